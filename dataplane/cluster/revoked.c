/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The revoked API keys and deleted templates from the control plane:
 * RevokedKeys every few seconds, from a cursor, into the set the routes check
 * tokens against.
 */
#include <event2/event.h>
#include <stdlib.h>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

#define REVOKED_TIMEOUT_MS 10000
/* How long to ask an older control plane, which refuses the question, for keys only. */
#define NO_TEMPLATES_RETRY_US (60 * 1000000LL)

static void poll_revoked(dp_cluster *c);

static void revoked_done(json_object *resp, const sp_error *err, void *userdata)
{
        dp_cluster *c = userdata;
        c->revoked_in_flight = false;
        if (c->freeing)
                return;
        _cleanup_error_ sp_error *e = NULL;
        pr_revoked_keys r = {0};
        if (!err && pr_revoked_resp_decode(resp, &r, &e) < 0)
                err = e;
        if (err && err->code == SP_E_INVALID && c->revoked_asked_templates) {
                /* An older control plane refuses the "templates" field: keys
                 * only for a while. Deleted templates' upload tokens then work
                 * until they expire, as before. */
                sp_log_warn_kv(SP_KV("control_plane", c->cfg.control_plane),
                               "the control plane does not answer deleted templates (%s): asking for revoked API "
                               "keys only, upload tokens of deleted templates are not refused",
                               err->message);
                c->revoked_no_templates_until_us = sp_now_real_us() + NO_TEMPLATES_RETRY_US;
                poll_revoked(c);
                return;
        }
        if (err) {
                if (!c->revoked_failing)
                        sp_log_warn_kv(SP_KV("control_plane", c->cfg.control_plane),
                                       "cannot fetch the revoked API keys (%s); keeping the %zu held", err->message,
                                       dp_revoked_count(c->revoked));
                c->revoked_failing = true;
                return;
        }
        if (c->revoked_failing)
                sp_log_info_kv(SP_KV("control_plane", c->cfg.control_plane), "revoked API keys fetched again");
        c->revoked_failing = false;
        /* The first answer with templates after keys-only ones starts from
         * the beginning of the window: templates deleted meanwhile were not
         * asked for. */
        bool restart = r.has_templates && !c->revoked_had_templates && c->revoked_fetched;
        c->revoked_had_templates = r.has_templates;
        int added_tpl = 0;
        int added = dp_revoked_add(c->revoked, &r, sp_now_real_us(), &added_tpl);
        if (added < 0) {
                sp_log_warn("out of memory holding the revoked API keys; asking again");
        } else {
                for (int i = 0; i < added && i < 16; i++)
                        sp_log_info_kv(SP_KV("key_id", r.keys[r.n - (size_t)added + (size_t)i].id),
                                       "API key revoked: its tokens are refused");
                for (int i = 0; i < added_tpl && i < 16; i++)
                        sp_log_info_kv(
                                SP_KV("template_id", r.templates[r.ntemplates - (size_t)added_tpl + (size_t)i].id),
                                "template deleted: its upload tokens are refused");
                c->revoked_fetched = true;
                /* The next poll overlaps this one, so that a revocation committed late is not missed. */
                c->revoked_cursor_us = r.more ? r.cursor_us : r.cursor_us - (int64_t)PR_REVOKED_SLACK_S * 1000000;
                if (c->revoked_cursor_us < 0 || restart)
                        c->revoked_cursor_us = 0;
        }
        bool more = (r.more || restart) && added >= 0;
        pr_revoked_keys_free(&r);
        if (more)
                poll_revoked(c);
}

static void poll_revoked(dp_cluster *c)
{
        if (c->revoked_in_flight)
                return;
        _cleanup_error_ sp_error *e = NULL;
        c->revoked_asked_templates = sp_now_real_us() >= c->revoked_no_templates_until_us;
        _cleanup_json_ json_object *req = pr_revoked_req_encode(c->revoked_cursor_us, c->revoked_asked_templates);
        if (sp_rpc_client_call(c->cli, "RevokedKeys", req, REVOKED_TIMEOUT_MS, revoked_done, c, &e) < 0) {
                sp_log_warn("cannot ask for the revoked API keys: %s", e->message);
                return;
        }
        c->revoked_in_flight = true;
}

static void revoked_timer_cb(evutil_socket_t fd, short what, void *userdata)
{
        poll_revoked(userdata);
}

int dp_cluster_watch_revoked(dp_cluster *c, dp_revoked *revoked, int64_t period_ms, sp_error **err)
{
        struct timeval period = {(time_t)(period_ms / 1000), (suseconds_t)((period_ms % 1000) * 1000)};
        c->revoked = revoked;
        if (!(c->revoked_timer = event_new(c->base, -1, EV_PERSIST, revoked_timer_cb, c)) ||
            event_add(c->revoked_timer, &period) < 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        poll_revoked(c);
        return 0;
}

bool dp_cluster_revoked_fetched(const dp_cluster *c)
{
        return !c->revoked || c->revoked_fetched;
}

void dp__cluster_revoked_stop(dp_cluster *c)
{
        if (c->revoked_timer)
                event_free(c->revoked_timer);
        c->revoked_timer = NULL;
}
