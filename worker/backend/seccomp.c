/* SPDX-License-Identifier: Apache-2.0 */
/* The jail's seccomp filter: allow by default, deny (EPERM) what a sandbox
 * never needs and what widens the kernel's attack surface. Other
 * architectures' system calls (ia32, x32) are killed by libseccomp's default
 * bad-arch action. */
#include <errno.h>
#include <linux/btrfs.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/netlink.h>

#include "backend/jail.h"
#include "space/cleanup.h"

/* Families 0 to SANDBOX_AF_LIMIT - 1 are ruled one by one (the kernel knows
 * fewer than 64); anything above is refused whole. */
#define SANDBOX_AF_LIMIT 64
/* Netlink protocols 0 to this - 1 are ruled one by one (the kernel knows 32);
 * anything above is refused whole. */
#define SANDBOX_NETLINK_LIMIT 64

static const char *const denied[] = {
        "init_module",
        "finit_module",
        "delete_module",
        "kexec_load",
        "kexec_file_load",
        "bpf",
        "perf_event_open",
        "keyctl",
        "add_key",
        "request_key",
        "userfaultfd",
        "open_by_handle_at",
        "name_to_handle_at",
        "acct",
        "swapon",
        "swapoff",
        "reboot",
        "settimeofday",
        "clock_settime",
        "clock_adjtime",
        "adjtimex",
        "iopl",
        "ioperm",
        "lookup_dcookie",
        "quotactl",
        "nfsservctl",
        "vm86",
        "vm86old",
        "uselib",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        "fanotify_init",
        "syslog",
        "kcmp",
        "process_vm_writev",
        "mount_setattr",
        "open_tree",
        "move_mount",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
};

static void seccomp_releasep(scmp_filter_ctx *c)
{
        if (*c)
                seccomp_release(*c);
}

static int build(scmp_filter_ctx *ret_ctx, sp_error **err)
{
        __attribute__((cleanup(seccomp_releasep))) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        if (!ctx)
                return sp_error_set(err, SP_E_INTERNAL, "seccomp_init failed");
        for (size_t i = 0; i < SP_ARRAY_SIZE(denied); i++) {
                int nr = seccomp_syscall_resolve_name(denied[i]);
                if (nr == __NR_SCMP_ERROR)
                        continue; /* not on this architecture */
                int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
                if (r < 0 && r != -EEXIST)
                        return sp_error_set_errno(err, SP_E_INTERNAL, -r, "seccomp rule for %s", denied[i]);
        }
        /* No nested user namespaces: a common first step of kernel exploits. */
        int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER));
        /* (The kernel reads an ioctl's request as 32 bits: compare only those.)
         * New btrfs subvolumes would get qgroups of their own, outside the sandbox's
         * disk quota; quota and qgroup control belongs to the host. */
        static const unsigned long btrfs_ioctls[] = {
                BTRFS_IOC_SUBVOL_CREATE, BTRFS_IOC_SUBVOL_CREATE_V2, BTRFS_IOC_SNAP_CREATE,   BTRFS_IOC_SNAP_CREATE_V2,
                BTRFS_IOC_QUOTA_CTL,     BTRFS_IOC_QGROUP_LIMIT,     BTRFS_IOC_QGROUP_CREATE, BTRFS_IOC_QGROUP_ASSIGN,
        };
        for (size_t i = 0; r == 0 && i < SP_ARRAY_SIZE(btrfs_ioctls); i++)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffu, (scmp_datum_t)(uint32_t)btrfs_ioctls[i]));
        /* Address families a sandbox has no use for are refused as if the
         * kernel lacked them: AF_VSOCK ignores network namespaces (on a worker
         * that is itself a VM it reaches the hypervisor), and the rest (packet,
         * crypto, bluetooth, ...) only widen what a sandbox can reach of the
         * kernel. Only unix, IPv4, IPv6 and netlink stay. The family is an int:
         * compare its 32 bits, and refuse every value outside the table too. */
        for (unsigned fam = 0; r == 0 && fam < SANDBOX_AF_LIMIT; fam++) {
                if (fam == AF_UNIX || fam == AF_INET || fam == AF_INET6 || fam == AF_NETLINK)
                        continue;
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, fam));
                if (r == 0)
                        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socketpair), 1,
                                             SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, fam));
        }
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
                                     SCMP_A0(SCMP_CMP_GE, SANDBOX_AF_LIMIT, 0)); /* (datum_b unused) */
        /* Netlink: routing (ip), socket diagnostics (ss) and uevents only. The
         * sandbox's root owns its network namespace (docs/threat-model.md, "Who
         * owns a jail's namespaces"), which would open the kernel's netfilter,
         * generic netlink families and the rest to it: the most exploited code
         * reachable from a user namespace, and of no use inside (what leaves is
         * policed on the host's side). The protocol is an int: refuse every
         * value outside the allowed ones, as if the kernel lacked them. */
        for (unsigned proto = 0; r == 0 && proto < SANDBOX_NETLINK_LIMIT; proto++) {
                if (proto == NETLINK_ROUTE || proto == NETLINK_SOCK_DIAG || proto == NETLINK_KOBJECT_UEVENT)
                        continue;
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_NETLINK),
                                     SCMP_A2(SCMP_CMP_MASKED_EQ, 0xffffffffu, proto));
        }
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_NETLINK),
                                     SCMP_A2(SCMP_CMP_GE, SANDBOX_NETLINK_LIMIT, 0));
        /* clone3 passes its flags in memory that seccomp cannot read: make
         * callers fall back to clone, as container runtimes do. */
        if (r == 0)
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
        if (r < 0)
                return sp_error_set_errno(err, SP_E_INTERNAL, -r, "seccomp rule for namespaces");
        *ret_ctx = ctx;
        ctx = NULL;
        return 0;
}

/* The program, built once per process (libseccomp allocates: never in a
 * child cloned from a process with other threads). */
static struct {
        pthread_once_t once;
        struct sock_filter *insns;
        unsigned short len;
        char error[256];
} program = {.once = PTHREAD_ONCE_INIT};

static void build_once(void)
{
        sp_error *e = NULL;
        scmp_filter_ctx ctx = NULL;
        if (build(&ctx, &e) < 0) {
                snprintf(program.error, sizeof(program.error), "%s", e->message);
                sp_error_free(e);
                return;
        }
        int fd = memfd_create("seccomp", MFD_CLOEXEC);
        int r = fd < 0 ? -errno : seccomp_export_bpf(ctx, fd);
        seccomp_release(ctx);
        off_t size = r < 0 ? -1 : lseek(fd, 0, SEEK_END);
        struct sock_filter *insns =
                size > 0 && size % (off_t)sizeof(*insns) == 0 && size / (off_t)sizeof(*insns) < 65536
                        ? malloc((size_t)size)
                        : NULL;
        if (!insns || pread(fd, insns, (size_t)size, 0) != size) {
                snprintf(program.error, sizeof(program.error), "export the seccomp filter: %s",
                         strerror(r < 0   ? -r
                                  : errno ? errno
                                          : EIO));
                free(insns);
        } else {
                program.insns = insns;
                program.len = (unsigned short)(size / (off_t)sizeof(*insns));
        }
        if (fd >= 0)
                close(fd);
}

int wk_jail_seccomp_program(struct sock_fprog *ret, sp_error **err)
{
        pthread_once(&program.once, build_once);
        if (!program.insns)
                return sp_error_set(err, SP_E_INTERNAL, "seccomp: %s", program.error[0] ? program.error : "no filter");
        ret->len = program.len;
        ret->filter = program.insns;
        return 0;
}

int wk_jail_seccomp_apply(const struct sock_fprog *prog)
{
        /* A caller with CAP_SYS_ADMIN (the jail's child, host root before it enters the sandbox's user
         * namespace) loads the filter without no_new_privs: setuid programs in the sandbox then work
         * (sudo, su: a sandbox's user becomes the sandbox's root, which the sandbox has anyway; a
         * file's owner or capabilities count only through the sandbox's idmapped mount and user
         * namespace, never as a host identity). Any other caller sets no_new_privs first, as
         * libseccomp's seccomp_load does and as the kernel requires. */
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) == 0)
                return 0;
        if (errno != EACCES)
                return -errno;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) < 0)
                return -errno;
        return 0;
}

int wk_jail_seccomp_load(sp_error **err)
{
        struct sock_fprog prog;
        if (wk_jail_seccomp_program(&prog, err) < 0)
                return -SP_E_INTERNAL;
        int r = wk_jail_seccomp_apply(&prog);
        if (r < 0)
                return sp_error_set_errno(err, SP_E_INTERNAL, -r, "load the seccomp filter");
        return 0;
}
