/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attachment tokens: minting with the cluster's current signing key (cached,
 * reloaded every few seconds so that a rotation made on another replica is
 * picked up), and the operators' routes over the keys.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"
#include "store/tokenkeys.h"

/* The current signer, reloaded from the database when it is older than
 * CP_TOKEN_SIGNER_RELOAD_US. */
static int signer(cp_api *api, sp_error **err)
{
        int64_t now = sp_now_mono_us();
        if (api->signer && now - api->signer_loaded_us < CP_TOKEN_SIGNER_RELOAD_US)
                return 0;
        sp_token_signer *s = NULL;
        int r = cp_token_keys_signer(api->db, &s, err);
        if (r < 0)
                return r;
        sp_token_signer_free(api->signer);
        api->signer = s;
        api->signer_loaded_us = now;
        return 0;
}

int cp__token_mint(cp_api *api, json_object *claims, int64_t ttl_s, char **ret_token, char ret_expires[static 32],
                   sp_error **err)
{
        int r = signer(api, err);
        if (r < 0)
                return r;
        /* Taken before signing, so that the expiry told is never later than the token's. */
        int64_t now_us = sp_now_real_us();
        char *token = sp_token_sign(api->signer, claims, ttl_s, err);
        if (!token)
                return sp_error_wrap(err, "attachment token");
        sp_time_format_rfc3339((now_us / SP_USEC_PER_SEC + ttl_s) * SP_USEC_PER_SEC, ret_expires);
        *ret_token = token;
        return 0;
}

void cp__h_token_keys_list(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *keys = NULL;
        int r = cp_token_keys_list(c->api->db, &keys, &e);
        cp__reply_wrapped(c, r, "keys", keys, e);
}

void cp__h_token_keys_rotate(cp_call *c)
{
        _cleanup_error_ sp_error *e = NULL;
        if (cp__body_none(c) < 0)
                return;
        if (cp__mutation_begin(c))
                return;
        char kid[SP_TOKEN_KID_LEN + 1];
        _cleanup_json_ json_object *keys = NULL;
        if (cp_token_keys_rotate(c->api->db, kid, &e) < 0 || cp__audit(c, "token_key.rotate", kid, NULL, &e) < 0 ||
            cp_token_keys_list(c->api->db, &keys, &e) < 0) {
                cp__mutation_abort(c, e);
                return;
        }
        /* This replica signs with the new key from its next token on; the others within
         * CP_TOKEN_SIGNER_RELOAD_US. */
        c->api->signer = sp_token_signer_free(c->api->signer);
        sp_log_info_kv(SP_KV("kid", kid, "request_id", sp_http_request_id(c->req)), "token signing key rotated");
        _cleanup_json_ json_object *out = json_object_new_object();
        json_object_object_add(out, "keys", json_object_get(keys));
        cp__mutation_commit(c, 200, out);
}
