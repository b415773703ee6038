/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-bench-worker: worker-level latencies, measured over the worker's own
 * RPC against a running space-worker, with the fork+exec floor measured in
 * the same run so every figure has a comparison.
 *
 *   space-bench-worker --addr 127.0.0.1:7071 [--samples N] [--json]
 *
 * Figures (milliseconds, p50/p90/p99): create → running with no warm pool
 * (cold), create claiming a warm sandbox (warm), exec round trip (Exec `true`,
 * attach, exit seen), and fork+exec of `true` on the host (the floor).
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/id.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/time.h"
#include "space/worker_rpc.h"
#include "stats.h"
#include "worker_call.h"

static const char *addr = "127.0.0.1:7071";

/* rpc(method, &(request type){...}): the literal may hold commas. */
#define rpc(method, ...) \
        bn_worker_call("space-bench-worker", addr, 60000, (method), (__VA_ARGS__), sizeof(*(__VA_ARGS__)))

static void new_id(const char *prefix, char *out)
{
        if (sp_id_new(prefix, out, NULL) < 0)
                abort();
}

/* --- exec round trip: Exec, then attach until the exit event --- */

typedef struct {
        struct event_base *base;
        bool done;
} attach_wait;

static void on_frame(sp_rpc_stream *s, sp_rpc_frame_type t, const uint8_t *p, size_t n, void *ud)
{
        (void)s;
        (void)t;
        (void)p;
        (void)n;
        (void)ud;
}

static void on_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        (void)trailer;
        attach_wait *w = ud;
        if (err) {
                fprintf(stderr, "space-bench-worker: attach: %s\n", err->message);
                exit(1);
        }
        w->done = true;
        event_base_loopbreak(w->base);
}

static double exec_once(sp_rpc_client *cli, struct event_base *base, const char *sandbox)
{
        char ses[SP_ID_MAX];
        new_id("ses", ses);
        int64_t t0 = sp_now_mono_us();
        _cleanup_json_ json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("true"));
        json_object_put(rpc("Exec", &(pr_wk_exec){.sandbox_id = sandbox, .session_id = ses, .argv = argv}));
        _cleanup_json_ json_object *req =
                pr_msg_encode(&pr_wk_attach_session_schema, &(pr_wk_attach_session){.session_id = ses});
        attach_wait w = {.base = base};
        static const sp_rpc_stream_ops ops = {.on_frame = on_frame, .on_end = on_end};
        _cleanup_error_ sp_error *e = NULL;
        if (!sp_rpc_client_stream(cli, "AttachSession", req, 30000, &ops, &w, &e)) {
                fprintf(stderr, "space-bench-worker: %s\n", e->message);
                exit(1);
        }
        while (!w.done)
                event_base_dispatch(base);
        return bn_ms_since(t0);
}

static double fork_exec_once(void)
{
        int64_t t0 = sp_now_mono_us();
        pid_t pid = fork();
        if (pid == 0) {
                execlp("true", "true", (char *)NULL);
                _exit(127);
        }
        waitpid(pid, NULL, 0);
        return bn_ms_since(t0);
}

static int warm_count(void)
{
        _cleanup_json_ json_object *info = rpc("NodeInfo", &(pr_wk_empty){0});
        json_object *w, *c;
        return json_object_object_get_ex(info, "warm", &w) && json_object_object_get_ex(w, "base", &c)
                       ? json_object_get_int(c)
                       : 0;
}

static void print_row(const char *name, bn_stats s, double floor_p50)
{
        printf("| %-28s | %5d | %8.2f | %8.2f | %8.2f | %8.2f |\n", name, s.n, s.p50, s.p90, s.p99,
               floor_p50 > 0 ? s.p50 / floor_p50 : 0.0);
}

int main(int argc, char **argv)
{
        int samples = 30;
        bool json = false;
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--addr") == 0 && i + 1 < argc)
                        addr = argv[++i];
                else if (strcmp(argv[i], "--samples") == 0 && i + 1 < argc)
                        samples = atoi(argv[++i]);
                else if (strcmp(argv[i], "--json") == 0)
                        json = true;
                else {
                        fprintf(stderr, "usage: space-bench-worker [--addr HOST:PORT] [--samples N] [--json]\n");
                        return 2;
                }
        }
        if (samples < 3 || samples > 10000) {
                fprintf(stderr, "space-bench-worker: --samples must be 3..10000\n");
                return 2;
        }
        double *cold = calloc((size_t)samples, sizeof(double)), *warm = calloc((size_t)samples, sizeof(double));
        double *ex = calloc((size_t)samples, sizeof(double)), *fe = calloc((size_t)samples, sizeof(double));
        char id[SP_ID_MAX];

        /* warm-up, then cold creates (each deleted before the next) */
        json_object_put(rpc("SetWarmPool", &(pr_wk_set_warm_pool){.template_name = "base", .size = 0}));
        for (int i = -2; i < samples; i++) {
                new_id("sbx", id);
                int64_t t0 = sp_now_mono_us();
                json_object_put(rpc("CreateSandbox",
                                    &(pr_wk_create_sandbox){.id = id, .template_name = "base", .warm = false}));
                double t = bn_ms_since(t0);
                if (i >= 0)
                        cold[i] = t;
                json_object_put(rpc("DeleteSandbox", &(pr_wk_sandbox_ref){.id = id}));
        }

        /* warm: the pool refilled before every claim */
        json_object_put(rpc("SetWarmPool", &(pr_wk_set_warm_pool){.template_name = "base", .size = 1}));
        for (int i = 0; i < samples; i++) {
                for (int k = 0; k < 2000 && warm_count() < 1; k++)
                        usleep(5000);
                new_id("sbx", id);
                int64_t t0 = sp_now_mono_us();
                json_object_put(
                        rpc("CreateSandbox", &(pr_wk_create_sandbox){.id = id, .template_name = "base", .warm = true}));
                warm[i] = bn_ms_since(t0);
                json_object_put(rpc("DeleteSandbox", &(pr_wk_sandbox_ref){.id = id}));
        }
        json_object_put(rpc("SetWarmPool", &(pr_wk_set_warm_pool){.template_name = "base", .size = 0}));

        /* exec round trips in one sandbox */
        new_id("sbx", id);
        json_object_put(
                rpc("CreateSandbox", &(pr_wk_create_sandbox){.id = id, .template_name = "base", .warm = false}));
        struct event_base *base = event_base_new();
        sp_rpc_client *cli = sp_rpc_client_new(base, addr, NULL, NULL);
        for (int i = -3; i < samples; i++) {
                double t = exec_once(cli, base, id);
                if (i >= 0)
                        ex[i] = t;
        }
        sp_rpc_client_free(cli);
        event_base_free(base);
        json_object_put(rpc("DeleteSandbox", &(pr_wk_sandbox_ref){.id = id}));

        for (int i = 0; i < samples; i++)
                fe[i] = fork_exec_once();

        bn_stats sc = bn_stats_of(cold, samples), sw = bn_stats_of(warm, samples), se = bn_stats_of(ex, samples),
                 sf = bn_stats_of(fe, samples);
        if (json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "samples", json_object_new_int(samples));
                bn_stats_json(o, "create_cold", sc);
                bn_stats_json(o, "create_warm", sw);
                bn_stats_json(o, "exec_rtt", se);
                bn_stats_json(o, "floor_fork_exec", sf);
                json_object_object_add(o, "exec_rtt_ratio_to_floor", json_object_new_double(se.p50 / sf.p50));
                printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
        } else {
                printf("| figure (ms)                  |     n |      p50 |      p90 |      p99 | p50/floor |\n");
                printf("|------------------------------|------:|---------:|---------:|---------:|---------:|\n");
                print_row("create, cold (worker RPC)", sc, sf.p50);
                print_row("create, warm pool (claim)", sw, sf.p50);
                print_row("exec `true` round trip", se, sf.p50);
                print_row("floor: fork+exec `true`", sf, sf.p50);
        }
        free(cold);
        free(warm);
        free(ex);
        free(fe);
        return 0;
}
