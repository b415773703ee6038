/* SPDX-License-Identifier: Apache-2.0 */
/* Heartbeats to the control plane on the worker's event loop. */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "space/cleanup.h"
#include "space/controlplane_rpc.h"
#include "space/json.h"
#include "space/log.h"
#include "space/rpc.h"
#include "space/tls.h"

#define HEARTBEAT_MS_DEFAULT 2000
#define CALL_TIMEOUT_MS 10000

typedef enum link_state {
        LINK_UNKNOWN = 0,
        LINK_UP,
        LINK_DOWN,
} link_state;

struct wk_cluster {
        struct event_base *base;
        wk_node *node;
        char *control_plane, *advertise;
        json_object *labels; /* owned reference, never NULL */
        SSL_CTX *ctx;
        sp_rpc_client *cli;
        struct event *timer;
        int64_t heartbeat_ms;
        link_state link;
        char state[32]; /* health and admin state the control plane last reported */
        bool in_flight; /* a Heartbeat call is under way */
        bool again; /* the templates changed while it was: send another right after */
        bool closing;
        /* The control plane refused "jobs" (one older than the field): sent
         * without it from then on, so that a worker upgraded first keeps its
         * heartbeats. */
        bool no_jobs;
        /* The same for the sandboxes' "busy" (their activity). */
        bool no_busy;
        /* The same for the artifact store ("artifact_store", "stored_bytes"). */
        bool no_store;
};

static pr_cp_resources resources(json_object *info, const char *field)
{
        json_object *src = NULL, *v;
        json_object_object_get_ex(info, field, &src);
        int64_t cpu = json_object_object_get_ex(src, "cpu_millis", &v) ? json_object_get_int64(v) : 0;
        int64_t mem = json_object_object_get_ex(src, "memory_bytes", &v) ? json_object_get_int64(v) : 0;
        int64_t slots = json_object_object_get_ex(src, "slots", &v) ? json_object_get_int64(v) : 0;
        int64_t disk = json_object_object_get_ex(src, "disk_bytes", &v) ? json_object_get_int64(v) : 0;
        return (pr_cp_resources){.cpu_millis = cpu, .memory_mb = mem >> 20, .slots = slots, .disk_mb = disk >> 20};
}

/* The field of from if it has the type, else a new empty one; a new reference. */
static json_object *copy_field(json_object *from, const char *field, json_type type)
{
        json_object *v = NULL;
        if (json_object_object_get_ex(from, field, &v) && json_object_is_type(v, type))
                return json_object_get(v);
        return type == json_type_array ? json_object_new_array() : json_object_new_object();
}

/* The Heartbeat request (space/controlplane_rpc.h): what the node holds now. */
static json_object *heartbeat_body(wk_cluster *c)
{
        _cleanup_json_ json_object *info = wk_node_info_json(c->node);
        _cleanup_json_ json_object *list = wk_node_sandboxes_json(c->node);
        _cleanup_json_ json_object *templates = copy_field(info, "templates", json_type_array);
        _cleanup_json_ json_object *warm = copy_field(info, "warm", json_type_object);
        _cleanup_json_ json_object *artifacts = wk_node_artifacts_json(c->node);
        _cleanup_json_ json_object *bytes = wk_node_template_bytes_json(c->node);
        _cleanup_json_ json_object *sandboxes = json_object_new_array();
        json_object *all = NULL;
        json_object_object_get_ex(list, "sandboxes", &all);
        for (size_t i = 0; all && i < json_object_array_length(all); i++) {
                json_object *sb = json_object_array_get_idx(all, i);
                pr_cp_sandbox s = {.id = sp_json_member_str(sb, "id"),
                                   .state = sp_json_member_str(sb, "state"),
                                   .template_name = sp_json_member_str(sb, "template")};
                s.secrets_missing = s.id && wk_node_sandbox_secrets_missing(c->node, s.id);
                _cleanup_json_ json_object *busy = s.id && !c->no_busy ? wk_node_sandbox_activity(c->node, s.id) : NULL;
                s.busy = busy;
                json_object *stored = NULL;
                if (!c->no_store && json_object_object_get_ex(sb, "stored_bytes", &stored))
                        s.stored_bytes = json_object_get_int64(stored);
                json_object_array_add(sandboxes, pr_msg_encode(&pr_cp_sandbox_schema, &s));
        }
        const char *backend = sp_json_member_str(info, "backend");
        json_object *backends = NULL;
        /* Only a worker of several says so: a control plane without the field refuses it. */
        if (!json_object_object_get_ex(info, "backends", &backends) || json_object_array_length(backends) < 2)
                backends = NULL;
        json_object *jobs = NULL, *v = NULL;
        json_object_object_get_ex(info, "jobs", &jobs);
        pr_cp_jobs queue = {0};
        bool has_jobs = !c->no_jobs && jobs && json_object_is_type(jobs, json_type_object);
        if (has_jobs) {
                queue.threads = json_object_object_get_ex(jobs, "threads", &v) ? json_object_get_int64(v) : 0;
                queue.running = json_object_object_get_ex(jobs, "running", &v) ? json_object_get_int64(v) : 0;
                queue.queued = json_object_object_get_ex(jobs, "queued", &v) ? json_object_get_int64(v) : 0;
        }
        pr_cp_heartbeat m = {
                .address = c->advertise,
                .backend = backend ? backend : "jail",
                .labels = c->labels,
                .capacity = resources(info, "capacity"),
                .used = resources(info, "used"),
                /* Its job queue: the scheduler prefers a worker with a thread free. */
                .has_jobs = has_jobs,
                .jobs = queue,
                .templates = templates,
                .warm = warm,
                /* Only when there are some: a control plane without the field refuses it. */
                .artifacts = json_object_object_length(artifacts) > 0 ? artifacts : NULL,
                /* What each template's files hold: the control plane counts it (with
                 * the artifact) against its tenant's template storage. */
                .template_bytes = json_object_object_length(bytes) > 0 ? bytes : NULL,
                .sandboxes = sandboxes,
                /* Whether the control plane may wake sandboxes from the store here. */
                .artifact_store = !c->no_store && wk_node_has_artifact_store(c->node),
                .backends = backends,
        };
        return pr_msg_encode(&pr_cp_heartbeat_schema, &m);
}

static void schedule(wk_cluster *c)
{
        struct timeval tv = {c->heartbeat_ms / 1000, (c->heartbeat_ms % 1000) * 1000};
        if (c->again) {
                c->again = false;
                tv = (struct timeval){0, 0};
        }
        evtimer_add(c->timer, &tv);
}

/* The node's templates changed: tell the control plane now rather than at
 * the next interval (after the call under way, if there is one). */
static void templates_changed(void *userdata)
{
        wk_cluster *c = userdata;
        if (c->in_flight) {
                c->again = true;
                return;
        }
        struct timeval now = {0, 0};
        evtimer_add(c->timer, &now);
}

static void link_down(wk_cluster *c, const char *why)
{
        if (c->link != LINK_DOWN)
                sp_log_warn_kv(SP_KV("control_plane", c->control_plane),
                               "control plane unreachable: %s (heartbeats go on every %lld ms)", why,
                               (long long)c->heartbeat_ms);
        c->link = LINK_DOWN;
}

static void on_reply(json_object *resp, const sp_error *err, void *userdata)
{
        wk_cluster *c = userdata;
        if (c->closing)
                return;
        c->in_flight = false;
        if (err && err->code == SP_E_INVALID && !c->no_jobs && strstr(err->message, "unknown field 'jobs'")) {
                sp_log_warn_kv(SP_KV("control_plane", c->control_plane),
                               "the control plane does not take the job queue in heartbeats (an older version): "
                               "sent without it, so its scheduler does not see this worker's queue");
                c->no_jobs = true;
                c->again = true;
                schedule(c);
                return;
        }
        if (err && err->code == SP_E_INVALID && !c->no_busy && strstr(err->message, "unknown field 'busy'")) {
                sp_log_warn_kv(SP_KV("control_plane", c->control_plane),
                               "the control plane does not take sandboxes' activity in heartbeats (an older "
                               "version): sent without it, so its idle timeouts count API calls only");
                c->no_busy = true;
                c->again = true;
                schedule(c);
                return;
        }
        if (err && err->code == SP_E_INVALID && !c->no_store &&
            (strstr(err->message, "unknown field 'artifact_store'") ||
             strstr(err->message, "unknown field 'stored_bytes'"))) {
                sp_log_warn_kv(SP_KV("control_plane", c->control_plane),
                               "the control plane does not take the artifact store in heartbeats (an older version): "
                               "sent without it, so it wakes no sandbox from the store");
                c->no_store = true;
                c->again = true;
                schedule(c);
                return;
        }
        if (err) {
                link_down(c, err->message);
                schedule(c);
                return;
        }
        /* Open: a newer control plane may add fields. */
        pr_cp_heartbeat_resp r;
        _cleanup_error_ sp_error *e = NULL;
        if (pr_msg_decode(&pr_cp_heartbeat_resp_schema, resp, &r, &e) < 0) {
                sp_error_wrap(&e, "the control plane's answer");
                link_down(c, e->message);
                schedule(c);
                return;
        }
        c->heartbeat_ms = r.heartbeat_ms;
        const char *id = r.worker_id, *health = r.state, *admin = r.admin_state;
        char state[32];
        snprintf(state, sizeof(state), "%s/%s", health, admin);
        if (c->link != LINK_UP)
                sp_log_info_kv(SP_KV("control_plane", c->control_plane, "worker_id", id),
                               "control plane reachable: heartbeats accepted (%s)", state);
        else if (strcmp(state, c->state) != 0)
                sp_log_info_kv(SP_KV("worker_id", id), "the control plane now holds this worker %s", state);
        snprintf(c->state, sizeof(c->state), "%s", state);
        c->link = LINK_UP;
        schedule(c);
}

static void tick(evutil_socket_t fd, short what, void *userdata)
{
        (void)fd;
        (void)what;
        wk_cluster *c = userdata;
        _cleanup_json_ json_object *req = heartbeat_body(c);
        _cleanup_error_ sp_error *e = NULL;
        if (sp_rpc_client_call(c->cli, "Heartbeat", req, CALL_TIMEOUT_MS, on_reply, c, &e) < 0) {
                link_down(c, e->message);
                schedule(c);
                return;
        }
        c->in_flight = true;
}

SSL_CTX *wk__cluster_tls(const sp_join_creds *creds, sp_error **err)
{
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {.ca_pem = creds->ca_pem,
                            .cert_pem = creds->cert_pem,
                            .key_pem = creds->key_pem,
                            .peer_roles = SP_ROLE_CONTROLPLANE,
                            .alpn = alpn};
        return sp_tls_client_ctx_new(&tc, err);
}

int wk_cluster_start(struct event_base *base, wk_node *node, const wk_cluster_config *cfg, const sp_join_creds *creds,
                     wk_cluster **ret, sp_error **err)
{
        wk_cluster *c = calloc(1, sizeof(*c));
        if (!c)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        c->base = base;
        c->node = node;
        c->heartbeat_ms = HEARTBEAT_MS_DEFAULT;
        c->control_plane = strdup(cfg->control_plane);
        c->advertise = strdup(cfg->advertise);
        c->labels = cfg->labels ? json_object_get(cfg->labels) : json_object_new_object();
        c->timer = evtimer_new(base, tick, c);
        if (!c->control_plane || !c->advertise || !c->labels || !c->timer) {
                wk_cluster_free(c);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (!(c->ctx = wk__cluster_tls(creds, err)) ||
            !(c->cli = sp_rpc_client_new(base, cfg->control_plane, c->ctx, err))) {
                wk_cluster_free(c);
                return sp_error_wrap(err, "control plane client");
        }
        /* The first heartbeat right away, from the loop. */
        struct timeval now = {0, 0};
        evtimer_add(c->timer, &now);
        wk_node_set_templates_changed(node, templates_changed, c);
        *ret = c;
        return 0;
}

bool wk_cluster_connected(const wk_cluster *c)
{
        return c && c->link == LINK_UP;
}

void wk_cluster_free(wk_cluster *c)
{
        if (!c)
                return;
        c->closing = true;
        if (c->node)
                wk_node_set_templates_changed(c->node, NULL, NULL);
        sp_rpc_client_free(c->cli);
        if (c->timer)
                event_free(c->timer);
        if (c->ctx)
                SSL_CTX_free(c->ctx);
        if (c->labels)
                json_object_put(c->labels);
        free(c->control_plane);
        free(c->advertise);
        free(c);
}
