/* SPDX-License-Identifier: Apache-2.0 */
/* The token keys from the control plane: TokenKeys now and then, and the saved copy. */
#include <errno.h>
#include <event2/event.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/controlplane_rpc.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/pki.h"
#include "space/rpc.h"
#include "space/time.h"
#include "space/token.h"

#define KEYS_FILE "token-keys.json"
#define KEYS_FILE_MAX (SP_TOKEN_MAX_KEYS * (SP_PKI_MAX_PEM + 64))
#define KEYS_TIMEOUT_MS 10000

/* The codec's bounds on the keys are these. */
_Static_assert(PR_CP_TOKEN_KEYS_MAX == SP_TOKEN_MAX_KEYS, "TokenKeys: the keys a verifier holds");
_Static_assert(PR_CP_PEM_MAX == SP_PKI_MAX_PEM, "TokenKeys: a PEM's bound");

size_t dp__cluster_count(char *const *v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

int dp__cluster_keys_strv(json_object *keys, char ***ret, sp_error **err)
{
        size_t n = keys ? json_object_array_length(keys) : 0;
        char **v = calloc(n + 1, sizeof(char *));
        if (!v)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n; i++)
                if (!(v[i] = strdup(json_object_get_string(json_object_array_get_idx(keys, i))))) {
                        sp_strv_freep(&v);
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                }
        *ret = v;
        return 0;
}

int dp__cluster_parse_keys(json_object *resp, char ***ret, sp_error **err)
{
        pr_cp_token_keys_resp m;
        if (pr_msg_decode(&pr_cp_token_keys_resp_schema, resp, &m, err) < 0)
                return -SP_E_INVALID;
        return dp__cluster_keys_strv(m.token_keys, ret, err);
}

int dp__cluster_save_keys(const dp_cluster_config *cfg, char *const *keys, sp_error **err)
{
        if (!cfg->state_dir)
                return 0;
        _cleanup_json_ json_object *arr = json_object_new_array();
        for (size_t i = 0; keys && keys[i]; i++)
                json_object_array_add(arr, json_object_new_string(keys[i]));
        pr_cp_token_keys_resp m = {.token_keys = arr};
        _cleanup_json_ json_object *o = pr_msg_encode(&pr_cp_token_keys_resp_schema, &m);
        const char *text = sp_json_str(o);
        char path[PATH_MAX];
        dp__cluster_path(cfg, KEYS_FILE, path);
        if (sp_mkdir_p(cfg->state_dir, 0700, err) < 0 || sp_file_write_atomic(path, text, strlen(text), 0644, err) < 0)
                return sp_error_wrap(err, "save the token keys");
        return 0;
}

int dp__cluster_load_keys(const dp_cluster_config *cfg, char ***ret, sp_error **err)
{
        *ret = NULL;
        if (!cfg->state_dir)
                return 0;
        char path[PATH_MAX];
        dp__cluster_path(cfg, KEYS_FILE, path);
        if (access(path, F_OK) < 0 && errno == ENOENT)
                return 0;
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        _cleanup_json_ json_object *o = NULL;
        if (sp_file_read(path, KEYS_FILE_MAX, &text, err) < 0 ||
            sp_json_parse(text.data ? text.data : "", text.len, &o, err) < 0 || dp__cluster_parse_keys(o, ret, err) < 0)
                return sp_error_wrap(err, "%s", path);
        return 0;
}

/* Takes the control plane's keys (ownership of keys passes); logs and saves them when they changed. */
static void apply_keys(dp_cluster *c, char **keys)
{
        _cleanup_strv_free_ char **owned = keys;
        _cleanup_error_ sp_error *e = NULL;
        bool same = c->last && dp__cluster_count(c->last) == dp__cluster_count(keys);
        for (size_t i = 0; same && keys[i]; i++)
                same = strcmp(c->last[i], keys[i]) == 0;
        if (same)
                return;
        if (dp_keys_set(c->keys, DP_KEYS_CONTROL_PLANE, (const char *const *)keys, dp__cluster_count(keys), &e) < 0) {
                sp_log_error_kv(SP_KV("control_plane", c->cfg.control_plane), "token keys refused: %s", e->message);
                return;
        }
        sp_log_info_kv(SP_KV("control_plane", c->cfg.control_plane), "token keys updated (%zu from the control plane)",
                       dp__cluster_count(keys));
        if (dp__cluster_save_keys(&c->cfg, keys, &e) < 0)
                sp_log_warn("%s", e->message);
        sp_strv_freep(&c->last);
        c->last = TAKE_PTR(owned);
}

static void keys_done(json_object *resp, const sp_error *err, void *userdata)
{
        dp_cluster *c = userdata;
        c->in_flight = false;
        if (c->freeing)
                return;
        _cleanup_error_ sp_error *e = NULL;
        char **keys = NULL;
        if (!err && dp__cluster_parse_keys(resp, &keys, &e) < 0)
                err = e;
        if (err) {
                if (!c->failing)
                        sp_log_warn_kv(SP_KV("control_plane", c->cfg.control_plane),
                                       "cannot fetch the token keys (%s); keeping the %zu held", err->message,
                                       dp_keys_count(c->keys));
                c->failing = true;
                return;
        }
        if (c->failing)
                sp_log_info_kv(SP_KV("control_plane", c->cfg.control_plane), "token keys fetched again");
        c->failing = false;
        c->fetched = true;
        apply_keys(c, keys);
}

static void fetch(dp_cluster *c)
{
        if (c->in_flight)
                return;
        _cleanup_error_ sp_error *e = NULL;
        pr_cp_empty none = {0};
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_cp_empty_schema, &none);
        if (sp_rpc_client_call(c->cli, "TokenKeys", req, KEYS_TIMEOUT_MS, keys_done, c, &e) < 0) {
                sp_log_warn("cannot ask for the token keys: %s", e->message);
                return;
        }
        c->in_flight = true;
        c->last_start_us = sp_now_mono_us();
}

static void timer_cb(evutil_socket_t fd, short what, void *userdata)
{
        fetch(userdata);
}

int dp_cluster_start(struct event_base *base, const dp_cluster_config *cfg, SSL_CTX *ctx, dp_keys *keys,
                     dp_cluster **ret, sp_error **err)
{
        dp_cluster *c = calloc(1, sizeof(*c));
        if (!c)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        c->base = base;
        c->keys = keys;
        c->cfg.control_plane = strdup(cfg->control_plane);
        c->cfg.name = cfg->name ? strdup(cfg->name) : NULL;
        c->cfg.state_dir = cfg->state_dir ? strdup(cfg->state_dir) : NULL;
        static const struct timeval period = {DP_CLUSTER_KEYS_PERIOD_MS / 1000,
                                              (DP_CLUSTER_KEYS_PERIOD_MS % 1000) * 1000};
        if (!c->cfg.control_plane || (cfg->name && !c->cfg.name) || (cfg->state_dir && !c->cfg.state_dir) ||
            !(c->timer = event_new(base, -1, EV_PERSIST, timer_cb, c)) || event_add(c->timer, &period) < 0) {
                dp_cluster_free(c);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (!(c->cli = sp_rpc_client_new(base, cfg->control_plane, ctx, err))) {
                dp_cluster_free(c);
                return sp_error_wrap(err, "--control-plane");
        }
        /* The keys saved by the last answer serve until the control plane answers again. */
        _cleanup_error_ sp_error *e = NULL;
        if (dp__cluster_load_keys(&c->cfg, &c->last, &e) < 0 ||
            dp_keys_set(keys, DP_KEYS_CONTROL_PLANE, (const char *const *)c->last, dp__cluster_count(c->last), &e) <
                    0) {
                sp_log_warn("the saved token keys are not used: %s", e->message);
                sp_strv_freep(&c->last);
        }
        fetch(c);
        *ret = c;
        return 0;
}

void dp_cluster_refresh(dp_cluster *c)
{
        if (c->in_flight ||
            (c->last_start_us && sp_now_mono_us() - c->last_start_us < DP_CLUSTER_KEYS_MIN_GAP_MS * SP_USEC_PER_MSEC))
                return;
        sp_log_info_kv(SP_KV("control_plane", c->cfg.control_plane),
                       "a token names an unknown key: asking for the keys");
        fetch(c);
}

sp_rpc_client *dp_cluster_client(dp_cluster *c)
{
        return c->cli;
}

bool dp_cluster_keys_fetched(const dp_cluster *c)
{
        return c->fetched;
}

void dp_cluster_free(dp_cluster *c)
{
        if (!c)
                return;
        c->freeing = true;
        dp__cluster_revoked_stop(c);
        sp_rpc_client_free(c->cli);
        if (c->timer)
                event_free(c->timer);
        free((char *)c->cfg.control_plane);
        free((char *)c->cfg.name);
        free((char *)c->cfg.state_dir);
        sp_strv_freep(&c->last);
        dp__cluster_revoked_stop(c);
        free(c);
}
