/* SPDX-License-Identifier: Apache-2.0 */
/* Attachment tokens: where a request carries one, its claims, what they grant. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth/token.h"
#include "space/json.h"

int dp_token_find(const sp_http_parser *p, const char **ret_token, dp_refusal *ret_reason, sp_error **err)
{
        const char *header = sp_http_parser_header(p, "Authorization");
        const char *query = NULL;
        for (size_t i = 0, n = sp_http_parser_query_count(p); i < n; i++) {
                const char *name, *value;
                if (!sp_http_parser_query_at(p, i, &name, &value) || strcmp(name, "token") != 0)
                        continue;
                if (query) {
                        *ret_reason = DP_REFUSE_AMBIGUOUS;
                        return sp_error_set(err, SP_E_INVALID, "the query parameter 'token' is given twice");
                }
                query = value;
        }
        if (header && query) {
                *ret_reason = DP_REFUSE_AMBIGUOUS;
                return sp_error_set(err, SP_E_INVALID,
                                    "give the token in the Authorization header or the query parameter 'token', "
                                    "not both");
        }
        if (!header && !query) {
                *ret_reason = DP_REFUSE_MISSING;
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "missing token");
        }
        const char *token = query;
        if (header) {
                if (strncasecmp(header, "Bearer ", 7) != 0) {
                        *ret_reason = DP_REFUSE_MALFORMED;
                        return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token");
                }
                token = header + 7;
                token += strspn(token, " ");
        }
        size_t n = strlen(token);
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)token[i] <= 0x20 || (unsigned char)token[i] >= 0x7f)
                        n = 0;
        if (n == 0) {
                *ret_reason = DP_REFUSE_MALFORMED;
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token");
        }
        *ret_token = token;
        return 0;
}

dp_refusal dp_token_refusal(const sp_error *e)
{
        static const struct {
                const char *message;
                dp_refusal reason;
        } map[] = {
                {"unknown signing key", DP_REFUSE_UNKNOWN_KEY},
                {"bad signature", DP_REFUSE_BAD_SIGNATURE},
                {"token expired", DP_REFUSE_EXPIRED},
                {"token not yet valid", DP_REFUSE_NOT_YET_VALID},
        };
        for (size_t i = 0; e && i < sizeof(map) / sizeof(map[0]); i++)
                if (strcmp(e->message, map[i].message) == 0)
                        return map[i].reason;
        return DP_REFUSE_MALFORMED;
}

/* "HOST:PORT": a DNS name or IPv4 literal, or a bracketed IPv6 literal, and a port 1-65535. */
static bool worker_address_ok(const char *s)
{
        const char *colon = strrchr(s, ':');
        if (!colon || colon == s)
                return false;
        size_t digits = strlen(colon + 1);
        if (digits == 0 || digits > 5 || strspn(colon + 1, "0123456789") != digits || colon[1] == '0')
                return false;
        long port = strtol(colon + 1, NULL, 10);
        if (port < 1 || port > 65535)
                return false;
        size_t hlen = (size_t)(colon - s);
        if (s[0] == '[')
                return hlen > 2 && s[hlen - 1] == ']' && strspn(s + 1, "0123456789abcdefABCDEF:.") == hlen - 2;
        return hlen <= 253 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") == hlen &&
               s[0] != '-' && s[0] != '.';
}

/* A user name or uid as the control plane takes it: printable ASCII, no
 * space, no ':'. */
static bool user_name_ok(const char *s)
{
        for (const unsigned char *c = (const unsigned char *)s; *c; c++)
                if (*c <= 0x20 || *c >= 0x7f || *c == ':')
                        return false;
        return true;
}

/* Copies a string claim of at most max bytes into out (room for max + 1). */
/* A worker's name, as the control plane gives them: [a-z0-9][a-z0-9.-]{0,62}. */
static bool worker_name_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > 63 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= '0' && s[0] <= '9')))
                return false;
        return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n;
}

static int claim_string(json_object *claims, const char *name, bool required, size_t max, char *out, sp_error **err)
{
        const char *v = NULL;
        _cleanup_error_ sp_error *e = NULL;
        if (sp_json_get_string(claims, name, required, max, &v, &e) < 0)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token claims: %s", e->message);
        if (v && !*v && required)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token claims: '%s' is empty", name);
        if (v)
                memcpy(out, v, strlen(v) + 1);
        return 0;
}

static bool claim_present(json_object *claims, const char *name)
{
        json_object *v = NULL;
        return json_object_object_get_ex(claims, name, &v) && v;
}

/* A template id: what the worker also takes as a file name, [A-Za-z0-9._-]
 * and not starting with '.'. */
static bool template_id_ok(const char *s)
{
        return s[0] != '.' &&
               strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == strlen(s);
}

/* The claims of a files token: path and usr optional, no ses. */
static int decode_files(json_object *claims, dp_claims *c, sp_error **err)
{
        int r;
        if (claim_present(claims, "ses"))
                return sp_error_set(err, SP_E_UNAUTHENTICATED,
                                    "malformed token claims: a files token names no session");
        if (claim_present(claims, "path")) {
                if ((r = claim_string(claims, "path", true, DP_CLAIM_PATH_MAX, c->path, err)) < 0)
                        return r;
                c->has_path = true;
        }
        if ((r = claim_string(claims, "usr", false, DP_CLAIM_USER_MAX, c->user, err)) < 0)
                return r;
        if (c->user[0] && !user_name_ok(c->user))
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token claims: 'usr' is not a user name");
        return 0;
}

/* The claims of a template token: tpl, fmt, max and optionally sto; no sbx,
 * ses, path or usr. */
static int decode_template(json_object *claims, dp_claims *c, sp_error **err)
{
        static const char *const refused[] = {"sbx", "ses", "path", "usr"};
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
                if (claim_present(claims, refused[i]))
                        return sp_error_set(err, SP_E_UNAUTHENTICATED,
                                            "malformed token claims: a template token names no '%s'", refused[i]);
        char fmt[8] = "";
        int r;
        if ((r = claim_string(claims, "tpl", true, DP_CLAIM_ID_MAX, c->template_id, err)) < 0 ||
            (r = claim_string(claims, "fmt", true, sizeof(fmt) - 1, fmt, err)) < 0)
                return r;
        if (!template_id_ok(c->template_id))
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token claims: 'tpl' is not a template id");
        if (strcmp(fmt, "tar") != 0 && strcmp(fmt, "oci") != 0)
                return sp_error_set(err, SP_E_UNAUTHENTICATED,
                                    "malformed token claims: 'fmt' must be \"tar\" or \"oci\"");
        memcpy(c->format, fmt, sizeof(c->format));
        int64_t max = 0;
        _cleanup_error_ sp_error *e = NULL;
        if (sp_json_get_int(claims, "max", true, 1, (int64_t)DP_CLAIM_UPLOAD_MAX, &max, &e) < 0)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token claims: %s", e->message);
        c->max_bytes = (uint64_t)max;
        int64_t sto = 0;
        if (sp_json_get_int(claims, "sto", false, 1, (int64_t)DP_CLAIM_UPLOAD_MAX, &sto, &e) < 0)
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token claims: %s", e->message);
        c->max_stored_bytes = (uint64_t)sto;
        return 0;
}

int dp_claims_decode(json_object *claims, dp_claims *ret, sp_error **err)
{
        if (!json_object_is_type(claims, json_type_object))
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token claims: not an object");
        dp_claims c = {0};
        char typ[16] = "", scope[16] = "";
        int r;
        if ((r = claim_string(claims, "typ", true, sizeof(typ) - 1, typ, err)) < 0 ||
            (r = claim_string(claims, "scope", true, sizeof(scope) - 1, scope, err)) < 0 ||
            (r = claim_string(claims, "ten", false, DP_CLAIM_ID_MAX, c.tenant, err)) < 0 ||
            (r = claim_string(claims, "akey", false, DP_CLAIM_ID_MAX, c.akey, err)) < 0)
                return r;
        if (strcmp(typ, "session") == 0)
                c.kind = DP_KIND_SESSION;
        else if (strcmp(typ, "files") == 0)
                c.kind = DP_KIND_FILES;
        else if (strcmp(typ, "template") == 0)
                c.kind = DP_KIND_TEMPLATE;
        else if (strcmp(typ, "ingress") == 0)
                c.kind = DP_KIND_INGRESS;
        else
                return sp_error_set(err, SP_E_UNAUTHENTICATED,
                                    "malformed token claims: 'typ' must be \"session\", \"files\", \"template\" or "
                                    "\"ingress\"");
        if (c.kind != DP_KIND_TEMPLATE && (r = claim_string(claims, "sbx", true, DP_CLAIM_ID_MAX, c.sandbox, err)) < 0)
                return r;
        /* An ingress token names no worker: the sandbox may move, and the data
         * plane asks the control plane where it is. */
        bool ingress = c.kind == DP_KIND_INGRESS;
        if (ingress && claim_present(claims, "wkr"))
                return sp_error_set(err, SP_E_UNAUTHENTICATED,
                                    "malformed token claims: an ingress token names no worker");
        if ((!ingress && (r = claim_string(claims, "wkr", true, DP_CLAIM_WORKER_MAX, c.worker, err)) < 0) ||
            (!ingress && (r = claim_string(claims, "wkn", false, sizeof(c.worker_name) - 1, c.worker_name, err)) < 0) ||
            (r = claim_string(claims, "kid", true, SP_TOKEN_KID_LEN, c.kid, err)) < 0)
                return r;
        if (ingress && !c.tenant[0])
                return sp_error_set(err, SP_E_UNAUTHENTICATED,
                                    "malformed token claims: an ingress token names its tenant");
        if (strcmp(scope, "write") == 0)
                c.write = true;
        else if (strcmp(scope, "read") != 0)
                return sp_error_set(err, SP_E_UNAUTHENTICATED,
                                    "malformed token claims: 'scope' must be \"read\" or \"write\"");
        if (c.worker_name[0] && !worker_name_ok(c.worker_name))
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token claims: 'wkn' is no worker's name");
        if (!ingress && !worker_address_ok(c.worker))
                return sp_error_set(err, SP_E_UNAUTHENTICATED, "malformed token claims: 'wkr' is not HOST:PORT");
        switch (c.kind) {
        case DP_KIND_FILES:
                r = decode_files(claims, &c, err);
                break;
        case DP_KIND_TEMPLATE:
                r = decode_template(claims, &c, err);
                break;
        case DP_KIND_INGRESS:
                if (claim_present(claims, "path") || claim_present(claims, "usr") || claim_present(claims, "ses"))
                        return sp_error_set(err, SP_E_UNAUTHENTICATED,
                                            "malformed token claims: an ingress token names no session, path or user");
                break;
        case DP_KIND_SESSION:
        default:
                if (claim_present(claims, "path") || claim_present(claims, "usr"))
                        return sp_error_set(err, SP_E_UNAUTHENTICATED,
                                            "malformed token claims: a session token names no path or user");
                r = claim_string(claims, "ses", true, DP_CLAIM_ID_MAX, c.session, err);
                break;
        }
        if (r < 0)
                return r;
        *ret = c;
        return 0;
}

/* Whether the token names the route's object (its session, sandbox or
 * template); if not, *ret_reason and *ret_what say which. */
static bool object_granted(const dp_claims *c, const dp_want *want, dp_refusal *ret_reason, const char **ret_what)
{
        const char *granted = c->session, *asked = want->session, *what = "session";
        dp_refusal reason = DP_REFUSE_SESSION;
        if (want->kind == DP_KIND_FILES || want->kind == DP_KIND_INGRESS) {
                granted = c->sandbox;
                asked = want->sandbox;
                what = "sandbox";
                reason = DP_REFUSE_SANDBOX;
        } else if (want->kind == DP_KIND_TEMPLATE) {
                granted = c->template_id;
                asked = want->template_id;
                what = "template";
                reason = DP_REFUSE_TEMPLATE;
        }
        if (asked && strcmp(granted, asked) == 0)
                return true;
        *ret_reason = reason;
        *ret_what = what;
        return false;
}

int dp_claims_check(const dp_claims *c, const dp_want *want, dp_refusal *ret_reason, sp_error **err)
{
        if (c->kind != want->kind) {
                *ret_reason = DP_REFUSE_ROUTE;
                return sp_error_set(err, SP_E_PERMISSION, "token does not grant this route");
        }
        const char *what = NULL;
        if (!object_granted(c, want, ret_reason, &what))
                return sp_error_set(err, SP_E_PERMISSION, "token does not grant this %s", what);
        if (want->kind == DP_KIND_FILES && c->has_path && (!want->path || strcmp(c->path, want->path) != 0)) {
                *ret_reason = DP_REFUSE_PATH;
                return sp_error_set(err, SP_E_PERMISSION, "token does not grant this path");
        }
        if (want->write && !c->write) {
                *ret_reason = DP_REFUSE_READ_ONLY;
                return sp_error_set(err, SP_E_PERMISSION, "token is read-only");
        }
        return 0;
}
