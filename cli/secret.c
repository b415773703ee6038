/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `spacectl secret`: a tenant's secrets (docs/secrets.md) — create (the
 * value from stdin or --from-file, never from the command line, where ps
 * and shell histories would show it), ls, get, rm (revoke), usage; and
 * rewrap (admins, after a new cluster key is put in the key file).
 *
 * The value is held in memory only for the request and wiped after it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"

#define VALUE_MAX 8192 /* the API's bound (gateway/policy/secret.h, GW_SECRET_VALUE_MAX) */

static void buf_wipe(sp_buf *b)
{
        if (b->data)
                sp_explicit_bzero(b->data, b->cap);
        sp_buf_free(b);
}
#define _cleanup_secret_buf_ __attribute__((cleanup(buf_wipe)))

/* A line from the terminal without echo. */
static int read_tty(const char *name, sp_buf *out, sp_error **err)
{
        struct termios old, quiet;
        bool restore = tcgetattr(STDIN_FILENO, &old) == 0;
        if (restore) {
                quiet = old;
                quiet.c_lflag &= ~(tcflag_t)ECHO;
                tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
        }
        fprintf(stderr, "value of secret %s (not shown): ", name);
        fflush(stderr);
        int r = 0;
        for (;;) {
                char c;
                ssize_t n = read(STDIN_FILENO, &c, 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0 || c == '\n')
                        break;
                if (out->len >= VALUE_MAX + 1) {
                        r = sp_error_set(err, SP_E_INVALID, "the value is longer than %d bytes", VALUE_MAX);
                        break;
                }
                sp_buf_append(out, &c, 1, NULL);
        }
        if (restore)
                tcsetattr(STDIN_FILENO, TCSAFLUSH, &old);
        fputc('\n', stderr);
        return r;
}

/* The value: --from-file's, else stdin's (a prompt without echo on a
 * terminal); one trailing newline is dropped. */
static int read_value(ctl_ctx *ctx, const ctl_args *a, sp_buf *out, sp_error **err)
{
        const char *file = ctl_arg(a, "from-file");
        int r;
        if (file)
                r = sp_file_read(strcmp(file, "-") == 0 ? "/dev/stdin" : file, VALUE_MAX + 2, out, err);
        else if (isatty(STDIN_FILENO))
                r = read_tty(a->pos[0], out, err);
        else
                r = sp_file_read("/dev/stdin", VALUE_MAX + 2, out, err);
        if (r < 0) {
                sp_error_wrap(err, "%s", file ? file : "stdin");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        if (out->len && out->data[out->len - 1] == '\n')
                out->data[--out->len] = '\0';
        if (out->len && out->data[out->len - 1] == '\r')
                out->data[--out->len] = '\0';
        if (out->len == 0)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "no value: pipe it on stdin (spacectl secret create %s < file) or give --from-file",
                                a->pos[0]);
        if (out->len > VALUE_MAX || memchr(out->data, '\0', out->len))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "the value must be 1 to %d bytes of printable ASCII", VALUE_MAX);
        return 0;
}

/* The SecretCreate body of the options (without the value). */
static int create_body(ctl_ctx *ctx, const ctl_args *a, json_object *body, sp_error **err)
{
        const char *s;
        json_object_object_add(body, "name", json_object_new_string(a->pos[0]));
        if (!ctl_arg(a, "host"))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "--host is required: the hosts the value goes to (api.example.com, *.example.com)");
        json_object *hosts = json_object_new_array();
        json_object_object_add(body, "hosts", hosts);
        for (size_t i = 0; (s = ctl_arg_at(a, "host", i)); i++)
                json_object_array_add(hosts, json_object_new_string(s));
        bool basic = ctl_flag(a, "basic") || ctl_arg(a, "username");
        if (basic && (ctl_arg(a, "header") || ctl_arg(a, "format")))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "--basic (and --username) or --header (and --format), not both");
        json_object *inject = json_object_new_object();
        json_object_object_add(body, "inject", inject);
        if (basic) {
                json_object *b = json_object_new_object();
                if ((s = ctl_arg(a, "username")))
                        json_object_object_add(b, "username", json_object_new_string(s));
                json_object_object_add(inject, "basic", b);
        } else {
                json_object_object_add(
                        inject, "header",
                        json_object_new_string(ctl_arg(a, "header") ? ctl_arg(a, "header") : "Authorization"));
                json_object_object_add(inject, "format",
                                       json_object_new_string(ctl_arg(a, "format")   ? ctl_arg(a, "format")
                                                              : ctl_arg(a, "header") ? "{{secret}}"
                                                                                     : "Bearer {{secret}}"));
        }
        if ((s = ctl_arg(a, "env")))
                json_object_object_add(body, "env", json_object_new_string(s));
        if ((s = ctl_arg(a, "rate-per-min"))) {
                int64_t v;
                int r = ctl_parse_int(s, 0, 1000000, &v, err);
                if (r < 0) {
                        sp_error_wrap(err, "--rate-per-min");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                json_object_object_add(body, "rate_per_min", json_object_new_int64(v));
        }
        if ((s = ctl_arg(a, "expires-at")))
                json_object_object_add(body, "expires_at", json_object_new_string(s));
        return 0;
}

static int run_create(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        if (ctl_arg(a, "value"))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "a secret's value is never given on the command line (ps and shell histories show "
                                "it): pipe it on stdin or give --from-file");
        _cleanup_json_ json_object *body = json_object_new_object(), *s = NULL;
        int r = create_body(ctx, a, body, err);
        if (r < 0)
                return r;
        _cleanup_secret_buf_ sp_buf value = SP_BUF_INIT;
        if ((r = read_value(ctx, a, &value, err)) < 0)
                return r;
        json_object *v = json_object_new_string_len(value.data, (int)value.len);
        json_object_object_add(body, "value", v);
        r = ctl_api(ctx, "POST", "/v1/secrets", body, NULL, &s, err);
        /* The JSON copy of the value, wiped. */
        sp_explicit_bzero((char *)json_object_get_string(v), (size_t)json_object_get_string_len(v));
        if (r < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, s);
        else
                fprintf(ctx->out, "%s (sandboxes given it hold a placeholder in $%s)\n", ctl_jstr(s, "name"),
                        ctl_jstr(s, "env"));
        return 0;
}

/* How a secret is injected, in a few words. */
static const char *injection(json_object *s, char *buf, size_t len)
{
        if (strcmp(ctl_jstr(s, "inject.header"), "-") != 0)
                snprintf(buf, len, "%s: %s", ctl_jstr(s, "inject.header"),
                         strcmp(ctl_jstr(s, "inject.format"), "-") ? ctl_jstr(s, "inject.format") : "{{secret}}");
        else
                snprintf(buf, len, "basic %s",
                         strcmp(ctl_jstr(s, "inject.basic.username"), "-") ? ctl_jstr(s, "inject.basic.username")
                                                                           : "(the sandbox's user)");
        return buf;
}

static int run_ls(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        (void)a;
        _cleanup_json_ json_object *resp = NULL;
        int r = ctl_api(ctx, "GET", "/v1/secrets", NULL, NULL, &resp, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, resp);
                return 0;
        }
        json_object *list = NULL;
        json_object_object_get_ex(resp, "secrets", &list);
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"NAME", "ENV", "HOSTS", "INJECT", "SANDBOXES", "EXPIRES", NULL});
        for (size_t i = 0; list && i < json_object_array_length(list); i++) {
                json_object *s = json_object_array_get_idx(list, i);
                char h[96], in[96];
                ctl_table_row(&t, (const char *[]){ctl_jstr(s, "name"), ctl_jstr(s, "env"),
                                                   ctl_jjoin(s, "hosts", h, sizeof(h)), injection(s, in, sizeof(in)),
                                                   ctl_jstr(s, "sandboxes"), ctl_jstr(s, "expires_at")});
        }
        ctl_table_print(ctx, &t);
        return 0;
}

static int run_get(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *s = NULL;
        int r = ctl_api_on(ctx, "GET", "/v1/secrets/", a->pos[0], "", &s, err);
        if (r < 0)
                return r;
        ctl_print_any(ctx, s);
        return 0;
}

static int run_rm(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *s = NULL;
        int r = ctl_api_on(ctx, "DELETE", "/v1/secrets/", a->pos[0], "", &s, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, s);
                return 0;
        }
        fprintf(ctx->out, "%s revoked (%s sandboxes lose it)\n", a->pos[0], ctl_jstr(s, "sandboxes_updating"));
        if (r == 202)
                fprintf(stderr, "spacectl: %s\n", ctl_jstr(s, "message"));
        return 0;
}

/* "injected=3 rate-limit=1" of an object of counts. */
static const char *counts(json_object *o, char *buf, size_t len)
{
        size_t used = 0;
        buf[0] = '\0';
        if (json_object_is_type(o, json_type_object)) {
                json_object_object_foreach (o, k, v) {
                        int n = snprintf(buf + used, len - used, "%s%s=%s", used ? " " : "", k,
                                         json_object_get_string(v));
                        if (n < 0 || (size_t)n >= len - used)
                                break;
                        used += (size_t)n;
                }
        }
        return buf[0] ? buf : "-";
}

static int run_usage(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        const char *s = ctl_arg(a, "limit");
        int64_t limit = 100;
        int r;
        if (s && (r = ctl_parse_int(s, 1, 100, &limit, err)) < 0) {
                sp_error_wrap(err, "--limit");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        char suffix[32];
        snprintf(suffix, sizeof(suffix), "/usage?limit=%lld", (long long)limit);
        _cleanup_json_ json_object *u = NULL;
        if ((r = ctl_api_on(ctx, "GET", "/v1/secrets/", a->pos[0], suffix, &u, err)) < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, u);
                return 0;
        }
        json_object *list = NULL, *recs = NULL;
        json_object_object_get_ex(u, "sandboxes", &list);
        json_object_object_get_ex(u, "records", &recs);
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"SANDBOX", "STATE", "USES", "BY RULE", "NOTE", NULL});
        for (size_t i = 0; list && i < json_object_array_length(list); i++) {
                json_object *e = json_object_array_get_idx(list, i), *by = NULL;
                char c[160];
                json_object_object_get_ex(e, "by_rule", &by);
                ctl_table_row(&t, (const char *[]){ctl_jstr(e, "sandbox_id"), ctl_jstr(e, "state"), ctl_jstr(e, "uses"),
                                                   counts(by, c, sizeof(c)),
                                                   strcmp(ctl_jstr(e, "error"), "-")          ? ctl_jstr(e, "error")
                                                   : strcmp(ctl_jstr(e, "more"), "true") == 0 ? "older records left out"
                                                                                              : ""});
        }
        ctl_table_print(ctx, &t);
        for (size_t i = 0; recs && i < json_object_array_length(recs); i++) {
                json_object *rec = json_object_array_get_idx(recs, i), *tv = NULL;
                int64_t us = json_object_object_get_ex(rec, "time_us", &tv) ? json_object_get_int64(tv) : 0;
                time_t secs = (time_t)(us / 1000000);
                struct tm tm;
                char when[64] = "-";
                if (us && gmtime_r(&secs, &tm))
                        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
                fprintf(ctx->out, "%s %s %-8s %-22s %s\n", when, ctl_jstr(rec, "sandbox_id"), ctl_jstr(rec, "decision"),
                        ctl_jstr(rec, "rule"), ctl_jstr(rec, "host"));
        }
        if (strcmp(ctl_jstr(u, "complete"), "true") != 0)
                fprintf(stderr,
                        "spacectl: partial: %s sandboxes have the secret; not every one was asked or answered\n",
                        ctl_jstr(u, "sandboxes_total"));
        return 0;
}

static int run_rewrap(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *body = json_object_new_object(), *out = NULL;
        const char *s = ctl_arg(a, "max");
        int r;
        if (s) {
                int64_t v;
                if ((r = ctl_parse_int(s, 1, 1000000, &v, err)) < 0) {
                        sp_error_wrap(err, "--max");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                json_object_object_add(body, "max", json_object_new_int64(v));
        }
        if ((r = ctl_api(ctx, "POST", "/v1/admin/secrets/rewrap", body, NULL, &out, err)) < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, out);
                return 0;
        }
        char missing[256];
        fprintf(ctx->out, "%s data keys wrapped again under '%s'; %s still under other keys\n",
                ctl_jstr(out, "rewrapped"), ctl_jstr(out, "primary"), ctl_jstr(out, "remaining"));
        if (strcmp(ctl_jjoin(out, "missing_keys", missing, sizeof(missing)), "-") != 0)
                fprintf(stderr, "spacectl: keys not in the key file wrap some secrets: %s\n", missing);
        if (strcmp(ctl_jstr(out, "failed"), "0") != 0)
                fprintf(stderr, "spacectl: %s secrets did not open (the control plane's log names them)\n",
                        ctl_jstr(out, "failed"));
        return 0;
}

static const ctl_opt create_opts[] = {
        {"host", "HOST", CTL_OPT_REPEAT, "a host the value goes to: api.example.com, or *.example.com (required)"},
        {"header", "NAME", 0, "the header it goes in (default Authorization, as 'Bearer {{secret}}')"},
        {"format", "TEXT", 0, "the header's whole value, with {{secret}} where the value goes"},
        {"basic", NULL, 0, "HTTP basic authentication instead, the value as the password"},
        {"username", "NAME", 0, "with --basic: the user name (default: the one the sandbox sends)"},
        {"env", "VAR", 0, "the variable that holds the placeholder in sandboxes (default: NAME in capitals)"},
        {"rate-per-min", "N", 0, "injections a minute on each node (default 0: no limit)"},
        {"expires-at", "TIME", 0, "not injected after this time (RFC 3339: 2030-01-31T12:00:00Z)"},
        {"from-file", "FILE", 0, "read the value from FILE (- for stdin) instead of stdin"},
        {"value", "VALUE", 0, "refused: the value never goes on the command line"},
        {0},
};

static const ctl_opt usage_opts[] = {
        {"limit", "N", 0, "the last N secret records of each sandbox (1-100, default 100)"},
        {0},
};

static const ctl_opt rewrap_opts[] = {
        {"max", "N", 0, "at most N data keys this time (default 10000)"},
        {0},
};

static const ctl_cmd secret_cmds[] = {
        {.name = "create",
         .usage = "NAME",
         .summary = "create a secret, its value read from stdin (or --from-file)",
         .min_args = 1,
         .max_args = 1,
         .opts = create_opts,
         .run = run_create,
         .help = "Example: spacectl secret create openai --host api.openai.com < key.txt\n"
                 "A sandbox is given it (spacectl sandbox create --secret openai) when its egress profile grants\n"
                 "it (\"secrets\": [\"openai\"]); the sandbox holds a placeholder, never the value."},
        {.name = "ls", .summary = "list your secrets (never their values)", .run = run_ls},
        {.name = "get", .usage = "NAME", .summary = "show a secret", .min_args = 1, .max_args = 1, .run = run_get},
        {.name = "rm",
         .usage = "NAME",
         .summary = "revoke a secret: its value is erased and the sandboxes given it lose it",
         .min_args = 1,
         .max_args = 1,
         .run = run_rm},
        {.name = "usage",
         .usage = "NAME",
         .summary = "where a secret was injected or refused, from its sandboxes' egress logs",
         .min_args = 1,
         .max_args = 1,
         .opts = usage_opts,
         .run = run_usage,
         .help = "Columns of the records: time, sandbox, decision, rule (injected, revoked, expired,\n"
                 "rate-limit, ...), host. Deleted sandboxes' logs are gone with them."},
        {.name = "rewrap",
         .summary = "wrap every secret's data key under the first key of the key file (admin)",
         .opts = rewrap_opts,
         .run = run_rewrap,
         .help = "After a new key is put on top of --secrets-key-file on every control plane; once it says 0\n"
                 "remain, the old key's line can go (docs/secrets.md, rotation)."},
        {0},
};

const ctl_group ctl_group_secret = {"secret", "Secrets: credentials the gateway injects for sandboxes.", secret_cmds};
