/* SPDX-License-Identifier: Apache-2.0 */
/* The worker's job threads (see jobs.h). */
#include "node/jobs.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "space/log.h"
#include "space/time.h"

/* Room for every kind there is (create, warm, delete, suspend, restore, pause,
 * resume, connect, base, export, import) and a few more: past it, the last
 * slot would count other kinds under its name. */
#define KINDS_MAX 16

typedef struct kind_stats {
        const char *kind;
        uint64_t done;
        double wait_s, run_s;
} kind_stats;

struct wk_jobs {
        struct event_base *base;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        pthread_t *threads;
        unsigned nthreads;
        bool stop;
        /* Waiting: user jobs, then background ones (FIFO each). */
        wk_job *user_head, **user_tail, *bg_head, **bg_tail;
        unsigned nuser, nbg, running, running_bg;
        wk_job *finished, **finished_tail; /* for the loop */
        int efd;
        struct event *ev;
        kind_stats kinds[KINDS_MAX];
};

static void push(wk_job **head, wk_job ***tail, wk_job *j)
{
        j->next = NULL;
        **tail = j;
        *tail = &j->next;
}

static wk_job *pop(wk_job **head, wk_job ***tail)
{
        wk_job *j = *head;
        if (j) {
                *head = j->next;
                if (!*head)
                        *tail = head;
                j->next = NULL;
        }
        return j;
}

/* Under mu: the next job a free thread may take. */
static wk_job *take(wk_jobs *js)
{
        if (js->user_head) {
                js->nuser--;
                return pop(&js->user_head, &js->user_tail);
        }
        /* A background job never takes the last free thread. */
        if (js->bg_head && (js->nthreads == 1 || js->running + 1 < js->nthreads)) {
                js->nbg--;
                js->running_bg++;
                return pop(&js->bg_head, &js->bg_tail);
        }
        return NULL;
}

static kind_stats *stats_of(wk_jobs *js, const char *kind)
{
        for (size_t i = 0; i < KINDS_MAX; i++) {
                if (!js->kinds[i].kind)
                        js->kinds[i].kind = kind;
                if (strcmp(js->kinds[i].kind, kind) == 0)
                        return &js->kinds[i];
        }
        return &js->kinds[KINDS_MAX - 1];
}

static void *thread_main(void *arg)
{
        wk_jobs *js = arg;
        pthread_mutex_lock(&js->mu);
        for (;;) {
                wk_job *j = NULL;
                while (!js->stop && !(j = take(js)))
                        pthread_cond_wait(&js->cv, &js->mu);
                if (!j)
                        break;
                js->running++;
                pthread_mutex_unlock(&js->mu);
                int64_t start = sp_now_mono_us();
                j->run(j);
                int64_t end = sp_now_mono_us();
                pthread_mutex_lock(&js->mu);
                js->running--;
                if (j->background)
                        js->running_bg--;
                kind_stats *k = stats_of(js, j->kind ? j->kind : "other");
                k->done++;
                k->wait_s += (double)(start - j->queued_us) / 1e6;
                k->run_s += (double)(end - start) / 1e6;
                push(&js->finished, &js->finished_tail, j);
                uint64_t one = 1;
                (void)!write(js->efd, &one, sizeof(one));
                /* A thread freed: a background job may go now. */
                pthread_cond_signal(&js->cv);
        }
        pthread_mutex_unlock(&js->mu);
        return NULL;
}

static void deliver(wk_jobs *js)
{
        pthread_mutex_lock(&js->mu);
        wk_job *list = js->finished;
        js->finished = NULL;
        js->finished_tail = &js->finished;
        pthread_mutex_unlock(&js->mu);
        while (list) {
                wk_job *j = list;
                list = j->next;
                j->next = NULL;
                j->done(j);
        }
}

static void on_wake(evutil_socket_t fd, short what, void *ud)
{
        (void)what;
        uint64_t v;
        while (read(fd, &v, sizeof(v)) < 0 && errno == EINTR)
                ;
        deliver(ud);
}

int wk_jobs_new(struct event_base *base, unsigned threads, wk_jobs **ret, sp_error **err)
{
        if (threads < 1)
                threads = 1;
        wk_jobs *js = calloc(1, sizeof(*js));
        if (!js)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        js->base = base;
        js->user_tail = &js->user_head;
        js->bg_tail = &js->bg_head;
        js->finished_tail = &js->finished;
        pthread_mutex_init(&js->mu, NULL);
        pthread_cond_init(&js->cv, NULL);
        js->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        js->threads = calloc(threads, sizeof(*js->threads));
        if (js->efd < 0 || !js->threads || !(js->ev = event_new(base, js->efd, EV_READ | EV_PERSIST, on_wake, js)) ||
            event_add(js->ev, NULL) < 0) {
                wk_jobs_free(js);
                return sp_error_set(err, SP_E_LIMIT, "job threads: cannot set up their queue");
        }
        /* Every signal blocked: the loop's thread handles them. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int r = 0;
        for (; js->nthreads < threads; js->nthreads++)
                if ((r = pthread_create(&js->threads[js->nthreads], NULL, thread_main, js)) != 0)
                        break;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r != 0) {
                wk_jobs_free(js);
                return sp_error_set_errno(err, SP_E_LIMIT, r, "start the job threads");
        }
        *ret = js;
        return 0;
}

void wk_jobs_submit(wk_jobs *js, wk_job *j)
{
        j->cancelled = false;
        j->queued_us = sp_now_mono_us();
        pthread_mutex_lock(&js->mu);
        if (j->background) {
                push(&js->bg_head, &js->bg_tail, j);
                js->nbg++;
        } else {
                push(&js->user_head, &js->user_tail, j);
                js->nuser++;
        }
        pthread_cond_signal(&js->cv);
        pthread_mutex_unlock(&js->mu);
}

void wk_jobs_counts(wk_jobs *js, unsigned *ret_threads, unsigned *ret_user, unsigned *ret_background,
                    unsigned *ret_running)
{
        pthread_mutex_lock(&js->mu);
        *ret_threads = js->nthreads;
        *ret_user = js->nuser;
        *ret_background = js->nbg;
        *ret_running = js->running;
        pthread_mutex_unlock(&js->mu);
}

void wk_jobs_metrics(wk_jobs *js, sp_buf *out)
{
        pthread_mutex_lock(&js->mu);
        sp_buf_appendf(out, NULL,
                       "# HELP space_worker_job_threads Threads that make, start and remove sandboxes off the loop.\n"
                       "# TYPE space_worker_job_threads gauge\nspace_worker_job_threads %u\n"
                       "# HELP space_worker_jobs_queued Jobs waiting for a thread (user: requests; background: "
                       "warm-pool refills).\n"
                       "# TYPE space_worker_jobs_queued gauge\n"
                       "space_worker_jobs_queued{priority=\"user\"} %u\n"
                       "space_worker_jobs_queued{priority=\"background\"} %u\n"
                       "# HELP space_worker_jobs_running Jobs running on the threads.\n"
                       "# TYPE space_worker_jobs_running gauge\nspace_worker_jobs_running %u\n",
                       js->nthreads, js->nuser, js->nbg, js->running);
        sp_buf_appendf(out, NULL,
                       "# HELP space_worker_jobs_total Jobs finished, by kind.\n"
                       "# TYPE space_worker_jobs_total counter\n");
        for (size_t i = 0; i < KINDS_MAX && js->kinds[i].kind; i++)
                sp_buf_appendf(out, NULL, "space_worker_jobs_total{kind=\"%s\"} %llu\n", js->kinds[i].kind,
                               (unsigned long long)js->kinds[i].done);
        sp_buf_appendf(out, NULL,
                       "# HELP space_worker_job_wait_seconds_total Time finished jobs waited for a thread, by kind.\n"
                       "# TYPE space_worker_job_wait_seconds_total counter\n");
        for (size_t i = 0; i < KINDS_MAX && js->kinds[i].kind; i++)
                sp_buf_appendf(out, NULL, "space_worker_job_wait_seconds_total{kind=\"%s\"} %.6f\n", js->kinds[i].kind,
                               js->kinds[i].wait_s);
        sp_buf_appendf(out, NULL,
                       "# HELP space_worker_job_run_seconds_total Time finished jobs ran, by kind.\n"
                       "# TYPE space_worker_job_run_seconds_total counter\n");
        for (size_t i = 0; i < KINDS_MAX && js->kinds[i].kind; i++)
                sp_buf_appendf(out, NULL, "space_worker_job_run_seconds_total{kind=\"%s\"} %.6f\n", js->kinds[i].kind,
                               js->kinds[i].run_s);
        pthread_mutex_unlock(&js->mu);
}

void wk_jobs_free(wk_jobs *js)
{
        if (!js)
                return;
        pthread_mutex_lock(&js->mu);
        js->stop = true;
        pthread_cond_broadcast(&js->cv);
        pthread_mutex_unlock(&js->mu);
        for (unsigned i = 0; i < js->nthreads; i++)
                pthread_join(js->threads[i], NULL);
        deliver(js);
        for (wk_job *j; (j = pop(&js->user_head, &js->user_tail)) || (j = pop(&js->bg_head, &js->bg_tail));) {
                j->cancelled = true;
                j->done(j);
        }
        if (js->ev)
                event_free(js->ev);
        if (js->efd >= 0)
                close(js->efd);
        free(js->threads);
        pthread_cond_destroy(&js->cv);
        pthread_mutex_destroy(&js->mu);
        free(js);
}
