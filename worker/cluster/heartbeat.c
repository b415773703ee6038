/* SPDX-License-Identifier: Apache-2.0 */
/* Heartbeats to the control plane on the worker's event loop. */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/rpc.h"
#include "space/tls.h"

#define HEARTBEAT_MS_DEFAULT 2000
#define HEARTBEAT_MS_MIN 100
#define HEARTBEAT_MS_MAX 600000
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
};

static json_object *resources(json_object *info, const char *field)
{
        json_object *src = NULL, *v;
        json_object_object_get_ex(info, field, &src);
        json_object *o = json_object_new_object();
        int64_t cpu = json_object_object_get_ex(src, "cpu_millis", &v) ? json_object_get_int64(v) : 0;
        int64_t mem = json_object_object_get_ex(src, "memory_bytes", &v) ? json_object_get_int64(v) : 0;
        int64_t slots = json_object_object_get_ex(src, "slots", &v) ? json_object_get_int64(v) : 0;
        int64_t disk = json_object_object_get_ex(src, "disk_bytes", &v) ? json_object_get_int64(v) : 0;
        json_object_object_add(o, "cpu_millis", json_object_new_int64(cpu));
        json_object_object_add(o, "memory_mb", json_object_new_int64(mem >> 20));
        json_object_object_add(o, "slots", json_object_new_int64(slots));
        json_object_object_add(o, "disk_mb", json_object_new_int64(disk >> 20));
        return o;
}

static json_object *copy_field(json_object *from, const char *field, json_type type)
{
        json_object *v = NULL;
        if (json_object_object_get_ex(from, field, &v) && json_object_is_type(v, type))
                return json_object_get(v);
        return type == json_type_array ? json_object_new_array() : json_object_new_object();
}

/* The Heartbeat request: what the node holds now. */
static json_object *heartbeat_body(wk_cluster *c)
{
        _cleanup_json_ json_object *info = wk_node_info_json(c->node);
        _cleanup_json_ json_object *list = wk_node_sandboxes_json(c->node);
        json_object *o = json_object_new_object(), *v = NULL;
        json_object_object_add(o, "address", json_object_new_string(c->advertise));
        json_object_object_add(o, "backend",
                               json_object_new_string(json_object_object_get_ex(info, "backend", &v)
                                                              ? json_object_get_string(v)
                                                              : "jail"));
        json_object_object_add(o, "labels", json_object_get(c->labels));
        json_object_object_add(o, "capacity", resources(info, "capacity"));
        json_object_object_add(o, "used", resources(info, "used"));
        json_object_object_add(o, "templates", copy_field(info, "templates", json_type_array));
        json_object_object_add(o, "warm", copy_field(info, "warm", json_type_object));
        /* Only when there are some: a control plane without the field refuses it. */
        json_object *artifacts = wk_node_artifacts_json(c->node), *bytes = wk_node_template_bytes_json(c->node);
        if (json_object_object_length(artifacts) > 0)
                json_object_object_add(o, "artifacts", artifacts);
        else
                json_object_put(artifacts);
        /* What each template's files hold: the control plane counts it (with
         * the artifact) against its tenant's template storage. */
        if (json_object_object_length(bytes) > 0)
                json_object_object_add(o, "template_bytes", bytes);
        else
                json_object_put(bytes);
        json_object *all = NULL, *sandboxes = json_object_new_array();
        json_object_object_get_ex(list, "sandboxes", &all);
        for (size_t i = 0; all && i < json_object_array_length(all); i++) {
                json_object *sb = json_object_array_get_idx(all, i), *s = json_object_new_object();
                const char *keys[] = {"id", "state", "template"};
                for (size_t k = 0; k < SP_ARRAY_SIZE(keys); k++)
                        if (json_object_object_get_ex(sb, keys[k], &v))
                                json_object_object_add(s, keys[k], json_object_get(v));
                json_object_array_add(sandboxes, s);
        }
        json_object_object_add(o, "sandboxes", sandboxes);
        return o;
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
        if (err) {
                link_down(c, err->message);
                schedule(c);
                return;
        }
        int64_t ms = 0;
        const char *id = "?", *health = "?", *admin = "?";
        if (sp_json_get_int(resp, "heartbeat_ms", false, HEARTBEAT_MS_MIN, HEARTBEAT_MS_MAX, &ms, NULL) == 0 && ms)
                c->heartbeat_ms = ms;
        (void)sp_json_get_string(resp, "worker_id", false, 64, &id, NULL);
        (void)sp_json_get_string(resp, "state", false, 15, &health, NULL);
        (void)sp_json_get_string(resp, "admin_state", false, 15, &admin, NULL);
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

int wk_cluster_start(struct event_base *base, wk_node *node, const wk_cluster_config *cfg, const sp_join_creds *creds,
                     wk_cluster **ret, sp_error **err)
{
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {.ca_pem = creds->ca_pem,
                            .cert_pem = creds->cert_pem,
                            .key_pem = creds->key_pem,
                            .peer_roles = SP_ROLE_CONTROLPLANE,
                            .alpn = alpn};
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
        if (!(c->ctx = sp_tls_client_ctx_new(&tc, err)) ||
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
