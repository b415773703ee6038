/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-probe: run inside a sandbox by the security tests. It attempts what
 * root in a sandbox must not be able to do and prints one line per attempt:
 *
 *   <name> ok|denied <errno name>
 *
 * "ok" means the attempt SUCCEEDED (a failure of isolation, unless the test
 * expects it). Modes (after --in-sandbox):
 *
 *   [HOSTPID...]  privileged operations, and signals to the given host pids
 *   --syscalls    every system call the jail's seccomp filter denies, called
 *                 with arguments that would be harmless (or invalid) if it
 *                 were let through, and socket address families
 *   --agent       reaching into the agent (PID 1): ptrace, its /proc entries,
 *                 pidfd_getfd, process_vm_readv, its binary
 *   --fds         descriptors this process inherited beyond 0, 1 and 2
 *                 ("inherited N TARGET" lines), then "fds checked"
 *   --limits      "nofile SOFT HARD", and an attempt to raise the hard limit
 *   --mounts      unmounting each mount of its mount namespace but the root,
 *                 the deepest first ("umount:PATH ..."): a mount the host
 *                 made and the kernel locked answers EINVAL
 *   --net OP ...  network attempts against the egress boundary (net.c)
 *
 * Every attempt is built to be harmless where it is permitted
 * (invalid arguments, values written back unchanged), and the program refuses
 * to run without --in-sandbox. Statically linked so it runs in any root
 * filesystem.
 */

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/btrfs.h>
#include <sys/ioctl.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <linux/kcmp.h>
#include <linux/keyctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <sys/uio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

int probe_net(int argc, char **argv);

static void report(const char *name, long r)
{
        if (r >= 0)
                printf("%s ok\n", name);
        else
                printf("%s denied %s\n", name, strerrorname_np(errno) ? strerrorname_np(errno) : "?");
        fflush(stdout);
}

/* For calls given invalid arguments on purpose: EINVAL/EFAULT/ENOENT/ENOEXEC
 * mean the kernel got past the permission check. */
static long permitted_if_invalid(long r)
{
        if (r < 0 && (errno == EINVAL || errno == EFAULT || errno == ENOENT || errno == ENOEXEC))
                return 0;
        return r;
}

/* Mounts a cgroup hierarchy (a cgroup namespace may allow it) and tries to
 * write its limits: only a successful write is a breach. */
static void raise_limits(const char *name, const char *fstype, const char *opts)
{
        if (mount(fstype, "/mnt", fstype, 0, opts) < 0) {
                report(name, -1);
                return;
        }
        static const char *const files[] = {
                "/mnt/memory.limit_in_bytes",  "/mnt/memory.memsw.limit_in_bytes", "/mnt/memory.max", "/mnt/pids.max",
                "/mnt/cgroup.max.descendants", "/mnt/cgroup.subtree_control"};
        long r = -1;
        int saved = EACCES;
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                int cfd = open(files[i], O_WRONLY);
                if (cfd < 0) {
                        if (errno != ENOENT)
                                saved = errno;
                        continue;
                }
                r = write(cfd, "max", 3);
                if (r < 0 && errno == EINVAL)
                        r = write(cfd, "-1", 2); /* v1 spells unlimited -1 */
                if (r < 0)
                        saved = errno;
                close(cfd);
                if (r >= 0)
                        break;
        }
        umount2("/mnt", MNT_DETACH);
        errno = saved;
        report(name, r);
}

#define SYS(name, ...) report("sys_" #name, syscall(SYS_##name, __VA_ARGS__))

/* The seccomp filter's list (worker/backend/seccomp.c), written out again on
 * purpose: a call dropped from the filter must show up here as let through.
 * Arguments: harmless or invalid, so a call let through fails with EINVAL,
 * EBADF, EFAULT or ENOSYS, or succeeds without effect — never EPERM. */
static int probe_syscalls(void)
{
        char buf[256] = {0};
        SYS(init_module, buf, sizeof(buf), "");
        SYS(finit_module, -1, "", 0);
        SYS(delete_module, "space_probe_none", O_NONBLOCK);
        SYS(kexec_load, 0, 0, NULL, 0xdead0000UL);
        SYS(kexec_file_load, -1, -1, 0, "", 0);
        union bpf_attr attr;
        memset(&attr, 0, sizeof(attr));
        attr.map_type = BPF_MAP_TYPE_ARRAY;
        attr.key_size = 4;
        attr.value_size = 4;
        attr.max_entries = 1;
        SYS(bpf, BPF_MAP_CREATE, &attr, sizeof(attr));
        struct perf_event_attr pe;
        memset(&pe, 0, sizeof(pe));
        pe.type = PERF_TYPE_SOFTWARE;
        pe.size = sizeof(pe);
        pe.config = PERF_COUNT_SW_CPU_CLOCK;
        SYS(perf_event_open, &pe, 0, -1, -1, 0);
        SYS(keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
        SYS(add_key, "user", "space-probe", "x", 1, KEY_SPEC_PROCESS_KEYRING);
        SYS(request_key, "user", "space-probe-none", NULL, KEY_SPEC_PROCESS_KEYRING);
        SYS(userfaultfd, O_CLOEXEC);
        SYS(open_by_handle_at, AT_FDCWD, buf, O_RDONLY);
        int mnt = 0;
        memset(buf, 0, sizeof(buf)); /* handle_bytes 0: EOVERFLOW if let through */
        SYS(name_to_handle_at, AT_FDCWD, "/", buf, &mnt, 0);
        SYS(acct, "/nonexistent-acct");
        SYS(swapon, "/nonexistent-swap", 0);
        SYS(swapoff, "/nonexistent-swap");
        SYS(reboot, 0xfee1dead, 672274793, 0x0badc0de, NULL);
        SYS(settimeofday, (void *)1, NULL);
        SYS(clock_settime, -1, (void *)1);
        SYS(clock_adjtime, -1, NULL);
        SYS(adjtimex, NULL);
        SYS(iopl, 99);
        SYS(ioperm, 0x10000UL, 1UL, 1);
        SYS(lookup_dcookie, 0, NULL, 0);
        SYS(quotactl, 0, NULL, 0, NULL);
        SYS(nfsservctl, 0, NULL, NULL);
#ifdef SYS_vm86
        SYS(vm86, 0, NULL);
#endif
#ifdef SYS_vm86old
        SYS(vm86old, NULL);
#endif
        SYS(uselib, NULL);
        memset(buf, 0, sizeof(buf));
        SYS(io_uring_setup, 1, buf);
        SYS(io_uring_enter, -1, 0, 0, 0, NULL, 0);
        SYS(io_uring_register, -1, 0, NULL, 0);
        SYS(fanotify_init, ~0U, 0);
        SYS(syslog, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0);
        SYS(kcmp, getpid(), getpid(), KCMP_VM, 0, 0);
        SYS(process_vm_writev, getpid(), NULL, 0, NULL, 0, 0);
        SYS(mount_setattr, -1, "", 0, NULL, 0);
        SYS(open_tree, -1, "space-probe-none", 0);
        SYS(move_mount, -1, "a", -1, "b", 0);
        SYS(fsopen, "space-probe-none", 0);
        SYS(fsconfig, -1, 0, NULL, NULL, 0);
        SYS(fsmount, -1, 0, 0);
        SYS(fspick, -1, "space-probe-none", 0);
        /* Namespaces: no user namespace (CLONE_FS makes a clone that got
         * through fail with EINVAL instead of starting a child). */
        report("sys_unshare_newuser", unshare(CLONE_NEWUSER));
        report("sys_clone_newuser", syscall(SYS_clone, CLONE_NEWUSER | CLONE_FS, NULL, NULL, NULL, 0));
        report("sys_clone3", syscall(SYS_clone3, NULL, 0));
        /* Address families: only unix, inet, inet6 and netlink. */
        static const struct {
                const char *name;
                long family;
        } fams[] = {{"af_vsock", AF_VSOCK},
                    {"af_vsock_high_bits", 0x100000000L | AF_VSOCK},
                    {"af_packet", AF_PACKET},
                    {"af_alg", AF_ALG},
                    {"af_key", AF_KEY},
                    {"af_bluetooth", AF_BLUETOOTH},
                    {"af_can", AF_CAN},
                    {"af_tipc", AF_TIPC},
                    {"af_rds", AF_RDS},
                    {"af_xdp", AF_XDP},
                    {"af_appletalk", AF_APPLETALK},
                    {"af_unknown_99", 99}};
        for (size_t i = 0; i < sizeof(fams) / sizeof(fams[0]); i++) {
                long fd = syscall(SYS_socket, fams[i].family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                if (fd < 0 && errno != EAFNOSUPPORT)
                        fd = syscall(SYS_socket, fams[i].family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                report(fams[i].name, fd);
                if (fd >= 0)
                        close((int)fd);
        }
        long pr = syscall(SYS_socketpair, AF_VSOCK, SOCK_STREAM, 0, (int[2]){0});
        report("af_vsock_socketpair", pr);
        /* Netlink protocols: routing, socket diagnostics and uevents only (the sandbox owns its
         * network namespace; netfilter's and generic netlink's code stays out of its reach). */
        static const struct {
                const char *name;
                long proto;
        } nls[] = {{"netlink_netfilter", NETLINK_NETFILTER},
                   {"netlink_generic", NETLINK_GENERIC},
                   {"netlink_xfrm", NETLINK_XFRM},
                   {"netlink_audit", NETLINK_AUDIT},
                   {"netlink_rdma", NETLINK_RDMA},
                   {"netlink_unknown_40", 40},
                   {"netlink_netfilter_high_bits", 0x100000000L | NETLINK_NETFILTER}};
        for (size_t i = 0; i < sizeof(nls) / sizeof(nls[0]); i++) {
                long fd = syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, nls[i].proto);
                report(nls[i].name, fd);
                if (fd >= 0)
                        close((int)fd);
        }
        static const struct {
                const char *name;
                int family, type, proto;
        } allowed[] = {{"allowed_af_unix", AF_UNIX, SOCK_STREAM, 0},
                       {"allowed_af_inet", AF_INET, SOCK_STREAM, 0},
                       {"allowed_af_inet6", AF_INET6, SOCK_STREAM, 0},
                       {"allowed_af_netlink", AF_NETLINK, SOCK_RAW, NETLINK_ROUTE},
                       {"allowed_netlink_sock_diag", AF_NETLINK, SOCK_RAW, NETLINK_SOCK_DIAG}};
        for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
                int fd = socket(allowed[i].family, allowed[i].type | SOCK_CLOEXEC, allowed[i].proto);
                report(allowed[i].name, fd);
                if (fd >= 0)
                        close(fd);
        }
        return 0;
}

/* The agent (PID 1 of the sandbox) must be out of reach of its root. */
static int probe_agent(void)
{
        report("ptrace_attach", ptrace(PTRACE_ATTACH, 1, NULL, NULL));
        report("ptrace_seize", ptrace(PTRACE_SEIZE, 1, NULL, NULL));
        static const char *const files[] = {"/proc/1/mem",  "/proc/1/environ", "/proc/1/fd/1",
                                            "/proc/1/fd/2", "/proc/1/fd/3",    "/proc/1/exe"};
        for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
                char name[64];
                snprintf(name, sizeof(name), "open_%s", files[i] + 1);
                for (char *c = name; *c; c++)
                        if (*c == '/')
                                *c = '_';
                int fd = open(files[i], (i >= 2 && i <= 3) ? O_WRONLY | O_APPEND : O_RDONLY);
                report(name, fd);
                if (fd >= 0)
                        close(fd);
        }
        char target[256];
        report("readlink_proc_1_exe", readlink("/proc/1/exe", target, sizeof(target)));
        DIR *d = opendir("/proc/1/fd");
        report("list_proc_1_fd", d ? 0 : -1);
        if (d)
                closedir(d);
        long pidfd = syscall(SYS_pidfd_open, 1, 0);
        long got = -1;
        int saved = errno;
        if (pidfd >= 0) {
                for (int fd = 0; fd < 16 && got < 0; fd++) {
                        got = syscall(SYS_pidfd_getfd, (int)pidfd, fd, 0);
                        if (got < 0 && errno == EBADF)
                                continue; /* no such descriptor: try the next */
                        saved = errno;
                        if (got < 0)
                                break;
                }
                close((int)pidfd);
        }
        errno = saved;
        report("pidfd_getfd", got);
        char mem[16];
        struct iovec local = {mem, sizeof(mem)}, remote = {(void *)0x400000, sizeof(mem)};
        report("process_vm_readv", process_vm_readv(1, &local, 1, &remote, 1, 0));
        int afd = open("/run/space/agent", O_WRONLY);
        report("write_agent_binary", afd);
        if (afd >= 0)
                close(afd);
        report("umount_agent_binary", umount2("/run/space/agent", MNT_DETACH));
        return 0;
}

/* Descriptors inherited from the agent (or the worker before it). */
static int probe_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        if (!d) {
                printf("fds unreadable %s\n", strerrorname_np(errno));
                return 1;
        }
        for (struct dirent *de; (de = readdir(d));) {
                int fd = atoi(de->d_name);
                if (de->d_name[0] == '.' || fd <= 2 || fd == dirfd(d))
                        continue;
                char path[64], target[256] = "";
                snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
                ssize_t n = readlink(path, target, sizeof(target) - 1);
                if (n > 0)
                        target[n] = '\0';
                printf("inherited %d %s\n", fd, target);
        }
        closedir(d);
        printf("fds checked\n");
        return 0;
}

static int probe_limits(void)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
                return 1;
        printf("nofile %llu %llu\n", (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
        struct rlimit more = {rl.rlim_max + 1, rl.rlim_max + 1};
        report("raise_nofile", setrlimit(RLIMIT_NOFILE, &more));
        return 0;
}

static int probe_mounts(void)
{
        FILE *f = fopen("/proc/self/mountinfo", "r");
        if (!f) {
                report("read_mountinfo", -1);
                return 1;
        }
        char *points[256], line[4096];
        int n = 0;
        while (n < 256 && fgets(line, sizeof(line), f)) {
                char mp[4096];
                if (sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strcmp(mp, "/") != 0)
                        points[n++] = strdup(mp);
        }
        fclose(f);
        /* mountinfo lists a mount after the one it is on: the last first. */
        for (int i = n - 1; i >= 0; i--) {
                char name[4200];
                snprintf(name, sizeof(name), "umount:%s", points[i]);
                report(name, umount2(points[i], MNT_DETACH));
                free(points[i]);
        }
        return 0;
}

int main(int argc, char **argv)
{
        if (argc < 2 || strcmp(argv[1], "--in-sandbox") != 0) {
                fprintf(stderr, "space-probe: run only inside a sandbox (--in-sandbox)\n");
                return 2;
        }
        if (argc > 2 && strcmp(argv[2], "--syscalls") == 0)
                return probe_syscalls();
        if (argc > 2 && strcmp(argv[2], "--agent") == 0)
                return probe_agent();
        if (argc > 2 && strcmp(argv[2], "--fds") == 0)
                return probe_fds();
        if (argc > 2 && strcmp(argv[2], "--limits") == 0)
                return probe_limits();
        if (argc > 2 && strcmp(argv[2], "--mounts") == 0)
                return probe_mounts();
        if (argc > 2 && strcmp(argv[2], "--net") == 0)
                return probe_net(argc - 3, argv + 3);
        char buf[64] = {0};
        report("init_module", permitted_if_invalid(syscall(SYS_init_module, buf, sizeof(buf), "")));
        report("finit_module", permitted_if_invalid(syscall(SYS_finit_module, -1, "", 0)));
        report("delete_module", permitted_if_invalid(syscall(SYS_delete_module, "space_probe_none", O_NONBLOCK)));
        report("kexec_load", permitted_if_invalid(syscall(SYS_kexec_load, 0, 0, NULL, 0xdead0000UL)));
        union bpf_attr attr;
        memset(&attr, 0, sizeof(attr));
        attr.map_type = BPF_MAP_TYPE_ARRAY;
        attr.key_size = 4;
        attr.value_size = 4;
        attr.max_entries = 1;
        report("bpf", syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof(attr)));
        struct perf_event_attr pe;
        memset(&pe, 0, sizeof(pe));
        pe.type = PERF_TYPE_SOFTWARE;
        pe.size = sizeof(pe);
        pe.config = PERF_COUNT_SW_CPU_CLOCK;
        report("perf_event_open", syscall(SYS_perf_event_open, &pe, 0, -1, -1, 0));
        report("keyctl", syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0));
        report("userfaultfd", syscall(SYS_userfaultfd, 0));
        report("unshare_user", unshare(CLONE_NEWUSER));
        report("mknod_block", mknod("/tmp/probe-blk", S_IFBLK | 0600, makedev(8, 0)));
        report("mknod_char", mknod("/tmp/probe-chr", S_IFCHR | 0600, makedev(1, 1)));
        report("mount_proc", mount("proc", "/mnt", "proc", 0, NULL));
        report("mount_sysfs", mount("sysfs", "/mnt", "sysfs", 0, NULL));
        report("remount_proc_sys_rw", mount(NULL, "/proc/sys", NULL, MS_REMOUNT | MS_BIND, NULL));
        report("umount_proc_sys", umount2("/proc/sys", MNT_DETACH));
        /* Write the current value back: a change only if the write is allowed, and then none. */
        char host[128] = {0};
        int fd = open("/proc/sys/kernel/hostname", O_RDONLY);
        ssize_t hn = fd >= 0 ? read(fd, host, sizeof(host) - 1) : -1;
        if (fd >= 0)
                close(fd);
        fd = open("/proc/sys/kernel/hostname", O_WRONLY);
        report("write_proc_sys", fd < 0 || hn <= 0 ? -1 : write(fd, host, (size_t)hn));
        if (fd >= 0)
                close(fd);
        fd = open("/sys/kernel/uevent_helper", O_WRONLY);
        report("write_sys", fd < 0 ? -1 : write(fd, "x", 1));
        if (fd >= 0)
                close(fd);
        /* No sethostname here: the sandbox's own uts namespace is its root's to name
         * (docs/threat-model.md, "Who owns a jail's namespaces"). */
        /* An invalid reboot command: EINVAL if permitted. */
        report("reboot", permitted_if_invalid(syscall(SYS_reboot, 0xfee1dead, 672274793, 0x0badc0de, NULL)));
        report("swapoff", permitted_if_invalid(syscall(SYS_swapoff, "/nonexistent-swap")));
        report("settimeofday", permitted_if_invalid(syscall(SYS_settimeofday, (void *)1, NULL)));
        report("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, buf, O_RDONLY));
        report("io_uring_setup", syscall(SYS_io_uring_setup, 1, buf));
        /* Its own cgroup limits: v1 hierarchies cannot be mounted; a cgroup2 mount
         * (allowed in a cgroup namespace) shows files it may not write. */
        /* A btrfs subvolume of its own would escape its disk quota (ENOTTY off btrfs
         * would mean the filter let the call through). */
        struct btrfs_ioctl_vol_args va;
        memset(&va, 0, sizeof(va));
        strcpy(va.name, "probe-subvol");
        int tfd = open("/tmp", O_RDONLY | O_DIRECTORY);
        long sr = ioctl(tfd, BTRFS_IOC_SUBVOL_CREATE, &va);
        if (sr < 0 && errno == ENOTTY)
                sr = 0;
        report("btrfs_subvol_create", sr);
        close(tfd);
        raise_limits("raise_cgroup_v1_limits", "cgroup", "memory");
        raise_limits("raise_cgroup_v2_limits", "cgroup2", NULL);
        /* Processes outside the sandbox: pid given on the command line (a host pid). */
        for (int i = 2; i < argc; i++) {
                char name[64];
                snprintf(name, sizeof(name), "kill_%s", argv[i]);
                report(name, kill(atoi(argv[i]), 0));
        }
        return 0;
}
