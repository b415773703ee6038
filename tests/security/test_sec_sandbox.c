/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Root inside a sandbox against what encloses it, on a real cluster (a
 * control plane with PostgreSQL and a joined worker, so the worker holds a
 * live connection to the control plane as it does in production). Each
 * check replays an attack of the security review (docs/threat-model.md):
 *
 *   - descriptors: every daemon's descriptors are close-on-exec; a sandbox's
 *     processes hold only their own (no control-plane connection to reconnect
 *     elsewhere, no host pipe), and the agent holds no host TCP socket;
 *   - the agent (PID 1) cannot be ptraced, read through /proc, or robbed of
 *     its descriptors with pidfd_getfd, and its binary cannot be replaced;
 *   - every system call the seccomp filter denies is refused (the probe lists
 *     them again on its own), and so are address families like AF_VSOCK;
 *   - open files per process are limited, and root inside cannot raise that;
 *   - file transfers to or from a FIFO are refused at once instead of hanging
 *     the agent, and a FIFO planted at an upload's temporary name is replaced;
 *   - /etc/passwd made a FIFO, or /proc mounted over with FIFOs for stat
 *     files, does not hang the agent (it looks users up and kills process
 *     trees through them), and SIGTERM from the sandbox's root does not end it;
 *   - file operations as a user whose uid the sandbox does not map (root
 *     inside adds it to /etc/passwd) are refused, naming the user, instead of
 *     running as root.
 *
 * The probes run again on sandboxes suspended and woken (tcase "restored": a
 * jail checkpointed and restored with CRIU, which workers do with --criu), and
 * a restore gains nothing the probes see: the same mounts with the same
 * options, the same capabilities, seccomp and no_new_privs of a command, the
 * agent's namespaces all but the network and pid ones the sandbox's own
 * again, and its mounts locked as a start's are (CRIU builds the mount tree
 * as host root and copies it into the sandbox's user namespace:
 * scripts/criu.d/0005-enter-userns.patch).
 *
 * Commands run through the sandbox's agent socket on the worker (as the
 * worker does); the static space-probe (tests/security/probe) is copied into
 * the sandbox through /proc/PID/root. Needs root and PostgreSQL.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/nsfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_client.h"
#include "harness.h"
#include "space/agent_proto.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space_cluster.h"

static sp_test_space S;
static char tenant_key[256];
static bool restored; /* tcase "restored": each sandbox is suspended and woken before use */

static void cluster_up(void)
{
        static const char *const args[] = {"--criu=auto", NULL};
        sp_test_space_opts o = {.workers = 1, .worker_args = restored ? args : NULL};
        sp_test_space_up(&S, &o);
        sp_test_new_tenant(&S, "sec", tenant_key);
}

static void cluster_up_restored(void)
{
        restored = true;
        cluster_up();
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

/* Suspends and wakes sandbox id; the suspend must have kept its processes. */
static void suspend_and_wake(const char *id)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/suspend", id);
        _cleanup_json_ json_object *r = sp_test_api(&S, tenant_key, "POST", path, 202, NULL, NULL);
        _cleanup_json_ json_object *op = sp_test_wait_op(&S, tenant_key, sp_test_jstr(r, "operation.id"), true);
        const char *mem = sp_test_jstr(op, "result.suspend.memory");
        ck_assert_msg(mem && strcmp(mem, "true") == 0, "the suspend kept no processes: %s",
                      json_object_to_json_string(op));
        char state[32];
        sp_test_sandbox_action(&S, tenant_key, id, "wake", state);
        ck_assert_str_eq(state, "running");
}

/* A sandbox of the base template with the probe in /bin, and where the
 * worker keeps it: its agent socket and its init's host pid. */
typedef struct {
        char id[64];
        char sock[1600];
        int pid;
} sandbox;

static void sandbox_find(sandbox *sb);

static void sandbox_new(sandbox *sb)
{
        sp_test_create_sandbox(&S, tenant_key, "{\"template\":\"base\"}", sb->id);
        if (restored)
                suspend_and_wake(sb->id);
        sandbox_find(sb);
}

/* Where the worker keeps sandbox sb->id: its agent socket, its init's pid (again after a restore). */
static void sandbox_find(sandbox *sb)
{
        char dir[1024];
        snprintf(dir, sizeof(dir), "%s/w0/state/sandboxes", S.dir);
        _cleanup_closedir_ DIR *d = opendir(dir);
        ck_assert_ptr_nonnull(d);
        sb->pid = 0;
        for (struct dirent *de; (de = readdir(d)) && !sb->pid;) {
                if (de->d_name[0] == '.')
                        continue;
                char p[1400];
                snprintf(p, sizeof(p), "%s/%s/sandbox.json", dir, de->d_name);
                _cleanup_json_ json_object *o = json_object_from_file(p);
                json_object *id, *box, *pid;
                if (!o || !json_object_object_get_ex(o, "id", &id) || strcmp(json_object_get_string(id), sb->id) != 0 ||
                    !json_object_object_get_ex(o, "box", &box) || !json_object_object_get_ex(box, "pid", &pid))
                        continue;
                sb->pid = json_object_get_int(pid);
                snprintf(sb->sock, sizeof(sb->sock), "%s/%s/run/agent.sock", dir, de->d_name);
        }
        ck_assert_msg(sb->pid > 0, "sandbox %s not found in the worker's state", sb->id);
        /* The probe goes in as the worker's file writes do (the root filesystem
         * is an idmapped mount that host root cannot create files in). */
        char probe[1024];
        snprintf(probe, sizeof(probe), "%s/tests/space-probe", sp_test_binary_dir());
        _cleanup_close_ int fd = open(probe, O_RDONLY | O_CLOEXEC);
        ck_assert_int_ge(fd, 0);
        sp_test_agent *a = sp_test_agent_connect(sb->sock, 5000);
        sp_test_agent_open(a, 1, "{\"op\":\"write\",\"path\":\"/bin/space-probe\",\"mode\":493}");
        sp_test_frame f = sp_test_agent_next(a);
        ck_assert_int_eq(f.type, PR_AGENT_WINDOW);
        sp_buf_free(&f.payload);
        static char chunk[65536];
        for (ssize_t n; (n = read(fd, chunk, sizeof(chunk))) > 0;)
                sp_test_agent_send(a, PR_AGENT_DATA, PR_STREAM_FILE, 1, chunk, (size_t)n);
        sp_test_agent_send(a, PR_AGENT_EOF, PR_STREAM_FILE, 1, NULL, 0);
        for (;;) {
                f = sp_test_agent_next(a);
                uint8_t t = f.type;
                sp_buf_free(&f.payload);
                if (t == PR_AGENT_EXIT)
                        break;
        }
        sp_test_agent_close(a);
}

static void sandbox_delete(const sandbox *sb)
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", sb->id);
        json_object *op = sp_test_api(&S, tenant_key, "DELETE", path, 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, tenant_key, sp_test_jstr(op, "operation.id"), true));
        json_object_put(op);
}

/* Runs argv (JSON) in the sandbox and returns its stdout; asserts exit 0. */
static char *run(const sandbox *sb, uint32_t channel, const char *argv_json)
{
        sp_test_agent *a = sp_test_agent_connect(sb->sock, 5000);
        sp_test_result r;
        sp_test_agent_exec(a, channel, argv_json, &r);
        ck_assert_msg(sp_test_result_int(&r, "code") == 0, "%s failed: %.*s", argv_json, (int)r.err.len, r.err.data);
        char *out = strndup(r.out.data ? r.out.data : "", r.out.len);
        sp_test_result_free(&r);
        sp_test_agent_close(a);
        return out;
}

/* Checks every "<name> ok|denied ERRNO" line of a probe's output with
 * verdict(), which returns NULL when the line is as it must be, or why not. */
static int check_lines(char *out, const char *(*verdict)(const char *name, const char *result, const char *err))
{
        int lines = 0;
        char *save = NULL;
        for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char name[64], result[16], err[32] = "";
                ck_assert_int_ge(sscanf(line, "%63s %15s %31s", name, result, err), 2);
                const char *why = verdict(name, result, err);
                ck_assert_msg(!why, "%s: %s %s (%s)", name, result, err, why);
                lines++;
        }
        return lines;
}

/* ---- descriptors ---- */

/* Every descriptor above 2 of process pid is close-on-exec; the offenders
 * otherwise, with what they are. */
static void assert_all_cloexec(const char *who, int pid)
{
        char dir[64];
        snprintf(dir, sizeof(dir), "/proc/%d/fdinfo", pid);
        _cleanup_closedir_ DIR *d = opendir(dir);
        ck_assert_ptr_nonnull(d);
        char bad[4096] = "";
        int seen = 0;
        for (struct dirent *de; (de = readdir(d));) {
                int fd = atoi(de->d_name);
                if (de->d_name[0] == '.' || fd <= 2)
                        continue;
                char p[128], line[256], target[256] = "?";
                snprintf(p, sizeof(p), "/proc/%d/fdinfo/%d", pid, fd);
                _cleanup_fclose_ FILE *f = fopen(p, "re");
                if (!f)
                        continue; /* closed meanwhile */
                unsigned long flags = 0;
                while (fgets(line, sizeof(line), f))
                        if (sscanf(line, "flags: %lo", &flags) == 1)
                                break;
                seen++;
                if (flags & O_CLOEXEC)
                        continue;
                snprintf(p, sizeof(p), "/proc/%d/fd/%d", pid, fd);
                ssize_t n = readlink(p, target, sizeof(target) - 1);
                if (n > 0)
                        target[n] = '\0';
                size_t len = strlen(bad);
                snprintf(bad + len, sizeof(bad) - len, " %d:%s", fd, target);
        }
        ck_assert_int_gt(seen, 0);
        ck_assert_msg(!bad[0], "%s (pid %d) has descriptors a child would inherit:%s", who, pid, bad);
}

START_TEST(daemon_descriptors_are_close_on_exec)
{
        sandbox sb;
        sandbox_new(&sb); /* the worker then also holds an agent connection */
        assert_all_cloexec("space-worker", S.workers[0].pid);
        assert_all_cloexec("space-controlplane", S.cp[0].pid);
        sandbox_delete(&sb);
}
END_TEST

/* The inodes of the host's TCP and UDP sockets (the test's network namespace
 * is the workers'), as " inode " words. */
static void host_socket_inodes(sp_buf *out)
{
        static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp", "/proc/net/udp6"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(tables); i++) {
                _cleanup_fclose_ FILE *f = fopen(tables[i], "re");
                if (!f)
                        continue;
                char line[512];
                while (fgets(line, sizeof(line), f)) {
                        unsigned long inode = 0;
                        /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
                        if (sscanf(line, "%*s %*s %*s %*s %*s %*s %*s %*s %*s %lu", &inode) == 1 && inode) {
                                char w[32];
                                snprintf(w, sizeof(w), " %lu ", inode);
                                sp_buf_append(out, w, strlen(w), NULL);
                        }
                }
        }
        sp_buf_append(out, "", 1, NULL);
}

START_TEST(sandbox_processes_hold_only_their_own_descriptors)
{
        sandbox sb;
        sandbox_new(&sb);
        /* Inside: a command sees 0, 1 and 2 and nothing else. */
        char *out = run(&sb, 11, "[\"space-probe\",\"--in-sandbox\",\"--fds\"]");
        ck_assert_msg(strstr(out, "fds checked"), "the probe did not run: %s", out);
        ck_assert_msg(!strstr(out, "inherited "), "a sandbox process inherited descriptors:\n%s", out);
        free(out);
        /* The agent itself: no host TCP or UDP socket (the worker's connection to
         * the control plane was fd 9 of every sandbox process). */
        _cleanup_(sp_buf_free) sp_buf inodes = SP_BUF_INIT;
        host_socket_inodes(&inodes);
        ck_assert_msg(inodes.len > 1, "no TCP socket on the host: the worker should hold one to the control plane");
        char dir[64];
        snprintf(dir, sizeof(dir), "/proc/%d/fd", sb.pid);
        _cleanup_closedir_ DIR *d = opendir(dir);
        ck_assert_ptr_nonnull(d);
        int n = 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (de->d_name[0] == '.')
                        continue;
                char p[400], target[256] = "";
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                ssize_t len = readlink(p, target, sizeof(target) - 1);
                if (len <= 0)
                        continue;
                target[len] = '\0';
                n++;
                unsigned long inode;
                if (sscanf(target, "socket:[%lu]", &inode) == 1) {
                        char w[32];
                        snprintf(w, sizeof(w), " %lu ", inode);
                        ck_assert_msg(!strstr(inodes.data, w), "the agent holds a host network socket as fd %s",
                                      de->d_name);
                }
                ck_assert_msg(!strstr(target, "/state/") || strstr(target, "agent-log.fifo"),
                              "the agent holds a worker file as fd %s: %s", de->d_name, target);
        }
        ck_assert_int_ge(n, 4);
        sandbox_delete(&sb);
}
END_TEST

/* ---- the agent ---- */

static const char *agent_verdict(const char *name, const char *result, const char *err)
{
        if (strcmp(result, "denied") != 0)
                return "root inside the sandbox reached the agent";
        if (strcmp(err, "EPERM") == 0 || strcmp(err, "EACCES") == 0)
                return NULL;
        if (strcmp(name, "write_agent_binary") == 0 && (strcmp(err, "EROFS") == 0 || strcmp(err, "ETXTBSY") == 0))
                return NULL;
        /* unmounting a mount the host locked answers EINVAL */
        if (strcmp(name, "umount_agent_binary") == 0 && strcmp(err, "EINVAL") == 0)
                return NULL;
        return "not refused for want of permission";
}

/* Root inside cannot unmount what the host mounted: every mount but the root is locked (EINVAL; EPERM would
 * mean the probe lacked the privilege the test is about). /dev/pts is the sandbox's own (the agent mounts it
 * from inside the sandbox's user namespace; a restore's copy locks it too). */
static const char *mount_verdict(const char *name, const char *result, const char *err)
{
        if (strcmp(name, "umount:/dev/pts") == 0)
                return NULL;
        if (strcmp(result, "denied") != 0)
                return "root inside unmounted a mount the host made";
        return strcmp(err, "EINVAL") == 0 ? NULL : "not refused as a locked mount (EINVAL)";
}

START_TEST(the_mounts_are_locked)
{
        sandbox sb;
        sandbox_new(&sb);
        char *out = run(&sb, 25, "[\"space-probe\",\"--in-sandbox\",\"--mounts\"]");
        ck_assert_msg(strstr(out, "umount:/run/space/agent denied") && strstr(out, "umount:/proc/sys denied") &&
                              strstr(out, "umount:/proc/kmsg denied"),
                      "%s", out);
        /* /dev and its nodes, /dev/shm, /proc and its masks, /sys, /run, the agent's binary */
        ck_assert_int_ge(check_lines(out, mount_verdict), 12);
        free(out);
        out = run(&sb, 26, "[\"echo\",\"alive\"]");
        ck_assert_str_eq(out, "alive\n");
        free(out);
        sandbox_delete(&sb);
}
END_TEST

START_TEST(the_agent_is_out_of_reach)
{
        sandbox sb;
        sandbox_new(&sb);
        char *out = run(&sb, 21, "[\"space-probe\",\"--in-sandbox\",\"--agent\"]");
        ck_assert_int_ge(check_lines(out, agent_verdict), 14);
        free(out);
        /* The agent is still whole: a command runs. */
        out = run(&sb, 22, "[\"echo\",\"alive\"]");
        ck_assert_str_eq(out, "alive\n");
        free(out);
        sandbox_delete(&sb);
}
END_TEST

/* ---- seccomp and address families ---- */

static const char *syscall_verdict(const char *name, const char *result, const char *err)
{
        if (strncmp(name, "allowed_", 8) == 0)
                return strcmp(result, "ok") == 0 ? NULL : "a family a sandbox needs was refused";
        if (strcmp(result, "denied") != 0)
                return "let through";
        if (strncmp(name, "af_", 3) == 0)
                return strcmp(err, "EAFNOSUPPORT") == 0 ? NULL : "not refused by the filter";
        if (strncmp(name, "netlink_", 8) == 0)
                return strcmp(err, "EPROTONOSUPPORT") == 0 ? NULL : "not refused by the filter";
        if (strcmp(name, "sys_clone3") == 0)
                return strcmp(err, "ENOSYS") == 0 ? NULL : "clone3 must fall back to clone";
        return strcmp(err, "EPERM") == 0 ? NULL : "not refused by the filter (EPERM)";
}

START_TEST(every_denied_system_call_is_refused)
{
        sandbox sb;
        sandbox_new(&sb);
        char *out = run(&sb, 31, "[\"space-probe\",\"--in-sandbox\",\"--syscalls\"]");
        /* 41 calls of the filter that exist on x86-64, 3 namespace checks, 13 families, 7 netlink
         * protocols, 5 allowed */
        ck_assert_int_ge(check_lines(out, syscall_verdict), 69);
        free(out);
        sandbox_delete(&sb);
}
END_TEST

START_TEST(open_files_are_limited)
{
        sandbox sb;
        sandbox_new(&sb);
        char *out = run(&sb, 41, "[\"space-probe\",\"--in-sandbox\",\"--limits\"]");
        unsigned long long soft = 0, hard = 0;
        char *line = strstr(out, "nofile ");
        ck_assert_msg(line && sscanf(line, "nofile %llu %llu", &soft, &hard) == 2, "%s", out);
        ck_assert_uint_le(soft, 1024);
        ck_assert_uint_le(hard, 65536);
        ck_assert_msg(strstr(out, "raise_nofile denied EPERM"), "%s", out);
        free(out);
        sandbox_delete(&sb);
}
END_TEST

/* ---- files ---- */

/* Opens a transfer and returns its first frame's type; *exit gets an EXIT's payload. */
static uint8_t open_transfer(sp_test_agent *a, uint32_t ch, const char *json, json_object **exit)
{
        sp_test_agent_open(a, ch, json);
        sp_test_frame f = sp_test_agent_next(a);
        *exit = f.type == PR_AGENT_EXIT ? json_tokener_parse(f.payload.data ? f.payload.data : "null") : NULL;
        uint8_t t = f.type;
        sp_buf_free(&f.payload);
        return t;
}

static void assert_refused(json_object *exit, const char *what)
{
        json_object *e, *msg;
        ck_assert_msg(exit && json_object_object_get_ex(exit, "error", &e) &&
                              json_object_object_get_ex(e, "message", &msg),
                      "%s: no error", what);
        ck_assert_msg(strstr(json_object_get_string(msg), "not a regular file"), "%s: %s", what,
                      json_object_get_string(msg));
}

START_TEST(special_files_never_block_the_agent)
{
        sandbox sb;
        sandbox_new(&sb);
        free(run(&sb, 51, "[\"mkfifo\",\"/tmp/fifo\"]"));
        sp_test_agent *a = sp_test_agent_connect(sb.sock, 5000);
        json_object *exit = NULL;
        /* An append opens the file itself: a FIFO would wait for a reader forever. */
        ck_assert_int_eq(open_transfer(a, 52, "{\"op\":\"write\",\"path\":\"/tmp/fifo\",\"append\":true}", &exit),
                         PR_AGENT_EXIT);
        assert_refused(exit, "append to a FIFO");
        json_object_put(exit);
        /* ... and a read would wait for a writer. */
        ck_assert_int_eq(open_transfer(a, 53, "{\"op\":\"read\",\"path\":\"/tmp/fifo\",\"window\":65536}", &exit),
                         PR_AGENT_EXIT);
        assert_refused(exit, "read of a FIFO");
        json_object_put(exit);
        ck_assert_int_eq(open_transfer(a, 54, "{\"op\":\"read\",\"path\":\"/dev/zero\",\"window\":65536}", &exit),
                         PR_AGENT_EXIT);
        assert_refused(exit, "read of a device");
        json_object_put(exit);
        /* A FIFO planted where an upload writes its temporary file (its name is
         * predictable: the agent's pid, 1, and the channel) is replaced. */
        free(run(&sb, 55, "[\"mkfifo\",\"/tmp/.space-upload-1-56\"]"));
        ck_assert_int_eq(open_transfer(a, 56, "{\"op\":\"write\",\"path\":\"/tmp/up\"}", &exit), PR_AGENT_WINDOW);
        sp_test_agent_send(a, PR_AGENT_DATA, PR_STREAM_FILE, 56, "hello", 5);
        sp_test_agent_send(a, PR_AGENT_EOF, PR_STREAM_FILE, 56, NULL, 0);
        for (;;) {
                sp_test_frame f = sp_test_agent_next(a);
                uint8_t t = f.type;
                sp_buf_free(&f.payload);
                if (t == PR_AGENT_EXIT)
                        break;
        }
        sp_test_agent_close(a);
        char *out = run(&sb, 57, "[\"cat\",\"/tmp/up\"]");
        ck_assert_str_eq(out, "hello");
        free(out);
        sandbox_delete(&sb);
}
END_TEST

/* Sends CONTROL json on channel and waits for the channel's EXIT. */
static void control_until_exit(sp_test_agent *a, uint32_t channel, const char *json)
{
        sp_test_agent_send(a, PR_AGENT_CONTROL, 0, channel, json, strlen(json));
        for (;;) {
                sp_test_frame f = sp_test_agent_next(a);
                bool done = f.type == PR_AGENT_EXIT && f.channel == channel;
                if (f.type == PR_AGENT_DATA)
                        sp_test_agent_ack(a, f.channel, f.stream, (uint32_t)f.payload.len);
                sp_buf_free(&f.payload);
                if (done)
                        return;
        }
}

START_TEST(the_sandbox_cannot_stall_or_stop_its_agent)
{
        sandbox sb;
        sandbox_new(&sb);
        /* The agent reads the sandbox's /etc/passwd for every command and file
         * operation: a FIFO there would block it for good. */
        free(run(&sb, 61, "[\"sh\",\"-c\",\"rm /etc/passwd && mkfifo /etc/passwd\"]"));
        char *out = run(&sb, 62, "[\"echo\",\"alive\"]");
        ck_assert_str_eq(out, "alive\n");
        free(out);
        /* Killing a process tree reads /proc: root inside mounts its own /proc with
         * FIFOs where the stat files were. */
        sp_test_agent *a = sp_test_agent_connect(sb.sock, 5000);
        sp_test_agent_open(a, 63, "{\"op\":\"exec\",\"session\":\"victim\",\"argv\":[\"sleep\",\"1003\"]}");
        sp_test_frame f = sp_test_agent_next(a);
        ck_assert_int_eq(f.type, PR_AGENT_REPLY);
        sp_buf_free(&f.payload);
        free(run(&sb, 64,
                 "[\"sh\",\"-c\",\"mount -t tmpfs none /proc && for i in $(seq 2 64); do mkdir /proc/$i && "
                 "mkfifo /proc/$i/stat; done && ln -s 1 /proc/self\"]"));
        control_until_exit(a, 63, "{\"kill\":true}");
        sp_test_agent_close(a);
        out = run(&sb, 65, "[\"echo\",\"still\"]");
        ck_assert_str_eq(out, "still\n");
        free(out);
        /* SIGTERM (and the like) to PID 1 from inside: ignored, the agent serves on. */
        free(run(&sb, 66, "[\"sh\",\"-c\",\"kill -TERM 1; kill -HUP 1; kill -INT 1; kill -QUIT 1\"]"));
        usleep(300 * 1000);
        out = run(&sb, 67, "[\"echo\",\"served\"]");
        ck_assert_str_eq(out, "served\n");
        free(out);
        sandbox_delete(&sb);
}
END_TEST

/* The error message of an EXIT, or "". */
static const char *exit_message(json_object *exit)
{
        json_object *e, *msg;
        return exit && json_object_object_get_ex(exit, "error", &e) && json_object_object_get_ex(e, "message", &msg)
                       ? json_object_get_string(msg)
                       : "";
}

static void assert_denied_as_big(json_object *exit, const char *what)
{
        json_object *e, *code;
        ck_assert_msg(exit && json_object_object_get_ex(exit, "error", &e) &&
                              json_object_object_get_ex(e, "code", &code) &&
                              strcmp(json_object_get_string(code), "permission_denied") == 0,
                      "%s: %s", what, exit ? json_object_to_json_string(exit) : "no error");
        ck_assert_msg(strstr(exit_message(exit), "'big'"), "%s: %s", what, exit_message(exit));
}

/* A user whose uid and gid (100000) the sandbox's user namespace does not
 * map: the agent cannot take its filesystem identity, and must not go on as
 * root. */
START_TEST(unmapped_users_are_refused_not_root)
{
        sandbox sb;
        sandbox_new(&sb);
        free(run(&sb, 71,
                 "[\"sh\",\"-c\",\"echo big:x:100000:100000::/tmp:/bin/sh >> /etc/passwd && echo big:x:100000: >> "
                 "/etc/group && echo s3cr3t > /root/secret && chmod 600 /root/secret && chmod 700 /root\"]"));
        sp_test_agent *a = sp_test_agent_connect(sb.sock, 5000);
        json_object *exit = NULL;
        ck_assert_int_eq(open_transfer(a, 72,
                                       "{\"op\":\"read\",\"path\":\"/root/secret\",\"user\":\"big\","
                                       "\"window\":65536}",
                                       &exit),
                         PR_AGENT_EXIT);
        assert_denied_as_big(exit, "read of a root-only file");
        json_object_put(exit);
        ck_assert_int_eq(open_transfer(a, 73, "{\"op\":\"write\",\"path\":\"/root/planted\",\"user\":\"big\"}", &exit),
                         PR_AGENT_EXIT);
        assert_denied_as_big(exit, "write into /root");
        json_object_put(exit);
        ck_assert_int_eq(open_transfer(a, 74, "{\"op\":\"list\",\"path\":\"/root\",\"user\":\"big\"}", &exit),
                         PR_AGENT_EXIT);
        assert_denied_as_big(exit, "list of /root");
        json_object_put(exit);
        /* A command as the user: the error names the user, not the program. */
        sp_test_agent_open(a, 75, "{\"op\":\"exec\",\"session\":\"big\",\"argv\":[\"id\"],\"user\":\"big\"}");
        sp_test_result r = {0};
        sp_test_agent_run_to_exit(a, 75, &r, true);
        const char *msg = exit_message(r.exit);
        ck_assert_msg(strstr(msg, "cannot switch to the user 'big'"), "%s", msg);
        sp_test_result_free(&r);
        sp_test_agent_close(a);
        char *out = run(&sb, 76, "[\"sh\",\"-c\",\"ls -a /root\"]");
        ck_assert_msg(!strstr(out, "planted") && !strstr(out, ".space-upload"), "%s", out);
        free(out);
        sandbox_delete(&sb);
}
END_TEST

/* What a command sees of its confinement: the mounts (point, options, type), its capabilities, seccomp and
 * no_new_privs, and who owns what the jail makes (a restore puts tmpfs contents back with tar). */
static char *confinement(const sandbox *sb, uint32_t channel)
{
        return run(sb, channel,
                   "[\"sh\",\"-c\",\"sed -E 's/^[0-9]+ [0-9]+ [0-9:]+ [^ ]+ ([^ ]+) ([^ ]+)( .*)? - ([^ ]+) .*/\\\\1 "
                   "\\\\2 "
                   "\\\\4/' /proc/self/mountinfo | sort; grep -E '^(Cap|Seccomp|NoNewPrivs)' /proc/self/status; "
                   "stat -c '%n %u:%g %a' /run /run/space /dev /dev/shm /dev/pts /proc /sys\"]");
}

/* The inode of the user namespace that owns pid's namespace ns. */
static unsigned long ns_owner(int pid, const char *ns)
{
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/ns/%s", pid, ns);
        _cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
        ck_assert_msg(fd >= 0, "open %s: %s", p, strerror(errno));
        _cleanup_close_ int owner = ioctl(fd, NS_GET_USERNS);
        ck_assert_msg(owner >= 0, "NS_GET_USERNS %s: %s", p, strerror(errno));
        struct stat st;
        ck_assert_int_eq(fstat(owner, &st), 0);
        return (unsigned long)st.st_ino;
}

/* The inode of pid's namespace ns (0: this process's). */
static unsigned long ns_inode(int pid, const char *ns)
{
        char p[64];
        if (pid)
                snprintf(p, sizeof(p), "/proc/%d/ns/%s", pid, ns);
        else
                snprintf(p, sizeof(p), "/proc/self/ns/%s", ns);
        struct stat st;
        ck_assert_msg(stat(p, &st) == 0, "stat %s: %s", p, strerror(errno));
        return (unsigned long)st.st_ino;
}

/* Who owns the agent's namespaces: its network and pid namespaces the host's user namespace (docs/threat-model.md, "Who
 * owns a jail's namespaces"), its uts, ipc, mount and cgroup namespaces the sandbox's. */
static void assert_ns_owners(const sandbox *sb)
{
        unsigned long host = ns_inode(0, "user"), own = ns_inode(sb->pid, "user");
        ck_assert_uint_ne(host, own);
        ck_assert_msg(ns_owner(sb->pid, "net") == host, "the sandbox's network namespace is not the host's");
        ck_assert_msg(ns_owner(sb->pid, "pid") == host, "the sandbox's pid namespace is not the host's");
        static const char *const mine[] = {"uts", "ipc", "mnt", "cgroup"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(mine); i++)
                ck_assert_msg(ns_owner(sb->pid, mine[i]) == own, "its %s namespace is not the sandbox's", mine[i]);
}

/* A checkpoint and restore (CRIU) gives root inside nothing it did not have: the same mounts with the same
 * options, the same capabilities, seccomp and no_new_privs, its network namespace still the host's. */
START_TEST(a_restore_gains_nothing)
{
        sandbox sb;
        sp_test_create_sandbox(&S, tenant_key, "{\"template\":\"base\"}", sb.id);
        sandbox_find(&sb);
        assert_ns_owners(&sb);
        _cleanup_free_ char *before = confinement(&sb, 51);
        ck_assert_msg(strstr(before, "\n/proc/sys ro,"), "%s", before);
        suspend_and_wake(sb.id);
        int old = sb.pid;
        sandbox_find(&sb);
        ck_assert_int_ne(sb.pid, old);
        assert_ns_owners(&sb);
        _cleanup_free_ char *after = confinement(&sb, 52);
        ck_assert_msg(strcmp(before, after) == 0, "before the suspend:\n%s\nafter the restore:\n%s", before, after);
        sandbox_delete(&sb);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sec_sandbox");
        TCase *tc = tcase_create("sandbox");
        tcase_set_timeout(tc, 300);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, daemon_descriptors_are_close_on_exec);
        tcase_add_test(tc, sandbox_processes_hold_only_their_own_descriptors);
        tcase_add_test(tc, the_agent_is_out_of_reach);
        tcase_add_test(tc, the_mounts_are_locked);
        tcase_add_test(tc, every_denied_system_call_is_refused);
        tcase_add_test(tc, open_files_are_limited);
        tcase_add_test(tc, special_files_never_block_the_agent);
        tcase_add_test(tc, the_sandbox_cannot_stall_or_stop_its_agent);
        tcase_add_test(tc, unmapped_users_are_refused_not_root);
        suite_add_tcase(s, tc);
        /* The probes again on sandboxes checkpointed and restored. */
        TCase *rt = tcase_create("restored");
        tcase_set_timeout(rt, 300);
        tcase_add_unchecked_fixture(rt, cluster_up_restored, cluster_down);
        tcase_add_test(rt, a_restore_gains_nothing);
        tcase_add_test(rt, the_mounts_are_locked);
        tcase_add_test(rt, the_agent_is_out_of_reach);
        tcase_add_test(rt, sandbox_processes_hold_only_their_own_descriptors);
        tcase_add_test(rt, every_denied_system_call_is_refused);
        tcase_add_test(rt, open_files_are_limited);
        suite_add_tcase(s, rt);
        return s;
}

int main(void)
{
        sp_test_require_root("sandboxes need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
