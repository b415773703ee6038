/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Scope-bound cleanup, in the manner of systemd and crun.
 *
 *   _cleanup_free_ char *s = strdup("x");
 *   _cleanup_close_ int fd = open(...);
 *   return TAKE_PTR(s);   // hands ownership on, the cleanup sees NULL
 */
#ifndef SPACE_CLEANUP_H
#define SPACE_CLEANUP_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <unistd.h>
#include <sys/types.h>

#define _cleanup_(f) __attribute__((cleanup(f)))

#define TAKE_PTR(p) \
        ({ \
                __typeof__(p) _tp_ = (p); \
                (p) = NULL; \
                _tp_; \
        })

#define TAKE_FD(fd) \
        ({ \
                int _tf_ = (fd); \
                (fd) = -1; \
                _tf_; \
        })

#define SP_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static inline void sp_freep(void *p)
{
        free(*(void **)p);
        *(void **)p = NULL;
}
#define _cleanup_free_ _cleanup_(sp_freep)

/* Closes fd if >= 0, preserving errno. Returns -1. */
static inline int sp_close(int fd)
{
        if (fd >= 0) {
                int saved = errno;
                close(fd);
                errno = saved;
        }
        return -1;
}
static inline void sp_closep(int *fd)
{
        *fd = sp_close(*fd);
}
#define _cleanup_close_ _cleanup_(sp_closep)

static inline void sp_fclosep(FILE **f)
{
        if (*f)
                fclose(*f);
        *f = NULL;
}
#define _cleanup_fclose_ _cleanup_(sp_fclosep)

static inline void sp_closedirp(DIR **d)
{
        if (*d)
                closedir(*d);
        *d = NULL;
}
#define _cleanup_closedir_ _cleanup_(sp_closedirp)

/* Frees a NULL-terminated array of strings and the array. */
static inline void sp_strv_freep(char ***v)
{
        if (*v)
                for (char **i = *v; *i; i++)
                        free(*i);
        free(*v);
        *v = NULL;
}
#define _cleanup_strv_free_ _cleanup_(sp_strv_freep)

/* Kills (SIGKILL) and reaps a child process if pid > 0. */
void sp_pid_kill_and_reap(pid_t *pid);
#define _cleanup_pid_ _cleanup_(sp_pid_kill_and_reap)

/* Defines a cleanup helper fname##p for a type whose destructor takes a pointer. */
#define SP_DEFINE_CLEANUP(type, func) \
        static inline void func##p(type *p) \
        { \
                if (*p) \
                        func(*p); \
                *p = NULL; \
        }

/* Zeroes memory in a way the compiler may not elide (for secrets). */
void sp_explicit_bzero(void *p, size_t n);

#endif
