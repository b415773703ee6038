/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `spacectl worker drain WORKER [--wait [--timeout DURATION]]`: cordons the
 * worker and has the control plane move its sandboxes away (suspended ones
 * stay suspended elsewhere, running ones run again elsewhere). With --wait
 * it follows the drain through GET /v1/workers/{id} (its "drain": the
 * sandboxes left and why, the moves since it began), printing a line as each
 * sandbox settles on its new worker, until the worker reads "drained"; with
 * --json, one summary at the end instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

#define DRAIN_TIMEOUT_DEFAULT_US (30 * 60 * SP_USEC_PER_SEC)
#define POLL_US (1 * SP_USEC_PER_SEC)
#define SETTLE_US (60 * SP_USEC_PER_SEC) /* once drained, for the moved ones still starting elsewhere */

const ctl_opt ctl_worker_drain_opts[] = {
        {"wait", NULL, 0, "wait until the worker is drained, printing where each sandbox went"},
        {"timeout", "DURATION", 0, "with --wait: give up after this long (default 30m; exit code 5)"},
        {0},
};

static json_object *array_at(json_object *o, const char *path)
{
        json_object *d = NULL, *a = NULL;
        if (!json_object_object_get_ex(o, "drain", &d) || !d)
                return NULL;
        return json_object_object_get_ex(d, path, &a) && json_object_is_type(a, json_type_array) ? a : NULL;
}

/* Whether a moved sandbox has got where it is going: in the state it is
 * wanted in, failed, deleted, or gone from that worker too. */
static bool settled(json_object *m)
{
        const char *state = ctl_jstr(m, "state"), *want = ctl_jstr(m, "desired_state");
        json_object *there = NULL;
        if (json_object_object_get_ex(m, "there", &there) && !json_object_get_boolean(there))
                return true;
        return strcmp(state, want) == 0 || strcmp(state, "failed") == 0 || strcmp(state, "deleted") == 0;
}

static bool all_settled(json_object *w)
{
        json_object *moved = array_at(w, "moved");
        for (size_t i = 0; moved && i < json_object_array_length(moved); i++)
                if (!settled(json_object_array_get_idx(moved, i)))
                        return false;
        return true;
}

/* "sbx_… running on node-1" / "sbx_… moved to node-1 (suspended)" */
static void print_move(ctl_ctx *ctx, json_object *m)
{
        const char *id = ctl_jstr(m, "sandbox_id"), *to = ctl_jstr(m, "to"), *state = ctl_jstr(m, "state");
        if (strcmp(state, "running") == 0 || strcmp(state, "paused") == 0)
                fprintf(ctx->out, "%s %s on %s\n", id, state, to);
        else
                fprintf(ctx->out, "%s moved to %s (%s)\n", id, to, state);
        fflush(ctx->out);
}

/* Prints the moves not printed yet (all of them when final; else only
 * those that settled); printed holds the ids printed so far. */
static void report_moves(ctl_ctx *ctx, json_object *w, json_object *printed, bool final)
{
        json_object *moved = array_at(w, "moved");
        for (size_t i = 0; moved && i < json_object_array_length(moved); i++) {
                json_object *m = json_object_array_get_idx(moved, i);
                const char *id = ctl_jstr(m, "sandbox_id");
                if (json_object_object_get_ex(printed, id, NULL) || (!final && !settled(m)))
                        continue;
                json_object_object_add(printed, id, json_object_new_boolean(true));
                if (!ctx->json)
                        print_move(ctx, m);
        }
}

/* "sbx_a (suspended): why; sbx_b (...)", the first few sandboxes left. */
static void describe_left(json_object *w, char *out, size_t len)
{
        json_object *left = array_at(w, "left");
        size_t n = left ? json_object_array_length(left) : 0, at = 0;
        out[0] = '\0';
        for (size_t i = 0; i < n && i < 5 && at < len; i++) {
                json_object *s = json_object_array_get_idx(left, i);
                int r = snprintf(out + at, len - at, "%s%s (%s): %s", i ? "; " : "", ctl_jstr(s, "id"),
                                 ctl_jstr(s, "state"), ctl_jstr(s, "message"));
                at += r > 0 ? (size_t)r : 0;
        }
        if (n > 5 && at < len)
                snprintf(out + at, len - at, "; and %zu more", n - 5);
}

/* The --json summary: the worker's id, name and state, the moves and what is left. */
static void print_summary(ctl_ctx *ctx, json_object *w)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "worker", json_object_new_string(ctl_jstr(w, "name")));
        json_object_object_add(o, "worker_id", json_object_new_string(ctl_jstr(w, "id")));
        json_object_object_add(o, "state", json_object_new_string(ctl_jstr(w, "state")));
        json_object *moved = array_at(w, "moved"), *left = array_at(w, "left");
        json_object_object_add(o, "moved", moved ? json_object_get(moved) : json_object_new_array());
        json_object_object_add(o, "left", left ? json_object_get(left) : json_object_new_array());
        ctl_print_json(ctx, o);
}

static int follow(ctl_ctx *ctx, const char *id, int64_t timeout_us, sp_error **err)
{
        ctl_progress p;
        ctl_progress_begin(ctx, &p);
        int64_t deadline = sp_now_mono_us() + timeout_us;
        _cleanup_json_ json_object *printed = json_object_new_object();
        int64_t settle_by = 0;
        for (;;) {
                _cleanup_json_ json_object *w = NULL;
                int r = ctl_api_on(ctx, "GET", "/v1/workers/", id, "", &w, err);
                if (r < 0) {
                        ctl_progress_end(&p);
                        return r;
                }
                const char *state = ctl_jstr(w, "state"), *name = ctl_jstr(w, "name");
                if (strcmp(state, "drained") == 0 && !settle_by)
                        /* Nothing is left there; the last ones may still be
                         * starting on their new workers: a little longer. */
                        settle_by = sp_now_mono_us() + SETTLE_US;
                if (strcmp(state, "drained") == 0 &&
                    (all_settled(w) || sp_now_mono_us() >= settle_by || sp_now_mono_us() >= deadline)) {
                        ctl_progress_end(&p);
                        report_moves(ctx, w, printed, true);
                        if (ctx->json)
                                print_summary(ctx, w);
                        else
                                fprintf(ctx->out, "%s drained: %zu sandboxes moved\n", name,
                                        array_at(w, "moved") ? json_object_array_length(array_at(w, "moved")) : 0);
                        return 0;
                }
                if (strcmp(ctl_jstr(w, "admin_state"), "draining") != 0) {
                        ctl_progress_end(&p);
                        report_moves(ctx, w, printed, true);
                        return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_CONFLICT,
                                        "the drain of %s was stopped: it is %s now", name, state);
                }
                report_moves(ctx, w, printed, false);
                char left[1024];
                describe_left(w, left, sizeof(left));
                ctl_progress_update(&p, "draining %s (%s): %s sandboxes left%s%s", name, state,
                                    ctl_jstr(w, "sandboxes"), left[0] ? ": " : "", left);
                if (sp_now_mono_us() >= deadline) {
                        ctl_progress_end(&p);
                        report_moves(ctx, w, printed, true);
                        if (ctx->json)
                                print_summary(ctx, w);
                        char d[32];
                        sp_duration_format(timeout_us, d);
                        return ctl_fail(ctx, CTL_EXIT_WAIT, err, SP_E_TIMEOUT,
                                        "%s is not drained after %s: %s sandboxes left%s%s", name, d,
                                        ctl_jstr(w, "sandboxes"), left[0] ? ": " : "", left);
                }
                usleep(POLL_US);
        }
}

int ctl_run_worker_drain(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int64_t timeout = DRAIN_TIMEOUT_DEFAULT_US;
        bool wait = ctl_flag(a, "wait");
        const char *t = ctl_arg(a, "timeout");
        if (t && !wait)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--timeout goes with --wait");
        if (t) {
                int r = sp_duration_parse(t, &timeout, err);
                if (r < 0) {
                        sp_error_wrap(err, "--timeout");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
        }
        char id[128];
        int r = ctl_worker_id(ctx, a->pos[0], id, sizeof(id), err);
        if (r < 0)
                return r;
        _cleanup_json_ json_object *w = NULL;
        r = ctl_api_on(ctx, "POST", "/v1/workers/", id, "/drain", &w, err);
        if (r < 0)
                return r;
        if (wait)
                return follow(ctx, id, timeout, err);
        if (ctx->json) {
                ctl_print_json(ctx, w);
                return 0;
        }
        fprintf(ctx->out, "%s %s\n", ctl_jstr(w, "name"), ctl_jstr(w, "state"));
        if (strcmp(ctl_jstr(w, "state"), "drained") != 0)
                fprintf(stderr,
                        "its %s sandboxes are being moved to other workers (suspended ones stay suspended, running "
                        "ones run again there); spacectl worker drain %s --wait follows them\n",
                        ctl_jstr(w, "sandboxes"), ctl_jstr(w, "name"));
        return 0;
}
