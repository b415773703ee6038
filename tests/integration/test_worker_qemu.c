/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The qemu backend run for real (needs root, QEMU and the guest kernel that
 * scripts/vm-kernel installs; KVM when a probe guest answers, else TCG): a
 * sandbox is a VM with its own kernel whose agent answers over the virtio
 * serial port, QEMU runs unprivileged, confined and in the box's cgroup,
 * pause stops the guest, a lost connection is taken up again (the port
 * resynchronises), a restarted worker adopts the VM, suspend keeps memory and
 * disk (processes go on after the restore), and destroy leaves nothing
 * running.
 *
 * One VM is booted for the whole suite (booting takes seconds under TCG)
 * and the checks run against it in order.
 */
#include <errno.h>
#include <glob.h>
#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "backend/agent_link.h"
#include "backend/backend.h"
#include "backend/qmp.h"
#include "guard.h"
#include "harness.h"
#include "session/session.h"
#include "space/agent_proto.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"

static char *dir;
static char kernel_dir[512];
static struct event_base *base;
static wk_backend *backend;
static wk_box *box;
static char rootfs[600], runtime[600], qmp_path[700];
static int sessions;

static void must(int r, const char *what)
{
        ck_assert_msg(r == 0, "%s: %s", what, strerror(errno));
}

/* A tiny root filesystem: static busybox and its applets, /etc files. */
static void make_rootfs(void)
{
        char p[1024];
        snprintf(rootfs, sizeof(rootfs), "%s/sbx/rootfs", dir);
        const char *dirs[] = {"/sbx", "/sbx/rootfs", "/sbx/rootfs/bin", "/sbx/rootfs/etc", "/sbx/rootfs/root"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(dirs); i++) {
                snprintf(p, sizeof(p), "%s%s", dir, dirs[i]);
                must(mkdir(p, 0755), p);
        }
        snprintf(p, sizeof(p), "cp /bin/busybox %s/bin/busybox", rootfs);
        must(system(p), "copy busybox");
        snprintf(p, sizeof(p),
                 "cd %s/bin && for a in $(./busybox --list); do [ $a = busybox ] || ln -sf busybox $a; done", rootfs);
        must(system(p), "busybox applets");
        snprintf(p, sizeof(p), "%s/etc/passwd", rootfs);
        FILE *f = fopen(p, "w");
        fputs("root:x:0:0:root:/root:/bin/sh\n", f);
        fclose(f);
        snprintf(p, sizeof(p), "%s/etc/group", rootfs);
        f = fopen(p, "w");
        fputs("root:x:0:\n", f);
        fclose(f);
}

static wk_box_spec spec(void)
{
        snprintf(runtime, sizeof(runtime), "%s/run", dir);
        return (wk_box_spec){
                .id = "qemutest",
                .rootfs = rootfs,
                .runtime_dir = runtime,
                .hostname = "vm-test",
                .cpu_millis = 1000,
                .memory_bytes = 192 << 20,
                .disk_bytes = 64 << 20,
                .id_slot = 3,
        };
}

static void spin(int ms)
{
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
}

/* Frees a link and lets the loop run: libevent closes a bufferevent's socket
 * in a finaliser on the loop, and until then QEMU's port still serves it. */
static void link_close(wk_agent_link *l)
{
        wk_agent_link_free(l);
        spin(20);
}

static wk_agent_link *connect_agent(void)
{
        int fd = -1;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(backend->ops->agent_connect(box, &fd, &e) == 0, "agent: %s", e ? e->message : "?");
        wk_agent_link *l = wk_agent_link_new_greeted(base, fd, NULL, NULL, &e);
        ck_assert_msg(l, "link: %s", e ? e->message : "?");
        return l;
}

/* Appends everything s's log holds to out. */
static void read_output(wk_session *s, sp_buf *out)
{
        char buf[65536];
        for (uint64_t off = 0; off < wk_session_output_end(s);) {
                uint8_t st;
                size_t n;
                ck_assert_int_eq(wk_session_read(s, off, buf, sizeof(buf), &st, &n, NULL), 0);
                sp_buf_append(out, buf, n, NULL);
                off += n;
        }
}

/* Runs script in the VM over l and returns its output (stdout and stderr). */
static char *run(wk_agent_link *l, const char *script, int *ret_code)
{
        char sdir[700], id[32];
        snprintf(id, sizeof(id), "ses_%d", ++sessions);
        snprintf(sdir, sizeof(sdir), "%s/%s", dir, id);
        json_object *req = json_object_new_object();
        json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        json_object_array_add(argv, json_object_new_string(script));
        json_object_object_add(req, "argv", argv);
        wk_session *s;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(wk_session_start(l, sdir, id, "qemutest", req, 1 << 20, NULL, &s, &e) == 0, "exec: %s",
                      e ? e->message : "?");
        json_object_put(req);
        for (int i = 0; i < 600 && !wk_session_output_complete(s); i++)
                spin(100);
        ck_assert_msg(wk_session_output_complete(s), "%s did not finish", script);
        sp_buf out = SP_BUF_INIT;
        read_output(s, &out);
        sp_buf_append(&out, "", 1, NULL);
        if (ret_code)
                *ret_code = wk_session_get_state(s) == WK_SESSION_EXITED ? wk_session_get_exit(s)->code : -1;
        wk_session_remove(s, NULL);
        return out.data;
}

static void qmp_status(char *buf, size_t n)
{
        _cleanup_qmp_ wk_qmp *q = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(wk_qmp_connect(qmp_path, 10000, &q, &e) == 0, "qmp: %s", e ? e->message : "?");
        ck_assert_msg(wk_qmp_status(q, 10000, buf, n, &e) == 0, "query-status: %s", e ? e->message : "?");
}

static pid_t qemu_pid(void)
{
        _cleanup_json_ json_object *o = backend->ops->save(box);
        int64_t pid = 0;
        sp_json_get_int(o, "pid", true, 1, INT32_MAX, &pid, NULL);
        return (pid_t)pid;
}

/* Whether pid has ended: gone, or a zombie (dead; QEMU is not our child, and the host's init reaps
 * it when it will). */
static bool ended(pid_t pid)
{
        char path[64], buf[512];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        if (!f || !fgets(buf, sizeof(buf), f))
                return true;
        char *p = strrchr(buf, ')');
        return p && (p[2] == 'Z' || p[2] == 'X');
}

/* "Name:\tvalue" of /proc/PID/status, or "". */
static void proc_status(pid_t pid, const char *name, char *out, size_t n)
{
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        out[0] = '\0';
        size_t len = strlen(name);
        while (f && fgets(line, sizeof(line), f))
                if (strncmp(line, name, len) == 0 && line[len] == ':') {
                        char *v = line + len + 1;
                        v += strspn(v, " \t");
                        v[strcspn(v, "\n")] = '\0';
                        snprintf(out, n, "%s", v);
                }
}

START_TEST(a_vm_answers_with_its_own_kernel)
{
        wk_agent_link *l = connect_agent();
        int code = -1;
        _cleanup_free_ char *out = run(l, "echo hello from $(hostname); uname -r; cat /proc/1/cmdline; echo", &code);
        ck_assert_int_eq(code, 0);
        struct utsname u;
        uname(&u);
        char kver[600];
        snprintf(kver, sizeof(kver), "%s/version", kernel_dir);
        FILE *f = fopen(kver, "r");
        ck_assert(f && fgets(kver, sizeof(kver), f));
        fclose(f);
        kver[strcspn(kver, "\n")] = '\0';
        ck_assert_msg(strstr(out, "hello from vm-test\n"), "%s", out);
        ck_assert_msg(strstr(out, kver), "the guest runs kernel %s: %s", kver, out);
        ck_assert_msg(strcmp(kver, u.release) != 0 || getenv("SPACE_TEST_SAME_KERNEL"),
                      "the host runs the guest's kernel too: this proves nothing");
        ck_assert_msg(strstr(out, "/init"), "the agent is not the VM's init: %s", out);
        /* A failing command's status comes back. */
        free(run(l, "exit 7", &code));
        ck_assert_int_eq(code, 7);
        link_close(l);
}
END_TEST

START_TEST(qemu_runs_unprivileged_confined_and_in_its_cgroup)
{
        pid_t pid = qemu_pid();
        ck_assert_int_gt(pid, 0);
        char v[256];
        proc_status(pid, "Uid", v, sizeof(v));
        ck_assert_msg(strncmp(v, "0\t", 2) != 0 && v[0], "QEMU runs as uid %s", v);
        proc_status(pid, "Seccomp", v, sizeof(v));
        ck_assert_msg(strcmp(v, "2") == 0, "QEMU has no seccomp filter (Seccomp: %s)", v);
        proc_status(pid, "CapEff", v, sizeof(v));
        ck_assert_msg(strcmp(v, "0000000000000000") == 0, "QEMU holds capabilities %s", v);
        proc_status(pid, "Groups", v, sizeof(v));
        ck_assert_msg(v[0] == '\0' || strspn(v, "0123456789 ") == strlen(v), "groups %s", v);
        char path[64], cg[1024] = "";
        snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
        FILE *f = fopen(path, "r");
        ck_assert(f);
        size_t n = fread(cg, 1, sizeof(cg) - 1, f);
        cg[n] = '\0';
        fclose(f);
        ck_assert_msg(strstr(cg, "space-test-qemu/qemutest"), "QEMU is not in the box's cgroup: %s", cg);
        /* A network namespace of its own, with nothing in it: a process that took QEMU over reaches no
         * network (its devices are descriptors it was handed). */
        char ns[64], mine[64] = "", its[64] = "";
        snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)pid);
        ck_assert_int_gt(readlink(ns, its, sizeof(its) - 1), 0);
        ck_assert_int_gt(readlink("/proc/self/ns/net", mine, sizeof(mine) - 1), 0);
        ck_assert_msg(strcmp(its, mine) != 0, "QEMU is in the worker's network namespace (%s)", its);
        snprintf(ns, sizeof(ns), "/proc/%d/net/dev", (int)pid);
        _cleanup_buf_ sp_buf dev = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(ns, 65536, &dev, NULL), 0);
        sp_buf_append(&dev, "", 1, NULL);
        /* a header of two lines, then lo's line alone */
        const char *lines = strchr(strchr(dev.data, '\n') + 1, '\n') + 1;
        ck_assert_msg(strstr(lines, "lo:") && !strchr(strchr(lines, '\n') + 1, ':'), "QEMU's interfaces: %s", dev.data);
        /* A mount namespace of its own whose root holds what QEMU runs from and nothing of the host's
         * besides, read-only, with a /proc that shows only its uid's processes and no other file. */
        snprintf(ns, sizeof(ns), "/proc/%d/ns/mnt", (int)pid);
        char mnt_its[64] = "", mnt_mine[64] = "";
        ck_assert_int_gt(readlink(ns, mnt_its, sizeof(mnt_its) - 1), 0);
        ck_assert_int_gt(readlink("/proc/self/ns/mnt", mnt_mine, sizeof(mnt_mine) - 1), 0);
        ck_assert_msg(strcmp(mnt_its, mnt_mine) != 0, "QEMU is in the worker's mount namespace (%s)", mnt_its);
        static const char *const absent[] = {"etc", "home", "root", "tmp", "var", "run", "sys", "srv", "opt"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(absent); i++) {
                char p[96];
                snprintf(p, sizeof(p), "/proc/%d/root/%s", (int)pid, absent[i]);
                ck_assert_msg(access(p, F_OK) < 0, "QEMU sees the host's /%s", absent[i]);
        }
        char p[96];
        snprintf(p, sizeof(p), "/proc/%d/root/usr/bin", (int)pid);
        ck_assert_msg(access(p, F_OK) == 0, "QEMU's root has no /usr/bin");
        snprintf(p, sizeof(p), "/proc/%d/mountinfo", (int)pid);
        _cleanup_buf_ sp_buf mi = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(p, 1 << 20, &mi, NULL), 0);
        sp_buf_append(&mi, "", 1, NULL);
        ck_assert_msg(strstr(mi.data, " / / ro,") && strstr(mi.data, "hidepid=invisible") &&
                              strstr(mi.data, "subset=pid"),
                      "QEMU's mounts: %s", mi.data);
        /* A write error of its disk is reported to the guest, never a pause that looks like a running VM. */
        snprintf(p, sizeof(p), "/proc/%d/cmdline", (int)pid);
        _cleanup_buf_ sp_buf cmd = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(p, 1 << 20, &cmd, NULL), 0);
        ck_assert_msg(memmem(cmd.data, cmd.len, "werror=report,rerror=report", 27),
                      "QEMU would pause on a write error");
        /* Nothing of the worker's in its reach: the runtime directory is root's. */
        struct stat st;
        ck_assert_int_eq(stat(runtime, &st), 0);
        ck_assert_int_eq(st.st_uid, 0);
        ck_assert_int_eq(st.st_mode & 077, 0);
}
END_TEST

START_TEST(pause_stops_the_guest_and_resume_continues_it)
{
        char status[32];
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(backend->ops->pause(box, &e) == 0, "pause: %s", e ? e->message : "?");
        qmp_status(status, sizeof(status));
        ck_assert_str_eq(status, "paused");
        ck_assert_msg(backend->ops->resume(box, &e) == 0, "resume: %s", e ? e->message : "?");
        qmp_status(status, sizeof(status));
        ck_assert_str_eq(status, "running");
        wk_agent_link *l = connect_agent();
        _cleanup_free_ char *out = run(l, "echo after resume", NULL);
        ck_assert_str_eq(out, "after resume\n");
        link_close(l);
}
END_TEST

/* The worker loses its connection in the middle of a command's output; the
 * next connection resynchronises the port and the command's output is whole. */
START_TEST(a_new_connection_resynchronises_the_port)
{
        for (int round = 0; round < 3; round++) {
                wk_agent_link *l = connect_agent();
                char sdir[700], id[32];
                snprintf(id, sizeof(id), "ses_cut_%d", round);
                snprintf(sdir, sizeof(sdir), "%s/%s", dir, id);
                json_object *req = json_object_new_object();
                json_object *argv = json_object_new_array();
                json_object_array_add(argv, json_object_new_string("sh"));
                json_object_array_add(argv, json_object_new_string("-c"));
                json_object_array_add(
                        argv, json_object_new_string("i=0; while [ $i -lt 20000 ]; do echo line $i; i=$((i+1)); done"));
                json_object_object_add(req, "argv", argv);
                wk_session *s;
                ck_assert_int_eq(wk_session_start(l, sdir, id, "qemutest", req, 64 << 20, NULL, &s, NULL), 0);
                json_object_put(req);
                spin(300 + 200 * round);
                link_close(l);
                wk_session_free(s);

                l = connect_agent();
                ck_assert_int_eq(wk_session_load(sdir, 64 << 20, NULL, &s, NULL), 0);
                ck_assert_int_eq(wk_session_attach_agent(s, l, NULL), 0);
                for (int i = 0; i < 600 && !wk_session_output_complete(s); i++)
                        spin(100);
                ck_assert(wk_session_output_complete(s));
                sp_buf got = SP_BUF_INIT, want = SP_BUF_INIT;
                read_output(s, &got);
                for (int i = 0; i < 20000; i++)
                        sp_buf_appendf(&want, NULL, "line %d\n", i);
                ck_assert_uint_eq(got.len, want.len);
                ck_assert(memcmp(got.data, want.data, want.len) == 0);
                sp_buf_free(&got);
                sp_buf_free(&want);
                wk_session_remove(s, NULL);
                link_close(l);
        }
}
END_TEST

/* A connection that ends right after its magic, before reading the agent's
 * greeting, does not disturb the next one: the backend's connection takes the
 * agent as connected only once it answered a ping of that connection, and a
 * command runs on it. */
START_TEST(an_abandoned_connection_leaves_the_next_one_whole)
{
        for (int round = 0; round < 3; round++) {
                const char *path = backend->ops->agent_socket(box);
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
                int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                ck_assert_int_ge(fd, 0);
                ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
                ck_assert_int_eq(write(fd, PR_AGENT_SYNC_MAGIC, PR_AGENT_SYNC_LEN), PR_AGENT_SYNC_LEN);
                /* The agent greets in answer; nobody reads it. */
                usleep(100000 * (round + 1));
                close(fd);
                spin(20);
                wk_agent_link *l = connect_agent();
                _cleanup_free_ char *out = run(l, "echo fresh", NULL);
                ck_assert_str_eq(out, "fresh\n");
                link_close(l);
        }
}
END_TEST

/* Bytes that outsiders choose (a command's stdin here; an upload or a port's
 * traffic alike) that hold the port's magic followed by frames are data: they
 * arrive byte-exact and start nothing. The agent looks for a magic only where
 * a frame would start. */
START_TEST(a_magic_in_a_payload_is_only_data)
{
        wk_agent_link *l = connect_agent();
        /* The payload: a prefix, the magic, a HELLO and an OPEN exec frame that would touch /root/injected. */
        sp_buf payload = SP_BUF_INIT;
        sp_buf_append_str(&payload, "innocent prefix\n", NULL);
        sp_buf_append(&payload, PR_AGENT_SYNC_MAGIC, PR_AGENT_SYNC_LEN, NULL);
        const char *hello = "{\"version\":1,\"worker\":\"x\"}";
        pr_agent_frame_append(&payload, PR_AGENT_HELLO, 0, 0, hello, strlen(hello), NULL);
        const char *op = "{\"op\":\"exec\",\"session\":\"inj\",\"argv\":[\"/bin/sh\",\"-c\",\"touch /root/injected\"]}";
        pr_agent_frame_append(&payload, PR_AGENT_OPEN, 0, 7777, op, strlen(op), NULL);
        sp_buf_append_str(&payload, "suffix\n", NULL);

        json_object *req = json_object_new_object();
        json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        json_object_array_add(argv, json_object_new_string("cat > /root/got; sync"));
        json_object_object_add(req, "argv", argv);
        json_object_object_add(req, "stdin", json_object_new_boolean(true));
        char sdir[700];
        snprintf(sdir, sizeof(sdir), "%s/ses_stdin", dir);
        wk_session *s;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(wk_session_start(l, sdir, "ses_stdin", "qemutest", req, 1 << 20, NULL, &s, &e) == 0, "exec: %s",
                      e ? e->message : "?");
        json_object_put(req);
        size_t sent = 0;
        for (int i = 0; i < 300 && sent < payload.len; i++) {
                spin(20);
                sent += wk_session_write_stdin(s, payload.data + sent, payload.len - sent);
        }
        ck_assert_uint_eq(sent, payload.len);
        for (int i = 0; i < 50 && wk_session_close_stdin(s, NULL) < 0; i++)
                spin(20);
        for (int i = 0; i < 600 && !wk_session_output_complete(s); i++)
                spin(100);
        ck_assert(wk_session_output_complete(s));
        ck_assert_int_eq(wk_session_get_exit(s)->code, 0);
        wk_session_remove(s, NULL);
        /* The same link still works, the bytes arrived whole, and nothing ran. */
        _cleanup_free_ char *out =
                run(l, "od -An -tx1 /root/got | tr -d ' \\n'; echo; ls /root/injected 2>&1 | grep -c 'No such'", NULL);
        _cleanup_buf_ sp_buf want = SP_BUF_INIT;
        for (size_t i = 0; i < payload.len; i++)
                sp_buf_appendf(&want, NULL, "%02x", (uint8_t)payload.data[i]);
        sp_buf_append_str(&want, "\n1\n", NULL);
        ck_assert_str_eq(out, want.data);
        sp_buf_free(&payload);
        link_close(l);
}
END_TEST

/* A restarted worker: the box is forgotten and adopted from what save() wrote. */
START_TEST(a_restarted_worker_adopts_the_vm)
{
        _cleanup_json_ json_object *saved = backend->ops->save(box);
        pid_t pid = qemu_pid();
        backend->ops->forget(box);
        box = NULL;
        wk_box_spec sp = spec();
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(backend->ops->adopt(backend, &sp, saved, &box, &e) == 0, "adopt: %s", e ? e->message : "?");
        ck_assert(backend->ops->alive(box));
        ck_assert_int_eq(qemu_pid(), pid);
        wk_agent_link *l = connect_agent();
        _cleanup_free_ char *out = run(l, "echo adopted", NULL);
        ck_assert_str_eq(out, "adopted\n");
        link_close(l);
}
END_TEST

/* Suspend saves memory and devices with the disk: a process started before
 * goes on counting after the restore, its /dev/shm intact, and a file written
 * without sync is there. */
START_TEST(suspend_keeps_memory_and_restore_resumes_it)
{
        wk_agent_link *l = connect_agent();
        _cleanup_free_ char *pid = run(l,
                                       "(i=0; while true; do i=$((i+1)); echo $i > /dev/shm/count; sleep 0.05; done) "
                                       ">/dev/null 2>&1 & echo $!; echo unsynced > /root/file",
                                       NULL);
        spin(1000);
        _cleanup_free_ char *c1 = run(l, "cat /dev/shm/count", NULL);
        link_close(l);
        pid_t qpid = qemu_pid();
        wk_suspend_info info;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(backend->ops->suspend(box, true, &info, &e) == 0, "suspend: %s", e ? e->message : "?");
        ck_assert(info.filesystem);
        ck_assert_msg(info.memory, "the suspend kept no memory");
        ck_assert(!backend->ops->alive(box));
        ck_assert(ended(qpid));
        char state[700];
        snprintf(state, sizeof(state), "%s/sbx/memory.state", dir);
        struct stat st;
        ck_assert_int_eq(stat(state, &st), 0);
        ck_assert_int_eq(st.st_uid, 0);
        ck_assert_int_eq(st.st_mode & 077, 0);
        wk_restore_info lost;
        ck_assert_msg(backend->ops->restore(box, &lost, &e) == 0, "restore: %s", e ? e->message : "?");
        ck_assert_str_eq(lost.why, "");
        ck_assert(backend->ops->alive(box));
        ck_assert_int_lt(access(state, F_OK), 0); /* spent: the disk goes on from here */
        l = connect_agent();
        char script[256];
        pid[strcspn(pid, "\n")] = '\0';
        snprintf(script, sizeof(script), "kill -0 %s && echo alive; cat /root/file; sleep 0.5; cat /dev/shm/count",
                 pid);
        _cleanup_free_ char *o2 = run(l, script, NULL);
        long before = strtol(c1, NULL, 10), after = 0;
        ck_assert_msg(strncmp(o2, "alive\nunsynced\n", 15) == 0, "after the restore: %s", o2);
        after = strtol(o2 + 15, NULL, 10);
        ck_assert_msg(after > before, "the counter went from %ld to %ld (%s)", before, after, o2);
        link_close(l);
}
END_TEST

START_TEST(destroy_leaves_nothing_running)
{
        pid_t pid = qemu_pid();
        ck_assert_int_gt(pid, 0);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(backend->ops->destroy(box, &e) == 0, "destroy: %s", e ? e->message : "?");
        box = NULL;
        ck_assert(ended(pid));
        char p[700];
        snprintf(p, sizeof(p), "%s/agent.sock", runtime);
        ck_assert_int_lt(access(p, F_OK), 0);
        snprintf(p, sizeof(p), "%s/sbx/disk.ext4", dir);
        ck_assert_int_lt(access(p, F_OK), 0);
}
END_TEST

static void suite_setup(void)
{
        base = event_base_new();
        dir = sp_test_tmpdir("qemu");
        make_rootfs();
        char agent[600], vmstate[600];
        snprintf(agent, sizeof(agent), "%s/bin/space-agent", sp_test_binary_dir());
        snprintf(vmstate, sizeof(vmstate), "%s/vm", dir);
        wk_backend_config cfg = {.agent_path = agent,
                                 .cgroup_parent = "space-test-qemu",
                                 .uid_base = 0x30000000,
                                 .uid_count = 65536,
                                 .vm_kernel_dir = kernel_dir,
                                 .vm_state_dir = vmstate,
                                 .accel = "auto",
                                 .die_with_parent = true};
        _cleanup_error_ sp_error *e = NULL;
        if (wk_backend_qemu_new(&cfg, &backend, &e) < 0) {
                fprintf(stderr, "qemu backend: %s\n", e->message);
                abort();
        }
        fprintf(stderr, "accelerator: %s\n", backend->ops->accel(backend));
        wk_box_spec sp = spec();
        snprintf(qmp_path, sizeof(qmp_path), "%s/qmp.sock", runtime);
        if (mkdir(runtime, 0700) < 0 || backend->ops->create(backend, &sp, &box, &e) < 0) {
                fprintf(stderr, "create: %s\n", e ? e->message : strerror(errno));
                abort();
        }
        sp_test_guard_kill(qemu_pid(), NULL);
}

static void suite_teardown(void)
{
        if (box)
                backend->ops->destroy(box, NULL);
        box = NULL;
        if (backend)
                backend->ops->free(backend);
        /* Every hierarchy's (cgroup v2's, and each v1 controller's on a hybrid host). */
        glob_t g;
        if (glob("/sys/fs/cgroup/*/space-test-qemu", GLOB_ONLYDIR, NULL, &g) == 0) {
                for (size_t i = 0; i < g.gl_pathc; i++)
                        rmdir(g.gl_pathv[i]);
                globfree(&g);
        }
        rmdir("/sys/fs/cgroup/space-test-qemu");
        sp_test_tmpdir_remove(dir);
        free(dir);
        event_base_free(base);
}

int main(void)
{
        sp_test_require_root("cgroups, a QEMU run as another user");
        sp_test_require_program("qemu-system-x86_64", "the qemu backend (Debian: qemu-system-x86)");
        sp_test_require_program("mkfs.ext4", "the VM's disk (Debian: e2fsprogs)");
        const char *kd = getenv("SPACE_VM_KERNEL_DIR");
        snprintf(kernel_dir, sizeof(kernel_dir), "%s", kd && *kd ? kd : "/var/lib/space/vm-kernel");
        char probe[600];
        snprintf(probe, sizeof(probe), "%s/vmlinuz", kernel_dir);
        if (access(probe, R_OK) < 0)
                sp_test_skip("no guest kernel at %s (scripts/vm-kernel installs it)", kernel_dir);
        Suite *s = suite_create("qemu");
        TCase *tc = tcase_create("qemu");
        /* One VM for every test, in order: no fork per test. */
        tcase_set_timeout(tc, 600);
        tcase_add_unchecked_fixture(tc, suite_setup, suite_teardown);
        tcase_add_test(tc, a_vm_answers_with_its_own_kernel);
        tcase_add_test(tc, qemu_runs_unprivileged_confined_and_in_its_cgroup);
        tcase_add_test(tc, pause_stops_the_guest_and_resume_continues_it);
        tcase_add_test(tc, a_new_connection_resynchronises_the_port);
        tcase_add_test(tc, a_magic_in_a_payload_is_only_data);
        tcase_add_test(tc, an_abandoned_connection_leaves_the_next_one_whole);
        tcase_add_test(tc, a_restarted_worker_adopts_the_vm);
        tcase_add_test(tc, suspend_keeps_memory_and_restore_resumes_it);
        tcase_add_test(tc, destroy_leaves_nothing_running);
        suite_add_tcase(s, tc);
        SRunner *sr = srunner_create(s);
        srunner_set_fork_status(sr, CK_NOFORK);
        srunner_run_all(sr, CK_NORMAL);
        int failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}
