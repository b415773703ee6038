/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One call of a space-worker's RPC for the benchmarks that drive a worker
 * (space-bench-worker, space-bench-checkpoint): the request is a struct of
 * the method's request type, checked against the method's size; any failure
 * ends the program with the method and why (who: the program's name).
 */
#ifndef SPACE_BENCH_WORKER_CALL_H
#define SPACE_BENCH_WORKER_CALL_H

#include <stdio.h>
#include <stdlib.h>

#include "space/cleanup.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/worker_rpc.h"

static inline json_object *bn_worker_call(const char *who, const char *addr, int64_t timeout_ms, const char *method,
                                          const void *q, size_t size)
{
        const pr_method *m = pr_worker_method(method);
        if (!m || m->request_size != size)
                abort();
        _cleanup_json_ json_object *req = pr_msg_encode(m->request, q);
        json_object *resp = NULL;
        _cleanup_error_ sp_error *e = NULL;
        if (sp_rpc_call_sync(addr, NULL, method, req, timeout_ms, &resp, &e) < 0) {
                fprintf(stderr, "%s: %s: %s\n", who, method, e->message);
                exit(1);
        }
        return resp;
}

#endif
