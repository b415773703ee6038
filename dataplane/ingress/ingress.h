/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Ingress (docs/ingress.md): HTTP requests to a server inside a sandbox,
 * relayed through the sandbox's worker and agent (ConnectPort) — by host name,
 * "{port}-{sandbox}.{domain}", or by path, "/v1/sandboxes/{id}/ports/{port}/…".
 *
 * This header has two halves. The pure one (host.c: no I/O, no globals,
 * fuzzed) reads where a request goes and the token it carries, and writes
 * the request head the server in the sandbox gets. The other (proxy.c) is
 * the handler: it resolves the sandbox with the control plane, checks access,
 * opens ConnectPort and relays the request and its answer — bodies streamed
 * with backpressure both ways, server-sent events as they come, a WebSocket
 * (any 101 answer) as raw bytes both ways.
 */
#ifndef DP_INGRESS_INGRESS_H
#define DP_INGRESS_INGRESS_H

#include <stdbool.h>
#include <stdint.h>

#include "auth/token.h"
#include "space/buf.h"
#include "space/error.h"
#include "space/http.h"
#include "space/http_parser.h"

/* The longest ingress domain (a DNS name of at most 200 bytes). */
#define DP_INGRESS_DOMAIN_MAX 200
/* The query parameter and cookie that carry an ingress token from a browser,
 * and the headers that may carry one (the second is E2B's). */
#define DP_INGRESS_TOKEN_PARAM "space_token"
#define DP_INGRESS_TOKEN_COOKIE "space_ingress_token"
#define DP_INGRESS_TOKEN_HEADER "X-Space-Ingress-Token"
#define DP_INGRESS_E2B_TOKEN_HEADER "E2B-Traffic-Access-Token"
/* "forward" from a client that serves the answers from an origin of its own
 * (spacectl port-forward): the path form's answers then pass as the host
 * form's. A browser never sends it: a page's request that adds it needs a
 * CORS preflight, which the data plane refuses. */
#define DP_INGRESS_CLIENT_HEADER "X-Space-Ingress-Client"

/* Where a request goes. */
typedef struct dp_ingress_target {
        uint16_t port;
        char sandbox[DP_CLAIM_ID_MAX + 1]; /* "sbx_…" */
        bool by_host; /* the host form (else the path form) */
} dp_ingress_target;

/* Whether domain is a valid ingress domain: 1 to DP_INGRESS_DOMAIN_MAX bytes
 * of labels of [a-z0-9-] (not starting or ending with '-'), dot-separated. */
bool dp_ingress_domain_valid(const char *domain);

/* Whether host (a Host header: name, optional ":port") is a name under
 * domain, compared without regard to case; ".domain" (an empty first label)
 * counts, so that it reaches the sandbox routes (and their 404), never the
 * data plane's own. Cheap: the server's dispatcher calls it on every
 * request. */
bool dp_ingress_host_matches(const char *host, const char *domain);

/* Reads "{port}-{sandbox}.{domain}[:port]": port 1-65535 in decimal without
 * leading zeros, the sandbox id with its '_' written as '-' (or kept; any
 * case), e.g. "8080-sbx-0123456789abcdefghjk.localhost:7071". Refusals are
 * SP_E_NOT_FOUND "no sandbox port is named by host …" (the host is quoted,
 * clipped). */
int dp_ingress_host_parse(const char *host, const char *domain, dp_ingress_target *ret, sp_error **err);

/* Reads the path form's sandbox id and port (route parameters). SP_E_NOT_FOUND
 * for an id that is not a sandbox's, SP_E_INVALID for a bad port. */
int dp_ingress_path_parse(const char *sandbox, const char *port, dp_ingress_target *ret, sp_error **err);

/* Where a request's ingress token came from. */
typedef enum dp_ingress_token_src {
        DP_INGRESS_TOKEN_NONE,
        DP_INGRESS_TOKEN_HEADER_SRC, /* X-Space-Ingress-Token or E2B-Traffic-Access-Token */
        DP_INGRESS_TOKEN_QUERY, /* ?space_token= */
        DP_INGRESS_TOKEN_COOKIE_SRC, /* Cookie: space_ingress_token= */
} dp_ingress_token_src;

/* Finds the request's ingress token: a header first, then the query
 * parameter, then the cookie. *ret_token is a new string (free it) or NULL
 * with src NONE. Two different tokens in headers, or the parameter twice,
 * are SP_E_INVALID; a token that is not printable ASCII or longer than 4096
 * bytes is SP_E_UNAUTHENTICATED "malformed token". */
int dp_ingress_token_find(const sp_http_parser *p, char **ret_token, dp_ingress_token_src *ret_src, sp_error **err);

/* What the upstream request head says besides the client's request. */
typedef struct dp_ingress_head {
        const char *path; /* the target's path for the server ("/…", raw, percent-encoded as received) */
        const char *client_addr; /* the client's address (no port), for X-Forwarded-For */
        const char *proto; /* "http" or "https": X-Forwarded-Proto */
        bool upgrade; /* keep Connection: Upgrade and the Upgrade header (a WebSocket) */
} dp_ingress_head;

/* Writes the request head the server in the sandbox gets for the request p
 * parsed (HTTP/1.1 whatever the client spoke): the method, h->path with the
 * query minus the token parameter (its name compared decoded), every header
 * but the hop-by-hop ones (Connection, Keep-Alive, Proxy-*, TE, Trailer,
 * Transfer-Encoding, Upgrade — the last two kept when h->upgrade — and those
 * the Connection header names), the ingress token headers, and the
 * token cookie (other cookies kept); then X-Forwarded-For (appended to the
 * client's), -Proto and -Host, "Connection: close" (or "Upgrade"), and the
 * body's framing: Content-Length as the client sent it, or
 * "Transfer-Encoding: chunked" for a chunked body (re-chunked by the
 * relay). Fails (SP_E_INVALID) only for a path that does not start with '/'. */
int dp_ingress_request_head(const sp_http_parser *p, const dp_ingress_head *h, sp_buf *out, sp_error **err);

/* Whether a response header (as the server in the sandbox sent it) is passed
 * to the client: not the hop-by-hop ones, and not Content-Length and
 * Transfer-Encoding, which the data plane's own framing replaces. */
bool dp_ingress_response_header_passes(const char *name);

/* What the client gets of a response header from the server in the sandbox:
 * NULL to leave it out, value as is, or a rewritten value (in buf, which the
 * answer then points into). Left out: hop-by-hop headers, framing, Date and
 * X-Request-Id (this server's own), Set-Cookie2 and Clear-Site-Data; on the
 * path form, which shares the data plane's own origin among all sandboxes,
 * also Set-Cookie and Service-Worker-Allowed. On the host form a Set-Cookie
 * loses its Domain attribute: a cookie for this sandbox's host, never for
 * the domain all sandboxes share. */
const char *dp_ingress_response_header(const char *name, const char *value, bool by_host, sp_buf *buf);

/* ---- proxy.c ---- */

typedef struct dp dp;

/* The handler of both forms: userdata is the dp; the request's target comes
 * from its Host (host form) or its route parameters (path form). Registered
 * with a streamed body, any method. */
void dp_ingress_handler(sp_http_request *req, void *userdata);

#endif
