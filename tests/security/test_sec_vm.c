/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Root inside a qemu sandbox against what encloses it, on a real cluster (a
 * control plane with PostgreSQL and one qemu worker under TCG, so that it
 * runs on any Linux host). The jail's escapes (test_sec_sandbox.c) go through
 * the host's kernel; a VM's guest has its own, and these check that it has
 * nothing else of the host's either:
 *
 *   - its kernel is not the host's;
 *   - it has no network device but its loopback, no PCI bus, and no virtio
 *     device but its disk and its agent's console (no shared folder, no
 *     vsock, no balloon);
 *   - the host's files are not in it: a marker the test writes beside the
 *     worker's state and storage is nowhere in the guest's filesystems;
 *   - the worker's and the control plane's ports, which listen on the host's
 *     loopback, are not reachable from the guest's;
 *   - filling its memory (a /dev/shm file larger than its RAM) is the
 *     guest's own problem: the VM answers afterwards and the worker lives.
 *
 * Commands run as root through the API's sessions (exit codes only). Needs
 * root, PostgreSQL, QEMU and the guest kernel (scripts/vm-kernel); skips
 * visibly without them.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space_cluster.h"

static sp_test_space S;
static char key[256], id[64];

static void cluster_up(void)
{
        static const char *const wargs[] = {"--backend=qemu", "--accel=tcg", NULL};
        sp_test_space_opts o = {.workers = 1, .no_network = true, .worker_args = wargs};
        sp_test_space_up(&S, &o);
        sp_test_new_tenant(&S, "vm", key);
        sp_test_create_sandbox(&S, key, "{\"template\":\"base\",\"backend\":\"qemu\"}", id);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

static int run(const char *cmd)
{
        return sp_test_sandbox_run(&S, key, id, cmd, 180);
}

START_TEST(its_kernel_is_not_the_hosts)
{
        struct utsname u;
        ck_assert_int_eq(uname(&u), 0);
        char cmd[512];
        snprintf(cmd, sizeof(cmd), "test \"$(uname -r)\" != '%s' && test \"$(uname -v)\" != '%s'", u.release,
                 u.version);
        ck_assert_msg(run(cmd) == 0, "the guest runs the host's kernel (%s)", u.release);
}
END_TEST

START_TEST(it_has_no_device_of_the_hosts)
{
        ck_assert_msg(run("test \"$(ls /sys/class/net)\" = lo") == 0, "a network device besides lo");
        ck_assert_msg(run("test ! -d /sys/bus/pci/devices || test -z \"$(ls /sys/bus/pci/devices)\"") == 0,
                      "a PCI device");
        /* virtio device ids: 2 block, 3 console; anything else (9p 9, vsock 19, balloon 5, net 1) is not ours. */
        ck_assert_msg(run("for d in /sys/bus/virtio/devices/*; do case $(cat $d/device) in 0x0002|0x0003) ;; *) "
                          "exit 1;; esac; done; test $(ls /sys/bus/virtio/devices | wc -l) -eq 2") == 0,
                      "a virtio device besides the disk and the console");
        ck_assert_msg(run("! grep -qw 9p /proc/filesystems || ! grep -q ' 9p ' /proc/mounts") == 0, "a 9p mount");
}
END_TEST

START_TEST(the_hosts_files_are_not_in_it)
{
        char token[64], path[900], cmd[512];
        snprintf(token, sizeof(token), "space-host-marker-%d-%ld", (int)getpid(), (long)time(NULL));
        static const char *const where[] = {"w0/state", "w0/storage", "w0"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(where); i++) {
                snprintf(path, sizeof(path), "%s/%s/%s", S.dir, where[i], token);
                sp_error *e = NULL;
                sp_test_ok(sp_file_write_atomic(path, token, strlen(token), 0644, &e), &e);
        }
        /* Not as a name anywhere on its filesystems (reading its whole disk for the bytes takes minutes
         * under TCG), and a find that works finds a name that is there. */
        snprintf(cmd, sizeof(cmd),
                 "command -v find >/dev/null || exit 2; test -n \"$(find / -xdev -name passwd 2>/dev/null)\" && "
                 "test -z \"$(find / -name '%s*' 2>/dev/null)\"",
                 token);
        ck_assert_msg(run(cmd) == 0, "a file of the host's is in the guest");
}
END_TEST

START_TEST(the_hosts_ports_are_out_of_reach)
{
        /* The worker's RPC and the control plane's ports listen on the host's loopback: from the
         * guest's, nothing answers there (and it has no other interface). */
        int ports[] = {S.rpc_port[0], S.api_port[0]};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ports); i++) {
                char cmd[256];
                snprintf(cmd, sizeof(cmd), "command -v nc >/dev/null || exit 2; ! nc -w 2 127.0.0.1 %d </dev/null",
                         ports[i]);
                ck_assert_msg(run(cmd) == 0, "port %d answered in the guest", ports[i]);
        }
}
END_TEST

START_TEST(filling_its_memory_is_its_own_problem)
{
        pid_t worker = S.workers[0].pid;
        /* More than its RAM into a tmpfs: the guest's kernel refuses or kills inside it. */
        (void)run("dd if=/dev/zero of=/dev/shm/fill bs=1M count=4096 2>/dev/null; true");
        ck_assert_int_eq(run("rm -f /dev/shm/fill; echo ok > /tmp/after && grep -q ok /tmp/after"), 0);
        ck_assert_msg(kill(worker, 0) == 0, "the worker died");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sec_vm");
        TCase *tc = tcase_create("vm");
        tcase_set_timeout(tc, 900);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, its_kernel_is_not_the_hosts);
        tcase_add_test(tc, it_has_no_device_of_the_hosts);
        tcase_add_test(tc, the_hosts_files_are_not_in_it);
        tcase_add_test(tc, the_hosts_ports_are_out_of_reach);
        tcase_add_test(tc, filling_its_memory_is_its_own_problem);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_require_program("qemu-system-x86_64", "the qemu backend (Debian: qemu-system-x86)");
        sp_test_require_program("mkfs.ext4", "the VM's disk (Debian: e2fsprogs)");
        if (access("/var/lib/space/vm-kernel/vmlinuz", R_OK) < 0)
                sp_test_skip("no guest kernel at /var/lib/space/vm-kernel (scripts/vm-kernel installs it)");
        sp_test_pg_require();
        return sp_test_main(suite());
}
