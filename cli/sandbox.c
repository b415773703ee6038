/* SPDX-License-Identifier: Apache-2.0 */
/* `spacectl sandbox`: create, list, get, delete, and the lifecycle verbs. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

/* The operation deadline on the control plane is 10 minutes. */
#define WAIT_DEFAULT_US (10 * 60 * SP_USEC_PER_SEC)
#define MAX_LIST_PAGES 1000
#define MAX_METADATA_FILTERS 8

static void sandbox_path(sp_buf *b, const char *id, const char *suffix)
{
        sp_buf_append_str(b, "/v1/sandboxes/", NULL);
        ctl_url_escape(b, id);
        sp_buf_append_str(b, suffix, NULL);
}

/* Waits for the operation in an OperationEnvelope and prints the outcome:
 * the envelope with the final operation and sandbox (--json), or "ID STATE". */
static int finish(ctl_ctx *ctx, bool wait, int64_t timeout, const char *id, json_object *env, const char *verb,
                  bool print_id_only, sp_error **err)
{
        int r;
        const char *op_id = ctl_jstr(env, "operation.id");
        if (!wait) {
                if (ctx->json)
                        ctl_print_json(ctx, env);
                else
                        fprintf(ctx->out, "%s\n", print_id_only ? id : op_id);
                return 0;
        }
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sandbox_path(&path, id, "");
        char label[128];
        snprintf(label, sizeof(label), "%s %s", verb, id);
        _cleanup_json_ json_object *op = NULL;
        r = ctl_wait_operation(ctx, op_id, label, path.data, timeout, &op, err);
        if (r < 0)
                return r;
        _cleanup_json_ json_object *sbx = NULL;
        bool gone = strcmp(verb, "delete") == 0;
        if (!gone) {
                r = ctl_api(ctx, "GET", path.data, NULL, NULL, &sbx, err);
                if (r < 0)
                        return r;
        }
        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "operation", json_object_get(op));
                if (sbx)
                        json_object_object_add(o, "sandbox", json_object_get(sbx));
                ctl_print_json(ctx, o);
        } else if (print_id_only) {
                fprintf(ctx->out, "%s\n", id);
        } else {
                fprintf(ctx->out, "%s %s\n", id, gone ? "deleted" : ctl_jstr(sbx, "state"));
        }
        return 0;
}

/* ---- create ---- */

static int add_map(ctl_ctx *ctx, const ctl_args *a, const char *opt, json_object *body, const char *field,
                   sp_error **err)
{
        if (!ctl_arg_at(a, opt, 0))
                return 0;
        json_object *map = json_object_new_object();
        json_object_object_add(body, field, map);
        for (size_t i = 0; ctl_arg_at(a, opt, i); i++) {
                int r = ctl_parse_kv(ctl_arg_at(a, opt, i), opt, map, err);
                if (r < 0)
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        return 0;
}

/* --secret NAME (each in the variable the secret names) or --secret VAR=NAME
 * (in VAR): "secrets" as an array of names or an object, one form for all. */
static int add_secrets(ctl_ctx *ctx, const ctl_args *a, json_object *body, sp_error **err)
{
        const char *s = ctl_arg_at(a, "secret", 0);
        if (!s)
                return 0;
        bool as_map = strchr(s, '=') != NULL;
        json_object *v = as_map ? json_object_new_object() : json_object_new_array();
        json_object_object_add(body, "secrets", v);
        for (size_t i = 0; (s = ctl_arg_at(a, "secret", i)); i++) {
                if ((strchr(s, '=') != NULL) != as_map)
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                        "--secret: give every one as NAME or every one as VAR=NAME");
                int r = as_map ? ctl_parse_kv(s, "secret", v, err) : 0;
                if (r < 0)
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                if (!as_map)
                        json_object_array_add(v, json_object_new_string(s));
        }
        return 0;
}

static int parse_pids(const char *s, int64_t *ret, sp_error **err)
{
        return ctl_parse_int(s, 0, 1 << 30, ret, err);
}

int ctl_sandbox_create_body(ctl_ctx *ctx, const ctl_args *a, const char *template_name, json_object *body,
                            sp_error **err)
{
        json_object_object_add(body, "template", json_object_new_string(template_name));
        json_object *res = json_object_new_object();
        json_object_object_add(body, "resources", res);
        const struct {
                const char *opt;
                int (*parse)(const char *s, int64_t *ret, sp_error **err);
                json_object *obj;
                const char *field;
        } ints[] = {
                {"cpu", ctl_parse_cpu, res, "cpu_millis"},
                {"memory", ctl_parse_mib, res, "memory_mb"},
                {"disk", ctl_parse_mib, res, "disk_mb"},
                {"pids", parse_pids, res, "pids"},
                {"timeout", ctl_parse_seconds, body, "timeout_s"},
                {"idle-timeout", ctl_parse_seconds, body, "idle_timeout_s"},
        };
        const char *s;
        int r;
        for (size_t i = 0; i < SP_ARRAY_SIZE(ints); i++) {
                if (!(s = ctl_arg(a, ints[i].opt)))
                        continue;
                int64_t v;
                if ((r = ints[i].parse(s, &v, err)) < 0) {
                        sp_error_wrap(err, "--%s", ints[i].opt);
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                json_object_object_add(ints[i].obj, ints[i].field, json_object_new_int64(v));
        }
        if (json_object_object_length(res) == 0)
                json_object_object_del(body, "resources");
        if ((r = add_map(ctx, a, "env", body, "env", err)) < 0 ||
            (r = add_map(ctx, a, "metadata", body, "metadata", err)) < 0 ||
            (r = add_map(ctx, a, "label", body, "labels", err)) < 0)
                return r;
        if ((s = ctl_arg(a, "ingress")) && (r = ctl_ingress_mode_check(ctx, s, err)) < 0)
                return r;
        if (ctl_flag(a, "auto-resume"))
                json_object_object_add(body, "auto_resume", json_object_new_boolean(true));
        const char *strings[][2] = {
                {"end-action", "end_action"}, {"backend", "backend"}, {"egress", "egress"}, {"ingress", "ingress"}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(strings); i++)
                if ((s = ctl_arg(a, strings[i][0])))
                        json_object_object_add(body, strings[i][1], json_object_new_string(s));
        return add_secrets(ctx, a, body, err);
}

static int run_create(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        if (!ctl_arg(a, "template"))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "--template is required\nRun 'spacectl sandbox create --help' for usage.");
        _cleanup_json_ json_object *body = json_object_new_object();
        int r = ctl_sandbox_create_body(ctx, a, ctl_arg(a, "template"), body, err);
        if (r < 0)
                return r;
        bool wait;
        int64_t timeout;
        r = ctl_wait_settings(ctx, a, WAIT_DEFAULT_US, &wait, &timeout, err);
        if (r < 0)
                return r;
        _cleanup_json_ json_object *env = NULL;
        r = ctl_api(ctx, "POST", "/v1/sandboxes", body, ctl_arg(a, "idempotency-key"), &env, err);
        if (r < 0)
                return r;
        const char *id = ctl_jstr(env, "sandbox.id");
        return finish(ctx, wait, timeout, id, env, "create", true, err);
}

/* ---- list, get ---- */

static void list_table(ctl_ctx *ctx, json_object *list)
{
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"ID", "TEMPLATE", "STATE", "WORKER", "CPU", "MEMORY", "AGE", NULL});
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *s = json_object_array_get_idx(list, i);
                char cpu[32], mem[32], age[32];
                snprintf(cpu, sizeof(cpu), "%sm", ctl_jstr(s, "resources.cpu_millis"));
                snprintf(mem, sizeof(mem), "%sMi", ctl_jstr(s, "resources.memory_mb"));
                const char *state = ctl_jstr(s, "state");
                char st[64];
                snprintf(st, sizeof(st), "%s%s", state,
                         strcmp(ctl_jstr(s, "worker_reachable"), "false") == 0 ? " (unreachable)" : "");
                ctl_table_row(&t,
                              (const char *[]){ctl_jstr(s, "id"), ctl_jstr(s, "template"), st, ctl_jstr(s, "worker_id"),
                                               cpu, mem, ctl_jage(s, "created_at", age, sizeof(age))});
        }
        ctl_table_print(ctx, &t);
}

static int run_ls(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_buf_ sp_buf query = SP_BUF_INIT;
        const char *s;
        if ((s = ctl_arg(a, "state"))) {
                sp_buf_append_str(&query, "&state=", NULL);
                ctl_url_escape(&query, s);
        }
        if ((s = ctl_arg(a, "template"))) {
                sp_buf_append_str(&query, "&template=", NULL);
                ctl_url_escape(&query, s);
        }
        for (size_t i = 0; (s = ctl_arg_at(a, "metadata", i)); i++) {
                const char *eq = strchr(s, '=');
                if (!eq || eq == s || i >= MAX_METADATA_FILTERS)
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                        "--metadata wants KEY=VALUE, at most %d times", MAX_METADATA_FILTERS);
                _cleanup_free_ char *key = strndup(s, (size_t)(eq - s));
                sp_buf_append_str(&query, "&metadata.", NULL);
                ctl_url_escape(&query, key);
                sp_buf_append_str(&query, "=", NULL);
                ctl_url_escape(&query, eq + 1);
        }
        int64_t limit = 100;
        if ((s = ctl_arg(a, "limit"))) {
                int r = ctl_parse_int(s, 1, 1000, &limit, err);
                if (r < 0) {
                        sp_error_wrap(err, "--limit");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
        }
        bool all = ctl_flag(a, "all");
        if (all && ctl_arg(a, "limit"))
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--all and --limit contradict each other");
        _cleanup_free_ char *cursor = ctl_arg(a, "cursor") ? strdup(ctl_arg(a, "cursor")) : NULL;
        _cleanup_json_ json_object *list = json_object_new_array();
        for (int page = 0;; page++) {
                if (page == MAX_LIST_PAGES)
                        return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "more than %d pages", MAX_LIST_PAGES);
                _cleanup_buf_ sp_buf target = SP_BUF_INIT;
                sp_buf_appendf(&target, NULL, "/v1/sandboxes?limit=%lld", (long long)(all ? 1000 : limit));
                if (query.len)
                        sp_buf_append(&target, query.data, query.len, NULL);
                if (cursor) {
                        sp_buf_append_str(&target, "&cursor=", NULL);
                        ctl_url_escape(&target, cursor);
                }
                _cleanup_json_ json_object *resp = NULL;
                int r = ctl_api(ctx, "GET", target.data, NULL, NULL, &resp, err);
                if (r < 0)
                        return r;
                json_object *items = NULL, *nc = NULL;
                json_object_object_get_ex(resp, "sandboxes", &items);
                for (size_t i = 0; items && i < json_object_array_length(items); i++)
                        json_object_array_add(list, json_object_get(json_object_array_get_idx(items, i)));
                json_object_object_get_ex(resp, "next_cursor", &nc);
                free(cursor);
                cursor = nc && json_object_is_type(nc, json_type_string) ? strdup(json_object_get_string(nc)) : NULL;
                if (!all || !cursor)
                        break;
        }
        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "sandboxes", json_object_get(list));
                json_object_object_add(o, "next_cursor", cursor ? json_object_new_string(cursor) : NULL);
                ctl_print_json(ctx, o);
                return 0;
        }
        list_table(ctx, list);
        if (cursor)
                fprintf(stderr, "spacectl: more sandboxes: --cursor %s for the next page, or --all\n", cursor);
        return 0;
}

static int run_get(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *s = NULL;
        int r = ctl_api_on(ctx, "GET", "/v1/sandboxes/", a->pos[0], "", &s, err);
        if (r < 0)
                return r;
        ctl_print_any(ctx, s);
        return 0;
}

/* A byte count as "12.3Mi" (binary units); "-" when v is absent. */
static const char *fmt_bytes(json_object *o, const char *field, char *buf, size_t len)
{
        json_object *v = NULL;
        if (!json_object_object_get_ex(o, field, &v) || !json_object_is_type(v, json_type_int))
                return "-";
        double n = (double)json_object_get_int64(v);
        const char *units[] = {"B", "Ki", "Mi", "Gi", "Ti"};
        size_t u = 0;
        while (n >= 1024 && u + 1 < SP_ARRAY_SIZE(units)) {
                n /= 1024;
                u++;
        }
        snprintf(buf, len, u ? "%.1f%s" : "%.0f%s", n, units[u]);
        return buf;
}

static int run_stats(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sandbox_path(&path, a->pos[0], "/stats");
        _cleanup_json_ json_object *s = NULL;
        int r = ctl_api(ctx, "GET", path.data, NULL, NULL, &s, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, s);
                return 0;
        }
        char cpu[48], mem[64], used[32], peak[32], limit[32], disk[32];
        json_object *ns = NULL;
        if (json_object_object_get_ex(s, "cpu_ns", &ns))
                snprintf(cpu, sizeof(cpu), "%.3fs", (double)json_object_get_int64(ns) / 1e9);
        else
                snprintf(cpu, sizeof(cpu), "-");
        snprintf(limit, sizeof(limit), "%sMi", ctl_jstr(s, "resources.memory_mb"));
        snprintf(mem, sizeof(mem), "%s/%s", fmt_bytes(s, "memory_bytes", used, sizeof(used)), limit);
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"ID", "CPU TIME", "MEMORY", "PEAK", "PIDS", "DISK", "OOM KILLS", NULL});
        ctl_table_row(&t, (const char *[]){ctl_jstr(s, "sandbox_id"), cpu, mem,
                                           fmt_bytes(s, "memory_peak_bytes", peak, sizeof(peak)), ctl_jstr(s, "pids"),
                                           fmt_bytes(s, "disk_bytes", disk, sizeof(disk)), ctl_jstr(s, "oom_kills")});
        ctl_table_print(ctx, &t);
        return 0;
}

/* ---- delete and the lifecycle ---- */

static int run_rm(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        bool wait;
        int64_t timeout;
        int r = ctl_wait_settings(ctx, a, WAIT_DEFAULT_US, &wait, &timeout, err);
        if (r < 0)
                return r;
        _cleanup_json_ json_object *env = NULL;
        r = ctl_api_on(ctx, "DELETE", "/v1/sandboxes/", a->pos[0], "", &env, err);
        if (r < 0)
                return r;
        return finish(ctx, wait, timeout, a->pos[0], env, "delete", false, err);
}

static int run_action(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        const char *verb = a->cmd->name;
        bool wait;
        int64_t timeout;
        int r = ctl_wait_settings(ctx, a, WAIT_DEFAULT_US, &wait, &timeout, err);
        if (r < 0)
                return r;
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sandbox_path(&path, a->pos[0], "/");
        sp_buf_append_str(&path, verb, NULL);
        _cleanup_json_ json_object *env = NULL;
        r = ctl_api(ctx, "POST", path.data, NULL, NULL, &env, err);
        if (r < 0)
                return r;
        return finish(ctx, wait, timeout, a->pos[0], env, verb, false, err);
}

static int run_timeout(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int64_t secs;
        int r = ctl_parse_seconds(a->pos[1], &secs, err);
        if (r < 0) {
                sp_error_wrap(err, "timeout");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "timeout_s", json_object_new_int64(secs));
        if (ctl_arg(a, "end-action"))
                json_object_object_add(body, "end_action", json_object_new_string(ctl_arg(a, "end-action")));
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sandbox_path(&path, a->pos[0], "/timeout");
        _cleanup_json_ json_object *s = NULL;
        r = ctl_api(ctx, "POST", path.data, body, NULL, &s, err);
        if (r < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, s);
        else if (strcmp(ctl_jstr(s, "end_at"), "-") == 0)
                fprintf(ctx->out, "%s has no timeout\n", ctl_jstr(s, "id"));
        else
                fprintf(ctx->out, "%s: %s at %s\n", ctl_jstr(s, "id"), ctl_jstr(s, "end_action"),
                        ctl_jstr(s, "end_at"));
        return 0;
}

static const ctl_opt create_opts[] = {
        {"template", "NAME", 0, "the template to start from (required)"},
        CTL_SANDBOX_CREATE_OPTS,
        {"ingress", "MODE", 0, "who may reach its ports through the data plane: token (default) or public"},
        {"auto-resume", NULL, 0, "a request for one of its ports wakes it when paused or suspended"},
        {"idempotency-key", "KEY", 0, "retries with the same key create one sandbox (default: a new key)"},
        {0},
};

static const ctl_opt ls_opts[] = {
        {"state", "STATE", 0, "only sandboxes in this state"},
        {"template", "NAME", 0, "only sandboxes of this template"},
        {"metadata", "K=V", CTL_OPT_REPEAT, "only sandboxes with this metadata (up to 8)"},
        {"limit", "N", 0, "at most N (1-1000, default 100), with a cursor for more"},
        {"cursor", "CURSOR", 0, "continue a listing where --limit stopped"},
        {"all", NULL, 0, "every page"},
        {0},
};

static const ctl_opt timeout_opts[] = {
        {"end-action", "ACTION", 0, "kill or suspend (default: keep the current one)"},
        {0},
};

#define ACTION(verb, what) \
        { \
                .name = verb, .usage = "ID", .summary = what, .min_args = 1, .max_args = 1, .run = run_action, \
                .waits = true \
        }

static const ctl_cmd cmds[] = {
        {.name = "create",
         .summary = "create a sandbox and wait until it runs (prints its id)",
         .opts = create_opts,
         .run = run_create,
         .waits = true,
         .help = "Retries after a lost connection reuse the same Idempotency-Key, so they never make two."},
        {.name = "ls", .summary = "list sandboxes", .opts = ls_opts, .run = run_ls},
        {.name = "get", .usage = "ID", .summary = "show a sandbox", .min_args = 1, .max_args = 1, .run = run_get},
        {.name = "stats",
         .usage = "ID",
         .summary = "show a running or paused sandbox's resource usage now",
         .min_args = 1,
         .max_args = 1,
         .run = run_stats},
        {.name = "rm",
         .usage = "ID",
         .summary = "delete a sandbox and everything it holds",
         .min_args = 1,
         .max_args = 1,
         .run = run_rm,
         .waits = true},
        ACTION("pause", "pause a running sandbox (its memory stays on its worker)"),
        ACTION("resume", "resume a paused sandbox"),
        ACTION("suspend", "suspend a sandbox: save it and release its worker"),
        ACTION("restore", "restore a suspended sandbox"),
        ACTION("wake", "bring a sandbox back to running, whatever its state"),
        ACTION("stop", "stop a sandbox's processes (its filesystem stays)"),
        ACTION("start", "start a stopped sandbox"),
        {.name = "timeout",
         .usage = "ID DURATION",
         .summary = "set (or with 0 clear) when a sandbox ends",
         .min_args = 2,
         .max_args = 2,
         .opts = timeout_opts,
         .run = run_timeout},
        {.name = "egress",
         .usage = "ID PROFILE",
         .summary = "change a sandbox's egress profile (a name, or @FILE with a profile of its own)",
         .min_args = 2,
         .max_args = 2,
         .run = ctl_run_sandbox_egress,
         .help = "A running sandbox has the new rules when this returns. PROFILE is none, public, one of\n"
                 "'spacectl egress ls', or @FILE (@- for stdin) holding a profile as JSON (docs/networking.md)."},
        {.name = "url",
         .usage = "ID PORT",
         .summary = "print the URL of a port of a sandbox on the data plane (--token: with a token, for a browser)",
         .min_args = 2,
         .max_args = 2,
         .opts = ctl_sandbox_url_opts,
         .run = ctl_run_sandbox_url,
         .help = "The host name form, {port}-{id}.{domain}, or with --path the path form on the data plane's URL.\n"
                 "A sandbox in ingress mode token needs a token with each request: --token mints one (for every\n"
                 "port of the sandbox) and appends ?space_token=, which the data plane keeps as a cookie.\n"
                 "With --json: {url, path_url}, and with --token also token and expires_at."},
        {.name = "ingress",
         .usage = "ID [token|public] [--auto-resume|--no-auto-resume]",
         .summary = "change who may reach a sandbox's ports, and whether a request wakes it",
         .min_args = 1,
         .max_args = 2,
         .opts = ctl_sandbox_ingress_opts,
         .run = ctl_run_sandbox_ingress,
         .help = "token: a request needs an ingress token (spacectl sandbox url --token); public: anyone with\n"
                 "the URL. --auto-resume: such a request wakes the sandbox when it is paused or suspended and\n"
                 "waits for it (instead of 409). Data planes see a change within a couple of seconds."},
        {.name = "egress-log",
         .usage = "ID",
         .summary = "show a sandbox's egress decisions (-f to follow them)",
         .min_args = 1,
         .max_args = 1,
         .opts = ctl_sandbox_egress_log_opts,
         .run = ctl_run_sandbox_egress_log,
         .help = "Columns: time, kind (dns, tcp, packet, secret), decision, rule, name, destination, protocol.\n"
                 "With --json: one JSON object per record and line when following, else the API's answer."},
        {0},
};

const ctl_group ctl_group_sandbox = {"sandbox", "Sandboxes: create, list, get, delete, and change their state.", cmds};
