/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Attack surface: keys that cannot be taken back.
 *
 * An admin could not revoke another tenant's key (DELETE /v1/keys/{id} was
 * scoped to the caller's tenant, and an admin's is the system tenant), and a
 * tenant could not be deleted at all: a leaked tenant key stayed valid until
 * the tenant itself revoked it. Against a real cluster (PostgreSQL, a
 * control plane, one worker):
 *
 *   - an admin revokes another tenant's key, which stops working at once; a
 *     tenant key revoking a foreign key gets 404 exactly like a missing one;
 *   - DELETE /v1/tenants/{id} is admin-only (403), refused with 409 while the
 *     tenant has a live sandbox (saying so) and for the system tenant;
 *     otherwise it revokes every key of the tenant (each answers 401 at once),
 *     deletes its templates from the workers, hides the tenant from the list,
 *     refuses it new keys and templates (404), and frees its name.
 *
 * One cluster for the file (an unchecked fixture). Needs root, btrfs and
 * PostgreSQL.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"
#include "space_cluster.h"

static sp_test_space S;

static json_object *api(const char *key, const char *method, const char *path, int want_status, const char *body)
{
        return sp_test_api(&S, key, method, path, want_status, body, NULL);
}

static void cluster_up(void)
{
        sp_test_space_opts o = {.workers = 1};
        sp_test_space_up(&S, &o);
}

static void cluster_down(void)
{
        sp_test_space_down(&S);
}

/* The tenant id and the key id of the tenant key key. */
static void whoami(const char *key, char tenant[static 64], char key_id[static 64])
{
        _cleanup_json_ json_object *ks = api(key, "GET", "/v1/keys", 200, NULL);
        json_object *k = json_object_array_get_idx(sp_test_jarr(ks, "keys"), 0);
        snprintf(tenant, 64, "%s", sp_test_jstr(k, "tenant_id"));
        snprintf(key_id, 64, "%s", sp_test_jstr(k, "id"));
}

/* The message of an error answer, with id replaced by "ID". */
static void message_without(json_object *r, const char *id, char out[static 256])
{
        const char *m = sp_test_jstr(r, "error.message");
        ck_assert_ptr_nonnull(m);
        const char *at = strstr(m, id);
        if (at)
                snprintf(out, 256, "%.*sID%s", (int)(at - m), m, at + strlen(id));
        else
                snprintf(out, 256, "%s", m);
}

static bool worker_lists_template(const char *tpl_id)
{
        _cleanup_json_ json_object *ws = api(S.admin_key, "GET", "/v1/workers", 200, NULL);
        json_object *w = json_object_array_get_idx(sp_test_jarr(ws, "workers"), 0), *obs = NULL, *arr = NULL;
        if (!json_object_object_get_ex(w, "observed", &obs) || !json_object_object_get_ex(obs, "templates", &arr))
                return false;
        for (size_t i = 0; i < json_object_array_length(arr); i++)
                if (strcmp(json_object_get_string(json_object_array_get_idx(arr, i)), tpl_id) == 0)
                        return true;
        return false;
}

START_TEST(admins_take_keys_and_tenants_back)
{
        char ka[256], kb[256], ta[64], tb[64], ida[64], idb[64], path[256], body[1024];
        sp_test_new_tenant(&S, "alpha", ka);
        sp_test_new_tenant(&S, "beta", kb);
        whoami(ka, ta, ida);
        whoami(kb, tb, idb);

        /* 1. A tenant cannot revoke another tenant's key: 404, exactly as a missing one. */
        snprintf(path, sizeof(path), "/v1/keys/%s", idb);
        _cleanup_json_ json_object *foreign = api(ka, "DELETE", path, 404, NULL);
        _cleanup_json_ json_object *missing = api(ka, "DELETE", "/v1/keys/key_k3v9w0q8e2m5t7z1c4h6", 404, NULL);
        char m1[256], m2[256];
        message_without(foreign, idb, m1);
        message_without(missing, "key_k3v9w0q8e2m5t7z1c4h6", m2);
        ck_assert_str_eq(m1, m2);
        ck_assert_str_eq(sp_test_jstr(foreign, "error.code"), sp_test_jstr(missing, "error.code"));
        json_object_put(api(kb, "GET", "/v1/sandboxes", 200, NULL));

        /* 2. An admin can: beta's key stops working at once. */
        json_object_put(api(S.admin_key, "DELETE", path, 204, NULL));
        json_object_put(api(kb, "GET", "/v1/sandboxes", 401, NULL));
        json_object_put(api(S.admin_key, "DELETE", path, 404, NULL)); /* already revoked */

        /* 3. Deleting a tenant: admins only. */
        snprintf(path, sizeof(path), "/v1/tenants/%s", ta);
        json_object_put(api(ka, "DELETE", path, 403, NULL));
        _cleanup_json_ json_object *sys = api(S.admin_key, "DELETE", "/v1/tenants/ten_system", 409, NULL);
        ck_assert_ptr_nonnull(strstr(sp_test_jstr(sys, "error.message"), "system tenant"));

        /* alpha holds a second key, a template of its own and a live sandbox. */
        snprintf(body, sizeof(body), "{\"name\":\"second\",\"tenant_id\":\"%s\"}", ta);
        _cleanup_json_ json_object *k2 = api(S.admin_key, "POST", "/v1/keys", 201, body);
        char ka2[256];
        snprintf(ka2, sizeof(ka2), "%s", sp_test_jstr(k2, "secret"));
        char cmd[2048];
        snprintf(cmd, sizeof(cmd), "cp -a %s/w0/storage/templates/base/rootfs %s/import/alpha", S.dir, S.dir);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(body, sizeof(body),
                 "{\"name\":\"alpha-tpl\",\"source\":\"dir\",\"path\":\"%s/import/alpha\",\"tenant_id\":\"%s\"}", S.dir,
                 ta);
        _cleanup_json_ json_object *tb_ = api(S.admin_key, "POST", "/v1/templates", 202, body);
        char tpl_id[64];
        snprintf(tpl_id, sizeof(tpl_id), "%s", sp_test_jstr(tb_, "template.id"));
        json_object_put(sp_test_wait_op(&S, S.admin_key, sp_test_jstr(tb_, "operation.id"), true));
        char sbx[64];
        sp_test_create_sandbox(&S, ka, "{\"template\":\"alpha-tpl\",\"resources\":{\"memory_mb\":64}}", sbx);

        /* 4. Refused while a sandbox lives, saying so; nothing changes. */
        _cleanup_json_ json_object *busy = api(S.admin_key, "DELETE", path, 409, NULL);
        ck_assert_msg(strstr(sp_test_jstr(busy, "error.message"), "1 live sandboxes"), "%s",
                      sp_test_jstr(busy, "error.message"));
        json_object_put(api(ka, "GET", "/v1/sandboxes", 200, NULL));
        char sp[128];
        snprintf(sp, sizeof(sp), "/v1/sandboxes/%s", sbx);
        _cleanup_json_ json_object *del = api(ka, "DELETE", sp, 202, NULL);
        json_object_put(sp_test_wait_op(&S, ka, sp_test_jstr(del, "operation.id"), true));

        /* 5. Deleted: both keys fail at once, its template leaves the worker. */
        _cleanup_json_ json_object *gone = api(S.admin_key, "DELETE", path, 200, NULL);
        ck_assert_str_eq(sp_test_jstr(gone, "id"), ta);
        ck_assert_str_eq(sp_test_jstr(gone, "keys_revoked"), "2");
        ck_assert_str_eq(sp_test_jstr(gone, "templates_deleted"), "1");
        json_object_put(api(ka, "GET", "/v1/sandboxes", 401, NULL));
        json_object_put(api(ka2, "GET", "/v1/templates", 401, NULL));
        int64_t deadline = sp_now_mono_us() + 30 * 1000000;
        while (worker_lists_template(tpl_id)) {
                ck_assert_msg(sp_now_mono_us() < deadline, "the worker still holds template %s", tpl_id);
                usleep(200 * 1000);
        }

        /* It is gone for the admin too: not listed, no new key or template, a second delete 404. */
        _cleanup_json_ json_object *list = api(S.admin_key, "GET", "/v1/tenants?limit=1000", 200, NULL);
        json_object *arr = sp_test_jarr(list, "tenants");
        for (size_t i = 0; i < json_object_array_length(arr); i++)
                ck_assert_str_ne(sp_test_jstr(json_object_array_get_idx(arr, i), "id"), ta);
        snprintf(body, sizeof(body), "{\"name\":\"again\",\"tenant_id\":\"%s\"}", ta);
        json_object_put(api(S.admin_key, "POST", "/v1/keys", 404, body));
        snprintf(body, sizeof(body),
                 "{\"name\":\"alpha-tpl2\",\"source\":\"dir\",\"path\":\"%s/import/alpha\",\"tenant_id\":\"%s\"}",
                 S.dir, ta);
        json_object_put(api(S.admin_key, "POST", "/v1/templates", 404, body));
        json_object_put(api(S.admin_key, "DELETE", path, 404, NULL));

        /* Its name is free again. */
        char name[64];
        snprintf(name, sizeof(name), "{\"name\":\"alpha-%d\"}", (int)getpid());
        json_object_put(api(S.admin_key, "POST", "/v1/tenants", 201, name));
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sec_api_keys");
        TCase *tc = tcase_create("keys");
        tcase_set_timeout(tc, 240);
        tcase_add_unchecked_fixture(tc, cluster_up, cluster_down);
        tcase_add_test(tc, admins_take_keys_and_tenants_back);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        sp_test_require_root("workers need namespaces, cgroups and btrfs");
        sp_test_pg_require();
        return sp_test_main(suite());
}
