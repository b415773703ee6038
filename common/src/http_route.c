/* SPDX-License-Identifier: Apache-2.0 */
/* The route table: patterns of literal, {param} and trailing *rest segments,
 * routes of one method or of every method ("*"), and the host handler that
 * takes requests for matching hosts before the table. */
#include <stdlib.h>
#include <string.h>

#include "http_internal.h"
#include "space/cleanup.h"

static bool name_valid(const char *s, size_t n)
{
        if (n == 0 || n > SP_HTTP_PARAM_NAME_MAX)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool ok =
                        c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9');
                if (!ok)
                        return false;
        }
        return true;
}

static bool literal_valid(const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c <= 0x20 || c >= 0x7f || strchr("%{}?#*", c))
                        return false;
        }
        return !((n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'));
}

static void route_clear(sp__http_route *r)
{
        free(r->method);
        free(r->pattern);
        for (size_t i = 0; i < r->nsegs; i++)
                free(r->segs[i].text);
        memset(r, 0, sizeof(*r));
}

static int route_parse(sp__http_route *r, const char *pattern, sp_error **err)
{
        if (pattern[0] != '/')
                return sp_error_set(err, SP_E_INVALID, "route pattern must start with '/'");
        const char *s = pattern + 1;
        for (;;) {
                const char *e = strchr(s, '/');
                size_t n = e ? (size_t)(e - s) : strlen(s);
                if (r->nsegs == SP_HTTP_MAX_SEGMENTS)
                        return sp_error_set(err, SP_E_INVALID, "route pattern has too many segments");
                sp__http_segment *seg = &r->segs[r->nsegs];
                if (n >= 2 && s[0] == '{' && s[n - 1] == '}') {
                        if (!name_valid(s + 1, n - 2))
                                return sp_error_set(err, SP_E_INVALID, "invalid parameter name in route pattern");
                        seg->kind = SP__SEG_PARAM;
                        seg->text = strndup(s + 1, n - 2);
                } else if (n >= 1 && s[0] == '*') {
                        if (e || !name_valid(s + 1, n - 1))
                                return sp_error_set(err, SP_E_INVALID,
                                                    "'*name' must be the last segment of a route pattern");
                        seg->kind = SP__SEG_REST;
                        seg->text = strndup(s + 1, n - 1);
                } else {
                        if (!literal_valid(s, n))
                                return sp_error_set(err, SP_E_INVALID, "invalid literal segment in route pattern");
                        seg->kind = SP__SEG_LITERAL;
                        seg->text = strndup(s, n);
                }
                if (!seg->text)
                        abort();
                r->nsegs++;
                for (size_t i = 0; i + 1 < r->nsegs; i++)
                        if (seg->kind != SP__SEG_LITERAL && r->segs[i].kind != SP__SEG_LITERAL &&
                            strcmp(r->segs[i].text, seg->text) == 0)
                                return sp_error_set(err, SP_E_INVALID, "duplicate parameter name in route pattern");
                if (!e)
                        break;
                s = e + 1;
        }
        return 0;
}

int sp_http_route_ex(sp_http_server *srv, const char *method, const char *pattern, const sp_http_route_opts *opts,
                     sp_http_handler handler, void *userdata, sp_error **err)
{
        if (!method || !sp_http_token_valid(method, strlen(method)) || strlen(method) > SP_HTTP_METHOD_MAX)
                return sp_error_set(err, SP_E_INVALID, "invalid route method");
        if (!pattern || !handler)
                return sp_error_set(err, SP_E_INVALID, "route needs a pattern and a handler");
        if (srv->nroutes == SP_HTTP_MAX_ROUTES)
                return sp_error_set(err, SP_E_LIMIT, "too many routes");
        for (size_t i = 0; i < srv->nroutes; i++)
                if (strcmp(srv->routes[i].method, method) == 0 && strcmp(srv->routes[i].pattern, pattern) == 0)
                        return sp_error_set(err, SP_E_CONFLICT, "route %s %s registered twice", method, pattern);

        sp__http_route r = {0};
        int ret = route_parse(&r, pattern, err);
        if (ret < 0) {
                route_clear(&r);
                sp_error_wrap(err, "route %s", pattern);
                return ret;
        }
        r.method = strdup(method);
        r.pattern = strdup(pattern);
        if (!r.method || !r.pattern)
                abort();
        r.handler = handler;
        r.userdata = userdata;
        r.max_body = opts && opts->max_body ? opts->max_body : srv->cfg.limits.max_body;
        r.flags = opts ? opts->flags : 0;

        sp__http_route *routes = realloc(srv->routes, (srv->nroutes + 1) * sizeof(*routes));
        if (!routes)
                abort();
        srv->routes = routes;
        srv->routes[srv->nroutes++] = r;
        return 0;
}

int sp_http_route(sp_http_server *srv, const char *method, const char *pattern, sp_http_handler handler, void *userdata,
                  sp_error **err)
{
        return sp_http_route_ex(srv, method, pattern, NULL, handler, userdata, err);
}

int sp_http_server_set_host_handler(sp_http_server *srv, sp_http_host_match_fn match, const sp_http_route_opts *opts,
                                    sp_http_handler handler, void *userdata, sp_error **err)
{
        if (!match || !handler)
                return sp_error_set(err, SP_E_INVALID, "a host handler needs a match function and a handler");
        if (srv->host_match)
                return sp_error_set(err, SP_E_CONFLICT, "the server already has a host handler");
        srv->host_match = match;
        srv->host_route = (sp__http_route){
                .handler = handler,
                .userdata = userdata,
                .max_body = opts && opts->max_body ? opts->max_body : srv->cfg.limits.max_body,
                .flags = opts ? opts->flags : 0,
        };
        return 0;
}

int sp_http_server_foreach_route(const sp_http_server *srv, sp_http_route_cb cb, void *userdata)
{
        for (size_t i = 0; i < srv->nroutes; i++) {
                int r = cb(srv->routes[i].method, srv->routes[i].pattern, userdata);
                if (r != 0)
                        return r;
        }
        return 0;
}

void sp__http_routes_free(sp_http_server *srv)
{
        for (size_t i = 0; i < srv->nroutes; i++)
                route_clear(&srv->routes[i]);
        free(srv->routes);
        srv->routes = NULL;
        srv->nroutes = 0;
}

/* The path split into raw segments and their decoded forms. */
typedef struct split_path {
        const char *raw[SP_HTTP_MAX_SEGMENTS + 1]; /* start of each raw segment (to the end of the path) */
        char *dec[SP_HTTP_MAX_SEGMENTS + 1];
        size_t n;
        bool too_long;
} split_path;

static void split_free(split_path *sp)
{
        for (size_t i = 0; i < sp->n; i++)
                free(sp->dec[i]);
}

static int split(const char *raw_path, split_path *sp)
{
        const char *s = raw_path + 1;
        for (;;) {
                const char *e = strchr(s, '/');
                size_t n = e ? (size_t)(e - s) : strlen(s);
                if (sp->n == SP_HTTP_MAX_SEGMENTS + 1) {
                        sp->too_long = true;
                        return 0;
                }
                sp->raw[sp->n] = s;
                sp->dec[sp->n] = malloc(n + 1);
                if (!sp->dec[sp->n])
                        abort();
                size_t dn;
                if (sp_http_percent_decode(s, n, false, sp->dec[sp->n], &dn) < 0) {
                        free(sp->dec[sp->n]);
                        return -1; /* cannot happen: the parser validated the path */
                }
                sp->n++;
                if (!e)
                        return 0;
                s = e + 1;
        }
}

/* The segment kinds as base-3 digits, padded to SP_HTTP_MAX_SEGMENTS, so that
 * comparing ranks compares patterns segment by segment: literal before
 * parameter before the rest wildcard (3^32 fits in 64 bits). */
static uint64_t rank_of(const sp__http_route *r)
{
        uint64_t rank = 0;
        for (size_t i = 0; i < SP_HTTP_MAX_SEGMENTS; i++)
                rank = rank * 3 + (i < r->nsegs ? (uint64_t)r->segs[i].kind : 0);
        return rank;
}

/* Whether route r matches the path. */
static bool match(const sp__http_route *r, const split_path *sp)
{
        size_t i = 0;
        for (; i < r->nsegs; i++) {
                const sp__http_segment *seg = &r->segs[i];
                if (seg->kind == SP__SEG_REST)
                        return true;
                if (i >= sp->n || sp->too_long)
                        return false;
                if (seg->kind == SP__SEG_LITERAL && strcmp(seg->text, sp->dec[i]) != 0)
                        return false;
                if (seg->kind == SP__SEG_PARAM && sp->dec[i][0] == '\0')
                        return false;
        }
        return i == sp->n && !sp->too_long;
}

static void add_param(sp_http_request *req, const char *name, const char *value, size_t len)
{
        sp__http_param *p = &req->params[req->nparams++];
        p->name = strdup(name);
        p->value = strndup(value, len);
        if (!p->name || !p->value)
                abort();
}

static void allow_add(sp_buf *allow, const char *method)
{
        /* methods are tokens: search ", m," in ", list," */
        size_t n = strlen(method);
        for (const char *s = allow->data; s && *s;) {
                const char *e = strchr(s, ',');
                size_t len = e ? (size_t)(e - s) : strlen(s);
                if (len == n && memcmp(s, method, n) == 0)
                        return;
                s = e ? e + 2 : s + len;
        }
        if (allow->len)
                sp_buf_append_str(allow, ", ", NULL);
        sp_buf_append_str(allow, method, NULL);
}

static bool any_method(const sp__http_route *r)
{
        return strcmp(r->method, "*") == 0;
}

const sp__http_route *sp__http_route_match(sp_http_server *srv, sp_http_request *req, int *ret_status, sp_buf *allow)
{
        const char *host = sp_http_parser_header(req->parser, "host");
        if (srv->host_match && host && srv->host_match(host, srv->host_route.userdata))
                return &srv->host_route;

        const char *method = sp_http_parser_method(req->parser);
        bool head = strcmp(method, "HEAD") == 0;
        split_path sp = {0};
        if (split(sp_http_parser_raw_path(req->parser), &sp) < 0) {
                split_free(&sp);
                *ret_status = 404;
                return NULL;
        }

        const sp__http_route *best = NULL, *best_get = NULL, *best_any = NULL;
        uint64_t best_rank = 0, get_rank = 0, any_rank = 0;
        bool path_known = false;
        for (size_t i = 0; i < srv->nroutes; i++) {
                const sp__http_route *r = &srv->routes[i];
                if (!match(r, &sp))
                        continue;
                uint64_t rank = rank_of(r);
                path_known = true;
                if (any_method(r)) {
                        /* Not in Allow: a path it matches never gets 405. */
                        if (!best_any || rank < any_rank) {
                                best_any = r;
                                any_rank = rank;
                        }
                        continue;
                }
                allow_add(allow, r->method);
                if (strcmp(r->method, "GET") == 0)
                        allow_add(allow, "HEAD");
                if (strcmp(r->method, method) == 0 && (!best || rank < best_rank)) {
                        best = r;
                        best_rank = rank;
                }
                if (head && strcmp(r->method, "GET") == 0 && (!best_get || rank < get_rank)) {
                        best_get = r;
                        get_rank = rank;
                }
        }
        if (!best) {
                best = best_get;
                best_rank = get_rank;
        }
        /* A route of every method stands for one of each: it loses to the
         * request's own method only on a pattern at least as specific. */
        if (best_any && (!best || any_rank < best_rank))
                best = best_any;
        if (!best) {
                split_free(&sp);
                *ret_status = path_known ? 405 : 404;
                return NULL;
        }

        req->params = calloc(best->nsegs ? best->nsegs : 1, sizeof(*req->params));
        if (!req->params)
                abort();
        for (size_t i = 0; i < best->nsegs; i++) {
                const sp__http_segment *seg = &best->segs[i];
                if (seg->kind == SP__SEG_PARAM) {
                        add_param(req, seg->text, sp.dec[i], strlen(sp.dec[i]));
                } else if (seg->kind == SP__SEG_REST) {
                        /* The rest, decoded as a whole from its raw form. */
                        if (i >= sp.n) {
                                add_param(req, seg->text, "", 0);
                        } else {
                                const char *raw = sp.raw[i];
                                size_t n = strlen(raw), dn;
                                _cleanup_free_ char *dec = malloc(n + 1);
                                if (!dec)
                                        abort();
                                if (sp_http_percent_decode(raw, n, false, dec, &dn) < 0)
                                        dn = 0, dec[0] = '\0';
                                add_param(req, seg->text, dec, dn);
                        }
                }
        }
        split_free(&sp);
        return best;
}
