/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl: the command line of a SPACE cluster (docs/spacectl.md).
 *
 * This file holds the root of the command table, the global options, the
 * parsing of a command line against the table, help and version. Commands
 * live in one file per group (see cli.h).
 */
#include <ctype.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"

const ctl_opt ctl_global_opts[] = {
        {"json", NULL, 0, "machine-readable output on stdout (see docs/spacectl.md for the shapes)"},
        {"progress", NULL, 0, "show progress on stderr even when it is not a terminal"},
        {"quiet", NULL, 0, "no progress on stderr (-q)"},
        {"profile", "NAME", 0, "use this profile (else SPACE_PROFILE, else the current one)"},
        {"endpoint", "URL", 0, "the API endpoint (else SPACE_ENDPOINT, else the profile's)"},
        {"api-key", "KEY", 0, "the API key (else SPACE_API_KEY, else the profile's)"},
        {"ca", "FILE", 0, "CA certificate(s) to trust for https (else SPACE_CA_FILE, else the profile's)"},
        {"config", "FILE", 0, "the configuration file (else SPACE_CONFIG, else ~/.config/space/config.json)"},
        {"help", NULL, 0, "show help (-h)"},
        {0},
};

/* ---- help, version, completion: commands of the root ---- */

static int run_version(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "version", json_object_new_string(SPACE_VERSION));
                ctl_print_json(ctx, o);
        } else {
                fprintf(ctx->out, "spacectl %s\n", SPACE_VERSION);
        }
        return 0;
}

/* Finds the group or command that words name, for help. */
static int run_help(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        const ctl_group *g = &ctl_root;
        char path[128] = "";
        for (int i = 0; i < a->npos; i++) {
                const ctl_cmd *c = g->cmds;
                while (c->name && strcmp(c->name, a->pos[i]) != 0)
                        c++;
                if (!c->name)
                        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "no command '%s%s%s'", path,
                                        *path ? " " : "", a->pos[i]);
                size_t len = strlen(path);
                snprintf(path + len, sizeof(path) - len, "%s%s", len ? " " : "", c->name);
                if (!c->group) {
                        ctl_help_cmd(ctx->out, path, c);
                        return 0;
                }
                g = c->group;
        }
        ctl_help_group(ctx->out, path, g);
        return 0;
}

static const ctl_cmd root_cmds[] = {
        {.name = "sandbox", .summary = "create sandboxes, list them, change their state", .group = &ctl_group_sandbox},
        {.name = "template", .summary = "build, list and delete templates", .group = &ctl_group_template},
        {.name = "egress", .summary = "egress profiles: what sandboxes may reach", .group = &ctl_group_egress},
        {.name = "secret",
         .summary = "secrets: credentials the gateway injects for sandboxes",
         .group = &ctl_group_secret},
        {.name = "operation", .summary = "follow asynchronous operations", .group = &ctl_group_operation},
        {.name = "exec",
         .usage = "SANDBOX [--] ARGV...",
         .summary = "run a command in a sandbox, streaming its output (exits with its exit code)",
         .min_args = 2,
         .max_args = -1,
         .opts = ctl_exec_opts,
         .run = ctl_run_exec,
         .help = "Stdin is forwarded when it is not a terminal, or with -i or -t; -t gives the command a terminal\n"
                 "(ours in raw mode, resized with it). Ctrl-C (SIGINT), SIGTERM and SIGHUP go to the command as\n"
                 "signals; a third Ctrl-C gives up waiting. Put -- before a command that has options of its own.\n"
                 "Exits with the command's exit code, 128+N when a signal N ended it. See docs/spacectl.md."},
        {.name = "run",
         .usage = "TEMPLATE [--] ARGV...",
         .summary = "create a sandbox, run a command in it, delete it (exits with the command's exit code)",
         .min_args = 2,
         .max_args = -1,
         .opts = ctl_run_opts,
         .run = ctl_run_run,
         .help = "Takes sandbox create's options and exec's. The sandbox is deleted when the command ends, when\n"
                 "spacectl is interrupted or fails, unless --keep (then its id is printed on stderr)."},
        {.name = "cp",
         .usage = "SRC DST",
         .summary = "copy a file into or out of a sandbox (SANDBOX:PATH; - is stdin or stdout)",
         .min_args = 2,
         .max_args = 2,
         .opts = ctl_cp_opts,
         .run = ctl_run_cp,
         .help = "One side is SANDBOX:PATH, the other a local path (a local path with a colon: ./a:b). A DST that\n"
                 "is a directory, or ends with /, receives the file under its name. Streams; a download lands\n"
                 "in a temporary file renamed into place once complete. Progress on stderr when it is a terminal."},
        {.name = "port-forward",
         .usage = "SANDBOX [LOCAL:]REMOTE",
         .summary = "serve a port of a sandbox on a local port, through the data plane (HTTP and WebSockets)",
         .min_args = 2,
         .max_args = 2,
         .opts = ctl_port_forward_opts,
         .run = ctl_run_port_forward,
         .help = "Listens on LOCAL (default: REMOTE's number; 0 picks a free port) and relays each connection to\n"
                 "the server on port REMOTE in the sandbox through the data plane's ingress, which speaks HTTP:\n"
                 "for HTTP servers, WebSockets included, not for other protocols (a database, ssh). Prints\n"
                 "\"Forwarding from ADDR:LOCAL -> SANDBOX:REMOTE\" (--json: one line {address, port, sandbox,\n"
                 "remote_port}) and runs until SIGINT or SIGTERM. A sandbox in ingress mode token gets an\n"
                 "ingress token, renewed while it runs. At most 256 connections at once."},
        {.name = "worker", .summary = "operators: workers and join tokens", .group = &ctl_group_worker},
        {.name = "tenant", .summary = "operators: tenants", .group = &ctl_group_tenant},
        {.name = "key", .summary = "API keys", .group = &ctl_group_key},
        {.name = "profile", .summary = "endpoints and keys to use, by name", .group = &ctl_group_profile},
        {.name = "audit",
         .summary = "read the audit log: who did what, and what was refused (--follow: as it grows)",
         .opts = ctl_audit_opts,
         .run = ctl_run_audit,
         .help = "One line per record, oldest first: time, action, object, outcome (with the HTTP status when\n"
                 "refused or failed), API key, tenant, request id; --json: one JSON object per line. An admin key\n"
                 "reads every tenant's records, any other key its own tenant's. See docs/operations.md."},
        {.name = "up",
         .summary = "start a whole single-node cluster on this host (as root)",
         .opts = ctl_up_opts,
         .run = ctl_run_up,
         .help = "Starts PostgreSQL (a private one unless --database-url), the control plane, a worker and the\n"
                 "data plane, each only if it is not running, waits until all are ready, and writes the CLI\n"
                 "profile 'local'. See docs/operations.md."},
        {.name = "status",
         .summary = "show each direct-mode component's state, pid and address",
         .opts = ctl_status_opts,
         .run = ctl_run_status},
        {.name = "down",
         .summary = "stop the direct-mode cluster (--purge: and remove every trace)",
         .opts = ctl_down_opts,
         .run = ctl_run_down},
        {.name = "env",
         .summary = "print the environment for other clients (--e2b: the E2B SDK)",
         .opts = ctl_env_opts,
         .run = ctl_run_env,
         .help = "eval \"$(spacectl env --e2b)\" points the unmodified E2B SDK at this cluster (docs/e2b.md)."},
        {.name = "completion",
         .usage = "bash|zsh",
         .summary = "print a shell completion script",
         .min_args = 1,
         .max_args = 1,
         .run = ctl_run_completion,
         .help = "Load it with:  source <(spacectl completion bash)   (or zsh)"},
        {.name = "version", .summary = "print spacectl's version", .run = run_version},
        {.name = "help",
         .usage = "[COMMAND...]",
         .summary = "show help for a command",
         .max_args = -1,
         .run = run_help},
        {0},
};

const ctl_group ctl_root = {"spacectl", "The command line of a SPACE cluster.", root_cmds};

/* ---- profile loading ---- */

/* Long-polls last up to 30 s; an answer may take that long. */
#define IO_TIMEOUT_MS 90000

int ctl_load_config(ctl_ctx *ctx, sp_error **err)
{
        if (ctx->config)
                return 0;
        _cleanup_free_ char *path = ctx->config_flag ? strdup(ctx->config_flag) : ctl_config_default_path(err);
        if (!path)
                return ctl_failed(ctx, CTL_EXIT_CONFIG, -SP_E_INVALID);
        int r = ctl_config_load(path, &ctx->config, err);
        if (r < 0)
                return ctl_failed(ctx, CTL_EXIT_CONFIG, r);
        if (ctx->config->loose_mode)
                fprintf(stderr, "spacectl: warning: %s is readable by others; it may hold API keys (chmod 600 it)\n",
                        path);
        return 0;
}

int ctl_connect(ctl_ctx *ctx, sp_error **err)
{
        if (ctx->http)
                return 0;
        int r = ctl_load_config(ctx, err);
        if (r < 0)
                return r;
        if (!ctx->resolved) {
                r = ctl_resolve(ctx->config, &ctx->flags, &ctx->env, &ctx->settings, err);
                if (r < 0)
                        return ctl_failed(ctx, CTL_EXIT_CONFIG, r);
                ctx->resolved = true;
        }
        sp_http_client_config cfg = {
                .ca_file = ctx->settings.v[CTL_F_CA_FILE],
                .io_timeout_ms = IO_TIMEOUT_MS,
                .user_agent = "spacectl/" SPACE_VERSION,
        };
        const char *key = ctx->settings.v[CTL_F_API_KEY];
        for (const char *c = key; c && *c; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f)
                        return ctl_fail(ctx, CTL_EXIT_CONFIG, err, SP_E_INVALID,
                                        "the API key (%s) has a control character",
                                        ctl_source_name(ctx->settings.source[CTL_F_API_KEY]));
        ctx->http = sp_http_client_new(ctx->settings.v[CTL_F_ENDPOINT], &cfg, err);
        if (!ctx->http) {
                sp_error_wrap(err, "endpoint %s (%s)", ctx->settings.v[CTL_F_ENDPOINT],
                              ctl_source_name(ctx->settings.source[CTL_F_ENDPOINT]));
                return ctl_failed(ctx, CTL_EXIT_CONFIG, -SP_E_INVALID);
        }
        return 0;
}

/* ---- help ---- */

static void print_opts(FILE *f, const ctl_opt *opts)
{
        for (const ctl_opt *o = opts; o && o->name; o++) {
                char left[64], sh[8] = "";
                if (CTL_OPT_SHORTHAND(o))
                        snprintf(sh, sizeof(sh), "-%c, ", CTL_OPT_SHORTHAND(o));
                snprintf(left, sizeof(left), "%s--%s%s%s", sh, o->name, o->arg ? " " : "", o->arg ? o->arg : "");
                fprintf(f, "  %-26s %s%s\n", left, o->help, o->flags & CTL_OPT_REPEAT ? " (repeatable)" : "");
        }
}

void ctl_help_group(FILE *f, const char *path, const ctl_group *g)
{
        fprintf(f, "Usage: spacectl %s%sCOMMAND [options]\n\n%s\n\nCommands:\n", path, *path ? " " : "",
                g == &ctl_root ? ctl_root.summary : g->summary);
        for (const ctl_cmd *c = g->cmds; c->name; c++)
                fprintf(f, "  %-12s %s\n", c->name, c->summary);
        if (g == &ctl_root) {
                fprintf(f, "\nGlobal options (accepted by every command):\n");
                print_opts(f, ctl_global_opts);
                fprintf(f, "\nExit codes: 0 ok, 1 API error or failed operation, 2 usage, 3 cannot reach the API "
                           "(connection, TLS, timeout),\n4 configuration, 5 gave up waiting. See docs/spacectl.md.\n");
        }
        fprintf(f, "\nRun 'spacectl %s%sCOMMAND --help' for a command's options.\n", path, *path ? " " : "");
}

void ctl_help_cmd(FILE *f, const char *path, const ctl_cmd *c)
{
        fprintf(f, "Usage: spacectl %s%s%s [options]\n\n%c%s.\n", path, c->usage ? " " : "", c->usage ? c->usage : "",
                toupper((unsigned char)c->summary[0]), c->summary + 1);
        if (c->help)
                fprintf(f, "\n%s\n", c->help);
        if ((c->opts && c->opts->name) || c->waits) {
                fprintf(f, "\nOptions:\n");
                print_opts(f, c->opts);
                if (c->waits)
                        print_opts(f, ctl_wait_opts);
        }
        fprintf(f, "\nGlobal options: --json, --progress, --quiet, --profile, --endpoint, --api-key, --ca, --config "
                   "(spacectl help).\n");
}

/* ---- parsed arguments ---- */

const char *ctl_arg_at(const ctl_args *a, const char *name, size_t i)
{
        for (size_t k = 0; k < a->nvals; k++)
                if (strcmp(a->vals[k].opt->name, name) == 0 && i-- == 0)
                        return a->vals[k].value;
        return NULL;
}

const char *ctl_arg(const ctl_args *a, const char *name)
{
        const char *v = NULL;
        for (size_t k = 0; k < a->nvals; k++)
                if (strcmp(a->vals[k].opt->name, name) == 0)
                        v = a->vals[k].value;
        return v;
}

bool ctl_flag(const ctl_args *a, const char *name)
{
        for (size_t k = 0; k < a->nvals; k++)
                if (strcmp(a->vals[k].opt->name, name) == 0)
                        return true;
        return false;
}

/* ---- parsing ---- */

static const ctl_opt *find_opt(const ctl_opt *opts, const char *name, size_t len)
{
        for (const ctl_opt *o = opts; o && o->name; o++)
                if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
                        return o;
        return NULL;
}

static void set_global(ctl_ctx *ctx, const ctl_opt *o, const char *v, bool *help)
{
        const char *n = o->name;
        if (strcmp(n, "json") == 0)
                ctx->json = true;
        else if (strcmp(n, "progress") == 0)
                ctx->progress = 1;
        else if (strcmp(n, "quiet") == 0)
                ctx->progress = 0;
        else if (strcmp(n, "profile") == 0)
                ctx->flags.profile = v;
        else if (strcmp(n, "endpoint") == 0)
                ctx->flags.v[CTL_F_ENDPOINT] = v;
        else if (strcmp(n, "api-key") == 0)
                ctx->flags.v[CTL_F_API_KEY] = v;
        else if (strcmp(n, "ca") == 0)
                ctx->flags.v[CTL_F_CA_FILE] = v;
        else if (strcmp(n, "config") == 0)
                ctx->config_flag = v;
        else if (strcmp(n, "help") == 0)
                *help = true;
}

typedef struct parse_state {
        const ctl_group *group; /* the deepest group named so far */
        const ctl_cmd *cmd;
        bool help;
        const char *pos[256];
        int npos;
} parse_state;

static int usage_error(ctl_ctx *ctx, const ctl_args *a, sp_error **err, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int usage_error(ctl_ctx *ctx, const ctl_args *a, sp_error **err, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "%s\nRun 'spacectl %s%s--help' for usage.", msg,
                        a->path, *a->path ? " " : "");
}

/* Records a command option's value (NULL for a flag). */
static int add_value(ctl_ctx *ctx, ctl_args *a, const ctl_opt *o, const char *value, sp_error **err)
{
        if (!(o->flags & CTL_OPT_REPEAT) && ctl_flag(a, o->name))
                return usage_error(ctx, a, err, "option --%s given twice", o->name);
        if (a->nvals == CTL_MAX_VALUES)
                return usage_error(ctx, a, err, "more than %d options", CTL_MAX_VALUES);
        a->vals[a->nvals].opt = o;
        a->vals[a->nvals].value = value;
        a->nvals++;
        return 0;
}

/* "-x", or grouped flags "-it": the command's shorthands (and -h, -q). An
 * option that takes a value takes the rest of the word ("-uNAME"), or the
 * next word. */
static int parse_shorthands(ctl_ctx *ctx, int argc, char **argv, int *i, parse_state *st, ctl_args *a, sp_error **err)
{
        const char *arg = argv[*i];
        for (const char *c = arg + 1; *c; c++) {
                if (*c == 'h' || *c == 'q') {
                        set_global(ctx, find_opt(ctl_global_opts, *c == 'h' ? "help" : "quiet", 4), NULL, &st->help);
                        continue;
                }
                const ctl_opt *o = st->cmd ? st->cmd->opts : NULL;
                while (o && o->name && CTL_OPT_SHORTHAND(o) != *c)
                        o = o + 1;
                if (!o || !o->name)
                        return usage_error(ctx, a, err, "unknown option '-%c'%s%s", *c, *a->path ? " for " : "",
                                           a->path);
                const char *value = NULL;
                if (o->arg) {
                        if (c[1])
                                value = c + 1;
                        else if (*i + 1 < argc)
                                value = argv[++*i];
                        else
                                return usage_error(ctx, a, err, "option -%c needs a value (%s)", *c, o->arg);
                }
                int r = add_value(ctx, a, o, value, err);
                if (r < 0 || value)
                        return r;
        }
        return 0;
}

/* Parses argv against the table: global options anywhere, the words that
 * name a command, then its options and positional arguments. */
static int parse(ctl_ctx *ctx, int argc, char **argv, parse_state *st, ctl_args *a, sp_error **err)
{
        bool options_done = false;
        st->group = &ctl_root;
        for (int i = 1; i < argc; i++) {
                const char *arg = argv[i];
                if (!options_done && strcmp(arg, "--") == 0) {
                        options_done = true;
                        continue;
                }
                if (!options_done && (strcmp(arg, "-h") == 0 || strcmp(arg, "-q") == 0)) {
                        const char *name = arg[1] == 'h' ? "help" : "quiet";
                        set_global(ctx, find_opt(ctl_global_opts, name, strlen(name)), NULL, &st->help);
                        continue;
                }
                if (!options_done && arg[0] == '-' && arg[1] != '\0' && arg[1] != '-') {
                        int r = parse_shorthands(ctx, argc, argv, &i, st, a, err);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (!options_done && arg[0] == '-' && arg[1] != '\0') {
                        const char *name = arg + 2;
                        const char *eq = strchr(name, '=');
                        size_t len = eq ? (size_t)(eq - name) : strlen(name);
                        const ctl_opt *o = find_opt(ctl_global_opts, name, len);
                        bool global = o != NULL;
                        if (!o && st->cmd)
                                o = find_opt(st->cmd->opts, name, len);
                        if (!o && st->cmd && st->cmd->waits)
                                o = find_opt(ctl_wait_opts, name, len);
                        if (!o)
                                return usage_error(ctx, a, err, "unknown option '--%.*s'%s%s", (int)len, name,
                                                   *a->path ? " for " : "", a->path);
                        const char *value = NULL;
                        if (o->arg) {
                                if (eq)
                                        value = eq + 1;
                                else if (i + 1 < argc)
                                        value = argv[++i];
                                else
                                        return usage_error(ctx, a, err, "option --%s needs a value (%s)", o->name,
                                                           o->arg);
                        } else if (eq) {
                                return usage_error(ctx, a, err, "option --%s takes no value", o->name);
                        }
                        if (global) {
                                set_global(ctx, o, value, &st->help);
                                continue;
                        }
                        int r = add_value(ctx, a, o, value, err);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (st->cmd) {
                        if (st->npos == (int)SP_ARRAY_SIZE(st->pos))
                                return usage_error(ctx, a, err, "too many arguments");
                        st->pos[st->npos++] = arg;
                        continue;
                }
                const ctl_cmd *c = st->group->cmds;
                while (c->name && strcmp(c->name, arg) != 0)
                        c++;
                if (!c->name)
                        return usage_error(ctx, a, err, "unknown command '%s%s%s'", a->path, *a->path ? " " : "", arg);
                size_t len = strlen(a->path);
                snprintf(a->path + len, sizeof(a->path) - len, "%s%s", len ? " " : "", c->name);
                if (c->group)
                        st->group = c->group;
                else
                        st->cmd = c;
        }
        return 0;
}

int ctl_main(int argc, char **argv, FILE *out)
{
        ctl_ctx ctx = {.progress = -1, .out = out};
        ctl_settings_from_env(&ctx.env);
        parse_state st = {0};
        ctl_args a = {0};
        _cleanup_error_ sp_error *e = NULL;
        int r = parse(&ctx, argc, argv, &st, &a, &e);
        if (r >= 0 && st.help) {
                if (st.cmd && st.cmd->run != run_help)
                        ctl_help_cmd(out, a.path, st.cmd);
                else
                        ctl_help_group(out, a.path, st.group);
                return CTL_EXIT_OK;
        }
        if (r >= 0 && !st.cmd) {
                ctl_help_group(stderr, a.path, st.group);
                return CTL_EXIT_USAGE;
        }
        if (r >= 0 && (st.npos < st.cmd->min_args || (st.cmd->max_args >= 0 && st.npos > st.cmd->max_args)))
                r = usage_error(&ctx, &a, &e, "%s arguments: spacectl %s%s%s",
                                st.npos < st.cmd->min_args ? "missing" : "too many", a.path, st.cmd->usage ? " " : "",
                                st.cmd->usage ? st.cmd->usage : "");
        if (r >= 0) {
                a.cmd = st.cmd;
                a.pos = st.pos;
                a.npos = st.npos;
                r = st.cmd->run(&ctx, &a, &e);
        }
        if (r < 0)
                fprintf(stderr, "spacectl: %s\n", e ? e->message : "failed");
        if (fflush(out) != 0 && r >= 0) {
                fprintf(stderr, "spacectl: cannot write the output\n");
                ctx.exit_code = CTL_EXIT_API;
                r = -1;
        }
        ctx.http = sp_http_client_free(ctx.http);
        ctx.config = ctl_config_free(ctx.config);
        ctl_resolved_free(&ctx.settings);
        if (r >= 0)
                return ctx.status;
        return ctx.exit_code ? ctx.exit_code : CTL_EXIT_API;
}

int main(int argc, char **argv)
{
        /* A closed pipe on stdout ends the output with an error, not a signal. */
        signal(SIGPIPE, SIG_IGN);
        return ctl_main(argc, argv, stdout);
}
