/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One worker, two backends (docs/backends.md, "A worker with several
 * backends"), against a real control plane: a worker started with
 * --backend=jail,qemu (TCG, so that it runs on any Linux host)
 *
 *   - says so: the workers API lists both, the default (jail) first;
 *   - takes a create that asks for either, and one that names none (its
 *     default): a qemu sandbox runs the guest's kernel, a jail the host's;
 *     the API says which backend each sandbox is;
 *   - refuses, at once, a backend no worker of the cluster runs;
 *   - re-adopts both kinds after it is killed and started again, each by its
 *     own backend, and both answer;
 *   - deletes both, leaving no QEMU behind.
 *
 * Commands are checked through their exit codes. Needs root, btrfs,
 * PostgreSQL, QEMU and the guest kernel (scripts/vm-kernel); skips visibly
 * without the last two.
 */
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "harness.h"
#include "http_client.h"
#include "launcher.h"
#include "proc.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

static sp_test_space S;

static void cluster_up(void)
{
        static const char *const wargs[] = {"--backend=jail,qemu", "--accel=tcg", NULL};
        sp_test_space_opts o = {.workers = 1, .no_network = true, .worker_args = wargs};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        char logp[700];
        snprintf(logp, sizeof(logp), "%s/w0/worker.log", S.dir);
        sp_test_dump_file_tail("worker", logp, 20);
        sp_test_space_down(&S);
}

static int run(const char *key, const char *id, const char *cmd)
{
        return sp_test_sandbox_run(&S, key, id, cmd, 180);
}

/* Until the sandbox's agent takes a command again (after the worker's restart, its connection to a VM's
 * agent is made on a job thread: meanwhile an exec is 503). */
static void until_connected(const char *key, const char *id)
{
        char path[128], auth[300];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s/sessions", id);
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key);
        const char *headers[] = {auth, "Content-Type: application/json", NULL};
        int status = 0;
        int64_t deadline = sp_now_mono_us() + 60 * 1000000LL;
        while (status != 201 && sp_now_mono_us() < deadline) {
                sp_test_http_response r = {0};
                _cleanup_error_ sp_error *e = NULL;
                if (sp_test_http(S.api, "POST", path, headers, "{\"argv\":[\"true\"]}", 10000, &r, &e) == 0)
                        status = r.status;
                sp_test_http_response_free(&r);
                if (status != 201)
                        usleep(250000);
        }
        ck_assert_msg(status == 201, "sandbox %s took no command within 60 s of the restart (%d)", id, status);
}

static void backend_of(const char *key, const char *id, char out[static 16])
{
        char path[128];
        snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
        _cleanup_json_ json_object *sb = sp_test_api(&S, key, "GET", path, 200, NULL, NULL);
        const char *b = sp_test_jstr(sb, "backend");
        snprintf(out, 16, "%s", b ? b : "");
}

START_TEST(one_worker_runs_jails_and_vms)
{
        /* The worker lists both, its default first. */
        _cleanup_json_ json_object *ws = sp_test_api(&S, S.admin_key, "GET", "/v1/workers", 200, NULL, NULL);
        json_object *w0 = json_object_array_get_idx(sp_test_jarr(ws, "workers"), 0);
        ck_assert_ptr_nonnull(w0);
        json_object *list = NULL;
        int64_t deadline = sp_now_mono_us() + 30 * 1000000LL;
        for (;;) {
                ck_assert(json_object_object_get_ex(w0, "backends", &list));
                if (json_object_array_length(list) == 2 || sp_now_mono_us() > deadline)
                        break;
                usleep(200000); /* the first heartbeat names them */
                json_object_put(ws);
                ws = sp_test_api(&S, S.admin_key, "GET", "/v1/workers", 200, NULL, NULL);
                w0 = json_object_array_get_idx(sp_test_jarr(ws, "workers"), 0);
        }
        ck_assert_msg(json_object_array_length(list) == 2, "backends: %s", json_object_to_json_string(list));
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(list, 0)), "jail");
        ck_assert_str_eq(json_object_get_string(json_object_array_get_idx(list, 1)), "qemu");

        char key[256], vm[64], jail[64], plain[64], b[16];
        sp_test_new_tenant(&S, "backends", key);
        sp_test_create_sandbox(&S, key, "{\"template\":\"base\",\"backend\":\"qemu\"}", vm);
        sp_test_create_sandbox(&S, key, "{\"template\":\"base\",\"backend\":\"jail\"}", jail);
        sp_test_create_sandbox(&S, key, "{\"template\":\"base\"}", plain);
        backend_of(key, vm, b);
        ck_assert_str_eq(b, "qemu");
        backend_of(key, jail, b);
        ck_assert_str_eq(b, "jail");
        backend_of(key, plain, b);
        ck_assert_str_eq(b, "jail");

        struct utsname u;
        ck_assert_int_eq(uname(&u), 0);
        char host_kernel[512], guest_kernel[512];
        snprintf(host_kernel, sizeof(host_kernel), "test \"$(uname -r)\" = '%s'", u.release);
        snprintf(guest_kernel, sizeof(guest_kernel), "test \"$(uname -r)\" != '%s'", u.release);
        ck_assert_msg(run(key, vm, guest_kernel) == 0, "the qemu sandbox runs the host's kernel");
        ck_assert_msg(run(key, jail, host_kernel) == 0, "the jail does not run the host's kernel");
        ck_assert_msg(run(key, plain, host_kernel) == 0, "the default (jail) sandbox does not run the host's kernel");
        ck_assert_int_gt((int)sp_test_procs_with_cmdline("qemu-system", vm), 0);

        /* A backend no worker runs: refused at once, nothing made. */
        _cleanup_json_ json_object *no = sp_test_api(&S, key, "POST", "/v1/sandboxes", 400,
                                                     "{\"template\":\"base\",\"backend\":\"firecracker\"}", NULL);
        const char *code = sp_test_jstr(no, "error.code"), *msg = sp_test_jstr(no, "error.message");
        ck_assert_str_eq(code, "failed_precondition");
        ck_assert_msg(msg && strstr(msg, "firecracker") && strstr(msg, "jail, qemu"), "%s", msg);

        /* Killed and started again: each sandbox is adopted by its own backend. */
        sp_error *e = NULL;
        sp_test_ok(sp_test_proc_kill(&S.workers[0], &e), &e);
        sp_test_ok(sp_test_space_start_worker(&S, 0, &e), &e);
        until_connected(key, vm);
        until_connected(key, jail);
        ck_assert_msg(run(key, vm, guest_kernel) == 0, "the VM was not re-adopted");
        ck_assert_msg(run(key, jail, "echo $$ > /tmp/x && test -s /tmp/x") == 0, "the jail was not re-adopted");

        const char *ids[] = {vm, jail, plain};
        for (size_t i = 0; i < SP_ARRAY_SIZE(ids); i++) {
                char path[128];
                snprintf(path, sizeof(path), "/v1/sandboxes/%s", ids[i]);
                _cleanup_json_ json_object *del = sp_test_api(&S, key, "DELETE", path, 202, NULL, NULL);
                json_object_put(sp_test_wait_op(&S, key, sp_test_jstr(del, "operation.id"), true));
        }
        deadline = sp_now_mono_us() + 30 * 1000000LL;
        while (sp_test_procs_with_cmdline("qemu-system", vm) > 0 && sp_now_mono_us() < deadline)
                usleep(200000);
        ck_assert_int_eq((int)sp_test_procs_with_cmdline("qemu-system", vm), 0);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cp_backends");
        TCase *tc = tcase_create("backends");
        tcase_set_timeout(tc, 900);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, one_worker_runs_jails_and_vms);
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
