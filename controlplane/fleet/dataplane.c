/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Data-plane replicas (proto/spec/controlplane-rpc.md, "Data-plane
 * replicas"): Join with role dataplane — a join token and a CSR for a
 * dataplane certificate, answered with the certificate, the cluster CA and
 * the token public keys — TokenKeys, which data planes (and workers) call
 * to learn rotated keys, and RevokedKeys, which they poll to refuse the
 * tokens of revoked API keys and the upload tokens of deleted templates.
 */
#include <string.h>

#include "fleet/fleet_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "store/keys.h"
#include "store/tokenkeys.h"

/* As in Join: longer than any token, so that an over-long one gets the token answer. */
#define TOKEN_FIELD_MAX 4096

typedef struct dp_join_req {
        const char *token, *name, *csr;
} dp_join_req;

static int parse(json_object *req, dp_join_req *r, sp_error **err)
{
        static const char *const worker_only[] = {"address", "backend", "labels"};
        static const char *const fields[] = {"role", "token", "name", "csr", NULL};
        memset(r, 0, sizeof(*r));
        for (size_t i = 0; i < SP_ARRAY_SIZE(worker_only); i++) {
                json_object *v = NULL;
                if (json_object_object_get_ex(req, worker_only[i], &v) && v)
                        return sp_error_set(err, SP_E_INVALID, "field '%s' is not allowed with role dataplane",
                                            worker_only[i]);
        }
        if (sp_json_check_fields(req, fields, err) < 0 ||
            sp_json_get_string(req, "token", true, TOKEN_FIELD_MAX, &r->token, err) < 0 ||
            sp_json_get_string(req, "name", true, CP_FLEET_NAME_MAX, &r->name, err) < 0 ||
            sp_json_get_string(req, "csr", true, SP_PKI_MAX_PEM, &r->csr, err) < 0)
                return -SP_E_INVALID;
        if (!cp__fleet_name_ok(r->name))
                return sp_error_set(
                        err, SP_E_INVALID,
                        "name '%s' must be 1 to 63 characters of [a-z0-9.-], starting with a letter or digit", r->name);
        return 0;
}

/* Everything after the token check, inside the transaction. */
static int record(cp_fleet *f, const dp_join_req *r, const char *token_id, char **ret_cert, json_object **ret_keys,
                  sp_error **err)
{
        sp_pki_cert_info info;
        _cleanup_free_ char *cert =
                sp_pki_csr_sign(f->ca, r->csr, SP_ROLE_DATAPLANE, (int)f->cfg.cert_days, &info, err);
        if (!cert)
                return sp_error_wrap(err, "csr");
        if (strcmp(info.name, r->name) != 0)
                return sp_error_set(err, SP_E_INVALID, "csr: its common name '%s' must be the data plane's name '%s'",
                                    info.name, r->name);
        _cleanup_json_ json_object *detail = json_object_new_object();
        json_object_object_add(detail, "name", json_object_new_string(r->name));
        json_object_object_add(detail, "token_id", json_object_new_string(token_id));
        json_object_object_add(detail, "cert_serial", json_object_new_string(info.serial));
        const char *params[] = {r->name, sp_json_str(detail)};
        if (cp_db_exec(f->db, "INSERT INTO audit_log (action, target, detail) VALUES ('dataplane.join', $1, $2::jsonb)",
                       2, params, NULL, err) < 0)
                return sp_error_wrap(err, "record the data plane");
        /* Read inside the transaction: if this fails, the token keeps its use. */
        int rc = cp_token_keys_public(f->db, ret_keys, err);
        if (rc < 0)
                return rc;
        *ret_cert = TAKE_PTR(cert);
        return 0;
}

int cp__fleet_join_dataplane(cp_fleet *f, json_object *req, json_object **ret, sp_error **err)
{
        dp_join_req r;
        if (parse(req, &r, err) < 0)
                return -SP_E_INVALID;
        if (cp_db_begin(f->db, err) < 0)
                return sp_error_wrap(err, "join");
        char token_id[SP_ID_MAX];
        _cleanup_free_ char *cert = NULL;
        _cleanup_json_ json_object *keys = NULL;
        int rc = cp__jointoken_consume(f->db, r.token, token_id, err);
        if (rc == 0)
                rc = record(f, &r, token_id, &cert, &keys, err);
        if (rc == 0)
                rc = cp_db_commit(f->db, err);
        if (rc < 0) {
                cp_db_rollback(f->db);
                return rc;
        }
        sp_log_info_kv(SP_KV("dataplane", r.name, "token_id", token_id), "data plane joined");
        json_object *o = json_object_new_object();
        json_object_object_add(o, "certificate", json_object_new_string(cert));
        json_object_object_add(o, "ca", json_object_new_string(f->ca_pem));
        json_object_object_add(o, "token_keys", json_object_get(keys));
        *ret = o;
        return 0;
}

void cp__fleet_token_keys(sp_rpc_call *call, json_object *req, void *userdata)
{
        cp_fleet *f = userdata;
        static const char *const none[] = {NULL};
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *keys = NULL;
        if (sp_json_check_fields(req, none, &e) < 0 || cp_token_keys_public(f->db, &keys, &e) < 0) {
                sp_rpc_call_fail(call, e);
                return;
        }
        _cleanup_json_ json_object *resp = json_object_new_object();
        json_object_object_add(resp, "token_keys", json_object_get(keys));
        sp_rpc_call_reply(call, resp, NULL);
}

void cp__fleet_revoked_keys(sp_rpc_call *call, json_object *req, void *userdata)
{
        cp_fleet *f = userdata;
        _cleanup_error_ sp_error *e = NULL;
        int64_t since = 0;
        bool templates = false;
        pr_revoked_keys r = {0};
        if (pr_revoked_req_decode(req, &since, &templates, &e) < 0 ||
            cp_apikey_revoked_since(f->db, since, &r, &e) < 0) {
                sp_rpc_call_fail(call, e);
                return;
        }
        /* Only to a poller that asked: an older one refuses the field. */
        if (templates && cp_template_revoked_since(f->db, since, &r, &e) < 0) {
                pr_revoked_keys_free(&r);
                sp_rpc_call_fail(call, e);
                return;
        }
        _cleanup_json_ json_object *resp = pr_revoked_resp_encode(&r);
        pr_revoked_keys_free(&r);
        sp_rpc_call_reply(call, resp, NULL);
}
