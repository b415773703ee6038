/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-probe: run inside a sandbox by the security tests. It attempts what
 * root in a sandbox must not be able to do and prints one line per attempt:
 *
 *   <name> ok|denied <errno name>
 *
 * "ok" means the attempt SUCCEEDED (a failure of isolation, unless the test
 * expects it). Every attempt is built to be harmless where it is permitted
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

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

int main(int argc, char **argv)
{
        if (argc < 2 || strcmp(argv[1], "--in-sandbox") != 0) {
                fprintf(stderr, "space-probe: run only inside a sandbox (--in-sandbox)\n");
                return 2;
        }
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
        gethostname(host, sizeof(host));
        report("sethostname", sethostname(host, strlen(host)));
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
