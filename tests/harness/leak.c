/* SPDX-License-Identifier: Apache-2.0 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"

#include "leak.h"
#include "netns.h"
#include "proc.h"

struct strset {
        char **v;
        size_t n, cap;
};

static int set_add(struct strset *s, char *str, sp_error **err)
{
        if (s->n == SP_TEST_SNAPSHOT_MAX) {
                free(str);
                return sp_error_set(err, SP_E_LIMIT, "snapshot: more than %d entries", SP_TEST_SNAPSHOT_MAX);
        }
        if (s->n == s->cap) {
                s->cap = s->cap ? s->cap * 2 : 64;
                s->v = realloc(s->v, s->cap * sizeof(*s->v));
                if (!s->v)
                        abort();
        }
        s->v[s->n++] = str;
        return 0;
}

static int addf(struct strset *s, sp_error **err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int addf(struct strset *s, sp_error **err, const char *fmt, ...)
{
        va_list ap;
        char *str = NULL;
        va_start(ap, fmt);
        int r = vasprintf(&str, fmt, ap);
        va_end(ap);
        if (r < 0)
                abort();
        return set_add(s, str, err);
}

static int cmp_str(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static void set_finish(struct strset *s, char ***ret, size_t *ret_n)
{
        if (s->n)
                qsort(s->v, s->n, sizeof(*s->v), cmp_str);
        *ret = s->v;
        *ret_n = s->n;
}

static void set_free(struct strset *s)
{
        for (size_t i = 0; i < s->n; i++)
                free(s->v[i]);
        free(s->v);
        memset(s, 0, sizeof(*s));
}

/* mountinfo: "id parent maj:min root mountpoint opts [optional...] - fstype source superopts" */
static int take_mounts(struct strset *s, sp_error **err)
{
        _cleanup_fclose_ FILE *f = fopen("/proc/self/mountinfo", "re");
        if (!f)
                return sp_error_set_errno(err, SP_E_IO, errno, "open /proc/self/mountinfo");
        _cleanup_free_ char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, f) > 0) {
                line[strcspn(line, "\n")] = '\0';
                char *save = NULL, *field[6] = {0}, *tok;
                int i = 0;
                for (tok = strtok_r(line, " ", &save); tok && i < 6; tok = strtok_r(NULL, " ", &save))
                        field[i++] = tok;
                while (tok && strcmp(tok, "-") != 0)
                        tok = strtok_r(NULL, " ", &save);
                char *fstype = tok ? strtok_r(NULL, " ", &save) : NULL;
                char *source = fstype ? strtok_r(NULL, " ", &save) : NULL;
                if (i < 6 || !fstype)
                        continue;
                if (addf(s, err, "%s %s %s", field[4], fstype, source ? source : "none") < 0)
                        return -SP_E_LIMIT;
        }
        return 0;
}

static int take_netns(struct strset *s, sp_error **err)
{
        _cleanup_closedir_ DIR *d = opendir(SP_TEST_NETNS_DIR);
        if (!d)
                return errno == ENOENT ? 0 : sp_error_set_errno(err, SP_E_IO, errno, "open %s", SP_TEST_NETNS_DIR);
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.' && addf(s, err, "%s", de->d_name) < 0)
                        return -SP_E_LIMIT;
        return 0;
}

static int take_links(struct strset *s, sp_error **err)
{
        _cleanup_closedir_ DIR *d = opendir("/sys/class/net");
        if (!d)
                return 0; /* no sysfs, no interfaces to see */
        struct dirent *de;
        while ((de = readdir(d)))
                if (de->d_name[0] != '.' && addf(s, err, "%s", de->d_name) < 0)
                        return -SP_E_LIMIT;
        return 0;
}

static int take_loops(struct strset *s, sp_error **err)
{
        _cleanup_closedir_ DIR *d = opendir("/sys/block");
        if (!d)
                return 0; /* no sysfs, no loop devices to see */
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strncmp(de->d_name, "loop", 4) != 0)
                        continue;
                char path[300], backing[4096];
                snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", de->d_name);
                _cleanup_fclose_ FILE *f = fopen(path, "re");
                if (!f || !fgets(backing, sizeof(backing), f))
                        continue; /* not attached */
                backing[strcspn(backing, "\n")] = '\0';
                if (addf(s, err, "%s %s", de->d_name, backing) < 0)
                        return -SP_E_LIMIT;
        }
        return 0;
}

static int cmp_pid(const void *a, const void *b)
{
        pid_t x = ((const sp_test_pidstat *)a)->pid, y = ((const sp_test_pidstat *)b)->pid;
        return x < y ? -1 : x > y;
}

static int take_procs(struct strset *s, sp_error **err)
{
        _cleanup_free_ sp_test_pidstat *all = NULL;
        size_t n = 0;
        if (sp_test_pidstat_list(&all, &n) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "listing /proc");
        pid_t self = getpid();
        bool leader = getpgrp() == self;
        qsort(all, n, sizeof(*all), cmp_pid);
        _cleanup_free_ bool *mine = calloc(n ? n : 1, sizeof(bool));
        if (!mine)
                abort();
        /* Descendants: mark children of marked processes until nothing changes
         * (at most one round per generation, and never more than n). A zombie
         * counts if one of ours has yet to reap it; an orphan's zombie is
         * init's business. */
        for (size_t round = 0; round <= n; round++) {
                bool changed = false;
                for (size_t i = 0; i < n; i++) {
                        if (mine[i] || all[i].pid == self)
                                continue;
                        bool zombie = all[i].state == 'Z' || all[i].state == 'X';
                        bool m = all[i].ppid == self || (leader && all[i].pgrp == self && !zombie);
                        if (!m) {
                                sp_test_pidstat key = {.pid = all[i].ppid};
                                sp_test_pidstat *parent = bsearch(&key, all, n, sizeof(*all), cmp_pid);
                                m = parent && mine[parent - all];
                        }
                        if (m) {
                                mine[i] = true;
                                changed = true;
                        }
                }
                if (!changed)
                        break;
        }
        for (size_t i = 0; i < n; i++)
                if (mine[i] && addf(s, err, "%d %s", (int)all[i].pid, all[i].comm) < 0)
                        return -SP_E_LIMIT;
        return 0;
}

int sp_test_snapshot_take(sp_test_snapshot *s, sp_error **err)
{
        memset(s, 0, sizeof(*s));
        struct strset m = {0}, ns = {0}, l = {0}, p = {0}, k = {0};
        if (take_mounts(&m, err) < 0 || take_netns(&ns, err) < 0 || take_loops(&l, err) < 0 ||
            take_procs(&p, err) < 0 || take_links(&k, err) < 0) {
                set_free(&m);
                set_free(&ns);
                set_free(&l);
                set_free(&p);
                set_free(&k);
                return sp_error_wrap(err, "host snapshot");
        }
        set_finish(&m, &s->mounts, &s->n_mounts);
        set_finish(&ns, &s->netns, &s->n_netns);
        set_finish(&l, &s->loops, &s->n_loops);
        set_finish(&p, &s->procs, &s->n_procs);
        set_finish(&k, &s->links, &s->n_links);
        return 0;
}

/* Appends "+ kind entry" / "- kind entry" for the difference of two sorted sets. */
static void diff_sets(sp_buf *out, const char *kind, char **a, size_t na, char **b, size_t nb, const char *filter)
{
        size_t i = 0, j = 0;
        while (i < na || j < nb) {
                int c = i == na ? 1 : j == nb ? -1 : strcmp(a[i], b[j]);
                if (c == 0) {
                        i++;
                        j++;
                        continue;
                }
                const char *entry = c < 0 ? a[i++] : b[j++];
                if (filter && !strstr(entry, filter))
                        continue;
                (void)sp_buf_appendf(out, NULL, "%c %s %s\n", c < 0 ? '-' : '+', kind, entry);
        }
}

char *sp_test_snapshot_diff(const sp_test_snapshot *before, const sp_test_snapshot *after, const char *filter)
{
        sp_buf out = SP_BUF_INIT;
        diff_sets(&out, "mount", before->mounts, before->n_mounts, after->mounts, after->n_mounts, filter);
        diff_sets(&out, "netns", before->netns, before->n_netns, after->netns, after->n_netns, filter);
        diff_sets(&out, "loop", before->loops, before->n_loops, after->loops, after->n_loops, filter);
        diff_sets(&out, "process", before->procs, before->n_procs, after->procs, after->n_procs, filter);
        diff_sets(&out, "link", before->links, before->n_links, after->links, after->n_links, filter);
        if (out.len == 0) {
                sp_buf_free(&out);
                return NULL;
        }
        return sp_buf_steal(&out);
}

void sp_test_snapshot_free(sp_test_snapshot *s)
{
        if (!s)
                return;
        struct strset sets[5] = {{s->mounts, s->n_mounts, s->n_mounts},
                                 {s->netns, s->n_netns, s->n_netns},
                                 {s->loops, s->n_loops, s->n_loops},
                                 {s->procs, s->n_procs, s->n_procs},
                                 {s->links, s->n_links, s->n_links}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(sets); i++)
                set_free(&sets[i]);
        memset(s, 0, sizeof(*s));
}
