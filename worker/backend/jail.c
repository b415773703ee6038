/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <linux/filter.h>
#include <linux/mount.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/jail.h"
#include "backend/proc.h"
#include "space/cleanup.h"

static int sys_open_tree(int dfd, const char *path, unsigned flags)
{
        return (int)syscall(SYS_open_tree, dfd, path, flags);
}

static int sys_mount_setattr(int dfd, const char *path, unsigned flags, struct mount_attr *attr)
{
        return (int)syscall(SYS_mount_setattr, dfd, path, flags, attr, sizeof(*attr));
}

static int sys_move_mount(int from_dfd, const char *from, int to_dfd, const char *to, unsigned flags)
{
        return (int)syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags);
}

const char *const wk_jail_dev_nodes[WK_JAIL_DEV_NODES] = {"null", "zero", "full", "random", "urandom", "tty"};
const char *const wk_jail_proc_readonly[WK_JAIL_PROC_READONLY] = {"sys", "bus", "fs", "irq"};
const char *const wk_jail_proc_masked[WK_JAIL_PROC_MASKED] = {
        "kcore", "keys", "timer_list", "sched_debug", "sysrq-trigger", "latency_stats", "kallsyms", "kmsg"};

static int write_file(const char *path, const char *text)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        size_t n = strlen(text);
        return write(fd, text, n) == (ssize_t)n ? 0 : -1;
}

/* The namespaces a jail is made of, held by fds until its init joins them. */
typedef struct {
        int user, uts, ipc;
} jail_ns;

static void jail_ns_close(jail_ns *ns)
{
        sp_close(ns->user), sp_close(ns->uts), sp_close(ns->ipc);
        *ns = (jail_ns){-1, -1, -1};
}

/* A user namespace mapping 0..count-1 to base..base+count-1, and uts and ipc
 * namespaces owned by it (a checkpoint of the tree with CRIU needs them owned
 * by the tree's user namespace), held by fds. The network and pid namespaces
 * stay the host's (docs/threat-model.md, "Who owns a jail's namespaces"):
 * root of its own network namespace could fill the kernel's shared neighbour
 * table and reach x_tables; a pid namespace cannot be joined before it has a
 * process, and the agent, its init, must be executed in the host's user
 * namespace. */
static int make_userns(uid_t base, uint32_t count, jail_ns *ret, sp_error **err)
{
        int go[2];
        if (pipe2(go, O_CLOEXEC) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        int ready[2];
        if (pipe2(ready, O_CLOEXEC) < 0) {
                sp_close(go[0]);
                sp_close(go[1]);
                return sp_error_set_errno(err, SP_E_IO, errno, "pipe");
        }
        pid_t pid = fork();
        if (pid < 0) {
                int e = errno;
                sp_close(go[0]), sp_close(go[1]), sp_close(ready[0]), sp_close(ready[1]);
                return sp_error_set_errno(err, SP_E_LIMIT, e, "fork");
        }
        if (pid == 0) {
                close(go[1]);
                close(ready[0]);
                char c = unshare(CLONE_NEWUSER | CLONE_NEWUTS | CLONE_NEWIPC) == 0 ? 'u' : 'x';
                (void)!write(ready[1], &c, 1);
                (void)!read(go[0], &c, 1);
                _exit(0);
        }
        close(go[0]);
        close(ready[1]);
        char c = 0;
        int r = 0;
        if (read(ready[0], &c, 1) != 1 || c != 'u') {
                r = sp_error_set(err, SP_E_UNAVAILABLE, "cannot create a user namespace");
                goto out;
        }
        char path[64], map[64];
        snprintf(map, sizeof(map), "0 %u %u\n", (unsigned)base, count);
        snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
        if (write_file(path, map) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "write uid_map");
                goto out;
        }
        snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
        if (write_file(path, map) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "write gid_map");
                goto out;
        }
        static const char *const names[] = {"user", "uts", "ipc"};
        int *fds[] = {&ret->user, &ret->uts, &ret->ipc};
        for (size_t i = 0; i < SP_ARRAY_SIZE(names); i++) {
                snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, names[i]);
                *fds[i] = open(path, O_RDONLY | O_CLOEXEC);
                if (*fds[i] < 0) {
                        r = sp_error_set_errno(err, SP_E_IO, errno, "open the %s namespace", names[i]);
                        jail_ns_close(ret);
                        break;
                }
        }
out:
        /* Lets the holder exit (the fd keeps the namespace): a byte, not the
         * pipe's end, which a child another thread forks meanwhile may hold. */
        (void)!write(go[1], "x", 1);
        close(go[1]);
        close(ready[0]);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        return r;
}

int wk_jail_make_userns(uid_t base, uint32_t count, int *ret_fd, sp_error **err)
{
        jail_ns ns = {-1, -1, -1};
        if (make_userns(base, count, &ns, err) < 0)
                return -SP_E_IO;
        *ret_fd = ns.user;
        ns.user = -1;
        jail_ns_close(&ns);
        return 0;
}

/* --- the child: everything below runs in the new namespaces --- */

typedef struct {
        const wk_jail_config *cfg;
        int sync_fd;
        int tree_fd;
        int listen_fd; /* the agent's listening socket, made in the child */
        const jail_ns *ns;
        const struct sock_fprog *seccomp;
} child_ctx;

__attribute__((noreturn, format(printf, 3, 4))) static void child_die(int sync_fd, int e, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        if (e && n >= 0 && (size_t)n < sizeof(msg))
                snprintf(msg + n, sizeof(msg) - (size_t)n, ": %s", strerror(e));
        (void)!write(sync_fd, msg, strlen(msg));
        _exit(126);
}

#define CHECK(expr, ...) \
        do { \
                if ((expr) < 0) \
                        child_die(x->sync_fd, errno, __VA_ARGS__); \
        } while (0)

static void bind_file(child_ctx *x, const char *src, const char *dst, bool ro)
{
        _cleanup_close_ int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        CHECK(fd, "create %s", dst);
        CHECK(mount(src, dst, NULL, MS_BIND, NULL), "bind %s", dst);
        if (ro)
                CHECK(mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL),
                      "read-only %s", dst);
}

int wk_jail_dev_skeleton(const char *dir, uid_t base, const char **ret_step)
{
        char opts[128], p[4096];
        snprintf(opts, sizeof(opts), "mode=755,size=65536k,uid=%u,gid=%u", (unsigned)base, (unsigned)base);
#define STEP(expr, what) \
        do { \
                if ((expr) < 0) { \
                        *ret_step = what; \
                        return -1; \
                } \
        } while (0)
        STEP(mount("tmpfs", dir, "tmpfs", MS_NOSUID | MS_NOEXEC, opts), "mount /dev");
        for (size_t i = 0; i < SP_ARRAY_SIZE(wk_jail_dev_nodes); i++) {
                snprintf(p, sizeof(p), "%s/%s", dir, wk_jail_dev_nodes[i]);
                int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
                STEP(fd, "create a device's mount point in /dev");
                close(fd);
        }
        snprintf(p, sizeof(p), "%s/pts", dir);
        STEP(mkdir(p, 0755), "mkdir /dev/pts");
        (void)!chown(p, base, base);
        snprintf(p, sizeof(p), "%s/shm", dir);
        STEP(mkdir(p, 01777), "mkdir /dev/shm");
        static const char *const links[][2] = {{"pts/ptmx", "ptmx"},
                                               {"/proc/self/fd", "fd"},
                                               {"/proc/self/fd/0", "stdin"},
                                               {"/proc/self/fd/1", "stdout"},
                                               {"/proc/self/fd/2", "stderr"}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(links); i++) {
                snprintf(p, sizeof(p), "%s/%s", dir, links[i][1]);
                STEP(symlink(links[i][0], p), "symlink in /dev");
                /* so the sandbox's root owns what it sees as its own /dev entries */
                (void)!lchown(p, base, base);
        }
#undef STEP
        return 0;
}

static void setup_dev(child_ctx *x, uid_t base)
{
        const char *step = NULL;
        if (wk_jail_dev_skeleton("dev", base, &step) < 0)
                child_die(x->sync_fd, errno, "%s", step);
        for (size_t i = 0; i < SP_ARRAY_SIZE(wk_jail_dev_nodes); i++) {
                char src[64], dst[64];
                snprintf(src, sizeof(src), "/dev/%s", wk_jail_dev_nodes[i]);
                snprintf(dst, sizeof(dst), "dev/%s", wk_jail_dev_nodes[i]);
                CHECK(mount(src, dst, NULL, MS_BIND, NULL), "bind %s", dst);
        }
        char opts[128];
        snprintf(opts, sizeof(opts), "mode=1777,size=65536k,uid=%u,gid=%u", (unsigned)base, (unsigned)base);
        CHECK(mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, opts), "mount /dev/shm");
}

static void setup_proc(child_ctx *x)
{
        CHECK(mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "mount /proc");
        for (size_t i = 0; i < SP_ARRAY_SIZE(wk_jail_proc_readonly); i++) {
                char p[64];
                snprintf(p, sizeof(p), "proc/%s", wk_jail_proc_readonly[i]);
                if (access(p, F_OK) < 0)
                        continue;
                CHECK(mount(p, p, NULL, MS_BIND | MS_REC, NULL), "bind %s", p);
                CHECK(mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL),
                      "read-only %s", p);
        }
        for (size_t i = 0; i < SP_ARRAY_SIZE(wk_jail_proc_masked); i++) {
                char p[64];
                snprintf(p, sizeof(p), "proc/%s", wk_jail_proc_masked[i]);
                if (access(p, F_OK) < 0)
                        continue;
                CHECK(mount("dev/null", p, NULL, MS_BIND, NULL), "mask %s", p);
        }
}

int wk_jail_loopback_up(void)
{
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                return -1;
        struct ifreq ifr = {0};
        memcpy(ifr.ifr_name, "lo", 3);
        int r = ioctl(s, SIOCGIFFLAGS, &ifr);
        if (r == 0) {
                ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
                r = ioctl(s, SIOCSIFFLAGS, &ifr);
        }
        int e = errno;
        close(s);
        errno = e;
        return r;
}

__attribute__((noreturn)) static void child_main(child_ctx *x)
{
        const wk_jail_config *cfg = x->cfg;
        /* Host root may enter namespaces a child user namespace owns. Done
         * before the parent's attach callback: "r" tells the parent they are
         * joined and the agent's socket is made. */
        CHECK(setns(x->ns->uts, CLONE_NEWUTS), "enter the uts namespace");
        CHECK(setns(x->ns->ipc, CLONE_NEWIPC), "enter the ipc namespace");
        /* The agent's listening socket, made here in the sandbox's network
         * namespace (a unix socket belongs to the namespace it is made in: with
         * the rest of the sandbox's tree, for a checkpoint of it). */
        if (wk_box_listen(cfg->agent_socket, 64, &x->listen_fd, NULL) < 0)
                child_die(x->sync_fd, errno, "listen on the agent socket");
        if (write(x->sync_fd, "r", 1) != 1)
                _exit(125);
        char c;
        if (read(x->sync_fd, &c, 1) != 1)
                _exit(125); /* the parent gave up */

        CHECK(sethostname(cfg->hostname, strlen(cfg->hostname)), "sethostname");
        CHECK(wk_jail_loopback_up(), "bring lo up");

        /* Build the sandbox's tree on a staging mount point, as host root. */
        CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make / private");
        char staging[4096];
        snprintf(staging, sizeof(staging), "%s/root", cfg->runtime_dir);
        CHECK(sys_move_mount(x->tree_fd, "", AT_FDCWD, staging, MOVE_MOUNT_F_EMPTY_PATH), "attach the root filesystem");
        close(x->tree_fd);
        /* A clone of a shared mount is shared (the storage beneath a Kubernetes volume with
         * Bidirectional propagation is), and pivot_root refuses a shared new root. */
        CHECK(mount(NULL, staging, NULL, MS_REC | MS_PRIVATE, NULL), "make the root filesystem private");
        CHECK(chdir(staging), "chdir to the root filesystem");
        setup_dev(x, cfg->uid_base);
        setup_proc(x); /* after /dev: its masks bind dev/null */
        CHECK(mount("sysfs", "sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL), "mount /sys");
        char opts[128];
        snprintf(opts, sizeof(opts), "mode=755,size=65536k,uid=%u,gid=%u", (unsigned)cfg->uid_base,
                 (unsigned)cfg->uid_base);
        CHECK(mount("tmpfs", "run", "tmpfs", MS_NOSUID | MS_NODEV, opts), "mount /run");
        /* The sandbox root's, as /run is: a checkpoint's tar (run inside the sandbox) could not keep a
         * host owner across a restore (docs/threat-model.md, "Checkpoints"). The binary in it is a locked
         * read-only mount. */
        CHECK(mkdir("run/space", 0755), "mkdir /run/space");
        CHECK(chown("run/space", cfg->uid_base, cfg->uid_base), "chown /run/space");
        bind_file(x, cfg->agent_path, "run/space/agent", true);

        CHECK(syscall(SYS_pivot_root, ".", "."), "pivot_root");
        CHECK(umount2(".", MNT_DETACH), "detach the old root");
        CHECK(chdir("/"), "chdir /");

        /* The seccomp filter binds the agent and everything it starts. It is
         * loaded here, as host root, because the agent below is executed before
         * it enters the sandbox's user namespace. */
        int sr = wk_jail_seccomp_apply(x->seccomp);
        if (sr < 0)
                child_die(x->sync_fd, -sr, "seccomp");
        /* Only lowered: a host without CAP_SYS_RESOURCE keeps its own hard limit. */
        struct rlimit nofile;
        CHECK(getrlimit(RLIMIT_NOFILE, &nofile), "read the open-files limit");
        if (nofile.rlim_max > WK_JAIL_NOFILE_HARD)
                nofile.rlim_max = WK_JAIL_NOFILE_HARD;
        nofile.rlim_cur = nofile.rlim_max < WK_JAIL_NOFILE_SOFT ? nofile.rlim_max : WK_JAIL_NOFILE_SOFT;
        CHECK(setrlimit(RLIMIT_NOFILE, &nofile), "limit open files");

        /* Hand the agent exactly its descriptors and close every other one the
         * worker had open (its control-plane connection, other sandboxes'
         * sockets): 0 /dev/null, 1 and 2 the log pipe, 3 the listening socket,
         * 4 the sandbox's user namespace, 5 this sync socket. */
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        CHECK(null, "open /dev/null");
        int src[6] = {null,
                      cfg->log_fd >= 0 ? cfg->log_fd : null,
                      cfg->log_fd >= 0 ? cfg->log_fd : null,
                      x->listen_fd,
                      x->ns->user,
                      x->sync_fd};
        int high[6];
        for (int i = 0; i < 6; i++) {
                high[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 16);
                CHECK(high[i], "move descriptor %d", i);
        }
        for (int i = 0; i < 6; i++)
                CHECK(dup2(high[i], i), "pass descriptor %d", i); /* dup2 clears close-on-exec */
        x->sync_fd = 5;
        CHECK(close_range(6, ~0U, 0), "close inherited descriptors");

        /* The agent is executed while still in the host's user namespace: its
         * memory then belongs to the host's, so once it has entered the
         * sandbox's namespace and made itself non-dumpable, nothing inside can
         * ptrace it, read its memory or take its descriptors. */
        char *const argv[] = {"space-agent", "--listen-fd", "3", "--jail-userns-fd", "4", "--jail-sync-fd", "5", NULL};
        char *const envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "container=space",
                              NULL};
        execve(WK_JAIL_AGENT_PATH, argv, envp);
        child_die(x->sync_fd, errno, "execute the agent");
}

static int prepare_rootfs(const wk_jail_config *cfg, sp_error **err)
{
        /* Mount points the sandbox needs; made on the raw path, before idmapping. */
        static const char *const dirs[] = {"proc", "sys", "dev", "run", "tmp"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(dirs); i++) {
                char p[4096];
                snprintf(p, sizeof(p), "%s/%s", cfg->rootfs, dirs[i]);
                if (mkdir(p, strcmp(dirs[i], "tmp") == 0 ? 01777 : 0755) < 0 && errno != EEXIST)
                        return sp_error_set_errno(err, SP_E_IO, errno, "create %s in the root filesystem", dirs[i]);
                struct stat st;
                if (lstat(p, &st) < 0 || !S_ISDIR(st.st_mode))
                        return sp_error_set(err, SP_E_INVALID, "/%s in the root filesystem is not a directory",
                                            dirs[i]);
        }
        char staging[4096];
        snprintf(staging, sizeof(staging), "%s/root", cfg->runtime_dir);
        if (mkdir(staging, 0700) < 0 && errno != EEXIST)
                return sp_error_set_errno(err, SP_E_IO, errno, "create %s", staging);
        return 0;
}

/* A detached clone of rootfs's mount, idmapped by userns_fd: the sandbox's own view of its root. */
static int idmapped_tree(const char *rootfs, int userns_fd, int *ret, sp_error **err)
{
        _cleanup_close_ int tree_fd = sys_open_tree(AT_FDCWD, rootfs, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (tree_fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "clone the root filesystem mount");
        /* The storage is mounted nosuid on the host (rootfs/storage.c); the sandbox's own view of its
         * root keeps setuid programs working (docs/threat-model.md, "setuid in a jail"). */
        struct mount_attr attr = {
                .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV,
                .attr_clr = MOUNT_ATTR_NOSUID,
                .userns_fd = (uint64_t)userns_fd,
        };
        if (sys_mount_setattr(tree_fd, "", AT_EMPTY_PATH, &attr) < 0)
                return sp_error_set_errno(err, SP_E_UNSUPPORTED, errno,
                                          "idmapped mount of %s (needs Linux 5.15+ and btrfs/ext4/xfs)", rootfs);
        *ret = tree_fd;
        tree_fd = -1;
        return 0;
}

int wk_jail_mount_root(const char *rootfs, uid_t base, uint32_t count, const char *path, sp_error **err)
{
        _cleanup_(jail_ns_close) jail_ns ns = {-1, -1, -1};
        _cleanup_close_ int tree_fd = -1;
        if (make_userns(base, count, &ns, err) < 0 || idmapped_tree(rootfs, ns.user, &tree_fd, err) < 0)
                return -SP_E_IO;
        if (sys_move_mount(tree_fd, "", AT_FDCWD, path, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "attach the root filesystem at %s", path);
        return 0;
}

int wk_jail_start(const wk_jail_config *cfg, pid_t *ret_pid, sp_error **err)
{
        if (!cfg->hostname || !*cfg->hostname || strlen(cfg->hostname) > 63)
                return sp_error_set(err, SP_E_INVALID, "invalid hostname");
        if (cfg->uid_base == 0 || cfg->uid_count < 1)
                return sp_error_set(err, SP_E_INVALID, "the sandbox's ids must map to unprivileged host ids");
        if (prepare_rootfs(cfg, err) < 0)
                return -SP_E_IO;

        _cleanup_(jail_ns_close) jail_ns ns = {-1, -1, -1};
        if (make_userns(cfg->uid_base, cfg->uid_count, &ns, err) < 0)
                return sp_error_wrap(err, "jail %s", cfg->id);

        _cleanup_close_ int tree_fd = -1;
        if (idmapped_tree(cfg->rootfs, ns.user, &tree_fd, err) < 0)
                return sp_error_wrap(err, "jail %s", cfg->id);

        struct sock_fprog seccomp;
        if (wk_jail_seccomp_program(&seccomp, err) < 0)
                return sp_error_wrap(err, "jail %s", cfg->id);
        int sp[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "socketpair");
        child_ctx x = {
                .cfg = cfg, .sync_fd = sp[1], .tree_fd = tree_fd, .listen_fd = -1, .ns = &ns, .seccomp = &seccomp};
        pid_t pid =
                (pid_t)syscall(SYS_clone, CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | SIGCHLD, NULL, NULL, NULL, NULL);
        if (pid < 0) {
                int e = errno;
                close(sp[0]);
                close(sp[1]);
                return sp_error_set_errno(err, SP_E_LIMIT, e, "jail %s: clone", cfg->id);
        }
        if (pid == 0) {
                close(sp[0]);
                /* Its own session: the sandbox outlives the worker (which re-adopts it after a
                 * restart) and is not reached by signals to the worker's process group. */
                setsid();
                if (cfg->die_with_parent)
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                child_main(&x);
        }
        close(sp[1]);
        _cleanup_close_ int sync_fd = sp[0];

        char msg[512];
        ssize_t n;
        do
                n = read(sync_fd, msg, sizeof(msg) - 1);
        while (n < 0 && errno == EINTR);
        if (n != 1 || msg[0] != 'r') {
                msg[n > 0 ? n : 0] = '\0';
                sp_error_set(err, SP_E_INTERNAL, "jail %s: %s", cfg->id, n > 0 ? msg : "the init died");
                goto fail;
        }
        if (cfg->attach && cfg->attach(pid, cfg->attach_userdata, err) < 0)
                goto fail;
        char go = 'g';
        if (write(sync_fd, &go, 1) != 1) {
                sp_error_set_errno(err, SP_E_IO, errno, "jail %s: start", cfg->id);
                goto fail;
        }
        /* EOF: the agent has entered the sandbox (it closes the socket then). A
         * message: a step failed, here or in the agent. */
        do
                n = read(sync_fd, msg, sizeof(msg) - 1);
        while (n < 0 && errno == EINTR);
        if (n > 0) {
                msg[n] = '\0';
                sp_error_set(err, SP_E_INTERNAL, "jail %s: %s", cfg->id, msg);
                goto fail;
        }
        *ret_pid = pid;
        return 0;
fail:
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        return -SP_E_INTERNAL;
}
