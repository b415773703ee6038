/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "guard.h"
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
        /* Removed even if the test dies before its teardown; best effort. */
        (void)sp_test_guard_remove(path, NULL);
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

void sp_test_ok_(long r, sp_error **err, const char *expr, const char *file, int line)
{
        if (r >= 0) {
                if (err)
                        sp_error_freep(err);
                return;
        }
        char msg[2048];
        snprintf(msg, sizeof(msg), "%s", err && *err ? (*err)->message : "(no error message)");
        if (err)
                sp_error_freep(err);
        _ck_assert_failed(file, line, "Failed", "%s returned %ld: %s", expr, r, msg);
}

#define TAIL_MAX_BYTES 65536

char *sp_test_file_tail(const char *path, size_t max_lines)
{
        char *out = NULL;
        _cleanup_close_ int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0 || max_lines == 0)
                return strdup("");
        off_t from = st.st_size > TAIL_MAX_BYTES ? st.st_size - TAIL_MAX_BYTES : 0;
        size_t want = (size_t)(st.st_size - from), got = 0;
        out = malloc(want + 1);
        if (!out)
                abort();
        while (got < want) {
                ssize_t n = pread(fd, out + got, want - got, from + (off_t)got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                got += (size_t)n;
        }
        out[got] = '\0';
        /* Walk back over max_lines line ends (a final newline does not count). */
        size_t end = got, lines = 0, start = 0;
        if (end > 0 && out[end - 1] == '\n')
                end--;
        for (size_t i = end; i > 0; i--) {
                if (out[i - 1] == '\n' && ++lines == max_lines) {
                        start = i;
                        break;
                }
        }
        memmove(out, out + start, got - start + 1);
        return out;
}

void sp_test_dump_file_tail(const char *title, const char *path, size_t max_lines)
{
        _cleanup_free_ char *tail = sp_test_file_tail(path, max_lines);
        fprintf(stderr, "==> %s (last %zu lines of %s)\n%s%s", title ? title : "log", max_lines, path ? path : "-",
                tail, *tail && tail[strlen(tail) - 1] != '\n' ? "\n" : "");
        fprintf(stderr, "<== %s\n", title ? title : "log");
}
