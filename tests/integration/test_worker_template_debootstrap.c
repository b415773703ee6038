/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The debootstrap importer for real: builds a minbase Debian root
 * filesystem from a mirror and runs its bash in a chroot. It needs the
 * network and minutes, so it runs only when SPACE_TEST_DEBOOTSTRAP=1 (suite
 * SPACE_TEST_DEBOOTSTRAP_SUITE, default bookworm; mirror
 * SPACE_TEST_DEBOOTSTRAP_MIRROR, default http://deb.debian.org/debian) and
 * skips visibly otherwise, or when the mirror cannot be reached.
 */
#include <netdb.h>
#include <poll.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/worker/test_template_util.h"
#include "harness.h"
#include "template/template.h"

#define DEFAULT_MIRROR "http://deb.debian.org/debian"

static const char *mirror, *suite_name;
static unsigned progress_lines;

static void count_line(const char *line, void *userdata)
{
        (void)line;
        (*(unsigned *)userdata)++;
}

/* Whether a TCP connection to the mirror's host succeeds within 10 s. */
static bool mirror_reachable(const char *url)
{
        const char *host = strstr(url, "://");
        if (!host)
                return false;
        host += 3;
        char name[256];
        size_t n = strcspn(host, ":/");
        if (n == 0 || n >= sizeof(name))
                return false;
        memcpy(name, host, n);
        name[n] = '\0';
        const char *port = strncmp(url, "https", 5) == 0 ? "443" : "80";
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
        if (getaddrinfo(name, port, &hints, &res) != 0)
                return false;
        bool ok = false;
        for (struct addrinfo *ai = res; ai && !ok; ai = ai->ai_next) {
                int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        continue;
                if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                        ok = true;
                } else {
                        struct pollfd p = {.fd = fd, .events = POLLOUT};
                        int e = 0;
                        socklen_t len = sizeof(e);
                        ok = poll(&p, 1, 10000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) == 0 && e == 0;
                }
                close(fd);
        }
        freeaddrinfo(res);
        return ok;
}

START_TEST(builds_a_debian_root_filesystem)
{
        char *dir = sp_test_tmpdir("tpl-debootstrap");
        ck_assert_int_eq(chmod(dir, 0755), 0);
        char dest[600], logp[600];
        snprintf(dest, sizeof(dest), "%s/rootfs", dir);
        snprintf(logp, sizeof(logp), "%s/debootstrap.log", dir);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        wk_debootstrap_opts o = {.suite = suite_name,
                                 .mirror = mirror,
                                 .log_path = logp,
                                 .timeout_sec = 1800,
                                 .progress = count_line,
                                 .userdata = &progress_lines};
        wk_template_meta *meta = NULL;
        sp_error *err = NULL;
        int r = wk_template_import_debootstrap(&o, dest, &meta, &err);
        if (r < 0)
                sp_test_dump_file_tail("debootstrap log", logp, 40);
        sp_test_ok(r, &err);
        ck_assert_uint_gt(progress_lines, 10);
        char p[700];
        snprintf(p, sizeof(p), "%s/etc/debian_version", dest);
        ck_assert_int_eq(access(p, R_OK), 0);
        ck_assert_str_eq(meta->cmd[0], "/bin/bash");

        int pipefd[2];
        ck_assert_int_eq(pipe(pipefd), 0);
        pid_t pid = fork();
        if (pid == 0) {
                dup2(pipefd[1], 1);
                if (chroot(dest) < 0 || chdir("/") < 0)
                        _exit(126);
                char *const argv[] = {"/bin/bash", "-c", "echo ok", NULL};
                char *const envp[] = {"PATH=/usr/bin:/bin", NULL};
                execve(argv[0], argv, envp);
                _exit(127);
        }
        close(pipefd[1]);
        char out[16] = "";
        ck_assert_int_eq(read(pipefd[0], out, sizeof(out) - 1), 3);
        close(pipefd[0]);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ck_assert_str_eq(out, "ok\n");
        wk_template_meta_free(meta);
        tt_rmrf(dir);
        free(dir);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("worker_template_debootstrap");
        TCase *tc = tcase_create("debootstrap");
        tcase_set_timeout(tc, 2000);
        tcase_add_test(tc, builds_a_debian_root_filesystem);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        const char *on = getenv("SPACE_TEST_DEBOOTSTRAP");
        if (!on || strcmp(on, "1") != 0)
                sp_test_skip("set SPACE_TEST_DEBOOTSTRAP=1 to build a Debian root filesystem (network, minutes)");
        sp_test_require_root("debootstrap and chroot");
        if (access("/usr/sbin/debootstrap", X_OK) != 0)
                sp_test_skip("needs /usr/sbin/debootstrap");
        mirror = getenv("SPACE_TEST_DEBOOTSTRAP_MIRROR");
        if (!mirror || !*mirror)
                mirror = DEFAULT_MIRROR;
        suite_name = getenv("SPACE_TEST_DEBOOTSTRAP_SUITE");
        if (!suite_name || !*suite_name)
                suite_name = "bookworm";
        if (!mirror_reachable(mirror))
                sp_test_skip("the mirror %s cannot be reached", mirror);
        return sp_test_main(suite());
}
