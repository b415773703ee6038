/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the data plane's reading of token claims. The input is a
 * token when it starts with "v1." — verified with a fixed key and clock, its
 * claims then decoded — and otherwise a claims object decoded directly.
 * Decoded claims are NUL-terminated within their bounds, name a worker (an
 * ingress token: none, and its tenant) and hold exactly the fields of their kind (a template token: its template,
 * format and bound, no sandbox, session, path or user); a refusal is
 * SP_E_UNAUTHENTICATED and leaves the output untouched; the grant check then
 * refuses exactly what the claims do not name.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "auth/token.h"
#include "space/json.h"
#include "space/token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The corpus tokens are signed with this key's private half (kid b4c66c39dcfdf06c). */
static const char key[] = "-----BEGIN PUBLIC KEY-----\n"
                          "MCowBQYDK2VwAyEAjJYIO8gnpqIQ+AMISlEzqFrV3hwQK70h+krMe/xONNQ=\n"
                          "-----END PUBLIC KEY-----\n";
/* Inside the corpus tokens' validity. */
#define FUZZ_NOW INT64_C(1796096100)

static sp_token_verifier *verifier;

/* Whether the claims hold exactly the fields of their kind. */
static bool kind_consistent(const dp_claims *c)
{
        bool tpl = c->kind == DP_KIND_TEMPLATE;
        if ((c->sandbox[0] == '\0') != tpl || (c->template_id[0] != '\0') != tpl ||
            (c->session[0] != '\0') != (c->kind == DP_KIND_SESSION))
                return false;
        if (c->kind != DP_KIND_FILES && (c->has_path || c->user[0]))
                return false;
        if (!tpl)
                return c->format[0] == '\0' && c->max_bytes == 0;
        return (strcmp(c->format, "tar") == 0 || strcmp(c->format, "oci") == 0) && c->max_bytes >= 1 &&
               c->max_bytes <= DP_CLAIM_UPLOAD_MAX && c->template_id[0] != '.' &&
               strlen(c->template_id) <= DP_CLAIM_ID_MAX &&
               strspn(c->template_id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
                       strlen(c->template_id);
}

/* A check that must refuse with reason. */
static void refuses(const dp_claims *c, const dp_want *want, dp_refusal reason)
{
        dp_refusal got = DP_REFUSE__MAX;
        sp_error *e = NULL;
        if (dp_claims_check(c, want, &got, &e) == 0 || got != reason || !e || e->code != SP_E_PERMISSION)
                abort();
        sp_error_free(e);
}

static void check(const dp_claims *c)
{
        /* An ingress token names no worker and always its tenant; the others a worker. */
        bool ingress = c->kind == DP_KIND_INGRESS;
        if (strlen(c->sandbox) > DP_CLAIM_ID_MAX || strlen(c->worker) > DP_CLAIM_WORKER_MAX ||
            (ingress ? c->worker[0] != '\0' || c->tenant[0] == '\0' : !strchr(c->worker, ':')) ||
            strlen(c->tenant) > DP_CLAIM_ID_MAX || strlen(c->akey) > DP_CLAIM_ID_MAX ||
            strlen(c->path) > DP_CLAIM_PATH_MAX || strlen(c->kid) > SP_TOKEN_KID_LEN || c->kind > DP_KIND_INGRESS ||
            !kind_consistent(c))
                abort();
        dp_want own = {.kind = c->kind,
                       .write = c->write,
                       .session = c->session,
                       .sandbox = c->sandbox,
                       .path = c->has_path ? c->path : "/any",
                       .template_id = c->template_id};
        dp_refusal reason;
        sp_error *e = NULL;
        if (dp_claims_check(c, &own, &reason, &e) < 0)
                abort();
        for (int k = DP_KIND_SESSION; k <= DP_KIND_INGRESS; k++) {
                dp_want other = own;
                other.kind = (dp_kind)k;
                if (other.kind != c->kind)
                        refuses(c, &other, DP_REFUSE_ROUTE);
        }
        dp_want elsewhere = own;
        elsewhere.session = elsewhere.sandbox = elsewhere.template_id = "other";
        if (strcmp(c->session, "other") != 0 && strcmp(c->sandbox, "other") != 0 &&
            strcmp(c->template_id, "other") != 0)
                refuses(c, &elsewhere,
                        c->kind == DP_KIND_FILES || ingress ? DP_REFUSE_SANDBOX
                        : c->kind == DP_KIND_TEMPLATE       ? DP_REFUSE_TEMPLATE
                                                            : DP_REFUSE_SESSION);
        dp_want write = own;
        write.write = true;
        if ((dp_claims_check(c, &write, &reason, &e) == 0) != c->write)
                abort();
        sp_error_free(e);
}

static void decode(json_object *o)
{
        dp_claims c = {.tenant = "untouched"};
        sp_error *e = NULL;
        if (dp_claims_decode(o, &c, &e) == 0) {
                if (e)
                        abort();
                check(&c);
        } else if (!e || e->code != SP_E_UNAUTHENTICATED || strcmp(c.tenant, "untouched") != 0) {
                abort();
        }
        sp_error_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (!verifier) {
                verifier = sp_token_verifier_new();
                if (!verifier || sp_token_verifier_add_key(verifier, key, NULL) < 0)
                        abort();
        }
        if (size > 2 * SP_TOKEN_MAX_LEN)
                return 0;
        char *text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';
        json_object *o = NULL;
        if (size >= 3 && memcmp(text, "v1.", 3) == 0) {
                sp_error *e = NULL;
                o = sp_token_verify(verifier, text, FUZZ_NOW, &e);
                if (!o && (!e || dp_token_refusal(e) >= DP_REFUSE__MAX))
                        abort();
                sp_error_free(e);
        } else if (sp_json_parse(text, size, &o, NULL) < 0) {
                o = NULL;
        }
        if (o)
                decode(o);
        json_object_put(o);
        free(text);
        return 0;
}
