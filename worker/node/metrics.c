/* SPDX-License-Identifier: Apache-2.0 */
/* The node's metrics (Prometheus text format) and readiness. */
#include <errno.h>
#include <string.h>
#include <sys/statfs.h>

#include "net/net.h"
#include "node/node_internal.h"
#include "session/log.h"

static void label_escape(sp_buf *out, const char *s)
{
        for (; *s; s++) {
                if (*s == '\\' || *s == '"')
                        sp_buf_append(out, "\\", 1, NULL);
                if (*s == '\n') {
                        sp_buf_append_str(out, "\\n", NULL);
                        continue;
                }
                sp_buf_append(out, s, 1, NULL);
        }
}

int wk_node_metrics(wk_node *n, sp_buf *out, sp_error **err)
{
        int64_t by_state[WK_SB_FAILED + 1] = {0}, sessions[WK_SESSION_FAILED + 1] = {0}, live = 0;
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next) {
                if (sb->state != WK_SB_SUSPENDED)
                        live++;
                for (size_t i = 0; i < sb->nexecs; i++)
                        sessions[wk_session_get_state(sb->execs[i]->session)]++;
                if (!sb->warm)
                        by_state[sb->state]++;
        }
        /* One line per backend it runs (the default first). */
        sp_buf_appendf(out, err, "# HELP space_worker_info The worker node.\n# TYPE space_worker_info gauge\n");
        for (size_t i = 0; i < n->nbackends; i++) {
                const wk_backend *b = n->backends[i];
                sp_buf_appendf(out, err, "space_worker_info{node=\"");
                label_escape(out, n->node_id);
                sp_buf_appendf(out, err, "\",backend=\"%s\",accel=\"%s\",version=\"%s\"} 1\n", b->ops->name,
                               b->ops->accel ? b->ops->accel(b) : "none", SPACE_VERSION);
        }
        sp_buf_appendf(out, err,
                       "# HELP space_worker_sandboxes Sandboxes on this node by state (warm ones not counted).\n"
                       "# TYPE space_worker_sandboxes gauge\n");
        for (int st = WK_SB_CREATING; st <= WK_SB_FAILED; st++)
                sp_buf_appendf(out, err, "space_worker_sandboxes{state=\"%s\"} %lld\n",
                               wk_sandbox_state_name((wk_sandbox_state)st), (long long)by_state[st]);
        sp_buf_appendf(out, err,
                       "# HELP space_worker_warm_sandboxes Ready sandboxes in the warm pool.\n"
                       "# TYPE space_worker_warm_sandboxes gauge\n");
        for (wk_template *t = n->templates; t; t = t->next) {
                int64_t c = 0;
                for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                        c += sb->warm && !sb->busy && sb->state == WK_SB_RUNNING &&
                             strcmp(sb->template_name, t->name) == 0;
                sp_buf_append_str(out, "space_worker_warm_sandboxes{template=\"", NULL);
                label_escape(out, t->name);
                sp_buf_appendf(out, err, "\"} %lld\n", (long long)c);
        }
        sp_buf_appendf(out, err,
                       "# HELP space_worker_sessions Command sessions by state.\n"
                       "# TYPE space_worker_sessions gauge\n");
        for (int st = WK_SESSION_STARTING; st <= WK_SESSION_FAILED; st++)
                sp_buf_appendf(out, err, "space_worker_sessions{state=\"%s\"} %lld\n",
                               wk_session_state_name((wk_session_state)st), (long long)sessions[st]);
        uint64_t from_memory = 0, from_file = 0;
        wk_log_read_counts(&from_memory, &from_file);
        sp_buf_appendf(out, err,
                       "# HELP space_worker_session_log_reads_total Reads of session output by attached readers: "
                       "from the in-memory copies of the newest records, or from the log's files.\n"
                       "# TYPE space_worker_session_log_reads_total counter\n"
                       "space_worker_session_log_reads_total{from=\"memory\"} %llu\n"
                       "space_worker_session_log_reads_total{from=\"file\"} %llu\n",
                       (unsigned long long)from_memory, (unsigned long long)from_file);
        sp_buf_appendf(out, err,
                       "# HELP space_worker_slots Sandbox slots.\n# TYPE space_worker_slots gauge\n"
                       "space_worker_slots{kind=\"total\"} %lld\nspace_worker_slots{kind=\"used\"} %lld\n",
                       (long long)n->cfg.slots, (long long)live);
        bool vm = false;
        for (size_t i = 0; i < n->nbackends; i++)
                vm |= n->backends[i]->ops->prepare != NULL;
        if (vm)
                sp_buf_appendf(out, err,
                               "# HELP space_worker_vm_creates_total VM creates: restored from their template's base "
                               "snapshot, or booted.\n# TYPE space_worker_vm_creates_total counter\n"
                               "space_worker_vm_creates_total{from=\"base\"} %llu\n"
                               "space_worker_vm_creates_total{from=\"boot\"} %llu\n"
                               "# HELP space_worker_vm_bases_total Base snapshots made, by result.\n"
                               "# TYPE space_worker_vm_bases_total counter\n"
                               "space_worker_vm_bases_total{result=\"made\"} %llu\n"
                               "space_worker_vm_bases_total{result=\"failed\"} %llu\n",
                               (unsigned long long)n->vm_creates_from_base, (unsigned long long)n->vm_creates_booted,
                               (unsigned long long)n->vm_bases_made, (unsigned long long)n->vm_bases_failed);
        if (n->jobs)
                wk_jobs_metrics(n->jobs, out);
        wk__store_metrics(n, out);
        if (n->cfg.net)
                wk_net_metrics(n->cfg.net, out);
        return 0;
}

bool wk_node_ready(wk_node *n, sp_error **err)
{
        struct statfs st;
        if (statfs(n->storage->dir, &st) < 0) {
                sp_error_set_errno(err, SP_E_UNAVAILABLE, errno, "storage %s", n->storage->dir);
                return false;
        }
        return true;
}
