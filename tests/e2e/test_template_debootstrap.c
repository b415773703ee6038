/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A template from a Debian suite, end to end: a real cluster (PostgreSQL, a
 * control plane, a worker) builds `bookworm` (variant minbase) through the
 * API as an admin naming a mirror; while debootstrap runs, the build
 * operation's message shows its latest output line; once ready, a sandbox of
 * the template runs `cat /etc/debian_version` through spacectl (and a data
 * plane joined to the cluster).
 *
 * It downloads a Debian base system (tens of MB) and takes minutes. The
 * mirror is SPACE_TEST_DEBOOTSTRAP_MIRROR, else the first Debian mirror this
 * host's apt sources name, else http://deb.debian.org/debian; the test skips
 * visibly when it cannot be reached, without /usr/sbin/debootstrap, or with
 * SPACE_TEST_DEBOOTSTRAP=0. Needs root, btrfs and PostgreSQL.
 */
#include <glob.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "launcher.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"
#include "../integration/test_spacectl_util.h"

#define DEFAULT_MIRROR "http://deb.debian.org/debian"
#define BUILD_TIMEOUT_S 1200

static sp_test_space S;
static sp_test_proc dp;
static int dp_port;
static char dp_url_arg[128];
static const char *cp_args[] = {dp_url_arg, NULL};
static char *dir;
static char mirror[512];

/* The first `http(s)://…/debian` mirror in the apt sources (one-line and
 * deb822 formats), security archives left out; "" when there is none. */
static void apt_mirror(char out[static 512])
{
        out[0] = '\0';
        glob_t g = {0};
        glob("/etc/apt/sources.list.d/*", 0, NULL, &g);
        const char *first[] = {"/etc/apt/sources.list"};
        for (size_t i = 0; i < 1 + g.gl_pathc && !out[0]; i++) {
                const char *path = i == 0 ? first[0] : g.gl_pathv[i - 1];
                FILE *f = fopen(path, "r");
                if (!f)
                        continue;
                char line[1024];
                while (!out[0] && fgets(line, sizeof(line), f)) {
                        if (line[0] == '#')
                                continue;
                        char *u = strstr(line, "http://");
                        if (!u)
                                u = strstr(line, "https://");
                        if (!u)
                                continue;
                        u[strcspn(u, " \t\r\n")] = '\0';
                        size_t n = strlen(u);
                        while (n && u[n - 1] == '/')
                                u[--n] = '\0';
                        if (n >= 7 && strcmp(u + n - 7, "/debian") == 0 && n < 512)
                                snprintf(out, 512, "%s", u);
                }
                fclose(f);
        }
        globfree(&g);
}

/* Whether a TCP connection to the URL's host succeeds within 10 s. */
static bool reachable(const char *url)
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

/* The cluster and a data plane joined to it (spacectl exec goes through it). */
static void cluster_up(void)
{
        sp_error *err = NULL;
        dp_port = sp_test_free_port(&err);
        sp_test_ok(dp_port, &err);
        snprintf(dp_url_arg, sizeof(dp_url_arg), "--dataplane-url=http://127.0.0.1:%d", dp_port);
        sp_test_space_opts o = {.workers = 1, .cp_args = cp_args};
        sp_test_space_up(&S, &o);
        sp_test_space_start_dataplane(&S, &dp, dp_port, "dp-deb", NULL);
        dir = sp_test_tmpdir("tpldeb");
        snprintf(ctl_home, sizeof(ctl_home), "%s", dir);
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/admin.json", dir);
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", S.api);
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "profile", "set", "local", "--endpoint", url,
                                                    "--api-key", S.admin_key, "--use", NULL);
        ctl_assert_code(r, 0);
}

static void cluster_down(void)
{
        if (dp.argv) {
                sp_test_proc_stop(&dp, 10000, NULL);
                sp_test_proc_free(&dp);
        }
        sp_test_space_down(&S);
        if (dir) {
                sp_test_tmpdir_remove(dir);
                free(dir);
                dir = NULL;
        }
}

START_TEST(bookworm_builds_and_runs_a_command)
{
        char body[800];
        snprintf(body, sizeof(body),
                 "{\"name\":\"deb12\",\"source\":\"debootstrap\",\"suite\":\"bookworm\",\"mirror\":\"%s\"}", mirror);
        _cleanup_json_ json_object *r = sp_test_api(&S, S.admin_key, "POST", "/v1/templates", 202, body, NULL);
        char op_path[128];
        snprintf(op_path, sizeof(op_path), "/v1/operations/%s?wait=5", sp_test_jstr(r, "operation.id"));
        /* Wait, watching the operation's message follow debootstrap's output. */
        int64_t until = sp_now_mono_us() + (int64_t)BUILD_TIMEOUT_S * 1000000;
        unsigned lines = 0;
        char last[512] = "";
        json_object *op = NULL;
        for (;;) {
                op = sp_test_api(&S, S.admin_key, "GET", op_path, 200, NULL, NULL);
                const char *state = sp_test_jstr(op, "state");
                if (strcmp(state, "succeeded") == 0 || strcmp(state, "failed") == 0)
                        break;
                const char *msg = sp_test_jstr(op, "message");
                if (msg && strncmp(msg, "I: ", 3) == 0 && strcmp(msg, last) != 0) {
                        snprintf(last, sizeof(last), "%s", msg);
                        lines++;
                        fprintf(stderr, "debootstrap: %s\n", msg);
                }
                json_object_put(op);
                ck_assert_msg(sp_now_mono_us() < until, "the build did not finish in %d s", BUILD_TIMEOUT_S);
        }
        ck_assert_msg(strcmp(sp_test_jstr(op, "state"), "succeeded") == 0, "the build failed: %s",
                      json_object_to_json_string(op));
        json_object_put(op);
        ck_assert_msg(lines >= 2, "the operation showed %u progress lines", lines);
        _cleanup_json_ json_object *t = sp_test_api(&S, S.admin_key, "GET", "/v1/templates/deb12", 200, NULL, NULL);
        ck_assert_str_eq(sp_test_jstr(t, "state"), "ready");

        char id[64];
        sp_test_create_sandbox(&S, S.admin_key, "{\"template\":\"deb12\",\"resources\":{\"memory_mb\":128}}", id);
        _cleanup_ctl_result_ ctl_result x = ctl_run(NULL, NULL, "exec", id, "--", "cat", "/etc/debian_version", NULL);
        ctl_assert_code(x, 0);
        ck_assert_msg(x.out.data && strncmp(x.out.data, "12.", 3) == 0, "debian_version: %s",
                      x.out.data ? x.out.data : "");
        _cleanup_ctl_result_ ctl_result rm = ctl_run(NULL, NULL, "sandbox", "rm", id, NULL);
        ctl_assert_code(rm, 0);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("template_debootstrap");
        TCase *tc = tcase_create("debootstrap");
        tcase_set_timeout(tc, 1500); /* a literal: cmake reads it for the CTest timeout */
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, bookworm_builds_and_runs_a_command);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        const char *on = getenv("SPACE_TEST_DEBOOTSTRAP");
        if (on && strcmp(on, "0") == 0)
                sp_test_skip("SPACE_TEST_DEBOOTSTRAP=0: not building a Debian template");
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        if (access("/usr/sbin/debootstrap", X_OK) != 0)
                sp_test_skip("needs /usr/sbin/debootstrap on the worker host");
        const char *env = getenv("SPACE_TEST_DEBOOTSTRAP_MIRROR");
        if (env && *env)
                snprintf(mirror, sizeof(mirror), "%s", env);
        else
                apt_mirror(mirror);
        if (!mirror[0])
                snprintf(mirror, sizeof(mirror), "%s", DEFAULT_MIRROR);
        if (!reachable(mirror))
                sp_test_skip("the Debian mirror %s cannot be reached", mirror);
        return sp_test_main(suite());
}
