/* SPDX-License-Identifier: Apache-2.0 */
/* `spacectl exec` and `spacectl run`: a command in a sandbox (see exec.h). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

/* The operation deadline on the control plane is 10 minutes. */
#define WAIT_DEFAULT_US (10 * 60 * SP_USEC_PER_SEC)
/* A session's timeout_s is at most 30 days. */
#define MAX_TIMEOUT_S (30 * 24 * 3600)

#define EXEC_COMMON_OPTS \
        {"cwd", "DIR", 0, "the command's working directory in the sandbox"}, \
                {"user", "USER", 0, "run it as this user (a name or uid in the sandbox; default root)"}, \
                {"tty", NULL, CTL_OPT_SHORT('t'), \
                 "give it a terminal of our window size (ours in raw mode meanwhile)"}, \
                {"interactive", NULL, CTL_OPT_SHORT('i'), "forward stdin even when it is a terminal"}, \
        { \
                "no-stdin", NULL, 0, "do not forward stdin (the command reads end of file)" \
        }

const ctl_opt ctl_exec_opts[] = {
        {"env", "K=V", CTL_OPT_REPEAT, "an environment variable of the command"},
        EXEC_COMMON_OPTS,
        {"timeout", "DURATION", 0, "kill the command after this long (30s, 5m, 2h)"},
        {0},
};

const ctl_opt ctl_run_opts[] = {
        CTL_SANDBOX_CREATE_OPTS,
        EXEC_COMMON_OPTS,
        {"keep", NULL, 0, "keep the sandbox afterwards (its id goes to stderr)"},
        {"wait-timeout", "DURATION", 0, "give up waiting for the sandbox to run after this long (default 10m)"},
        {0},
};

/* The spec from the options and the positional arguments from first on
 * (the command). With session_env, --env belongs to the command (exec);
 * run's --env is the sandbox's, which its commands get anyway. */
static int parse_spec(ctl_ctx *ctx, const ctl_args *a, int first, bool session_env, ctl_exec_spec *spec,
                      json_object **ret_env, sp_error **err)
{
        memset(spec, 0, sizeof(*spec));
        spec->argv = a->pos + first;
        spec->argc = a->npos - first;
        spec->cwd = ctl_arg(a, "cwd");
        spec->user = ctl_arg(a, "user");
        spec->tty = ctl_flag(a, "tty");
        bool interactive = ctl_flag(a, "interactive"), none = ctl_flag(a, "no-stdin");
        if (interactive && none)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID,
                                "--interactive (-i) and --no-stdin contradict each other");
        spec->forward_stdin = !none && (interactive || spec->tty || !isatty(STDIN_FILENO));
        if (session_env && ctl_arg(a, "timeout")) {
                int r = ctl_parse_seconds(ctl_arg(a, "timeout"), &spec->timeout_s, err);
                if (r >= 0 && (spec->timeout_s < 1 || spec->timeout_s > MAX_TIMEOUT_S))
                        r = sp_error_set(err, SP_E_INVALID, "between 1 second and 30 days");
                if (r < 0) {
                        sp_error_wrap(err, "--timeout");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
        }
        if (session_env && ctl_arg_at(a, "env", 0)) {
                _cleanup_json_ json_object *env = json_object_new_object();
                for (size_t i = 0; ctl_arg_at(a, "env", i); i++) {
                        int r = ctl_parse_kv(ctl_arg_at(a, "env", i), "env", env, err);
                        if (r < 0)
                                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                spec->env = *ret_env = TAKE_PTR(env);
        }
        return 0;
}

int ctl_run_exec(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        ctl_exec_spec spec;
        _cleanup_json_ json_object *env = NULL;
        if (parse_spec(ctx, a, 1, true, &spec, &env, err) < 0)
                return -1;
        _cleanup_signals_ ctl_signals sig = {0};
        if (ctl_signals_install(&sig, err) < 0)
                return ctl_failed(ctx, CTL_EXIT_API, -SP_E_IO);
        int code = 0;
        if (ctl_exec_session(ctx, a->pos[0], &spec, &sig, &code, err) < 0)
                return -1;
        ctx->status = code;
        return 0;
}

/* ---- run ---- */

static void sandbox_path(sp_buf *b, const char *id)
{
        sp_buf_append_str(b, "/v1/sandboxes/", NULL);
        ctl_url_escape(b, id);
}

/* Deletes the sandbox and waits until it is gone. */
static int delete_sandbox(ctl_ctx *ctx, const char *id, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sandbox_path(&path, id);
        _cleanup_json_ json_object *env = NULL;
        const char *op = NULL;
        ctx->interrupted = NULL;
        if (ctl_api(ctx, "DELETE", path.data, NULL, NULL, &env, err) < 0)
                return -1;
        json_object *o = NULL;
        if (sp_json_get_object(env, "operation", true, &o, NULL) < 0 || !o ||
            sp_json_get_string(o, "id", true, SP_ID_MAX - 1, &op, NULL) < 0 || !op)
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID, "the API's answer names no operation");
        char label[96];
        snprintf(label, sizeof(label), "delete %s", id);
        return ctl_wait_operation(ctx, op, label, NULL, WAIT_DEFAULT_US, NULL, err);
}

/* Deletes the sandbox after a failure, keeping the failure's error and exit code. */
static int fail_and_delete(ctl_ctx *ctx, const char *id, bool keep, int r, sp_error **err)
{
        int code = ctx->exit_code;
        sp_error *e = NULL;
        if (keep)
                fprintf(stderr, "spacectl: kept sandbox %s\n", id);
        else if (delete_sandbox(ctx, id, &e) < 0)
                fprintf(stderr, "spacectl: deleting sandbox %s: %s\n", id, e->message);
        sp_error_free(e);
        ctx->exit_code = code;
        return r;
}

int ctl_run_run(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        ctl_exec_spec spec;
        _cleanup_json_ json_object *unused = NULL;
        if (parse_spec(ctx, a, 1, false, &spec, &unused, err) < 0)
                return -1;
        _cleanup_json_ json_object *body = json_object_new_object();
        if (ctl_sandbox_create_body(ctx, a, a->pos[0], body, err) < 0)
                return -1;
        int64_t wait_us = WAIT_DEFAULT_US;
        if (ctl_arg(a, "wait-timeout")) {
                int r = sp_duration_parse(ctl_arg(a, "wait-timeout"), &wait_us, err);
                if (r < 0) {
                        sp_error_wrap(err, "--wait-timeout");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
        }
        bool keep = ctl_flag(a, "keep");
        _cleanup_signals_ ctl_signals sig = {0};
        if (ctl_signals_install(&sig, err) < 0)
                return ctl_failed(ctx, CTL_EXIT_API, -SP_E_IO);

        /* Create it; a signal from here on ends the wait and deletes it. */
        _cleanup_json_ json_object *env = NULL;
        if (ctl_api(ctx, "POST", "/v1/sandboxes", body, NULL, &env, err) < 0)
                return -1;
        char id[SP_ID_MAX];
        snprintf(id, sizeof(id), "%s", ctl_jstr(env, "sandbox.id"));
        const char *op = ctl_jstr(env, "operation.id");
        if (!sp_id_valid(id, "sbx") || strcmp(op, "-") == 0)
                return ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID, "the API's answer names no sandbox");
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sandbox_path(&path, id);
        char label[96];
        snprintf(label, sizeof(label), "create %s", id);
        ctx->interrupted = &ctl_interrupts;
        sp_error *e = NULL;
        int r = ctl_wait_operation(ctx, op, label, path.data, wait_us, NULL, &e);
        ctx->interrupted = NULL;
        if (r < 0 && ctl_interrupts) {
                sp_error_free(e);
                e = NULL;
                r = ctl_fail(ctx, 128 + SIGINT, &e, SP_E_TIMEOUT, "interrupted while sandbox %s was being created", id);
        }
        if (r < 0) {
                sp_error_move(err, &e);
                return fail_and_delete(ctx, id, keep, r, err);
        }
        /* Signals before the command started are not the command's. */
        while (ctl_signals_next(&sig) != 0) {
        }

        int code = 0;
        r = ctl_exec_session(ctx, id, &spec, &sig, &code, err);
        if (r < 0)
                return fail_and_delete(ctx, id, keep, r, err);
        ctx->status = code;
        if (keep) {
                fprintf(stderr, "spacectl: kept sandbox %s\n", id);
                return 0;
        }
        if (delete_sandbox(ctx, id, err) < 0) {
                sp_error_wrap(err, "the command exited with %d, but deleting sandbox %s failed", code, id);
                return -1;
        }
        return 0;
}
