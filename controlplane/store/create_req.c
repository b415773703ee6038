/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/json.h"
#include "space/worker_rpc.h"
#include "store/create_req.h"
#include "store/secrets.h"

/* The integer o.key of a sandbox's spec, 0 (the worker's default) when absent. */
static int64_t spec_int(json_object *o, const char *key)
{
        json_object *v = NULL;
        return json_object_object_get_ex(o, key, &v) && v ? json_object_get_int64(v) : 0;
}

int cp_sandbox_create_request(cp_db *db, cp_keyring *k, const char *sbx_id, json_object **ret,
                              int64_t *ret_egress_generation, sp_error **err)
{
        _cleanup_pgresult_ PGresult *sbx = NULL;
        const char *p[] = {sbx_id};
        /* Its backend goes to a worker that runs several (an older worker, which runs one, takes no such
         * field). */
        if (cp_db_exec(db,
                       "SELECT s.template_id, s.spec::text, s.tenant_id, s.egress_generation, "
                       "CASE WHEN cardinality(w.backends) > 1 THEN s.backend END "
                       "FROM sandboxes s LEFT JOIN workers w ON w.id = s.worker_id WHERE s.id = $1",
                       1, p, &sbx, err) < 0)
                return -SP_E_UNAVAILABLE;
        if (PQntuples(sbx) != 1)
                return sp_error_set(err, SP_E_NOT_FOUND, "sandbox %.64s not found", sbx_id);
        pr_wk_create_sandbox q = {.id = sbx_id, .template_name = PQgetvalue(sbx, 0, 0), .warm = true};
        _cleanup_json_ json_object *spec = NULL, *bindings = NULL;
        const char *s = PQgetvalue(sbx, 0, 1);
        json_object *res = NULL, *env = NULL;
        if (sp_json_parse(s, strlen(s), &spec, NULL) == 0) {
                if (json_object_object_get_ex(spec, "resources", &res) && res)
                        q.resources = (pr_wk_resources){.cpu_millis = spec_int(res, "cpu_millis"),
                                                        .memory_mb = spec_int(res, "memory_mb"),
                                                        .pids = spec_int(res, "pids"),
                                                        .disk_mb = spec_int(res, "disk_mb")};
                if (json_object_object_get_ex(spec, "env", &env) && json_object_is_type(env, json_type_object))
                        q.env = env;
                /* The whole egress profile (api/egress.c); none when absent. */
                json_object *egress = NULL;
                if (json_object_object_get_ex(spec, "egress_profile", &egress) &&
                    json_object_is_type(egress, json_type_object))
                        q.egress = egress;
        }
        /* Its secrets, with their values, as its profile grants them now; none:
         * the field stays out. */
        if (cp_sandbox_secret_bindings(db, k, sbx_id, q.egress, &bindings, err) < 0)
                return -SP_E_UNAVAILABLE;
        if (json_object_array_length(bindings) > 0)
                q.secrets = bindings;
        q.tenant_id = PQgetvalue(sbx, 0, 2);
        q.egress_generation = strtoll(PQgetvalue(sbx, 0, 3), NULL, 10);
        q.backend = PQgetisnull(sbx, 0, 4) ? NULL : PQgetvalue(sbx, 0, 4);
        json_object *req = pr_msg_encode(&pr_wk_create_sandbox_schema, &q);
        if (!req)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        *ret = req;
        *ret_egress_generation = q.egress_generation;
        return 0;
}
