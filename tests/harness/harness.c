/* SPDX-License-Identifier: Apache-2.0 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

int sp_test_main(Suite *s)
{
        SRunner *sr = srunner_create(s);
        srunner_set_fork_status(sr, CK_FORK);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed == 0 ? 0 : 1;
}

void sp_test_skip(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "SKIP: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        exit(SP_TEST_SKIP);
}

bool sp_test_is_root(void)
{
        return geteuid() == 0;
}

void sp_test_require_root(const char *why)
{
        if (!sp_test_is_root())
                sp_test_skip("needs root (%s)", why);
}

void sp_test_require_program(const char *prog, const char *why)
{
        const char *path = getenv("PATH");
        if (path) {
                char *copy = strdup(path), *save = NULL;
                for (char *dir = strtok_r(copy, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
                        char full[4096];
                        snprintf(full, sizeof(full), "%s/%s", dir, prog);
                        if (access(full, X_OK) == 0) {
                                free(copy);
                                return;
                        }
                }
                free(copy);
        }
        sp_test_skip("needs %s on PATH (%s)", prog, why);
}

char *sp_test_tmpdir(const char *tag)
{
        const char *base = getenv("TMPDIR");
        char *path = NULL;
        if (asprintf(&path, "%s/space-test-%s-XXXXXX", base && *base ? base : "/tmp", tag) < 0)
                abort();
        if (!mkdtemp(path)) {
                perror("mkdtemp");
                abort();
        }
        return path;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        remove(p);
        return 0;
}

void sp_test_tmpdir_remove(const char *path)
{
        if (path && *path)
                nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
}

const char *sp_test_source_dir(void)
{
        const char *s = getenv("SPACE_SOURCE_DIR");
        return s ? s : ".";
}

const char *sp_test_binary_dir(void)
{
        const char *s = getenv("SPACE_BINARY_DIR");
        return s ? s : ".";
}
