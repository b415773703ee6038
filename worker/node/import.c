/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template imports off the event loop (node.h, "Template imports").
 *
 * An import owns one thread that runs its fill function and nothing else:
 * the subvolume is created before the thread starts, and sealed and recorded
 * (storage, the template list, the state file, the warm pool) on the loop
 * after the thread ended. The thread talks to the loop through the import's
 * mutex and an eventfd: it stores the latest output line or its result under
 * the mutex and wakes the loop (once per wake-up: `woken`); the loop reads
 * the state, forwards lines at most WK_IMPORT_PROGRESS_PER_S a second (a
 * timer sends the latest line when they come faster) and, once the thread is
 * done, joins it and finishes the import.
 *
 * Ownership: the node's list holds every import until it finishes; the
 * caller's callbacks stop at wk_import_detach. The thread only reads the
 * fields fixed before it started (dest, fill, fill_ud) and writes its result
 * under the mutex.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "node/node_internal.h"
#include "space/cleanup.h"
#include "space/log.h"
#include "space/time.h"

#define LINE_MAX_BYTES 512 /* of a progress line forwarded */

/* A delete that waits for the import to stop. */
typedef struct delete_waiter {
        wk_node_deleted_fn done;
        void *userdata;
        struct delete_waiter *next;
} delete_waiter;

struct wk_import {
        wk_node *node;
        char name[WK_NAME_MAX + 1];
        char *dest;
        wk__import_spec spec; /* spec.name points at name */
        const wk_import_ops *ops; /* NULL once detached */
        void *userdata;
        pthread_t thread;
        atomic_bool cancel;
        delete_waiter *deletes; /* the template was deleted: never recorded */
        int efd;
        struct event *wake, *throttle;
        uint64_t sent_seq; /* the line last forwarded */
        int64_t sent_us;
        struct wk_import *next;
        /* Shared with the thread, under mu. */
        pthread_mutex_t mu;
        bool woken, done;
        char line[LINE_MAX_BYTES];
        uint64_t line_seq;
        int rc;
        sp_error *err;
        wk_template_meta *meta;
        uint64_t bytes; /* what the template's files hold, measured after the fill */
};

bool wk__import_under_way(wk_node *n, const char *name)
{
        for (wk_import *i = n->imports; i; i = i->next)
                if (strcmp(i->name, name) == 0)
                        return true;
        return false;
}

void wk_import_detach(wk_import *imp)
{
        if (imp)
                imp->ops = NULL;
}

int wk__import_cancel(wk_node *n, const char *name, wk_node_deleted_fn done, void *userdata, sp_error **err)
{
        wk_import *imp = n->imports;
        while (imp && strcmp(imp->name, name) != 0)
                imp = imp->next;
        if (!imp)
                return 0;
        delete_waiter *w = calloc(1, sizeof(*w));
        if (!w)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        *w = (delete_waiter){.done = done, .userdata = userdata, .next = imp->deletes};
        if (!imp->deletes)
                sp_log_info_kv(SP_KV("template", name), "cancelling the import (the template is being deleted)");
        imp->deletes = w;
        atomic_store(&imp->cancel, true);
        return 1;
}

/* Answers the deletes that waited for the import (err NULL: nothing of it is left). */
static void deletes_answer(wk_import *imp, const sp_error *err)
{
        while (imp->deletes) {
                delete_waiter *w = imp->deletes;
                imp->deletes = w->next;
                w->done(err, w->userdata);
                free(w);
        }
}

/* Wakes the loop unless a wake-up is pending. Called with mu held. */
static void wake_locked(wk_import *imp)
{
        if (imp->woken)
                return;
        imp->woken = true;
        uint64_t one = 1;
        while (write(imp->efd, &one, sizeof(one)) < 0 && errno == EINTR)
                ;
}

/* The importer's output (on the import's thread). */
static void on_line(const char *line, void *ud)
{
        wk_import *imp = ud;
        pthread_mutex_lock(&imp->mu);
        snprintf(imp->line, sizeof(imp->line), "%s", line);
        imp->line_seq++;
        wake_locked(imp);
        pthread_mutex_unlock(&imp->mu);
}

static void *import_main(void *arg)
{
        wk_import *imp = arg;
        wk__fill_ctx ctx = {.cancel = &imp->cancel, .progress = on_line, .progress_ud = imp, .bound = &imp->spec.bound};
        wk_template_meta *meta = NULL;
        sp_error *err = NULL;
        int rc = imp->spec.fill(imp->dest, imp->spec.fill_ud, &ctx, &meta, &err);
        /* Measured here, off the loop: a walk of every file. The fill kept
         * within the bound where its importer could; this catches the rest. */
        uint64_t bytes = 0;
        if (rc >= 0 && (rc = wk_template_measure(imp->dest, &bytes, &err)) >= 0 && bytes > imp->spec.bound.max_bytes)
                rc = sp_error_set(&err, SP_E_TOO_LARGE, "the template holds %llu bytes, more than %llu",
                                  (unsigned long long)bytes, (unsigned long long)imp->spec.bound.max_bytes);
        pthread_mutex_lock(&imp->mu);
        imp->bytes = bytes;
        imp->rc = rc;
        imp->err = err;
        imp->meta = meta;
        imp->done = true;
        wake_locked(imp);
        pthread_mutex_unlock(&imp->mu);
        return NULL;
}

static void unlink_import(wk_import *imp)
{
        for (wk_import **p = &imp->node->imports; *p; p = &(*p)->next)
                if (*p == imp) {
                        *p = imp->next;
                        break;
                }
}

static void import_free(wk_import *imp)
{
        if (imp->wake)
                event_free(imp->wake);
        if (imp->throttle)
                event_free(imp->throttle);
        sp_close(imp->efd);
        if (imp->spec.fill_free)
                imp->spec.fill_free(imp->spec.fill_ud);
        wk_template_meta_free(imp->meta);
        sp_error_free(imp->err);
        pthread_mutex_destroy(&imp->mu);
        free(imp->dest);
        free(imp);
}

/* Forwards the latest line if it is new and the rate allows; else arms the
 * timer that forwards it when it does. */
static void forward_progress(wk_import *imp)
{
        char line[LINE_MAX_BYTES];
        pthread_mutex_lock(&imp->mu);
        uint64_t seq = imp->line_seq;
        memcpy(line, imp->line, sizeof(line));
        pthread_mutex_unlock(&imp->mu);
        if (seq == imp->sent_seq)
                return;
        int64_t now = sp_now_mono_us(), gap = 1000000 / WK_IMPORT_PROGRESS_PER_S;
        if (imp->sent_us && now - imp->sent_us < gap) {
                if (!evtimer_pending(imp->throttle, NULL)) {
                        int64_t wait = gap - (now - imp->sent_us);
                        struct timeval tv = {.tv_sec = wait / 1000000, .tv_usec = wait % 1000000};
                        evtimer_add(imp->throttle, &tv);
                }
                return;
        }
        imp->sent_seq = seq;
        imp->sent_us = now;
        sp_log_debug_kv(SP_KV("template", imp->name), "import: %s", line);
        if (imp->ops && imp->ops->progress)
                imp->ops->progress(line, imp->userdata);
}

static void on_throttle(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        forward_progress(ud);
}

/* The thread has ended: seal and record, or clean up; tell the caller. */
static void finish(wk_import *imp)
{
        wk_node *n = imp->node;
        pthread_join(imp->thread, NULL);
        unlink_import(imp);
        _cleanup_error_ sp_error *e = TAKE_PTR(imp->err), *de = NULL;
        int rc = imp->rc;
        /* Deleted meanwhile: whatever the thread achieved (or why it stopped), it
         * is not recorded, and the caller hears why. */
        if (imp->deletes) {
                e = sp_error_free(e);
                rc = sp_error_set(&e, SP_E_NOT_FOUND, "template %s was deleted while it was imported", imp->name);
        }
        if (rc >= 0) {
                rc = wk__template_record(n, imp->name, TAKE_PTR(imp->meta), imp->spec.artifact_format,
                                         imp->spec.artifact_bytes, (int64_t)imp->bytes, &e);
        } else {
                if (!e)
                        sp_error_set(&e, SP_E_INTERNAL, "the import failed");
                /* Past a bound that is not the node's own: say which one, in
                 * the caller's terms (the importer's message names an entry). */
                if (e->code == SP_E_TOO_LARGE && imp->spec.bound.kind != WK__BOUND_NODE) {
                        sp_error_free(TAKE_PTR(e));
                        wk__bound_refuse(&imp->spec.bound, &e);
                }
                sp_error_wrap(&e, "template %s", imp->name);
                if (wk_storage_template_delete(n->storage, imp->name, &de) < 0)
                        sp_log_warn_kv(SP_KV("template", imp->name), "removing the failed import: %s", de->message);
        }
        if (rc < 0) {
                sp_log_warn_kv(SP_KV("template", imp->name), "import failed: %s", e->message);
                if (imp->spec.on_fail)
                        imp->spec.on_fail(n, imp->name, imp->spec.fill_ud);
        }
        if (imp->ops)
                imp->ops->done(rc < 0 ? e : NULL, imp->userdata);
        if (imp->deletes)
                sp_log_info_kv(SP_KV("template", imp->name), "template deleted (its import stopped)");
        deletes_answer(imp, de);
        import_free(imp);
}

static void on_wake(evutil_socket_t fd, short what, void *ud)
{
        (void)what;
        wk_import *imp = ud;
        uint64_t v;
        while (read(fd, &v, sizeof(v)) < 0 && errno == EINTR)
                ;
        pthread_mutex_lock(&imp->mu);
        imp->woken = false;
        bool done = imp->done;
        pthread_mutex_unlock(&imp->mu);
        if (done)
                finish(imp);
        else
                forward_progress(imp);
}

/* Starts the thread with every signal blocked: the loop's thread handles them. */
static int start_thread(wk_import *imp)
{
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int r = pthread_create(&imp->thread, NULL, import_main, imp);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return r;
}

int wk__bound_refuse(const wk__bound *b, sp_error **err)
{
        if (b->kind == WK__BOUND_CALLER)
                return sp_error_set(err, SP_E_TOO_LARGE,
                                    "the template would hold more than the %llu bytes left of the tenant's template "
                                    "storage",
                                    (unsigned long long)b->caller);
        if (b->kind == WK__BOUND_POOL)
                return sp_error_set(err, SP_E_TOO_LARGE,
                                    "the template would not fit in the worker's free storage (%llu bytes free for "
                                    "templates, beyond the space the worker keeps in reserve)",
                                    (unsigned long long)b->max_bytes);
        return sp_error_set(err, SP_E_TOO_LARGE,
                            "the template would hold more than this worker's %llu bytes per template",
                            (unsigned long long)b->max_bytes);
}

/* The pool's free space less the reserve, which is at most a tenth of the
 * pool: small pools (tests, trials) keep most of their room for templates. */
static uint64_t pool_room(const struct statvfs *vfs, uint64_t reserve)
{
        uint64_t avail = (uint64_t)vfs->f_bavail * (uint64_t)vfs->f_frsize;
        uint64_t tenth = (uint64_t)vfs->f_blocks * (uint64_t)vfs->f_frsize / 10;
        if (reserve > tenth)
                reserve = tenth;
        return avail > reserve ? avail - reserve : 0;
}

int wk__pool_room(int fd, uint64_t reserve, uint64_t *ret, sp_error **err)
{
        /* Written but not yet allocated (delayed allocation) is not in the
         * free space the filesystem reports: write it out first. */
        struct statvfs vfs;
        if (syncfs(fd) < 0 || fstatvfs(fd, &vfs) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "look at the storage pool's free space");
        *ret = pool_room(&vfs, reserve);
        return 0;
}

int wk__pool_room_check(void *ud, int fd, uint64_t n, sp_error **err)
{
        wk__pool_watch *w = ud;
        uint64_t room;
        if (wk__pool_room(fd, w->reserve, &room, err) < 0)
                return -SP_E_IO;
        if (n <= room)
                return 0;
        wk__bound b = {.max_bytes = room, .kind = WK__BOUND_POOL};
        if (w->bound)
                wk__bound_narrow(w->bound, room);
        return wk__bound_refuse(w->bound ? w->bound : &b, err);
}

void wk__bound_narrow(wk__bound *b, uint64_t room)
{
        if (room < b->max_bytes) {
                b->max_bytes = room;
                b->kind = WK__BOUND_POOL;
        }
}

int wk__import_bound(wk_node *n, uint64_t caller, uint64_t used, wk__bound *ret, sp_error **err)
{
        wk__bound b = {.max_bytes = wk_node_upload_max_bytes(n), .kind = WK__BOUND_NODE, .caller = caller};
        if (caller) {
                uint64_t left = caller > used ? caller - used : 0;
                if (left < b.max_bytes) {
                        b.max_bytes = left;
                        b.kind = WK__BOUND_CALLER;
                }
        }
        /* What the pool has free now, less the reserve; imports running at
         * the same time share it (each may take it all: the reserve is what
         * keeps the pool from filling up entirely). */
        struct statvfs vfs;
        if (statvfs(n->storage->dir, &vfs) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "look at the storage pool's free space");
        wk__bound_narrow(&b, pool_room(&vfs, n->cfg.storage_reserve));
        *ret = b;
        if (b.max_bytes == 0)
                return wk__bound_refuse(&b, err);
        return 0;
}

int wk__import_start(wk_node *n, const wk__import_spec *spec, const wk_import_ops *ops, void *userdata, wk_import **ret,
                     sp_error **err)
{
        wk_import *imp = NULL;
        int r = wk__template_name_free(n, spec->name, err);
        if (r < 0)
                goto fail_spec;
        if (!(imp = calloc(1, sizeof(*imp)))) {
                r = sp_error_set(err, SP_E_LIMIT, "out of memory");
                goto fail_spec;
        }
        imp->node = n;
        snprintf(imp->name, sizeof(imp->name), "%s", spec->name);
        imp->spec = *spec;
        imp->spec.name = imp->name;
        imp->ops = ops;
        imp->userdata = userdata;
        imp->efd = -1;
        atomic_init(&imp->cancel, false);
        pthread_mutex_init(&imp->mu, NULL);
        imp->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (imp->efd < 0) {
                r = sp_error_set_errno(err, SP_E_LIMIT, errno, "eventfd");
                goto fail;
        }
        imp->wake = event_new(n->base, imp->efd, EV_READ | EV_PERSIST, on_wake, imp);
        imp->throttle = evtimer_new(n->base, on_throttle, imp);
        if (!imp->wake || !imp->throttle || event_add(imp->wake, NULL) < 0) {
                r = sp_error_set(err, SP_E_LIMIT, "out of memory");
                goto fail;
        }
        if ((r = wk_storage_template_create(n->storage, imp->name, &imp->dest, err)) < 0) {
                sp_error_wrap(err, "template %s", imp->name);
                goto fail;
        }
        if ((r = start_thread(imp)) != 0) {
                wk_storage_template_delete(n->storage, imp->name, NULL);
                r = sp_error_set_errno(err, SP_E_LIMIT, r, "template %s: start the import's thread", imp->name);
                goto fail;
        }
        imp->next = n->imports;
        n->imports = imp;
        sp_log_info_kv(SP_KV("template", imp->name), "importing a template");
        if (ret)
                *ret = imp;
        return 0;
fail:
        imp->ops = NULL;
        import_free(imp);
        return r;
fail_spec:
        if (spec->fill_free)
                spec->fill_free(spec->fill_ud);
        return r;
}

void wk__imports_cancel_all(wk_node *n)
{
        for (wk_import *i = n->imports; i; i = i->next)
                atomic_store(&i->cancel, true);
        while (n->imports) {
                wk_import *imp = n->imports;
                sp_log_info_kv(SP_KV("template", imp->name), "cancelling the import (the worker is stopping)");
                pthread_join(imp->thread, NULL);
                n->imports = imp->next;
                /* Not recorded, whatever the thread achieved: the template goes. */
                _cleanup_error_ sp_error *e = NULL;
                if (wk_storage_template_delete(n->storage, imp->name, &e) < 0)
                        sp_log_warn_kv(SP_KV("template", imp->name), "removing the cancelled import: %s", e->message);
                if (imp->spec.on_fail)
                        imp->spec.on_fail(n, imp->name, imp->spec.fill_ud);
                if (imp->ops) {
                        sp_error stop = {SP_E_UNAVAILABLE, 0, (char *)"the worker is stopping"};
                        imp->ops->done(&stop, imp->userdata);
                }
                deletes_answer(imp, e);
                import_free(imp);
        }
}

/* Only at the start, before anything is imported: an import under way has no record yet. */
void wk__templates_sweep(wk_node *n)
{
        _cleanup_strv_free_ char **names = NULL;
        _cleanup_error_ sp_error *e = NULL;
        if (wk_storage_list(n->storage, true, &names, &e) < 0) {
                sp_log_warn("cannot list the stored templates: %s", e->message);
                return;
        }
        for (char **p = names; *p; p++) {
                /* A record that does not load keeps its template: for an operator to look at. */
                char rec[PATH_MAX];
                wk__path(rec, sizeof(rec), "%s/templates/%s.json", n->state_dir, *p);
                if (wk__template_find(n, *p) || access(rec, F_OK) == 0 || errno != ENOENT)
                        continue;
                _cleanup_error_ sp_error *de = NULL;
                if (wk_storage_template_delete(n->storage, *p, &de) < 0)
                        sp_log_warn_kv(SP_KV("template", *p), "cannot remove a template without a record: %s",
                                       de->message);
                else
                        sp_log_info_kv(SP_KV("template", *p),
                                       "removed a template without a record (an import cut short)");
        }
}
