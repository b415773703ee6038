/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `spacectl sandbox url` and `spacectl sandbox ingress`: where a port of a
 * sandbox is reached through the data plane, an ingress token for a browser,
 * and who may reach it (docs/api.md, "Ingress"). port-forward is in
 * portfwd.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"

#define MAX_URL 4096

char *ctl_ingress_url(const char *tmpl, int port)
{
        const char *at = strstr(tmpl, "{port}");
        char *out = NULL;
        if (!at || asprintf(&out, "%.*s%d%s", (int)(at - tmpl), tmpl, port, at + 6) < 0)
                return NULL;
        return out;
}

int ctl_parse_port(ctl_ctx *ctx, const char *s, int64_t min, const char *what, int *ret, sp_error **err)
{
        int64_t v;
        int r = ctl_parse_int(s, min, 65535, &v, err);
        if (r < 0) {
                sp_error_wrap(err, "%s", what);
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        *ret = (int)v;
        return 0;
}

int ctl_ingress_mode_check(ctl_ctx *ctx, const char *mode, sp_error **err)
{
        if (strcmp(mode, "token") == 0 || strcmp(mode, "public") == 0)
                return 0;
        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                        "ingress mode '%s': token (a request needs an ingress token) or public", mode);
}

/* The "url" and "path_url" templates of an object holding them (a Sandbox's
 * "ingress", or an IngressToken). */
static int templates(ctl_ctx *ctx, json_object *o, const char **url, const char **path_url, sp_error **err)
{
        if (!o || sp_json_get_string(o, "url", true, MAX_URL, url, NULL) < 0 || !*url ||
            sp_json_get_string(o, "path_url", true, MAX_URL, path_url, NULL) < 0 || !*path_url ||
            !strstr(*url, "{port}") || !strstr(*path_url, "{port}"))
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                "the API's answer has no ingress URLs (a control plane without ingress?)");
        return 0;
}

/* ---- spacectl sandbox url SANDBOX PORT ---- */

int ctl_run_sandbox_url(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int port = 0;
        int r = ctl_parse_port(ctx, a->pos[1], 1, "PORT", &port, err);
        if (r < 0)
                return r;
        bool token = ctl_flag(a, "token");
        int64_t ttl = 0;
        const char *s = ctl_arg(a, "ttl");
        if (s && !token)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--ttl is the lifetime of --token's token");
        if (s && (r = ctl_parse_seconds(s, &ttl, err)) < 0) {
                sp_error_wrap(err, "--ttl");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        if (s && (ttl < 60 || ttl > 86400))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--ttl: 60 seconds to 24 hours");

        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_append_str(&path, "/v1/sandboxes/", NULL);
        ctl_url_escape(&path, a->pos[0]);
        _cleanup_json_ json_object *resp = NULL;
        json_object *urls = NULL;
        if (token) {
                /* The token's answer carries the templates too. */
                sp_buf_append_str(&path, "/ingress/tokens", NULL);
                _cleanup_json_ json_object *body = json_object_new_object();
                if (ttl)
                        json_object_object_add(body, "ttl_s", json_object_new_int64(ttl));
                r = ctl_api(ctx, "POST", path.data, body, NULL, &resp, err);
                urls = resp;
        } else {
                r = ctl_api(ctx, "GET", path.data, NULL, NULL, &resp, err);
                json_object_object_get_ex(resp, "ingress", &urls);
        }
        if (r < 0)
                return r;
        const char *url_t, *path_t, *tok = NULL;
        if (templates(ctx, urls, &url_t, &path_t, err) < 0)
                return -1;
        if (token && (sp_json_get_string(resp, "token", true, CTL_DP_TOKEN_MAX, &tok, NULL) < 0 || !tok || !*tok))
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                                "the API's ingress token answer has no token");
        _cleanup_free_ char *url = ctl_ingress_url(url_t, port), *path_url = ctl_ingress_url(path_t, port);
        if (!url || !path_url)
                return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");

        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "url", json_object_new_string(url));
                json_object_object_add(o, "path_url", json_object_new_string(path_url));
                if (token) {
                        json_object_object_add(o, "token", json_object_new_string(tok));
                        json_object_object_add(o, "expires_at", json_object_new_string(ctl_jstr(resp, "expires_at")));
                }
                ctl_print_json(ctx, o);
                return 0;
        }
        const char *chosen = ctl_flag(a, "path") ? path_url : url;
        if (!token) {
                fprintf(ctx->out, "%s\n", chosen);
                return 0;
        }
        /* For a browser: the data plane answers ?space_token= with a cookie
         * that carries the token on the page's further requests. */
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        sp_buf_append_str(&out, chosen, NULL);
        sp_buf_append_str(&out, strchr(chosen, '?') ? "&space_token=" : "?space_token=", NULL);
        ctl_url_escape(&out, tok);
        fprintf(ctx->out, "%s\n", out.data);
        fprintf(stderr, "spacectl: the token in this URL grants every port of %s until %s\n", a->pos[0],
                ctl_jstr(resp, "expires_at"));
        return 0;
}

/* ---- spacectl sandbox ingress SANDBOX [MODE] [--auto-resume|--no-auto-resume] ---- */

int ctl_run_sandbox_ingress(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        const char *mode = a->npos > 1 ? a->pos[1] : NULL;
        bool on = ctl_flag(a, "auto-resume"), off = ctl_flag(a, "no-auto-resume");
        if (on && off)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "--auto-resume and --no-auto-resume contradict each other");
        if (!mode && !on && !off)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "give a mode (token or public), --auto-resume or --no-auto-resume\n"
                                "Run 'spacectl sandbox ingress --help' for usage.");
        int r = mode ? ctl_ingress_mode_check(ctx, mode, err) : 0;
        if (r < 0)
                return r;
        _cleanup_json_ json_object *body = json_object_new_object(), *s = NULL;
        if (mode)
                json_object_object_add(body, "mode", json_object_new_string(mode));
        if (on || off)
                json_object_object_add(body, "auto_resume", json_object_new_boolean(on));
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_append_str(&path, "/v1/sandboxes/", NULL);
        ctl_url_escape(&path, a->pos[0]);
        sp_buf_append_str(&path, "/ingress", NULL);
        r = ctl_api(ctx, "PUT", path.data, body, NULL, &s, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, s);
        } else {
                json_object *ing = NULL, *ar = NULL;
                bool wakes = json_object_object_get_ex(s, "ingress", &ing) &&
                             json_object_object_get_ex(ing, "auto_resume", &ar) && json_object_get_boolean(ar);
                fprintf(ctx->out, "%s: ingress %s%s\n", ctl_jstr(s, "id"), ctl_jstr(s, "ingress.mode"),
                        wakes ? ", auto-resume" : "");
        }
        return 0;
}

const ctl_opt ctl_sandbox_ingress_opts[] = {
        {"auto-resume", NULL, 0, "a request for one of its ports wakes it when paused or suspended"},
        {"no-auto-resume", NULL, 0, "such a request is answered 409 (the default)"},
        {0},
};

const ctl_opt ctl_sandbox_url_opts[] = {
        {"path", NULL, 0, "the path form on the data plane's own URL (default: the host name form)"},
        {"token", NULL, 0, "mint an ingress token and put it in the URL (?space_token=), for a browser"},
        {"ttl", "SECONDS", 0, "the token's lifetime: 60 to 86400 seconds, or 5m, 2h (default 1h)"},
        {0},
};
