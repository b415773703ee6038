/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `space-worker --drain-self` and `--uncordon-self`: the worker asks the
 * control plane, with its own certificate, to drain it or to undo a drain of
 * its own (proto/spec/controlplane-rpc.md, DrainSelf). A node's shutdown hook
 * runs them, so that no admin key has to be on a sandbox node.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/ssl.h>

#include "cluster/cluster.h"
#include "space/cleanup.h"
#include "space/controlplane_rpc.h"
#include "space/json.h"
#include "space/log.h"
#include "space/rpc.h"
#include "space/time.h"
#include "space/tls.h"

#define CALL_TIMEOUT_MS 30000

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)
#define POLL_MS 2000

static void pause_ms(int64_t ms)
{
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
}

/* One DrainSelf call, retried while the control plane cannot be reached,
 * until deadline (µs, monotonic). */
static int call(const wk_cluster_config *cfg, SSL_CTX *ctx, const char *action, int64_t deadline, json_object **ret,
                sp_error **err)
{
        _cleanup_json_ json_object *req = json_object_new_object();
        json_object_object_add(req, "action", json_object_new_string(action));
        for (bool told = false;;) {
                _cleanup_error_ sp_error *e = NULL;
                if (sp_rpc_call_sync(cfg->control_plane, ctx, "DrainSelf", req, CALL_TIMEOUT_MS, ret, &e) == 0)
                        return 0;
                if ((e->code != SP_E_UNAVAILABLE && e->code != SP_E_TIMEOUT) || sp_now_mono_us() >= deadline) {
                        sp_error_move(err, &e);
                        return sp_error_wrap(err, "DrainSelf %s", cfg->control_plane);
                }
                if (!told)
                        sp_log_warn("cannot reach the control plane yet (%s); retrying", e->message);
                told = true;
                pause_ms(POLL_MS);
        }
}

int wk_cluster_self_admin(const wk_cluster_config *cfg, const sp_join_creds *creds, bool drain, int64_t timeout_us,
                          sp_error **err)
{
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx = wk__cluster_tls(creds, err);
        if (!ctx)
                return sp_error_wrap(err, "tls");
        int64_t deadline = sp_now_mono_us() + timeout_us;
        _cleanup_json_ json_object *resp = NULL;
        if (!drain) {
                _cleanup_error_ sp_error *e = NULL;
                if (call(cfg, ctx, "uncordon", deadline, &resp, &e) < 0) {
                        if (e->code != SP_E_PRECONDITION) {
                                sp_error_move(err, &e);
                                return -SP_E_UNAVAILABLE;
                        }
                        sp_log_info("%s", e->message); /* an operator's: left as it is */
                        return 0;
                }
                sp_log_info_kv(SP_KV("worker", cfg->name), "worker %s is %s", cfg->name,
                               sp_json_member_str(resp, "state") ? sp_json_member_str(resp, "state") : "?");
                return 0;
        }
        const char *action = "drain";
        int64_t last = -1;
        for (;;) {
                json_object_put(resp);
                resp = NULL;
                if (call(cfg, ctx, action, deadline, &resp, err) < 0)
                        return -SP_E_UNAVAILABLE;
                action = "status";
                pr_cp_drain_self_resp r;
                if (pr_msg_decode(&pr_cp_drain_self_resp_schema, resp, &r, err) < 0)
                        return sp_error_wrap(err, "DrainSelf's answer");
                /* Unreachable or quarantined outrank drained in the state word; a draining
                 * worker that holds nothing is drained whatever its health. */
                if (strcmp(r.state, "drained") == 0 || (strcmp(r.admin_state, "draining") == 0 && r.sandboxes == 0)) {
                        sp_log_info_kv(SP_KV("worker", cfg->name), "worker %s is drained", cfg->name);
                        return 0;
                }
                if (strcmp(r.admin_state, "draining") != 0)
                        return sp_error_set(err, SP_E_CONFLICT, "worker %s is %s: its drain was lifted", cfg->name,
                                            r.admin_state);
                if (r.sandboxes != last)
                        sp_log_info_kv(SP_KV("worker", cfg->name), "draining: %lld sandboxes left (%s)",
                                       (long long)r.sandboxes, r.state);
                last = r.sandboxes;
                if (sp_now_mono_us() >= deadline)
                        return sp_error_set(err, SP_E_TIMEOUT, "worker %s is not drained yet: %lld sandboxes left",
                                            cfg->name, (long long)r.sandboxes);
                pause_ms(POLL_MS);
        }
}
