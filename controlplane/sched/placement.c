/* SPDX-License-Identifier: Apache-2.0 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched/placement.h"
#include "sched/sched.h"
#include "space/cleanup.h"
#include "space/json.h"

/* How to choose: avoid (fallback allowed) or exclude (never), and prefer. */
typedef struct choice {
        const char *avoid;
        const char *const *exclude;
        size_t nexclude;
        const char *prefer;
        bool need_store;
} choice;

static int choose(cp_db *db, const char *template_id, const char *spec, const char *backend, const choice *how,
                  cp_placement *ret, sp_error **err)
{
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *p[] = {template_id};
        if (cp_db_exec(db,
                       "SELECT w.id, coalesce(w.name, w.id), "
                       "array_to_string(coalesce(w.backends, ARRAY[w.backend]), ','), w.state, w.admin_state, "
                       "w.labels::text, "
                       "coalesce((w.capacity->>'cpu_millis')::bigint, 0), coalesce((w.capacity->>'memory_mb')::bigint, "
                       "0), coalesce((w.capacity->>'slots')::bigint, 0), coalesce(u.cpu, 0), coalesce(u.mem, 0), "
                       "coalesce(u.n, 0), coalesce(w.observed->'templates', '[]'::jsonb) ? $1, "
                       "coalesce((w.observed->'warm'->>$1)::bigint, 0), "
                       "coalesce((w.capacity->>'disk_mb')::bigint, 0), "
                       "coalesce((w.observed->'used'->>'disk_mb')::bigint, 0), coalesce(w.address, ''), "
                       "coalesce((w.observed->'jobs'->>'threads')::bigint, 0), "
                       "greatest(coalesce((w.observed->'jobs'->>'running')::bigint, 0) + "
                       "coalesce((w.observed->'jobs'->>'queued')::bigint, 0), coalesce(u.creating, 0)), "
                       "w.artifact_store FROM workers w LEFT JOIN (SELECT worker_id, "
                       "sum((spec->'resources'->>'cpu_millis')::bigint) "
                       "cpu, sum((spec->'resources'->>'memory_mb')::bigint) mem, count(*) n, "
                       "count(*) FILTER (WHERE observed_state = 'creating') creating FROM sandboxes WHERE "
                       "deleted_at IS NULL AND worker_id IS NOT NULL AND observed_state NOT IN ('suspended', "
                       "'stopped', 'deleted', 'failed') GROUP BY worker_id) u ON u.worker_id = w.id ORDER BY 2",
                       1, p, &res, err) < 0)
                return -SP_E_UNAVAILABLE;
        int n = PQntuples(res);
        cp_sched_worker *ws = calloc(n ? (size_t)n : 1, sizeof(*ws));
        json_object **labels = calloc(n ? (size_t)n : 1, sizeof(*labels));
        if (!ws || !labels) {
                free(ws);
                free(labels);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        for (int i = 0; i < n; i++) {
                const char *l = PQgetvalue(res, i, 5);
                (void)sp_json_parse(l, strlen(l), &labels[i], NULL);
                ws[i] = (cp_sched_worker){
                        .id = PQgetvalue(res, i, 0),
                        .name = PQgetvalue(res, i, 1),
                        .backend = PQgetvalue(res, i, 2),
                        .health = PQgetvalue(res, i, 3),
                        .admin_state = PQgetvalue(res, i, 4),
                        .labels = labels[i],
                        .cpu_millis_capacity = strtoll(PQgetvalue(res, i, 6), NULL, 10),
                        .memory_mb_capacity = strtoll(PQgetvalue(res, i, 7), NULL, 10),
                        .slots_capacity = strtoll(PQgetvalue(res, i, 8), NULL, 10),
                        .cpu_millis_used = strtoll(PQgetvalue(res, i, 9), NULL, 10),
                        .memory_mb_used = strtoll(PQgetvalue(res, i, 10), NULL, 10),
                        .slots_used = strtoll(PQgetvalue(res, i, 11), NULL, 10),
                        .has_template = strcmp(PQgetvalue(res, i, 12), "t") == 0,
                        .warm = strtoll(PQgetvalue(res, i, 13), NULL, 10),
                        .disk_mb_capacity = strtoll(PQgetvalue(res, i, 14), NULL, 10),
                        .disk_mb_used = strtoll(PQgetvalue(res, i, 15), NULL, 10),
                        .job_threads = strtoll(PQgetvalue(res, i, 17), NULL, 10),
                        .jobs_pending = strtoll(PQgetvalue(res, i, 18), NULL, 10),
                        .artifact_store = strcmp(PQgetvalue(res, i, 19), "t") == 0,
                };
        }
        _cleanup_json_ json_object *sp = NULL;
        json_object *resources = NULL, *v = NULL;
        cp_sched_request req = {.template_id = template_id, .backend = backend && *backend ? backend : NULL};
        if (spec && sp_json_parse(spec, strlen(spec), &sp, NULL) == 0) {
                if (json_object_object_get_ex(sp, "resources", &resources)) {
                        if (json_object_object_get_ex(resources, "cpu_millis", &v))
                                req.cpu_millis = json_object_get_int64(v);
                        if (json_object_object_get_ex(resources, "memory_mb", &v))
                                req.memory_mb = json_object_get_int64(v);
                        if (json_object_object_get_ex(resources, "disk_mb", &v))
                                req.disk_mb = json_object_get_int64(v);
                }
                if (json_object_object_get_ex(sp, "labels", &v))
                        req.labels = v;
        }
        size_t idx = 0;
        int r = -SP_E_UNAVAILABLE;
        req.exclude_workers = how->exclude;
        req.nexclude_workers = how->nexclude;
        req.need_store = how->need_store;
        for (int i = 0; how->prefer && i < n; i++)
                if (strcmp(ws[i].id, how->prefer) == 0 && cp_sched_place(&req, &ws[i], 1, &idx, NULL) == 0) {
                        idx = (size_t)i;
                        r = 0;
                }
        if (r < 0) {
                req.exclude_worker = how->avoid;
                r = cp_sched_place(&req, ws, (size_t)n, &idx, how->avoid ? NULL : err);
        }
        if (r < 0 && how->avoid) {
                req.exclude_worker = NULL;
                r = cp_sched_place(&req, ws, (size_t)n, &idx, err);
        }
        if (r == 0) {
                snprintf(ret->worker_id, sizeof(ret->worker_id), "%s", ws[idx].id);
                snprintf(ret->name, sizeof(ret->name), "%s", ws[idx].name);
                snprintf(ret->address, sizeof(ret->address), "%s", PQgetvalue(res, (int)idx, 16));
                ret->warm = ws[idx].warm;
        }
        for (int i = 0; i < n; i++)
                if (labels[i])
                        json_object_put(labels[i]);
        free(labels);
        free(ws);
        return r;
}

int cp_placement_choose(cp_db *db, const char *template_id, const char *spec, const char *backend, const char *avoid,
                        cp_placement *ret, sp_error **err)
{
        return choose(db, template_id, spec, backend, &(choice){.avoid = avoid}, ret, err);
}

int cp_placement_choose_other(cp_db *db, const char *template_id, const char *spec, const char *backend,
                              const char *const *exclude, size_t nexclude, const char *prefer, bool need_store,
                              cp_placement *ret, sp_error **err)
{
        return choose(db, template_id, spec, backend,
                      &(choice){.exclude = exclude, .nexclude = nexclude, .prefer = prefer, .need_store = need_store},
                      ret, err);
}
