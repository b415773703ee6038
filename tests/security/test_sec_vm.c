/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Root inside a qemu sandbox against what encloses it, on a real cluster (a
 * control plane with PostgreSQL and one qemu worker under TCG, so that it
 * runs on any Linux host). The jail's escapes (test_sec_sandbox.c) go through
 * the host's kernel; a VM's guest has its own, and these check that it has
 * nothing else of the host's either:
 *
 *   - its kernel is not the host's;
 *   - it has no device but its own: no PCI bus, and no virtio device but its
 *     disk, its agent's console and its network card (no shared folder, no
 *     vsock, no balloon);
 *   - its network is a jail's (docs/networking.md): behind the egress
 *     gateway, which lets it reach what its profile allows in this test's
 *     own internet (inet.h) and nothing else; UDP past DNS, its router's
 *     and the host's ports reach nothing; it has the fixed address and
 *     router of every VM, and keeps them, and its network, across a suspend
 *     and its wake (docs/backends.md, "Network");
 *   - the host's files are not in it: a marker the test writes beside the
 *     worker's state and storage is nowhere in the guest's filesystems;
 *   - the worker's and the control plane's ports, which listen on the host's
 *     loopback, are not reachable from the guest's;
 *   - filling its memory (a /dev/shm file larger than its RAM) is the
 *     guest's own problem: the VM answers afterwards and the worker lives;
 *   - creating machines of ever new shapes (memory, disk size) leaves no
 *     more than 4 disk images and 4 base snapshots in the template's
 *     directory, the least recently used removed;
 *   - rewriting its disk so that the host's copy-on-write keeps every old
 *     extent half-referenced (each pass shifted by a block) takes no more
 *     of the pool than its quota (twice its disk, its memory and a margin:
 *     docs/backends.md "Disk"), though it takes more than its disk's size.
 *
 * Commands run as root through the API's sessions (exit codes only). Needs
 * root, PostgreSQL, QEMU and the guest kernel (scripts/vm-kernel); skips
 * visibly without them.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "guard.h"
#include "harness.h"
#include "inet.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

static sp_test_space S;
static sp_test_inet in;
static char *dir;
static int ns_guard;
static char key[256], id[64];

static const sp_test_inet_record records[] = {
        {"allowed.test", "10.213.200.1"},
        {"evil.test", "10.213.200.3"},
};

static void cluster_up(void)
{
        sp_error *e = NULL;
        dir = sp_test_tmpdir("secvm");
        sp_test_ok(sp_test_inet_start(&in, dir, records, SP_ARRAY_SIZE(records), &e), &e);
        const char *del_ns[] = {"ip", "netns", "delete", in.ns.name, NULL};
        ns_guard = sp_test_guard_run(del_ns, &e);
        sp_test_ok(ns_guard, &e);
        static const char *const wargs[] = {"--backend=qemu", "--accel=tcg", NULL};
        sp_test_space_opts o = {.workers = 1, .net_upstream = in.ns.path, .worker_args = wargs};
        sp_test_space_up(&S, &o);
        sp_test_new_tenant(&S, "vm", key);
        sp_test_create_sandbox(&S, key,
                               "{\"template\":\"base\",\"backend\":\"qemu\",\"egress\":{\"domains\":[\"allowed.test\"],"
                               "\"ports\":[80]}}",
                               id);
}

static void cluster_down(void)
{
        char logp[700];
        snprintf(logp, sizeof(logp), "%s/w0/worker.log", S.dir);
        sp_test_dump_file_tail("worker", logp, 20);
        sp_test_space_down(&S);
        sp_test_inet_stop(&in);
        sp_test_guard_done(ns_guard);
        sp_test_tmpdir_remove(dir);
        free(dir);
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
        ck_assert_msg(run("test \"$(ls /sys/class/net | tr '\\n' ' ')\" = 'eth0 lo '") == 0,
                      "network devices besides eth0 and lo");
        ck_assert_msg(run("test ! -d /sys/bus/pci/devices || test -z \"$(ls /sys/bus/pci/devices)\"") == 0,
                      "a PCI device");
        /* virtio device ids: 1 net, 2 block, 3 console; anything else (9p 9, vsock 19, balloon 5) is not ours. */
        ck_assert_msg(run("for d in /sys/bus/virtio/devices/*; do case $(cat $d/device) in 0x0001|0x0002|0x0003) ;; "
                          "*) exit 1;; esac; done; test $(ls /sys/bus/virtio/devices | wc -l) -eq 3") == 0,
                      "a virtio device besides the disk, the console and the network card");
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

/* The host's end of the (only) sandbox link of worker w: an address on an interface of its prefix. */
static void host_end_of(int w, char out[static 16])
{
        struct ifaddrs *ifs = NULL;
        ck_assert_int_eq(getifaddrs(&ifs), 0);
        size_t n = strlen(S.net[w].ifprefix);
        for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
                if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && strncmp(i->ifa_name, S.net[w].ifprefix, n) == 0)
                        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, 16);
        freeifaddrs(ifs);
}

START_TEST(the_hosts_ports_are_out_of_reach)
{
        /* The worker's RPC and the control plane's ports listen on the host's loopback: from the
         * guest's, nothing answers there; nor at its router (the namespace QEMU's tap is in), nor at the
         * host's end of its link (whose firewall hands every TCP connection to the gateway, which
         * refuses an address no name of the profile resolved to). */
        int ports[] = {S.rpc_port[0], S.api_port[0]};
        const char *where[] = {"127.0.0.1", "169.254.77.1", "$(cat /tmp/host_end)"};
        ck_assert_int_eq(run("command -v nc >/dev/null && ip route | awk '/default/ {print $3}' > /tmp/router && "
                             "test \"$(cat /tmp/router)\" = 169.254.77.1"),
                         0);
        /* Its router answers nothing for itself (no ping either; root in the guest may send one). */
        ck_assert_int_eq(run("command -v ping >/dev/null && ! ping -c 1 -W 2 169.254.77.1 >/dev/null 2>&1"), 0);
        /* The host end: the worker's record of the sandbox's link, not the guest's (which never sees it). */
        char host_end[16] = "";
        host_end_of(0, host_end);
        ck_assert_msg(host_end[0], "no host end of worker 0's prefix %s", S.net[0].ifprefix);
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "echo %s > /tmp/host_end", host_end);
        ck_assert_int_eq(run(cmd), 0);
        for (size_t w = 0; w < SP_ARRAY_SIZE(where); w++)
                for (size_t i = 0; i < SP_ARRAY_SIZE(ports); i++) {
                        /* Not a byte back: the host end's connection is the gateway's, which closes it. */
                        snprintf(cmd, sizeof(cmd),
                                 "test -z \"$(printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 2 %s %d 2>/dev/null)\"",
                                 where[w], ports[i]);
                        ck_assert_msg(run(cmd) == 0, "port %d at %s answered in the guest", ports[i], where[w]);
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

/* The storage directory (worker 0's) of the sandbox with that id: the one whose record names it. */
static void storage_dir_of(const char *sid, char out[static 700])
{
        char states[600];
        snprintf(states, sizeof(states), "%s/w0/state/sandboxes", S.dir);
        _cleanup_(sp_closedirp) DIR *d = opendir(states);
        ck_assert_ptr_nonnull(d);
        out[0] = '\0';
        for (struct dirent *de; (de = readdir(d));) {
                char rec[900];
                snprintf(rec, sizeof(rec), "%s/%s/sandbox.json", states, de->d_name);
                _cleanup_buf_ sp_buf text = SP_BUF_INIT;
                _cleanup_json_ json_object *o = NULL;
                if (de->d_name[0] == '.' || sp_file_read(rec, 1 << 20, &text, NULL) < 0 ||
                    sp_json_parse(text.data, text.len, &o, NULL) < 0)
                        continue;
                const char *rid = sp_json_member_str(o, "id");
                if (rid && strcmp(rid, sid) == 0)
                        snprintf(out, 700, "%s/w0/storage/sandboxes/%s", S.dir, de->d_name);
        }
        ck_assert_msg(out[0], "no record of sandbox %s on worker 0", sid);
}

/* Its qgroup's exclusive bytes and limit, as btrfs-progs reports them after a sync. */
static void qgroup_of(const char *path, uint64_t *excl, uint64_t *max)
{
        char cmd[900];
        snprintf(cmd, sizeof(cmd), "btrfs filesystem sync '%s' >/dev/null && btrfs qgroup show --raw -e -f '%s'", path,
                 path);
        FILE *f = popen(cmd, "r");
        ck_assert_ptr_nonnull(f);
        char line[256];
        bool found = false;
        while (fgets(line, sizeof(line), f)) {
                unsigned lvl;
                uint64_t sub, rfer;
                char m[32];
                if (sscanf(line, "%u/%" SCNu64 " %" SCNu64 " %" SCNu64 " %31s", &lvl, &sub, &rfer, excl, m) == 5 &&
                    lvl == 0) {
                        *max = strcmp(m, "none") == 0 ? 0 : strtoull(m, NULL, 10);
                        found = true;
                }
        }
        ck_assert_int_eq(pclose(f), 0);
        ck_assert_msg(found, "no qgroup of %s", path);
}

/* Entries of the base template's vm/ directory on worker 0 whose names start with prefix (and
 * hold needle, if given). */
static int vm_entries(const char *prefix, const char *needle)
{
        char vm[700];
        snprintf(vm, sizeof(vm), "%s/w0/storage/templates/base/vm", S.dir);
        _cleanup_(sp_closedirp) DIR *d = opendir(vm);
        int n = 0;
        for (struct dirent *de; d && (de = readdir(d));)
                if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 && !strstr(de->d_name, ".tmp") &&
                    (!needle || strstr(de->d_name, needle)))
                        n++;
        return n;
}

START_TEST(new_machine_shapes_leave_bounded_files)
{
        /* Each shape makes a disk image of its size and, after its first create, a base snapshot
         * of its machine: six shapes, one after the other, each deleted at once. */
        for (int i = 0; i < 6; i++) {
                char body[256], sid[64], needle[32], path[160];
                snprintf(body, sizeof(body),
                         "{\"template\":\"base\",\"backend\":\"qemu\",\"resources\":{\"disk_mb\":%d,"
                         "\"memory_mb\":%d}}",
                         64 + i, 128 + i);
                sp_test_create_sandbox(&S, key, body, sid);
                snprintf(path, sizeof(path), "/v1/sandboxes/%s", sid);
                _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", path, 202, NULL, NULL);
                json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
                /* Its base is made in the background: wait for it. */
                snprintf(needle, sizeof(needle), "-%dm1c%dd", 128 + i, 64 + i);
                int64_t deadline = sp_now_mono_us() + 180 * 1000000LL;
                while (vm_entries("base-", needle) == 0 && sp_now_mono_us() < deadline)
                        usleep(250000);
                ck_assert_msg(vm_entries("base-", needle) == 1, "no base snapshot of shape %s", needle);
                ck_assert_msg(vm_entries("base-", NULL) <= 4, "%d base snapshots kept", vm_entries("base-", NULL));
                ck_assert_msg(vm_entries("disk-", NULL) <= 4, "%d disk images kept", vm_entries("disk-", NULL));
        }
        /* The newest stay, the oldest went. */
        ck_assert_int_eq(vm_entries("base-", "-133m1c69d"), 1);
        ck_assert_int_eq(vm_entries("disk-69.", NULL), 1);
        ck_assert_int_eq(vm_entries("base-", "-128m1c64d"), 0);
        ck_assert_int_eq(vm_entries("disk-64.", NULL), 0);
        /* The suite's own sandbox, whose shape's files went, still answers. */
        ck_assert_int_eq(run("true"), 0);
}
END_TEST

START_TEST(rewriting_its_disk_takes_no_more_than_its_quota)
{
        /* A small disk and memory, so that its quota is soon reached. */
        char vid[64], sdir[700];
        sp_test_create_sandbox(&S, key,
                               "{\"template\":\"base\",\"backend\":\"qemu\","
                               "\"resources\":{\"disk_mb\":64,\"memory_mb\":128}}",
                               vid);
        storage_dir_of(vid, sdir);
        uint64_t excl = 0, max = 0;
        qgroup_of(sdir, &excl, &max);
        /* Twice its disk, its memory and a margin of 64 MiB. */
        ck_assert_uint_eq(max, (UINT64_C(2) * 64 + 128 + 64) << 20);
        /* A 40 MiB file written once, then rewritten pass after pass but for one 8 KiB unit in the
         * middle of each range the last pass wrote, and every unit skipped before: each extent the
         * host's copy-on-write made for the last pass stays referenced by that unit, so every pass
         * keeps all of the one before it. Writes past the quota fail in the guest (its disk reports
         * them: its own problem). */
        static const char attack[] =
                "U=8192; n=5120; P=10; "
                "dd if=/dev/urandom of=/dev/shm/r bs=$U count=$((n+P+1)) 2>/dev/null || exit 10; "
                "dd if=/dev/shm/r of=/pin bs=$U count=$n 2>/dev/null || exit 11; sync; "
                "skips=''; p=1; "
                "while [ $p -le $P ]; do "
                "  new=''; prev=-1; "
                "  for s in $skips $n; do "
                "    a=$((prev+1)); b=$((s-1)); "
                "    if [ $((b-a)) -ge 2 ]; then new=\"$new $(((a+b)/2))\"; fi; "
                "    if [ $s -lt $n ]; then new=\"$new $s\"; fi; prev=$s; "
                "  done; "
                "  skips=$new; prev=-1; "
                "  for s in $skips $n; do "
                "    a=$((prev+1)); "
                "    if [ $s -gt $a ]; then dd if=/dev/shm/r of=/pin bs=$U skip=$((a+p)) seek=$a count=$((s-a)) "
                "conv=notrunc 2>/dev/null; fi; prev=$s; "
                "  done; "
                "  sync; p=$((p+1)); "
                "done; true";
        (void)sp_test_sandbox_run(&S, key, vid, attack, 600);
        qgroup_of(sdir, &excl, &max);
        /* The attack works (it holds more than twice its disk), the quota is what stopped it (its disk
         * reported a write error), and nothing past the quota is held. */
        ck_assert_msg(excl > (UINT64_C(2) * 64) << 20, "the rewrites held only %" PRIu64 " bytes", excl);
        ck_assert_msg(excl <= max, "%" PRIu64 " bytes held, past the quota of %" PRIu64, excl, max);
        ck_assert_msg(sp_test_sandbox_run(&S, key, vid, "dmesg | grep -q 'I/O error'", 120) == 0,
                      "no write failed in the guest (%" PRIu64 " of %" PRIu64 " bytes held)", excl, max);
        /* It still answers, and so does the other sandbox, which can still write. */
        ck_assert_int_eq(run("echo ok > /tmp/after-disk && grep -q ok /tmp/after-disk"), 0);
        /* Deleted at its quota (btrfs needs room to delete a subvolume): nothing of it stays. */
        char path[160];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", vid);
        _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", path, 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
        int64_t deadline = sp_now_mono_us() + 60 * 1000000LL;
        while (access(sdir, F_OK) == 0 && sp_now_mono_us() < deadline)
                usleep(200000);
        ck_assert_msg(access(sdir, F_OK) < 0, "the deleted sandbox's storage %s stayed", sdir);
}
END_TEST

#define GET_ALLOWED "timeout 20 wget -q -O /tmp/o http://allowed.test/ && grep -q 'http allowed.test' /tmp/o"

START_TEST(its_network_is_behind_the_gateway)
{
        /* Every VM's fixed address, router and resolver: the worker's side translates them. */
        ck_assert_int_eq(run("ip -4 addr show eth0 | grep -q 'inet 169.254.77.2/30' && "
                             "grep -qx 'nameserver 169.254.77.1' /etc/resolv.conf"),
                         0);
        ck_assert_msg(run(GET_ALLOWED) == 0, "the guest could not reach what its profile allows");
        ck_assert_int_eq(sp_test_inet_seen(&in, "tcp 10.213.200.1:80 sni=- host=allowed.test"), 1);
        /* A name its profile does not allow: refused, and nothing reached that host. */
        ck_assert_int_ne(run("timeout 20 wget -q -O /tmp/e http://evil.test/"), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, "accept tcp 10.213.200.3"), 0);
        /* UDP past DNS (to the internet's echo port) is dropped before it leaves the host. */
        ck_assert_int_eq(run("echo hi | timeout 5 nc -u -w 2 10.213.200.1 9999 >/tmp/u; test ! -s /tmp/u"), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, "udp 10.213.200.1:9999 echo"), 0);
        /* IPv6 is off in the guest, as in a jail's namespace. */
        ck_assert_int_eq(run("test \"$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6)\" = 1"), 0);
        /* The gateway's log has it as this sandbox's (the translation gives it the sandbox's address). */
        char path[160];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/egress/log?decision=allowed", id);
        _cleanup_json_ json_object *log = sp_test_api(&S, key, "GET", path, 200, NULL, NULL);
        ck_assert_msg(strstr(json_object_to_json_string(log), "allowed.test"), "no allowed record: %s",
                      json_object_to_json_string(log));
}
END_TEST

START_TEST(its_network_survives_a_suspend)
{
        char state[32];
        sp_test_sandbox_action(&S, key, id, "suspend", state);
        ck_assert_str_eq(state, "suspended");
        sp_test_sandbox_action(&S, key, id, "restore", state);
        ck_assert_str_eq(state, "running");
        int before = sp_test_inet_seen(&in, "tcp 10.213.200.1:80 sni=- host=allowed.test");
        ck_assert_msg(run(GET_ALLOWED) == 0, "the woken guest could not reach what its profile allows");
        ck_assert_int_eq(sp_test_inet_seen(&in, "tcp 10.213.200.1:80 sni=- host=allowed.test"), before + 1);
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
        tcase_add_test(tc, its_network_is_behind_the_gateway);
        tcase_add_test(tc, its_network_survives_a_suspend);
        tcase_add_test(tc, filling_its_memory_is_its_own_problem);
        tcase_add_test(tc, rewriting_its_disk_takes_no_more_than_its_quota);
        tcase_add_test(tc, new_machine_shapes_leave_bounded_files);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_require_program("qemu-system-x86_64", "the qemu backend (Debian: qemu-system-x86)");
        sp_test_require_program("mkfs.ext4", "the VM's disk (Debian: e2fsprogs)");
        sp_test_require_program("btrfs", "reading a sandbox's disk quota (Debian: btrfs-progs)");
        if (access("/var/lib/space/vm-kernel/vmlinuz", R_OK) < 0)
                sp_test_skip("no guest kernel at /var/lib/space/vm-kernel (scripts/vm-kernel installs it)");
        sp_test_pg_require();
        return sp_test_main(suite());
}
