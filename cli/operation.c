/* SPDX-License-Identifier: Apache-2.0 */
/* `spacectl operation`: look at an asynchronous operation, or wait for it. */
#include <stdio.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

#define WAIT_DEFAULT_US (10 * 60 * SP_USEC_PER_SEC)

static int run_get(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *op = NULL;
        int r = ctl_api_on(ctx, "GET", "/v1/operations/", a->pos[0], "", &op, err);
        if (r < 0)
                return r;
        ctl_print_any(ctx, op);
        return 0;
}

static int run_wait(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int64_t timeout = WAIT_DEFAULT_US;
        const char *t = ctl_arg(a, "timeout");
        if (t) {
                int r = sp_duration_parse(t, &timeout, err);
                if (r < 0) {
                        sp_error_wrap(err, "--timeout");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
        }
        _cleanup_json_ json_object *op = NULL;
        int r = ctl_wait_operation(ctx, a->pos[0], a->pos[0], NULL, timeout, &op, err);
        if (r < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, op);
        else
                fprintf(ctx->out, "%s %s\n", a->pos[0], ctl_jstr(op, "state"));
        return 0;
}

static const ctl_opt wait_opts[] = {
        {"timeout", "DURATION", 0, "give up after this long (default 10m; exit code 5)"},
        {0},
};

static const ctl_cmd cmds[] = {
        {.name = "get", .usage = "ID", .summary = "show an operation", .min_args = 1, .max_args = 1, .run = run_get},
        {.name = "wait",
         .usage = "ID",
         .summary = "wait until an operation has finished (exit code 1 if it failed)",
         .min_args = 1,
         .max_args = 1,
         .opts = wait_opts,
         .run = run_wait},
        {0},
};

const ctl_group ctl_group_operation = {"operation", "Operations: the asynchronous changes the API makes.", cmds};
