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
 *   - deleting it leaves no QEMU process, artifact or staging behind on
 *     either worker.
 *
 * Commands are checked through their exit codes (GET /v1/sessions/{id}), so
 * that no data plane is needed. Needs root, btrfs, PostgreSQL, QEMU and the
 * guest kernel (scripts/vm-kernel); skips visibly without the last two.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

static sp_test_space S;

static void cluster_up(void)
{
        static const char *const wargs[] = {"--backend=qemu", "--accel=tcg", NULL};
        sp_test_space_opts o = {.workers = 2, .no_network = true, .worker_args = wargs};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
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
        int n = 0;
        _cleanup_closedir_ DIR *d = opendir("/proc");
        struct dirent *de;
        while (d && (de = readdir(d))) {
                char p[300], buf[8192];
                snprintf(p, sizeof(p), "/proc/%s/cmdline", de->d_name);
                FILE *f = fopen(p, "r");
                if (!f)
                        continue;
                size_t k = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
                for (size_t i = 0; i < k; i++)
                        if (!buf[i])
                                buf[i] = ' ';
                buf[k] = '\0';
                if (strstr(buf, "qemu-system") && strstr(buf, id))
                        n++;
        }
        return n;
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
        sp_test_create_sandbox(&S, key, "{\"template\":\"base\",\"backend\":\"qemu\"}", id);
        sp_test_sandbox_worker(&S, key, id, from);

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

        /* Delete: nothing of it stays on either worker. */
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", path, 202, NULL, NULL);
        json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
        int64_t deadline = sp_now_mono_us() + 60 * 1000000LL;
        while ((qemu_processes_of(id) > 0 || leftovers(0, id) || leftovers(1, id)) && sp_now_mono_us() < deadline)
                usleep(200000);
        ck_assert_int_eq(qemu_processes_of(id), 0);
        ck_assert_msg(!leftovers(0, id) && !leftovers(1, id), "sandbox %s left files on a worker", id);

        snprintf(path, sizeof(path), "/v1/workers/%s/uncordon", from);
        json_object_put(sp_test_api(&S, S.admin_key, "POST", path, 200, NULL, NULL));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_move_qemu");
        TCase *tc = tcase_create("move");
        tcase_set_timeout(tc, 900);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, a_suspended_vm_wakes_on_the_other_worker_with_its_processes);
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
