/* SPDX-License-Identifier: Apache-2.0 */
/* The warm pool: ready sandboxes per template, claimed by a create in one
 * step and refilled in the background, one sandbox at a time, on a job
 * thread at background priority (jobs.h): a refill never holds up a request. */
#include <stdio.h>
#include <string.h>

#include "node/node_internal.h"
#include "space/cleanup.h"
#include "space/log.h"

static int64_t target_of(const wk_node *n, const wk_template *t)
{
        return t->warm_target >= 0 ? t->warm_target : n->cfg.default_warm;
}

static int64_t warm_count(wk_node *n, const char *template_name)
{
        int64_t c = 0;
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                if (sb->warm && !sb->deleting && strcmp(sb->template_name, template_name) == 0)
                        c++;
        return c;
}

static void refill(evutil_socket_t fd, short what, void *ud);

static wk_box_spec warm_spec(const wk_template *t)
{
        return (wk_box_spec){.cpu_millis = t->warm_cpu_millis,
                             .memory_bytes = t->warm_memory_bytes,
                             .pids_max = t->warm_pids_max,
                             .disk_bytes = (uint64_t)t->warm_disk_bytes};
}

/* A warm VM made for an older machine than the template's creates now ask for is never claimed. */
static bool fits_template(wk_node *n, const wk_sandbox *sb, const wk_template *t)
{
        wk_box_spec want = warm_spec(t);
        return !sb->backend->ops->fits || sb->backend->ops->fits(sb->box, &want);
}

static void retry_later(wk_node *n)
{
        /* Try again later rather than spin on a persistent failure. */
        struct timeval tv = {5, 0};
        if (!n->warm_timer)
                n->warm_timer = evtimer_new(n->base, refill, n);
        evtimer_add(n->warm_timer, &tv);
        n->warm_busy = true;
}

static void made(wk_sandbox *sb, const sp_error *err, void *ud)
{
        wk_node *n = ud;
        n->warm_busy = false;
        if (!sb) {
                sp_log_warn("warm pool: %s", err->message);
                retry_later(n);
                return;
        }
        wk__warm_schedule(n);
}

static void refill(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_node *n = ud;
        n->warm_busy = false;
        /* Trim pools above their target first (a lowered size, a deleted template). */
        for (wk_sandbox *sb = n->sandboxes, *next; sb; sb = next) {
                next = sb->next;
                if (!sb->warm || sb->busy)
                        continue;
                wk_template *t = wk__template_find(n, sb->template_name);
                if (!t || warm_count(n, sb->template_name) > target_of(n, t) || sb->state == WK_SB_FAILED ||
                    (sb->box && !fits_template(n, sb, t))) {
                        wk_node_sandbox_delete(n, sb->id, NULL, NULL, NULL);
                        wk__warm_schedule(n);
                        return;
                }
        }
        /* A request took a slot the pool held (sandbox.c lets it): the pool gives one back. */
        if ((int64_t)wk__live_count(n) > n->cfg.slots) {
                for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                        if (sb->warm && !sb->busy && !sb->deleting && sb->state == WK_SB_RUNNING) {
                                wk_node_sandbox_delete(n, sb->id, NULL, NULL, NULL);
                                wk__warm_schedule(n);
                                return;
                        }
        }
        /* Keep one slot free for a cold create. */
        if ((int64_t)wk__live_count(n) + 1 >= n->cfg.slots)
                return;
        for (wk_template *t = n->templates; t; t = t->next) {
                if (warm_count(n, t->name) >= target_of(n, t))
                        continue;
                _cleanup_error_ sp_error *e = NULL;
                if (wk__warm_make(n, t->name, made, n, &e) < 0) {
                        sp_log_warn_kv(SP_KV("template", t->name), "warm pool: %s", e->message);
                        retry_later(n);
                        return;
                }
                n->warm_busy = true; /* until made() */
                return;
        }
}

size_t wk__warm_live_count(const wk_node *n)
{
        size_t c = 0;
        for (const wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                c += sb->warm && (sb->state != WK_SB_SUSPENDED || sb->busy);
        return c;
}

void wk__warm_schedule(wk_node *n)
{
        if (n->warm_busy)
                return;
        if (!n->warm_timer)
                n->warm_timer = evtimer_new(n->base, refill, n);
        struct timeval tv = {0, 0};
        evtimer_add(n->warm_timer, &tv);
        n->warm_busy = true;
}

wk_sandbox *wk__warm_claim(wk_node *n, const char *template_name, const wk_box_spec *want)
{
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                if (sb->warm && !sb->busy && sb->state == WK_SB_RUNNING &&
                    strcmp(sb->template_name, template_name) == 0 && wk_agent_link_ready(sb->link) &&
                    (!sb->backend->ops->fits || sb->backend->ops->fits(sb->box, want)))
                        return sb;
        return NULL;
}

int wk_node_set_warm(wk_node *n, const char *template_name, int64_t size, sp_error **err)
{
        wk_template *t = wk__template_find(n, template_name);
        if (!t)
                return sp_error_set(err, SP_E_NOT_FOUND, "template %s not found", template_name);
        if (size < 0 || size > n->cfg.slots)
                return sp_error_set(err, SP_E_INVALID, "warm pool size must be between 0 and %lld",
                                    (long long)n->cfg.slots);
        t->warm_target = size;
        wk__warm_schedule(n);
        return 0;
}
