/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl internals shared by its files: the command table, parsed
 * arguments, the context every command runs with (resolved endpoint, key and
 * CA, --json, progress), the API call helper, waiting for operations, and
 * output (JSON, aligned tables, key/value listings).
 *
 * Layout: main.c parses global options, loads the profile and dispatches
 * through the table of command groups; each group has its own file
 * (sandbox.c, template.c, admin.c for workers/tenants/keys, operation.c,
 * profile.c); the root's commands exec and run are in exec.c (with
 * session.c, stdin.c and term.c under them, exec.h), cp in cp.c, up, status
 * and down in up.c, port-forward in portfwd.c (sandbox url and ingress in
 * ingress.c); completion.c generates shell completion from the same table.
 * A new command is a ctl_cmd entry in its group's table; a new group is a
 * ctl_group in its own file, listed in main.c's root table.
 *
 * Errors: a command returns < 0 with *err set and the exit code recorded in
 * ctx->exit_code (ctl_fail(), or ctl_api() for API and connection failures);
 * main prints "spacectl: <message>" on stderr and exits with it. A command
 * that succeeds exits with ctx->status (0 unless it sets it: exec and run
 * exit with their command's code). Single threaded (exec forks a child
 * process to forward stdin, see exec.h; port-forward runs a libevent loop).
 */
#ifndef SPACECTL_CLI_H
#define SPACECTL_CLI_H

#include <json-c/json.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "space/buf.h"
#include "space/error.h"
#include "space/http_client.h"

/* Exit codes (docs/spacectl.md). */
enum {
        CTL_EXIT_OK = 0,
        CTL_EXIT_API = 1, /* the API answered with an error, or an operation failed */
        CTL_EXIT_USAGE = 2, /* unknown command or option, bad or missing argument */
        CTL_EXIT_CONNECT = 3, /* the endpoint cannot be reached: connection, TLS, timeout, malformed answer */
        CTL_EXIT_CONFIG = 4, /* the configuration file, profile, endpoint URL or CA file */
        CTL_EXIT_WAIT = 5, /* --wait gave up: the operation is still running */
};

/* ---- the command table ---- */

enum {
        CTL_OPT_REPEAT = 1u << 0, /* may be given several times */
};
/* A one-letter shorthand of an option (-x; flags may be grouped: -it), in its flags. */
#define CTL_OPT_SHORT(c) ((unsigned)(unsigned char)(c) << 8)
#define CTL_OPT_SHORTHAND(o) ((char)(((o)->flags >> 8) & 0xff))

/* An option of a command: --name, or --name VALUE / --name=VALUE when arg is set. */
typedef struct ctl_opt {
        const char *name; /* without the dashes */
        const char *arg; /* the value's placeholder ("ID", "K=V"); NULL for a flag */
        unsigned flags; /* CTL_OPT_*, CTL_OPT_SHORT() */
        const char *help;
} ctl_opt;

typedef struct ctl_ctx ctl_ctx;
typedef struct ctl_args ctl_args;
typedef struct ctl_group ctl_group;

/* Runs a command; returns 0, or < 0 with *err set (see ctl_fail()). */
typedef int (*ctl_run_fn)(ctl_ctx *ctx, const ctl_args *a, sp_error **err);

/* A command, or (group set) a group of subcommands. Tables end with {0}. */
typedef struct ctl_cmd {
        const char *name;
        const char *usage; /* its positional arguments, e.g. "ID" (NULL: none) */
        const char *summary; /* one line, for help and completion */
        int min_args, max_args; /* positional arguments; max -1: any number */
        const ctl_opt *opts; /* ends with {0}; NULL for none */
        ctl_run_fn run;
        const ctl_group *group;
        const char *help; /* more text after the summary in `--help` (may be NULL) */
        bool waits; /* also takes ctl_wait_opts (it starts an operation) */
} ctl_cmd;

struct ctl_group {
        const char *name; /* as typed: "sandbox", "join-token" */
        const char *summary;
        const ctl_cmd *cmds;
};

/* The root of the table (main.c), and the groups. */
extern const ctl_group ctl_root;
extern const ctl_group ctl_group_sandbox;
extern const ctl_group ctl_group_template;
extern const ctl_group ctl_group_operation;
extern const ctl_group ctl_group_worker;
extern const ctl_group ctl_group_tenant;
extern const ctl_group ctl_group_key;

/* `tenant usage [ID]` and `tenant quota ID --<quota> N ...` (quota.c), in
 * the tenant group. */
extern const ctl_opt ctl_tenant_quota_opts[];
int ctl_tenant_usage_run(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
int ctl_tenant_quota_run(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
extern const ctl_group ctl_group_profile;
extern const ctl_group ctl_group_egress;
extern const ctl_group ctl_group_secret;
/* spacectl sandbox egress ID PROFILE and sandbox egress-log ID (egress.c). */
extern const ctl_opt ctl_sandbox_egress_log_opts[];
int ctl_run_sandbox_egress(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
int ctl_run_sandbox_egress_log(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
/* spacectl sandbox url and sandbox ingress (ingress.c), port-forward (portfwd.c). */
extern const ctl_opt ctl_sandbox_url_opts[];
extern const ctl_opt ctl_sandbox_ingress_opts[];
extern const ctl_opt ctl_port_forward_opts[];
int ctl_run_sandbox_url(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
int ctl_run_sandbox_ingress(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
int ctl_run_port_forward(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
/* A sandbox's ingress URL template ("http://{port}-sbx-….localhost:7071/")
 * with its "{port}" replaced (malloc'd; NULL without one). */
char *ctl_ingress_url(const char *tmpl, int port);
/* Parses a port number within [min, 65535]; a bad one fails with
 * CTL_EXIT_USAGE naming what. */
int ctl_parse_port(ctl_ctx *ctx, const char *s, int64_t min, const char *what, int *ret, sp_error **err);
/* Accepts "token" and "public"; anything else fails with CTL_EXIT_USAGE. */
int ctl_ingress_mode_check(ctl_ctx *ctx, const char *mode, sp_error **err);
/* Direct mode (up.c): spacectl up, status, down. */
extern const ctl_opt ctl_up_opts[];
extern const ctl_opt ctl_status_opts[];
extern const ctl_opt ctl_down_opts[];
int ctl_run_up(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
int ctl_run_status(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
int ctl_run_down(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
/* spacectl worker drain (drain.c); WORKER resolved by ctl_worker_id (admin.c). */
extern const ctl_opt ctl_worker_drain_opts[];
int ctl_run_worker_drain(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
/* The id of a worker given by id or by name (looked up in GET /v1/workers). */
int ctl_worker_id(ctl_ctx *ctx, const char *arg, char *out, size_t len, sp_error **err);
/* spacectl audit (audit.c). */
extern const ctl_opt ctl_audit_opts[];
int ctl_run_audit(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
/* spacectl env (env.c). */
extern const ctl_opt ctl_env_opts[];
int ctl_run_env(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
/* Commands in sandboxes (exec.c) and file transfers (cp.c). */
extern const ctl_opt ctl_exec_opts[];
extern const ctl_opt ctl_run_opts[];
extern const ctl_opt ctl_cp_opts[];
int ctl_run_exec(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
int ctl_run_run(ctl_ctx *ctx, const ctl_args *a, sp_error **err);
int ctl_run_cp(ctl_ctx *ctx, const ctl_args *a, sp_error **err);

/* The options every command accepts (main.c), and those of commands that
 * start an operation and wait for it (api.c). */
extern const ctl_opt ctl_global_opts[];
extern const ctl_opt ctl_wait_opts[];

/* Most option values on one command line. */
#define CTL_MAX_VALUES 128

/* A parsed command line: the command, its positional arguments and option
 * values (borrowed from argv). */
struct ctl_args {
        const ctl_cmd *cmd;
        char path[128]; /* "sandbox create", for messages */
        const char *const *pos;
        int npos;
        struct {
                const ctl_opt *opt;
                const char *value; /* NULL for a flag */
        } vals[CTL_MAX_VALUES];
        size_t nvals;
};

/* The last value of option name, or NULL when absent. */
const char *ctl_arg(const ctl_args *a, const char *name);
/* Whether option (flag) name was given. */
bool ctl_flag(const ctl_args *a, const char *name);
/* The i-th value of a repeatable option, or NULL past the last. */
const char *ctl_arg_at(const ctl_args *a, const char *name, size_t i);

/* ---- the context ---- */

struct ctl_ctx {
        /* global options (borrowed from argv) */
        bool json;
        int progress; /* 1 --progress, 0 --quiet, -1 when stderr is a terminal */
        const char *config_flag;
        ctl_settings flags; /* --profile, --endpoint, --api-key, --ca */
        ctl_settings env; /* SPACE_PROFILE, SPACE_ENDPOINT, ... */

        /* loaded on demand */
        ctl_config *config;
        ctl_resolved settings;
        bool resolved;
        sp_http_client *http;

        int exit_code; /* of the failure being reported */
        int status; /* the exit code of a command that succeeded (0 unless it sets it) */
        /* When set, waits for operations poll it and give up once it is nonzero
         * (spacectl run: a signal arrived while its sandbox was being made). */
        const volatile sig_atomic_t *interrupted;
        FILE *out; /* stdout */
};

/* Records exit_code for the failure and sets *err; returns -(int)code. */
int ctl_fail(ctl_ctx *ctx, int exit_code, sp_error **err, sp_errc code, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
/* Records exit_code for a failure whose *err is already set; returns r. */
int ctl_failed(ctl_ctx *ctx, int exit_code, int r);

/* Loads the configuration file (once) into ctx->config. */
int ctl_load_config(ctl_ctx *ctx, sp_error **err);
/* Resolves the settings (flags > environment > profile > defaults) and
 * makes the HTTP client for the endpoint (once). */
int ctl_connect(ctl_ctx *ctx, sp_error **err);

/* ---- the API ---- */

/* Calls method target (percent-encoded, with its query) with body (JSON,
 * borrowed; may be NULL). Mutating methods carry Idempotency-Key: idem_key,
 * or a generated one when it is NULL. A connection failure, a timeout or a
 * 503 is retried (a few times, backing off) with the same key, so that a
 * retry never acts twice. Returns the HTTP status (2xx) with the parsed body
 * in *ret (NULL when empty; ret may be NULL); an error status fails with the
 * API's message (CTL_EXIT_API), a connection failure with CTL_EXIT_CONNECT. */
int ctl_api(ctl_ctx *ctx, const char *method, const char *target, json_object *body, const char *idem_key,
            json_object **ret, sp_error **err);

/* Appends s percent-encoded (everything but unreserved characters). */
void ctl_url_escape(sp_buf *out, const char *s);
/* ctl_api() on prefix + the escaped name + suffix ("/v1/sandboxes/", id, "/pause"),
 * without a body. */
int ctl_api_on(ctl_ctx *ctx, const char *method, const char *prefix, const char *name, const char *suffix,
               json_object **ret, sp_error **err);
/* Prints o as JSON (--json) or as "key: value" lines. */
void ctl_print_any(ctl_ctx *ctx, json_object *o);

/* Fails with the error in an HTTP error answer: the API's error shape
 * (the data plane's is the same) with its message and code, or the status
 * and the start of the body when it is something else (CTL_EXIT_API). */
int ctl_http_fail(ctl_ctx *ctx, int status, const sp_buf *body, sp_error **err);

/* ---- the data plane (dataplane.c) ---- */

/* A client for a data-plane URL the API handed out (a session's attach_url,
 * a files url): its base is the dataplane_url setting when there is one
 * (flag-less: SPACE_DATAPLANE_URL or the profile), else the URL up to its
 * "/v1/" path; *ret_target is the rest, from "/v1/" on (malloc'd). TLS
 * trusts the CA setting, as the API does. SP_E_INVALID (CTL_EXIT_CONFIG)
 * for a URL or setting that cannot be used. */
sp_http_client *ctl_dp_client(ctl_ctx *ctx, const char *url, char **ret_target, sp_error **err);

/* The base URL of the data plane for a URL the API handed out, as
 * ctl_dp_client() takes it (malloc'd); *ret_target points into url at its
 * "/v1/". */
char *ctl_dp_base(ctl_ctx *ctx, const char *url, const char **ret_target, sp_error **err);

/* Reads the rest of an error answer (at most 64 KiB) from c and fails with
 * ctl_http_fail(). */
int ctl_dp_fail(ctl_ctx *ctx, sp_http_client *c, int status, sp_error **err);

/* The longest token the API may hand out, and the header line that carries it. */
#define CTL_DP_TOKEN_MAX 8192
#define CTL_DP_AUTH_MAX (CTL_DP_TOKEN_MAX + 32)

/* The "Authorization: Bearer <token>" line for a data-plane request, in
 * buf (of len bytes, CTL_DP_AUTH_MAX for any token); SP_E_INVALID when the
 * token does not fit or has a byte a header cannot carry. */
int ctl_dp_auth(char *buf, size_t len, const char *token, sp_error **err);

/* Waits for operation op_id to finish (long-polling), for at most
 * timeout_us, showing progress on stderr (see ctl_progress) with the state
 * of the object at state_target (a GET path answering an object with a
 * "state", or NULL). On success *ret is the final operation. A failed
 * operation fails with its error (CTL_EXIT_API), running out of time with
 * CTL_EXIT_WAIT, and so does *ctx->interrupted turning nonzero (checked
 * every second when ctx->interrupted is set). */
int ctl_wait_operation(ctl_ctx *ctx, const char *op_id, const char *label, const char *state_target, int64_t timeout_us,
                       json_object **ret, sp_error **err);

/* Reads the options of commands with `waits` set (ctl_wait_opts:
 * --wait, --no-wait, --wait-timeout; default_timeout_us when --wait-timeout
 * is absent). Returns 0 and whether to wait, or < 0 for a bad duration. */
int ctl_wait_settings(ctl_ctx *ctx, const ctl_args *a, int64_t default_timeout_us, bool *ret_wait,
                      int64_t *ret_timeout_us, sp_error **err);

/* ---- progress on stderr ---- */

/* A live status line while something runs: rewritten in place on a
 * terminal, one line per change otherwise; silent unless ctx->progress
 * allows. */
typedef struct ctl_progress {
        bool on, tty;
        int64_t start_us;
        char last[512];
} ctl_progress;

void ctl_progress_begin(ctl_ctx *ctx, ctl_progress *p);
/* Shows "<text> (<elapsed>)"; text without the elapsed time decides what
 * counts as a change. */
void ctl_progress_update(ctl_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears the status line. */
void ctl_progress_end(ctl_progress *p);

/* A transfer's progress (transfer.c): "LABEL [#####-----]  50% 1.0 MiB/2.0 MiB
 * 3.1 MiB/s" after half a second, then every 100 ms on a terminal (2 s
 * otherwise); total -1 when unknown. */
typedef struct ctl_xfer {
        ctl_progress p;
        const char *label;
        int64_t total; /* -1: unknown */
        int64_t done;
        int64_t start_us, last_us;
} ctl_xfer;

void ctl_xfer_begin(ctl_ctx *ctx, ctl_xfer *x, const char *label, int64_t total);
/* Shows the progress if it is due (always when final). */
void ctl_xfer_tick(ctl_xfer *x, bool final);
/* "1.5 MiB" */
void ctl_human_bytes(char out[static 32], int64_t n);

/* ---- output ---- */

/* Prints o as JSON (indented) on ctx->out. */
void ctl_print_json(ctl_ctx *ctx, json_object *o);
/* Prints o as "key: value" lines, nested objects with dotted keys, arrays
 * joined by commas. */
void ctl_print_object(ctl_ctx *ctx, json_object *o);
/* The scalar at a dotted path of o as text (strings as they are, numbers
 * and booleans formatted), or "-" when absent or null. Borrowed from o, or
 * static. */
const char *ctl_jstr(json_object *o, const char *path);
/* "a,b,c" of the strings or numbers in array key of o, cut to fit len (its
 * end "..." when cut); "-" when absent or empty. buf, or static. */
const char *ctl_jjoin(json_object *o, const char *key, char *buf, size_t len);
/* The time since an RFC 3339 timestamp at path, e.g. "45s", "12m", "3h",
 * "5d"; "-" when absent. Written to buf (at least 32 bytes). */
const char *ctl_jage(json_object *o, const char *path, char *buf, size_t len);

/* An aligned table: a header row, then rows of the same width. */
typedef struct ctl_table {
        size_t ncols;
        size_t nrows;
        char **cells; /* nrows * ncols, owned */
} ctl_table;

/* Starts a table with the given header cells (NULL-terminated). */
void ctl_table_init(ctl_table *t, const char *const *header);
/* Adds a row of ncols cells (copied; NULL prints as "-"). */
void ctl_table_row(ctl_table *t, const char *const *cells);
/* Prints the table on ctx->out, columns separated by two spaces. */
void ctl_table_print(ctl_ctx *ctx, const ctl_table *t);
void ctl_table_free(ctl_table *t);
#define _cleanup_table_ __attribute__((cleanup(ctl_table_free)))

/* ---- sandboxes (sandbox.c) ---- */

/* The options that describe a new sandbox, shared by `sandbox create` and
 * `run` (entries of a ctl_opt table). */
#define CTL_SANDBOX_CREATE_OPTS \
        {"cpu", "CPUS", 0, "CPUs: 2, 0.5 or 250m (thousandths)"}, \
                {"memory", "SIZE", 0, "memory: 512M, 2G (no suffix: MiB)"}, \
                {"disk", "SIZE", 0, "disk: 4G (no suffix: MiB)"}, {"pids", "N", 0, "the most processes"}, \
                {"env", "K=V", CTL_OPT_REPEAT, "an environment variable of its commands"}, \
                {"metadata", "K=V", CTL_OPT_REPEAT, "a label of yours, filterable in ls"}, \
                {"label", "K=V", CTL_OPT_REPEAT, "place only on workers with this label"}, \
                {"backend", "NAME", 0, "jail, qemu or firecracker (default: any)"}, \
                {"timeout", "DURATION", 0, "end it after this long (30m, 2h; 0: never)"}, \
                {"end-action", "ACTION", 0, "what its timeout does: kill or suspend"}, \
                {"idle-timeout", "DURATION", 0, "suspend it after this long without activity (0: never)"}, \
                {"egress", "PROFILE", 0, "the egress profile (default none; see spacectl egress ls)"}, \
        { \
                "secret", "NAME|VAR=NAME", CTL_OPT_REPEAT, \
                        "a secret of yours its profile grants: its variable holds a placeholder (docs/secrets.md)" \
        }

/* Builds the SandboxCreate body for template_name from the
 * CTL_SANDBOX_CREATE_OPTS options in a, into body (an object). A bad value
 * fails with CTL_EXIT_USAGE naming the option. */
int ctl_sandbox_create_body(ctl_ctx *ctx, const ctl_args *a, const char *template_name, json_object *body,
                            sp_error **err);

/* ---- values on the command line (values.c) ---- */

/* "2", "0.5" CPUs or "250m" thousandths → thousandths of a CPU. */
int ctl_parse_cpu(const char *s, int64_t *ret_millis, sp_error **err);
/* "512", "512M", "512MiB", "2G", "1T" (powers of 1024; no suffix: MiB) →
 * MiB; a size that is not a whole number of MiB is refused. */
int ctl_parse_mib(const char *s, int64_t *ret_mib, sp_error **err);
/* A duration ("90", "30s", "5m", "1h30m", "0") → whole seconds. */
int ctl_parse_seconds(const char *s, int64_t *ret_s, sp_error **err);
/* A non-negative integer within [min, max]. */
int ctl_parse_int(const char *s, int64_t min, int64_t max, int64_t *ret, sp_error **err);
/* Adds "KEY=VALUE" to the object map (KEY non-empty; a repeated key is
 * refused). what names the option in messages. */
int ctl_parse_kv(const char *s, const char *what, json_object *map, sp_error **err);

/* Runs a command line (argv[0] is the program); returns the exit code.
 * Output goes to out (stdout), messages to stderr. */
int ctl_main(int argc, char **argv, FILE *out);

/* `spacectl completion bash|zsh` (completion.c). */
int ctl_run_completion(ctl_ctx *ctx, const ctl_args *a, sp_error **err);

/* Prints help for a group or a command (main.c). */
void ctl_help_group(FILE *f, const char *path, const ctl_group *g);
void ctl_help_cmd(FILE *f, const char *path, const ctl_cmd *c);

#endif
