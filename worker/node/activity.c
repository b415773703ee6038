/* SPDX-License-Identifier: Apache-2.0 */
/* What keeps a sandbox from being idle (docs/worker.md "Activity"): the
 * worker says with each heartbeat which of its running sandboxes are busy and
 * why, and the control plane's idle timeout counts from the last time one was
 * (docs/controlplane.md). API calls are the control plane's own to count. */
#include <string.h>

#include "node/node_internal.h"
#include "space/time.h"

json_object *wk_node_sandbox_activity(wk_node *n, const char *id)
{
        wk_sandbox *sb = wk_node_sandbox_find(n, id);
        if (!sb || sb->state != WK_SB_RUNNING || !sb->box)
                return NULL;
        bool session = false, attached = false;
        for (size_t i = 0; i < sb->nexecs; i++) {
                wk_session *s = sb->execs[i]->session;
                wk_session_state st = wk_session_get_state(s);
                if (st == WK_SESSION_STARTING || st == WK_SESSION_RUNNING)
                        session = true;
                /* Its exec slot's own watch, and one per client reading it. */
                if (wk_session_watch_count(s) > 1)
                        attached = true;
        }
        bool cpu = false;
        wk_box_stats st = {0};
        int64_t now = sp_now_mono_us();
        if (sb->backend->ops->stats && sb->backend->ops->stats(sb->box, &st, NULL) == 0) {
                if (sb->activity_at_us > 0 && now > sb->activity_at_us && st.cpu_ns >= sb->activity_cpu_ns) {
                        uint64_t used = st.cpu_ns - sb->activity_cpu_ns,
                                 wall = (uint64_t)(now - sb->activity_at_us) * 1000;
                        cpu = used * 100 > wall * WK_BUSY_CPU_PERCENT;
                }
                sb->activity_cpu_ns = st.cpu_ns;
                sb->activity_at_us = now;
        }
        if (!session && !attached && !cpu && sb->ports_open <= 0)
                return NULL;
        json_object *a = json_object_new_array();
        if (session)
                json_object_array_add(a, json_object_new_string("session"));
        if (attached)
                json_object_array_add(a, json_object_new_string("attached"));
        if (sb->ports_open > 0)
                json_object_array_add(a, json_object_new_string("ingress"));
        if (cpu)
                json_object_array_add(a, json_object_new_string("cpu"));
        return a;
}
