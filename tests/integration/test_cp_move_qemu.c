/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A VM moves between workers with its processes, against a real control
 * plane and two qemu workers (TCG, so that it runs on any Linux host):
 *
 *   - a qemu sandbox runs a counter that holds a file open and keeps its
 *     state in /dev/shm; it is suspended (memory and devices saved), its
 *     worker drained, and woken: it runs on the other worker, and the same
 *     process goes on counting — its pid, its /dev/shm files and its open
 *     file intact, its numbers without a gap or a restart;
 *   - its clock is the host's again (it stood still while the VM was saved);
 *   - its network works on either worker (the workers' sandbox networks
 *     differ, the guest's configuration does not: docs/backends.md,
 *     "Network"): it reaches what its profile allows in this test's own
 *     internet (inet.h) before and after the move, as does a VM restored
 *     from a base snapshot, which was made without a network;
 *   - deleting it leaves no QEMU process, link, artifact or staging behind
 *     on either worker;
 *   - fast starts on the same two workers (sharing their boots): after a
 *     create had to boot, the worker makes the template's base snapshot, and
 *     the next creates restore copies of it — each with its own host name,
 *     its own randomness (the copies' kernels are reseeded: their first
 *     random bytes differ), the host's time and its own disk; a warm pool of
 *     VMs fills from the base and a create claims one, which takes the
 *     caller's host name.
 *
 * Commands are checked through their exit codes (GET /v1/sessions/{id}), so
 * that no data plane is needed. Needs root, btrfs, PostgreSQL, QEMU and the
 * guest kernel (scripts/vm-kernel); skips visibly without the last two.
 */
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "guard.h"
#include "harness.h"
#include "http_client.h"
#include "inet.h"
#include "proc.h"
#include "space/fileio.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

static sp_test_space S;
static sp_test_inet in;
static char *dir;
static int ns_guard;

static const sp_test_inet_record records[] = {{"allowed.test", "10.213.200.1"}};
#define BODY "{\"template\":\"base\",\"backend\":\"qemu\",\"egress\":{\"domains\":[\"allowed.test\"],\"ports\":[80]}}"
#define GET_ALLOWED "timeout 20 wget -q -O /tmp/o http://allowed.test/ && grep -q 'http allowed.test' /tmp/o"
#define SEEN_ALLOWED "tcp 10.213.200.1:80 sni=- host=allowed.test"

static void cluster_up(void)
{
        sp_error *e = NULL;
        dir = sp_test_tmpdir("cpmoveqemu");
        sp_test_ok(sp_test_inet_start(&in, dir, records, SP_ARRAY_SIZE(records), &e), &e);
        const char *del_ns[] = {"ip", "netns", "delete", in.ns.name, NULL};
        ns_guard = sp_test_guard_run(del_ns, &e);
        sp_test_ok(ns_guard, &e);
        static const char *const wargs[] = {"--backend=qemu", "--accel=tcg", NULL};
        sp_test_space_opts o = {.workers = 2, .net_upstream = in.ns.path, .worker_args = wargs};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
        sp_test_inet_stop(&in);
        sp_test_guard_done(ns_guard);
        sp_test_tmpdir_remove(dir);
        free(dir);
}

/* Sandbox links (host ends) of worker i left on the host. */
static int links_of(int i)
{
        struct if_nameindex *all = if_nameindex();
        ck_assert_ptr_nonnull(all);
        int n = 0;
        size_t len = strlen(S.net[i].ifprefix);
        for (const struct if_nameindex *x = all; x->if_index; x++)
                n += strncmp(x->if_name, S.net[i].ifprefix, len) == 0;
        if_freenameindex(all);
        return n;
}

static int run(const char *key, const char *id, const char *cmd)
{
        return sp_test_sandbox_run(&S, key, id, cmd, 120);
}

/* Waits until cmd exits 0. */
static void until(const char *key, const char *id, const char *cmd)
{
        for (int i = 0; i < 60; i++) {
                if (run(key, id, cmd) == 0)
                        return;
                usleep(500000);
        }
        ck_abort_msg("%s never succeeded", cmd);
}

/* QEMU processes whose command line names the sandbox. */
static int qemu_processes_of(const char *id)
{
        return (int)sp_test_procs_with_cmdline("qemu-system", id);
}

/* Whether anything of sandbox id is left under worker i's state or storage. */
static bool leftovers(int i, const char *id)
{
        static const char *const where[] = {"state/sandboxes", "state/incoming", "storage/sandboxes"};
        for (size_t k = 0; k < SP_ARRAY_SIZE(where); k++) {
                char p[1024];
                struct stat st;
                snprintf(p, sizeof(p), "%s/w%d/%s/%s", S.dir, i, where[k], id);
                if (lstat(p, &st) == 0)
                        return true;
                snprintf(p, sizeof(p), "%s/w%d/%s/%s.incoming", S.dir, i, where[k], id);
                if (lstat(p, &st) == 0)
                        return true;
        }
        return false;
}

START_TEST(a_suspended_vm_wakes_on_the_other_worker_with_its_processes)
{
        char key[256], id[64], from[64], to[64], path[160], state[32];
        sp_test_new_tenant(&S, "move", key);
        sp_test_create_sandbox(&S, key, BODY, id);
        sp_test_sandbox_worker(&S, key, id, from);
        int seen = sp_test_inet_seen(&in, SEEN_ALLOWED);
        ck_assert_int_eq(run(key, id, GET_ALLOWED), 0);
        ck_assert_int_eq(sp_test_inet_seen(&in, SEEN_ALLOWED), seen + 1);

        /* A counter: its pid and count in /dev/shm, every number appended to a file it holds open. */
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string("sh"));
        json_object_array_add(argv, json_object_new_string("-c"));
        json_object_array_add(
                argv, json_object_new_string("echo $$ > /dev/shm/pid; exec 3>>/tmp/held; i=0; while :; do "
                                             "i=$((i+1)); echo $i >&3; echo $i > /dev/shm/count; sleep 0.2; done"));
        json_object_object_add(body, "argv", argv);
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", id);
        json_object_put(sp_test_api(&S, key, "POST", path, 201, json_object_to_json_string(body), NULL));
        until(key, id, "test \"$(cat /dev/shm/count 2>/dev/null)\" -ge 3");

        sp_test_sandbox_action(&S, key, id, "suspend", state);
        ck_assert_str_eq(state, "suspended");
        ck_assert_int_eq(qemu_processes_of(id), 0); /* a suspended VM holds no QEMU */
        snprintf(path, sizeof(path), "/v1/workers/%s/drain", from);
        json_object_put(sp_test_api(&S, S.admin_key, "POST", path, 200, NULL, NULL));

        sp_test_sandbox_action(&S, key, id, "restore", state);
        ck_assert_str_eq(state, "running");
        sp_test_sandbox_worker(&S, key, id, to);
        ck_assert_msg(strcmp(from, to) != 0, "it woke on the worker it was suspended on (%s)", from);

        /* The same process: alive, its file still open, its numbers going on from where they were, without a
         * gap or a second start. */
        ck_assert_int_eq(run(key, id, "cp /dev/shm/count /dev/shm/woken && kill -0 $(cat /dev/shm/pid)"), 0);
        until(key, id, "test $(cat /dev/shm/count) -gt $(cat /dev/shm/woken)");
        ck_assert_int_eq(run(key, id, "test \"$(readlink /proc/$(cat /dev/shm/pid)/fd/3)\" = /tmp/held"), 0);
        ck_assert_int_eq(run(key, id, "test $(wc -l < /tmp/held) -gt $(cat /dev/shm/woken)"), 0);
        ck_assert_int_eq(run(key, id, "awk 'NR != $1 { exit 1 }' /tmp/held"), 0);
        /* Its clock was set when it woke: it stood still while the VM was saved and moved. */
        char clock[200];
        snprintf(clock, sizeof(clock), "h=%lld; d=$(date +%%s); test $((d - h)) -le 10 -a $((h - d)) -le 10",
                 (long long)time(NULL));
        ck_assert_msg(run(key, id, clock) == 0, "the guest's clock is off by more than 10 s after the wake");
        /* Its network, on the other worker's sandbox network, with the configuration it had. */
        ck_assert_msg(run(key, id, GET_ALLOWED) == 0, "the moved VM could not reach what its profile allows");
        ck_assert_int_eq(sp_test_inet_seen(&in, SEEN_ALLOWED), seen + 2);

        /* Delete: nothing of it stays on either worker. */
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", path, 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
        int64_t deadline = sp_now_mono_us() + 60 * 1000000LL;
        while ((qemu_processes_of(id) > 0 || leftovers(0, id) || leftovers(1, id)) && sp_now_mono_us() < deadline)
                usleep(200000);
        ck_assert_int_eq(qemu_processes_of(id), 0);
        ck_assert_msg(!leftovers(0, id) && !leftovers(1, id), "sandbox %s left files on a worker", id);
        deadline = sp_now_mono_us() + 10 * 1000000LL;
        while ((links_of(0) || links_of(1)) && sp_now_mono_us() < deadline)
                usleep(100000);
        ck_assert_msg(!links_of(0) && !links_of(1), "sandbox links left: %d and %d", links_of(0), links_of(1));

        snprintf(path, sizeof(path), "/v1/workers/%s/uncordon", from);
        json_object_put(sp_test_api(&S, S.admin_key, "POST", path, 200, NULL, NULL));
}
END_TEST

/* The worker's /metrics value of series (its full name with labels), or -1. */
static long long worker_metric(int i, const char *series)
{
        int port = 0;
        for (char *const *a = S.workers[i].argv; a && *a && !port; a++)
                sscanf(*a, "--http-listen=127.0.0.1:%d", &port);
        ck_assert_msg(port > 0, "worker %d's metrics port", i);
        sp_test_http_response r = {0};
        _cleanup_error_ sp_error *e = NULL;
        if (sp_test_http(port, "GET", "/metrics", NULL, NULL, 10000, &r, &e) < 0)
                return -1;
        long long v = -1;
        size_t n = strlen(series);
        for (const char *l = r.body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
                if (strncmp(l, series, n) == 0 && l[n] == ' ')
                        v = atoll(l + n + 1);
        sp_test_http_response_free(&r);
        return v;
}

/* Which of S.workers worker_id is (by the address it registered). */
static int worker_index(const char *worker_id)
{
        const char *params[] = {worker_id};
        _cleanup_free_ char *addr = sp_test_space_sql(&S, "SELECT address FROM workers WHERE id = $1", 1, params);
        ck_assert_msg(addr, "worker %s's address", worker_id);
        for (int i = 0; i < 2; i++)
                for (char *const *a = S.workers[i].argv; a && *a; a++)
                        if (strncmp(*a, "--listen=", 9) == 0 && strcmp(*a + 9, addr) == 0)
                                return i;
        ck_abort_msg("no worker listens on %s", addr);
        return -1;
}

/* Waits until worker i's series reaches at least want. */
static void until_metric(int i, const char *series, long long want, int timeout_s)
{
        int64_t deadline = sp_now_mono_us() + (int64_t)timeout_s * 1000000;
        while (worker_metric(i, series) < want && sp_now_mono_us() < deadline)
                usleep(250000);
        ck_assert_msg(worker_metric(i, series) >= want, "worker %d: %s stayed at %lld (want %lld)", i, series,
                      worker_metric(i, series), want);
}

/* The first n bytes of /root/rand in sandbox id, one exit code each. */
static void read_rand(const char *key, const char *id, int n, char *out, size_t outsz)
{
        out[0] = '\0';
        for (int k = 0; k < n; k++) {
                char cmd[128];
                snprintf(cmd, sizeof(cmd), "exit $(od -An -tu1 -j%d -N1 /root/rand)", k);
                int b = run(key, id, cmd);
                ck_assert_msg(b >= 0 && b <= 255, "byte %d of /root/rand", k);
                size_t len = strlen(out);
                snprintf(out + len, outsz - len, " %d", b);
        }
}

static void hostname_of(const char *id, char *out, size_t n)
{
        snprintf(out, n, "%s", id);
        for (char *c = out; *c; c++)
                if (*c == '_')
                        *c = '-';
}

/* Before any create: each worker made the base template's base snapshot for the default machine when
 * the template arrived (at its start), so the first create that names no resources restores it. */
START_TEST(a_templates_base_is_made_when_it_arrives)
{
        for (int i = 0; i < 2; i++) {
                until_metric(i, "space_worker_vm_bases_total{result=\"made\"}", 1, 600);
                ck_assert_int_le(worker_metric(i, "space_worker_vm_creates_total{from=\"boot\"}"), 0);
        }
        char key[256], id[64], w[64], path[160];
        sp_test_new_tenant(&S, "ahead", key);
        sp_test_create_sandbox(&S, key, BODY, id);
        sp_test_sandbox_worker(&S, key, id, w);
        int wi = worker_index(w);
        ck_assert_int_eq(worker_metric(wi, "space_worker_vm_creates_total{from=\"base\"}"), 1);
        ck_assert_int_le(worker_metric(wi, "space_worker_vm_creates_total{from=\"boot\"}"), 0);
        ck_assert_int_eq(run(key, id, "echo up"), 0);
        /* The base was made without a network; its copy has one. */
        ck_assert_msg(run(key, id, GET_ALLOWED) == 0, "a VM restored from its base could not reach its allowed host");
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", path, 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
}
END_TEST

START_TEST(creates_restore_the_templates_base_snapshot_and_claim_warm_vms)
{
        char key[256], a[64], b[64], c[64], d[64], w[64], cmd[512], host[64], rand_b[128], path[160];
        sp_test_new_tenant(&S, "base", key);
        const char *body = "{\"template\":\"base\",\"backend\":\"qemu\"}";
        sp_test_create_sandbox(&S, key, body, a);
        sp_test_sandbox_worker(&S, key, a, w);
        int wi = worker_index(w);
        const char *params[] = {w};
        _cleanup_free_ char *other = sp_test_space_sql(&S, "SELECT id FROM workers WHERE id <> $1", 1, params);
        ck_assert_ptr_nonnull(other);
        /* The rest on the same worker: the base snapshot is that worker's. */
        snprintf(path, sizeof(path), "/v1/workers/%s/cordon", other);
        json_object_put(sp_test_api(&S, S.admin_key, "POST", path, 200, NULL, NULL));

        /* A booted (or restored, if an earlier create on this worker made the base already): the base follows. */
        until_metric(wi, "space_worker_vm_bases_total{result=\"made\"}", 1, 600);
        long long from_base = worker_metric(wi, "space_worker_vm_creates_total{from=\"base\"}");
        sp_test_create_sandbox(&S, key, body, b);
        sp_test_create_sandbox(&S, key, body, c);
        ck_assert_int_eq(worker_metric(wi, "space_worker_vm_creates_total{from=\"base\"}"), from_base + 2);

        /* Each copy: its own name, the host's time, its own disk. */
        hostname_of(c, host, sizeof(host));
        snprintf(cmd, sizeof(cmd), "test \"$(hostname)\" = %s", host);
        ck_assert_msg(run(key, c, cmd) == 0, "a restored VM does not have its own host name");
        snprintf(cmd, sizeof(cmd), "h=%lld; d=$(date +%%s); test $((d - h)) -le 10 -a $((h - d)) -le 10",
                 (long long)time(NULL));
        ck_assert_msg(run(key, c, cmd) == 0, "a restored VM's clock is off by more than 10 s");
        /* Its own randomness: the first bytes each copy reads differ (the same
         * generator state would give the same bytes). */
        ck_assert_int_eq(run(key, b, "head -c 8 /dev/urandom > /root/rand"), 0);
        ck_assert_int_eq(run(key, c, "head -c 8 /dev/urandom > /root/rand"), 0);
        read_rand(key, b, 8, rand_b, sizeof(rand_b));
        char rand_c[128];
        read_rand(key, c, 8, rand_c, sizeof(rand_c));
        ck_assert_msg(strcmp(rand_b, rand_c) != 0, "two copies of one base read the same random bytes:%s", rand_b);
        ck_assert_int_eq(run(key, b, "echo mine > /root/only-b && sync"), 0);
        ck_assert_int_eq(run(key, c, "test ! -e /root/only-b"), 0);

        /* A warm VM: made from the base, claimed by the next create, which names it. */
        json_object_put(sp_test_api(&S, S.admin_key, "POST", "/v1/templates/base/warm", 200, "{\"warm\":1}", NULL));
        until_metric(wi, "space_worker_warm_sandboxes{template=\"base\"}", 1, 600);
        sp_test_create_sandbox(&S, key, body, d);
        char logp[700], needle[200];
        snprintf(logp, sizeof(logp), "%s/w%d/worker.log", S.dir, wi);
        snprintf(needle, sizeof(needle), "sandbox_id=%s", d);
        _cleanup_buf_ sp_buf logbuf = SP_BUF_INIT;
        ck_assert_int_eq(sp_file_read(logp, 64 << 20, &logbuf, NULL), 0);
        bool claimed = false;
        for (char *l = logbuf.data; l && *l && !claimed; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
                char *end = strchr(l, '\n');
                size_t len = end ? (size_t)(end - l) : strlen(l);
                claimed = memmem(l, len, "claimed warm sandbox", 20) && memmem(l, len, needle, strlen(needle));
        }
        ck_assert_msg(claimed, "sandbox %s was not a claimed warm VM", d);
        hostname_of(d, host, sizeof(host));
        snprintf(cmd, sizeof(cmd), "test \"$(hostname)\" = %s", host);
        ck_assert_msg(run(key, d, cmd) == 0, "a claimed warm VM kept its pool name");
        /* Every restored copy's agent set its clock and name and reseeded its kernel's generator
         * (the bytes above would often differ without it: in its first two minutes a kernel reseeds
         * itself every uptime/2 seconds, and a base is saved seconds after its boot). */
        sp_buf_clear(&logbuf);
        ck_assert_int_eq(sp_file_read(logp, 64 << 20, &logbuf, NULL), 0);
        ck_assert_msg(!strstr(logbuf.data, "its agent answered no"), "an agent did not take its refresh: %s",
                      strstr(logbuf.data, "its agent answered no"));
        json_object_put(sp_test_api(&S, S.admin_key, "POST", "/v1/templates/base/warm", 200, "{\"warm\":0}", NULL));

        const char *ids[] = {a, b, c, d};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ids); i++) {
                snprintf(path, sizeof(path), "/v1/sandboxes/%s", ids[i]);
                _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", path, 202, NULL, NULL);
                json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
        }
        snprintf(path, sizeof(path), "/v1/workers/%s/uncordon", other);
        json_object_put(sp_test_api(&S, S.admin_key, "POST", path, 200, NULL, NULL));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_move_qemu");
        TCase *tc = tcase_create("move");
        tcase_set_timeout(tc, 900);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, a_templates_base_is_made_when_it_arrives);
        tcase_add_test(tc, a_suspended_vm_wakes_on_the_other_worker_with_its_processes);
        tcase_add_test(tc, creates_restore_the_templates_base_snapshot_and_claim_warm_vms);
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
