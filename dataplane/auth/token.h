/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attachment tokens as the data plane reads them (proto/spec/dataplane.md,
 * "Tokens"): where a request carries its token, what the verified claims
 * say, and whether they grant the request at hand.
 *
 * Everything here is pure (no I/O, no globals) so that it can be fuzzed. No
 * function copies a token into an error message: refusals name the reason,
 * never the token.
 */
#ifndef DP_AUTH_TOKEN_H
#define DP_AUTH_TOKEN_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "metrics/metrics.h"
#include "space/error.h"
#include "space/http_parser.h"
#include "space/token.h"

#define DP_CLAIM_ID_MAX 64 /* ten, sbx, ses, tpl */
#define DP_CLAIM_WORKER_MAX 261 /* "[IPv6]:port" or "name:port": 253-byte name, ':' and 5 digits, or brackets */
#define DP_CLAIM_PATH_MAX 4096
#define DP_CLAIM_USER_MAX 64 /* a user name or uid inside the sandbox */
#define DP_CLAIM_UPLOAD_MAX (UINT64_C(1) << 50) /* the largest "max" of a template token */

/* What a token is for (claim typ); a token is refused on the other kinds of route. */
typedef enum dp_kind {
        DP_KIND_SESSION,
        DP_KIND_FILES,
        DP_KIND_TEMPLATE,
        DP_KIND_INGRESS, /* a sandbox's ports (ingress): sbx and ten, no worker */
} dp_kind;

/* What a verified token grants. Strings are copies (NUL-terminated). */
typedef struct dp_claims {
        dp_kind kind; /* typ */
        bool write; /* scope "write" (which includes read) */
        char tenant[DP_CLAIM_ID_MAX + 1]; /* "" if the token names none */
        char akey[DP_CLAIM_ID_MAX + 1]; /* the API key that minted it ("" if none): refused once revoked */
        char sandbox[DP_CLAIM_ID_MAX + 1]; /* "" for template tokens */
        char session[DP_CLAIM_ID_MAX + 1]; /* session tokens only, else "" */
        char template_id[DP_CLAIM_ID_MAX + 1]; /* template tokens only (tpl), else "" */
        char format[4]; /* template tokens: "tar" or "oci" (fmt), else "" */
        uint64_t max_bytes; /* template tokens: the most the upload may hold (max, 1..DP_CLAIM_UPLOAD_MAX), else 0 */
        /* template tokens: the most the template may hold on the worker, its
         * archive and unpacked files together (sto, optional: 0 when absent) */
        uint64_t max_stored_bytes;
        char worker[DP_CLAIM_WORKER_MAX + 1]; /* HOST:PORT of the worker RPC */
        char worker_name[64]; /* "wkn": that worker's name, which its certificate must carry; "" when absent */
        char user[DP_CLAIM_USER_MAX + 1]; /* files tokens: act as this user in the sandbox ("": its default) */
        bool has_path; /* files tokens: the one path granted */
        char path[DP_CLAIM_PATH_MAX + 1];
        char kid[SP_TOKEN_KID_LEN + 1];
} dp_claims;

/* Finds the token of a request: "Authorization: Bearer <token>" or the query
 * parameter `token`. On success *ret_token points into the parser (valid as
 * long as it is). Refusals, with *ret_reason set for metrics:
 *   none at all                       SP_E_UNAUTHENTICATED "missing token"
 *   an Authorization header that is not "Bearer <token>" (one space, a
 *   non-empty token of printable ASCII)  SP_E_UNAUTHENTICATED "malformed token"
 *   both, or the parameter twice     SP_E_INVALID naming the problem */
int dp_token_find(const sp_http_parser *p, const char **ret_token, dp_refusal *ret_reason, sp_error **err);

/* Maps the rejection of sp_token_verify() (one of its documented messages)
 * to a refusal reason; DP_REFUSE_MALFORMED for anything else. */
dp_refusal dp_token_refusal(const sp_error *e);

/* Decodes the claims of a verified token (as sp_token_verify() returns
 * them) into *ret: typ, scope and wkr required; sbx required on session and
 * files tokens; ses required for session tokens and refused on the others;
 * path and usr only on files tokens; tpl (a template id: [A-Za-z0-9._-], not
 * starting with '.'), fmt and max required on template tokens (sto, the
 * bound on what the template may hold stored, optional), which name no
 * sbx, ses, path or usr; ten and akey optional. Claims this version does not know are ignored (the control
 * plane may add some). Every refusal is SP_E_UNAUTHENTICATED "malformed
 * token claims: ..." naming the claim. *ret is untouched on failure. */
int dp_claims_decode(json_object *claims, dp_claims *ret, sp_error **err);

/* What a request needs. */
typedef struct dp_want {
        dp_kind kind; /* the kind of route */
        bool write; /* a write route */
        const char *session; /* session routes: the session id in the path */
        const char *sandbox; /* files and ingress routes: the sandbox id in the path or host */
        const char *path; /* files routes: the path asked for */
        const char *template_id; /* template routes: the template id in the path */
} dp_want;

/* Checks that claims grant want, in this order: the kind of route, the
 * session, sandbox or template, the path, the scope. Refusals are
 * SP_E_PERMISSION with the spec's messages ("token does not grant this
 * route" / "session" / "sandbox" / "template" / "path", "token is
 * read-only"), *ret_reason set. */
int dp_claims_check(const dp_claims *c, const dp_want *want, dp_refusal *ret_reason, sp_error **err);

#endif
