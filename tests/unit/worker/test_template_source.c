/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: template sources confined to an import root (every way out —
 * `..`, symlinks anywhere on the path, absolute paths outside the root, a
 * sibling sharing the root's name as a prefix, fifos, the wrong kind of file —
 * fails with one message that names no path), no root at all refused, and the
 * import time bound (an import past its deadline fails with SP_E_TIMEOUT).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/time.h"
#include "template/internal.h"
#include "template/template.h"
#include "test_template_util.h"

static char *dir;
static char root[512], dest[512];

static void setup(void)
{
        dir = sp_test_tmpdir("tpl-src");
        snprintf(root, sizeof(root), "%s/root", dir);
        snprintf(dest, sizeof(dest), "%s/dest", dir);
        char p[1024];
        ck_assert_int_eq(mkdir(root, 0755), 0);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        snprintf(p, sizeof(p), "%s/secret", dir);
        ck_assert_int_eq(mkdir(p, 0700), 0);
        snprintf(p, sizeof(p), "%s/secret/key", dir);
        tt_write(p, "s3cr3t\n", 0600);
        snprintf(p, sizeof(p), "%s/root-sibling", dir);
        ck_assert_int_eq(mkdir(p, 0755), 0);
        snprintf(p, sizeof(p), "%s/tree/etc", root);
        ck_assert_int_eq(sp_mkdir_p(p, 0755, NULL), 0);
        snprintf(p, sizeof(p), "%s/tree/etc/hostname", root);
        tt_write(p, "inside\n", 0644);
        snprintf(p, sizeof(p), "%s/image.tar", root);
        tt_write(p, "not really a tarball", 0644);
        snprintf(p, sizeof(p), "%s/fifo", root);
        ck_assert_int_eq(mkfifo(p, 0644), 0);
        char target[1024];
        snprintf(target, sizeof(target), "%s/secret", dir);
        snprintf(p, sizeof(p), "%s/out", root);
        ck_assert_int_eq(symlink(target, p), 0); /* absolute, out */
        snprintf(p, sizeof(p), "%s/up", root);
        ck_assert_int_eq(symlink("../secret", p), 0); /* relative, out */
        snprintf(p, sizeof(p), "%s/in", root);
        ck_assert_int_eq(symlink("tree", p), 0); /* stays inside, still refused */
}

static void teardown(void)
{
        tt_rmrf(dir);
        free(dir);
}

static void assert_refused(const char *path, bool want_dir)
{
        _cleanup_error_ sp_error *err = NULL;
        int fd = wk_template_source_open(root, path, want_dir, &err);
        ck_assert_msg(fd < 0, "%s opened", path);
        ck_assert_int_eq(err->code, SP_E_NOT_FOUND);
        ck_assert_str_eq(err->message, WK_TEMPLATE_SOURCE_REFUSED);
}

START_TEST(opens_only_beneath_the_root)
{
        char p[1024];
        _cleanup_error_ sp_error *err = NULL;
        /* Inside: absolute, relative, the root itself, a file. */
        snprintf(p, sizeof(p), "%s/tree", root);
        int fd = wk_template_source_open(root, p, true, &err);
        ck_assert_msg(fd >= 0, "%s", err ? err->message : "");
        close(fd);
        fd = wk_template_source_open(root, "tree/./etc", true, &err);
        ck_assert_int_ge(fd, 0);
        close(fd);
        fd = wk_template_source_open(root, root, true, &err);
        ck_assert_int_ge(fd, 0);
        close(fd);
        snprintf(p, sizeof(p), "%s/image.tar", root);
        fd = wk_template_source_open(root, p, false, &err);
        ck_assert_int_ge(fd, 0);
        close(fd);
        /* The root given with a trailing slash and as a path through a symlink. */
        char root2[600], link[600];
        snprintf(root2, sizeof(root2), "%s/", root);
        snprintf(p, sizeof(p), "%s/tree", root);
        fd = wk_template_source_open(root2, p, true, &err);
        ck_assert_int_ge(fd, 0);
        close(fd);
        snprintf(link, sizeof(link), "%s/root-link", dir);
        ck_assert_int_eq(symlink(root, link), 0);
        fd = wk_template_source_open(link, p, true, &err);
        ck_assert_int_ge(fd, 0);
        close(fd);

        /* Out, or not a source: all alike. */
        snprintf(p, sizeof(p), "%s/secret", dir);
        assert_refused(p, true);
        snprintf(p, sizeof(p), "%s/root/../secret", dir);
        assert_refused(p, true);
        assert_refused("../secret", true);
        assert_refused("tree/../../secret", true);
        snprintf(p, sizeof(p), "%s/root-sibling", dir);
        assert_refused(p, true);
        assert_refused("/etc", true);
        assert_refused("/", true);
        assert_refused("out", true);
        assert_refused("out/key", false);
        assert_refused("up", true);
        assert_refused("in/etc", true);
        assert_refused("missing", true);
        assert_refused("fifo", false);
        assert_refused("tree", false); /* a directory where a file is wanted */
        assert_refused("image.tar", true);
        assert_refused("", true);
}
END_TEST

START_TEST(no_root_no_imports)
{
        _cleanup_error_ sp_error *err = NULL;
        ck_assert_int_lt(wk_template_source_open(NULL, "/etc", true, &err), 0);
        ck_assert_int_eq(err->code, SP_E_PERMISSION);
        ck_assert_ptr_null(strchr(err->message, '/'));
        sp_error *e2 = NULL;
        ck_assert_int_lt(wk_template_source_open("", root, true, &e2), 0);
        ck_assert_int_eq(e2->code, SP_E_PERMISSION);
        sp_error_free(e2);
}
END_TEST

START_TEST(imports_stop_at_their_deadline)
{
        _cleanup_error_ sp_error *err = NULL;
        char p[1024];
        snprintf(p, sizeof(p), "%s/tree", root);
        wk_template_limits lim = {.max_seconds = 5, .deadline_us = sp_now_mono_us() - 1};
        ck_assert_int_lt(wk_template_import_dir(p, dest, &lim, NULL, NULL, &err), 0);
        ck_assert_int_eq(err->code, SP_E_TIMEOUT);
        ck_assert_msg(strstr(err->message, "longer than 5 seconds"), "%s", err->message);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("template_source");
        TCase *tc = tcase_create("source");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, opens_only_beneath_the_root);
        tcase_add_test(tc, no_root_no_imports);
        tcase_add_test(tc, imports_stop_at_their_deadline);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
