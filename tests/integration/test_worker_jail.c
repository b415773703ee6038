/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The jail backend's namespaces, run for real (needs root): the agent runs as
 * PID 1 in its own namespaces on an idmapped root filesystem, answers over
 * its socket, and root inside cannot touch what encloses it.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/mount.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent_client.h"
#include "backend/jail.h"
#include "guard.h"
#include "harness.h"
#include "space/cleanup.h"
#include "space/id.h"

static char *dir;
static char rootfs[512], runtime[90], sock_path[108];
static pid_t init_pid;

static void must(int r, const char *what)
{
        ck_assert_msg(r == 0, "%s: %s", what, strerror(errno));
}

/* A tiny root filesystem: static busybox and its applets, /etc files. */
static void make_rootfs(void)
{
        char p[1024];
        snprintf(rootfs, sizeof(rootfs), "%s/rootfs", dir);
        const char *dirs[] = {"", "/bin", "/etc", "/root", "/home", "/home/user", "/tmp", "/mnt"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(dirs); i++) {
                snprintf(p, sizeof(p), "%s%s", rootfs, dirs[i]);
                must(mkdir(p, 0755), p);
        }
        snprintf(p, sizeof(p), "cp /bin/busybox %s/bin/busybox", rootfs);
        must(system(p), "copy busybox");
        snprintf(p, sizeof(p),
                 "cd %s/bin && for a in $(./busybox --list); do [ $a = busybox ] || ln -sf busybox $a; done", rootfs);
        must(system(p), "busybox applets");
        snprintf(p, sizeof(p), "cp %s/tests/space-probe %s/bin/space-probe", sp_test_binary_dir(), rootfs);
        must(system(p), "copy space-probe");
        snprintf(p, sizeof(p), "%s/etc/passwd", rootfs);
        FILE *f = fopen(p, "w");
        fputs("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n", f);
        fclose(f);
}

/* Starts a jail on rootfs whose runtime directory is run_dir, its agent
 * listening on sock; *pid is its init. */
static void start_jail(const char *run_dir, const char *sock, bool die_with_parent, pid_t *pid)
{
        must(mkdir(run_dir, 0700), "runtime dir");

        char agent[1024];
        snprintf(agent, sizeof(agent), "%s/bin/space-agent", sp_test_binary_dir());
        unsigned char r;
        sp_random_bytes(&r, 1, NULL);
        wk_jail_config cfg = {
                .id = "sbx_test",
                .rootfs = rootfs,
                .runtime_dir = run_dir,
                .agent_path = agent,
                .hostname = "sbx-test",
                .uid_base = 0x20000000u + (uid_t)r * 65536u,
                .uid_count = 65536,
                .agent_socket = sock,
                .log_fd = 2,
                .die_with_parent = die_with_parent,
        };
        _cleanup_error_ sp_error *e = NULL;
        int rc = wk_jail_start(&cfg, pid, &e);
        ck_assert_msg(rc == 0, "jail start: %s", e ? e->message : "?");
}

static void setup(void)
{
        dir = sp_test_tmpdir("jail");
        chmod(dir, 0755);
        make_rootfs();
        snprintf(runtime, sizeof(runtime), "%s/run", dir);
        snprintf(sock_path, sizeof(sock_path), "%s/agent.sock", runtime);
        /* die_with_parent: a failed test (no teardown) must not leave it running */
        start_jail(runtime, sock_path, true, &init_pid);
        /* and should the whole test process be killed, the guard kills the sandbox */
        _cleanup_error_ sp_error *e = NULL;
        sp_test_ok(sp_test_guard_kill(init_pid, &e), &e);
}

static void teardown(void)
{
        if (init_pid > 0) {
                kill(init_pid, SIGKILL);
                waitpid(init_pid, NULL, 0);
        }
        char p[1024];
        snprintf(p, sizeof(p), "%s/root", runtime);
        umount2(p, MNT_DETACH);
        sp_test_tmpdir_remove(dir);
        free(dir);
}

static void run(sp_test_agent *a, uint32_t ch, const char *script, sp_test_result *r)
{
        char argv[4096];
        snprintf(argv, sizeof(argv), "[\"sh\",\"-c\",\"%s\"]", script);
        sp_test_agent_exec(a, ch, argv, r);
}

START_TEST(agent_is_pid1_as_sandbox_root)
{
        sp_test_agent *a = sp_test_agent_connect(sock_path, 5000);
        sp_test_result r;
        run(a, 1, "id -u; hostname; cat /proc/1/cmdline | tr '\\\\0' ' '; echo; ls /proc | grep -c '^[0-9]'", &r);
        ck_assert_int_eq(sp_test_result_int(&r, "code"), 0);
        ck_assert_msg(strncmp(r.out.data, "0\nsbx-test\nspace-agent --listen-fd 3", 36) == 0, "got: %s", r.out.data);
        /* only our own few processes are visible */
        const char *last = strrchr(r.out.data, '\n');
        while (last > r.out.data && last[-1] != '\n')
                last--;
        ck_assert_int_le(atoi(last), 4);
        sp_test_result_free(&r);

        /* files written by sandbox root are owned by root on disk (idmapped mount) */
        run(a, 2, "echo hi > /root/f; ls -ln /root/f", &r);
        ck_assert_int_eq(sp_test_result_int(&r, "code"), 0);
        sp_test_result_free(&r);
        char p[1024];
        snprintf(p, sizeof(p), "%s/root/f", rootfs);
        struct stat st;
        ck_assert_int_eq(stat(p, &st), 0);
        ck_assert_int_eq(st.st_uid, 0);
        sp_test_agent_close(a);
}
END_TEST

START_TEST(root_inside_cannot_touch_the_host)
{
        sp_test_agent *a = sp_test_agent_connect(sock_path, 5000);
        struct {
                const char *script, *what;
        } attempts[] = {
                {"mknod /tmp/sda b 8 0", "create a block device"},
                {"mknod /tmp/mem c 1 1", "create a character device"},
                {"echo 1 > /proc/sys/kernel/sysrq", "write /proc/sys"},
                {"echo 1 > /proc/sys/net/ipv4/ip_forward", "write /proc/sys/net"},
                {"echo x > /sys/kernel/uevent_helper", "write /sys"},
                {"umount /proc/sys", "unmount /proc/sys"},
                {"mount -o remount,rw /proc/sys", "remount /proc/sys"},
                {"umount -l /run/space/agent", "unmount the agent binary"},
                {"echo x > /run/space/agent", "overwrite the agent binary"},
                {"mount -t proc proc /mnt", "mount a new proc"},
                {"mount -t sysfs sysfs /mnt", "mount sysfs"},
                {"ip link set lo down || ifconfig lo down", "reconfigure the network"},
                {"cat /proc/kcore | head -c 1 | grep -q .", "read /proc/kcore"},
                {"kill -9 1; sleep 0.2; kill -0 1", "never fails: PID 1 ignores SIGKILL from inside"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(attempts); i++) {
                sp_test_result r;
                run(a, (uint32_t)(10 + i), attempts[i].script, &r);
                int64_t code = sp_test_result_int(&r, "code");
                if (i == SP_ARRAY_SIZE(attempts) - 1)
                        ck_assert_msg(code == 0, "PID 1 died from an inside SIGKILL");
                else
                        ck_assert_msg(code != 0, "root inside could %s: %s%s", attempts[i].what, r.out.data,
                                      r.err.data);
                sp_test_result_free(&r);
        }
        sp_test_agent_close(a);
}
END_TEST

/* The sandbox's user namespace owns its uts and ipc namespaces (docs/threat-
 * model.md, "Who owns a jail's namespaces": a checkpoint needs them so): root
 * inside may set its host name, which is not the host's. */
START_TEST(root_inside_owns_its_host_name)
{
        char before[256] = "";
        ck_assert_int_eq(gethostname(before, sizeof(before)), 0);
        sp_test_agent *a = sp_test_agent_connect(sock_path, 5000);
        sp_test_result r;
        run(a, 1, "hostname evil-inside && hostname", &r);
        ck_assert_msg(sp_test_result_int(&r, "code") == 0, "%s%s", r.out.data, r.err.data);
        ck_assert_str_eq(r.out.data, "evil-inside\n");
        sp_test_result_free(&r);
        sp_test_agent_close(a);
        char after[256] = "";
        ck_assert_int_eq(gethostname(after, sizeof(after)), 0);
        ck_assert_str_eq(after, before);
}
END_TEST

/* Every privileged operation the probe attempts is refused, with a refusal
 * errno (not an argument error that would mean the permission check passed). */
START_TEST(system_calls_are_refused)
{
        sp_test_agent *a = sp_test_agent_connect(sock_path, 5000);
        char argv[256];
        snprintf(argv, sizeof(argv), "[\"space-probe\",\"--in-sandbox\",\"%d\",\"%d\"]", (int)getpid(), (int)getppid());
        sp_test_result r;
        sp_test_agent_exec(a, 1, argv, &r);
        ck_assert_msg(sp_test_result_int(&r, "code") == 0, "probe failed: %s", r.err.data);
        int lines = 0;
        char *save = NULL;
        for (char *line = strtok_r(r.out.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                lines++;
                char name[64], verdict[16], err[32] = "";
                ck_assert_int_ge(sscanf(line, "%63s %15s %31s", name, verdict, err), 2);
                ck_assert_msg(strcmp(verdict, "denied") == 0, "root inside the sandbox could: %s", name);
                bool refusal = strcmp(err, "EPERM") == 0 || strcmp(err, "EACCES") == 0 || strcmp(err, "EROFS") == 0 ||
                               strcmp(err, "ENOSYS") == 0 || strcmp(err, "ESRCH") == 0 || strcmp(err, "ENOENT") == 0 ||
                               /* the kernel answers EINVAL to unmounting a locked mount */
                               (strcmp(name, "umount_proc_sys") == 0 && strcmp(err, "EINVAL") == 0);
                ck_assert_msg(refusal, "%s: refused with %s, which is not a permission error", name, err);
                /* a host process must be invisible, not merely protected */
                if (strncmp(name, "kill_", 5) == 0)
                        ck_assert_str_eq(err, "ESRCH");
        }
        ck_assert_int_ge(lines, 25);
        sp_test_result_free(&r);
        sp_test_agent_close(a);
}
END_TEST

START_TEST(killing_init_ends_everything)
{
        sp_test_agent *a = sp_test_agent_connect(sock_path, 5000);
        sp_test_agent_open(a, 1, "{\"op\":\"exec\",\"session\":\"bg\",\"argv\":[\"sleep\",\"1002\"]}");
        sp_test_frame f = sp_test_agent_next(a);
        ck_assert_int_eq(f.type, PR_AGENT_REPLY);
        sp_buf_free(&f.payload);
        sp_test_agent_close(a);
        kill(init_pid, SIGKILL);
        ck_assert_int_eq(waitpid(init_pid, NULL, 0), init_pid);
        init_pid = 0;
        /* the namespace's other processes die with their init */
        char cmd[] = "pgrep -f 'sleep 100[2]' >/dev/null";
        int gone = 0;
        for (int i = 0; i < 200 && !gone; i++) {
                gone = system(cmd) != 0;
                if (!gone)
                        usleep(10000);
        }
        ck_assert_msg(gone, "a sandbox process outlived its init");
}
END_TEST

/* A process gone or a zombie. */
static bool process_gone(pid_t pid)
{
        char p[64], st[256];
        snprintf(p, sizeof(p), "/proc/%d/stat", (int)pid);
        FILE *f = fopen(p, "r");
        if (!f)
                return true;
        size_t n = fread(st, 1, sizeof(st) - 1, f);
        fclose(f);
        st[n] = '\0';
        const char *paren = strrchr(st, ')');
        return !paren || paren[1] == '\0' || paren[2] == 'Z' || paren[2] == 'X';
}

/* die_with_parent outlives the agent's change of credentials: the sandbox of
 * a process that dies goes with it. */
START_TEST(dies_with_its_parent)
{
        char run2[90], sock2[108];
        snprintf(run2, sizeof(run2), "%s/run2", dir);
        snprintf(sock2, sizeof(sock2), "%s/agent.sock", run2);
        int pfd[2];
        must(pipe(pfd), "pipe");
        pid_t parent = fork();
        ck_assert_int_ge(parent, 0);
        if (parent == 0) {
                close(pfd[0]);
                pid_t pid = 0;
                start_jail(run2, sock2, true, &pid);
                /* the agent answers: it has entered the sandbox */
                sp_test_agent *a = sp_test_agent_connect(sock2, 5000);
                sp_test_agent_close(a);
                (void)!write(pfd[1], &pid, sizeof(pid));
                _exit(0);
        }
        close(pfd[1]);
        pid_t jail = 0;
        ssize_t n = read(pfd[0], &jail, sizeof(jail));
        close(pfd[0]);
        int status = 0;
        ck_assert_int_eq(waitpid(parent, &status, 0), parent);
        ck_assert_msg(n == sizeof(jail) && jail > 0, "the parent did not start its jail (status %d)", status);
        bool gone = false;
        for (int i = 0; i < 500 && !(gone = process_gone(jail)); i++)
                usleep(10000);
        if (!gone)
                kill(jail, SIGKILL);
        ck_assert_msg(gone, "the sandbox's init outlived the process that started it with die_with_parent");
}
END_TEST

int main(void)
{
        sp_test_require_root("namespaces, idmapped mounts");
        Suite *s = suite_create("jail");
        TCase *tc = tcase_create("jail");
        tcase_set_timeout(tc, 60);
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, agent_is_pid1_as_sandbox_root);
        tcase_add_test(tc, root_inside_cannot_touch_the_host);
        tcase_add_test(tc, system_calls_are_refused);
        tcase_add_test(tc, root_inside_owns_its_host_name);
        tcase_add_test(tc, killing_init_ends_everything);
        tcase_add_test(tc, dies_with_its_parent);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
