/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: the `base` template — its layout, its files, and a shell that
 * runs: the built tree's busybox and /bin/sh are executed (no chroot needed:
 * busybox is static and /bin/sh a relative symlink). Needs a static busybox
 * on the host (Debian's busybox-static); skips visibly without one.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "template/template.h"
#include "test_template_util.h"

#define HOST_BUSYBOX "/bin/busybox"

static char *dir;
static char dest[512];

static void setup(void)
{
        dir = sp_test_tmpdir("tpl-base");
        snprintf(dest, sizeof(dest), "%s/dest", dir);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
}

static void teardown(void)
{
        tt_rmrf(dir);
        free(dir);
}

static char *at(const char *rel)
{
        static char buf[4][1024];
        static int i;
        char *b = buf[i++ % 4];
        snprintf(b, sizeof(buf[0]), "%s/%s", dest, rel);
        return b;
}

/* Runs argv with an empty environment and returns its stdout (bounded). */
static char *run(char *const argv[])
{
        int p[2];
        ck_assert_int_eq(pipe(p), 0);
        pid_t pid = fork();
        if (pid == 0) {
                dup2(p[1], 1);
                close(p[0]);
                char *const envp[] = {NULL};
                execve(argv[0], argv, envp);
                _exit(127);
        }
        close(p[1]);
        sp_buf out = SP_BUF_INIT;
        char chunk[4096];
        ssize_t n;
        while ((n = read(p[0], chunk, sizeof(chunk))) > 0 && out.len < 65536)
                sp_buf_append(&out, chunk, (size_t)n, NULL);
        close(p[0]);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed", argv[0]);
        return out.data ? sp_buf_steal(&out) : strdup("");
}

static void build(wk_template_meta **meta)
{
        /* Any static binary stands in for the agent here; the integration
         * test installs the real one. */
        wk_base_opts o = {.agent_path = HOST_BUSYBOX, .bash_path = "/nonexistent/bash-static"};
        sp_error *err = NULL;
        sp_test_ok(wk_template_build_base(&o, dest, meta, &err), &err);
}

START_TEST(layout_and_files)
{
        wk_template_meta *meta = NULL;
        build(&meta);
        static const struct {
                const char *path;
                mode_t mode;
        } dirs[] = {{"bin", 0755},  {"sbin", 0755},     {"usr/bin", 0755}, {"etc", 0755},
                    {"tmp", 01777}, {"var/tmp", 01777}, {"root", 0700},    {"home/user", 0755},
                    {"proc", 0555}, {"sys", 0555},      {"dev", 0755},     {"run", 0755}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(dirs); i++) {
                struct stat st;
                ck_assert_msg(lstat(at(dirs[i].path), &st) == 0 && S_ISDIR(st.st_mode), "/%s", dirs[i].path);
                ck_assert_msg((st.st_mode & 07777) == dirs[i].mode, "/%s has mode %o", dirs[i].path,
                              st.st_mode & 07777);
        }
        ck_assert_int_eq(tt_count_entries(at("proc")), 0);
        ck_assert_int_eq(tt_count_entries(at("dev")), 0);
        struct stat st;
        ck_assert_int_eq(stat(dest, &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0755);
        ck_assert_int_eq(stat(at("bin/busybox"), &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0755);
        ck_assert_int_eq(stat(at("sbin/space-agent"), &st), 0);
        ck_assert_uint_eq(st.st_mode & 07777, 0755);
        ck_assert_int_ne(access(at("bin/bash"), F_OK), 0); /* no bash-static given */

        char target[256];
        ssize_t n = readlink(at("bin/sh"), target, sizeof(target) - 1);
        ck_assert_int_gt(n, 0);
        target[n] = '\0';
        ck_assert_str_eq(target, "busybox");
        n = readlink(at("usr/bin/env"), target, sizeof(target) - 1);
        ck_assert_int_gt(n, 0);
        target[n] = '\0';
        ck_assert_str_eq(target, "/bin/busybox");
        ck_assert_int_eq(lstat(at("bin/ls"), &st), 0);
        ck_assert(S_ISLNK(st.st_mode));

        char *passwd = tt_read(at("etc/passwd"));
        ck_assert_ptr_nonnull(strstr(passwd, "root:x:0:0:root:/root:/bin/sh\n"));
        ck_assert_ptr_nonnull(strstr(passwd, "user:x:1000:1000:user:/home/user:/bin/sh\n"));
        ck_assert_ptr_nonnull(strstr(passwd, "nobody:x:65534:65534:"));
        free(passwd);
        char *group = tt_read(at("etc/group"));
        ck_assert_ptr_nonnull(strstr(group, "user:x:1000:"));
        free(group);
        tt_assert_content(at("etc/resolv.conf"), "");
        tt_assert_content(at("etc/hostname"), "sandbox\n");
        char *hosts = tt_read(at("etc/hosts"));
        ck_assert_ptr_nonnull(strstr(hosts, "127.0.0.1\tlocalhost"));
        free(hosts);

        ck_assert_int_eq(meta->source, WK_TEMPLATE_SOURCE_BASE);
        ck_assert_str_eq(meta->user, "root");
        ck_assert_str_eq(meta->workdir, "/");
        ck_assert_str_eq(meta->env[0], WK_TEMPLATE_DEFAULT_PATH);
        ck_assert_str_eq(meta->cmd[0], "/bin/sh");
        ck_assert_ptr_null(meta->cmd[1]);
        wk_template_meta_free(meta);
}
END_TEST

START_TEST(its_shell_runs)
{
        build(NULL);
        char *const echo[] = {at("bin/busybox"), "echo", "ok", NULL};
        char *out = run(echo);
        ck_assert_str_eq(out, "ok\n");
        free(out);
        char *const sh[] = {at("bin/sh"), "-c", "echo ok from sh; test -x /bin/sh || true", NULL};
        out = run(sh);
        ck_assert_str_eq(out, "ok from sh\n");
        free(out);
}
END_TEST

START_TEST(refuses_bad_inputs)
{
        sp_error *err = NULL;
        tt_assert_error(wk_template_build_base(&(wk_base_opts){0}, dest, NULL, &err), err, SP_E_INVALID, "agent");
        char script[600];
        snprintf(script, sizeof(script), "%s/agent.sh", dir);
        tt_write(script, "#!/bin/sh\n", 0755);
        tt_assert_error(wk_template_build_base(&(wk_base_opts){.agent_path = script}, dest, NULL, &err), err,
                        SP_E_INVALID, "not an ELF executable");
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        /* a dynamically linked program cannot be the sandbox's busybox */
        tt_assert_error(wk_template_build_base(&(wk_base_opts){.agent_path = HOST_BUSYBOX, .busybox_path = "/bin/ls"},
                                               dest, NULL, &err),
                        err, SP_E_INVALID, "not statically linked");
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        tt_write(at("x"), "", 0644);
        tt_assert_error(wk_template_build_base(&(wk_base_opts){.agent_path = HOST_BUSYBOX}, dest, NULL, &err), err,
                        SP_E_CONFLICT, "not empty");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("template_base");
        TCase *tc = tcase_create("base");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, layout_and_files);
        tcase_add_test(tc, its_shell_runs);
        tcase_add_test(tc, refuses_bad_inputs);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        if (access(HOST_BUSYBOX, X_OK) != 0)
                sp_test_skip("needs a static busybox at %s (Debian: busybox-static)", HOST_BUSYBOX);
        return sp_test_main(suite());
}
