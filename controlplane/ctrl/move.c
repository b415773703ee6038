/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Moving a suspended sandbox to another worker (DESIGN.md §5b), as one step
 * of an operation (ctrl/ops.c: a `move`, or a `restore`/`start` whose worker
 * is draining). From worker A, which holds it, to worker B:
 *
 *   1. B is chosen by the scheduler (sched/placement.h): the sandbox's
 *      backend, ready, neither cordoned nor draining, with the template and
 *      room; never A nor a worker that refused it before. The choice is kept
 *      in the operation's request (move_to), so that a retry prefers B, which
 *      may already hold part of the artifacts.
 *   2. ExportSandbox on A {id, to: B's name} answers the Manifest (A may pack
 *      a filesystem first: a long call).
 *   3. ImportSandbox on B {id, from: {A's name, A's address}, manifest, spec:
 *      the sandbox as we know it} — B fetches every file from A itself, takes
 *      our word over A's record — answers it suspended.
 *   4. One transaction hands the sandbox to B (only if it is still A's), moves
 *      its sessions' records with it (their output travelled in its state),
 *      records the move (sandbox_moves, the audit log, the operation's
 *      request and message) and logs it.
 *   5. DeleteSandbox on A, best effort: reconciliation removes A's copy as an
 *      orphan anyway once the operation is over.
 *
 * From the artifact store (docs/backends.md "The artifact store"), when A is
 * unreachable (gone, as far as anyone can tell) and its heartbeats said the
 * sandbox's copy there is whole: B is chosen among the workers with the
 * store, step 2 is skipped, step 3 is ImportSandbox {id, from: {store: true},
 * spec} — B reads the copy from the store and checks it as a fetch — and
 * step 5 too (A cannot answer; should it come back, reconciliation removes
 * its copy as an orphan, and its store copy is B's by then).
 *
 * Until step 4 the sandbox is A's and nothing is lost whatever fails: the
 * operation is retried, and both workers answer an export or an import again
 * (B at once for a sandbox it already took). Reconciliation leaves a
 * sandbox alone while it has an active operation (ctrl/reconcile.c), so it
 * neither removes B's copy as an orphan nor records A's state while the move
 * runs; a move that fails for good leaves B's copy an orphan, removed then.
 *
 * Threading: the controllers' loop.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl/ctrl_internal.h"
#include "sched/placement.h"
#include "store/create_req.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/worker_rpc.h"

#define EXPORT_TIMEOUT_MS (30 * 60 * 1000) /* A may pack a whole filesystem */
#define IMPORT_TIMEOUT_MS (60 * 60 * 1000) /* B fetches every byte from A */
#define NAME_MAX_ 72

typedef struct cp_move {
        cp_ctrl *c;
        char op[SP_ID_MAX], sbx[SP_ID_MAX], tenant[SP_ID_MAX], backend[32];
        char from[SP_ID_MAX], from_name[NAME_MAX_], from_address[272];
        bool from_store; /* A is unreachable: B takes the sandbox from the artifact store */
        cp_placement to;
        json_object *manifest; /* A's answer, as it came */
        int64_t bytes;
        cp_move_done_fn done;
        void *userdata;
} move;

static void move_free(move *m)
{
        if (m->manifest)
                json_object_put(m->manifest);
        free(m);
}

/* "1.5 MiB" */
static void human(char out[static 32], int64_t n)
{
        static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
        double v = (double)n;
        size_t u = 0;
        while (v >= 1024 && u + 1 < SP_ARRAY_SIZE(units)) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(out, 32, "%" PRId64 " bytes", n);
        else
                snprintf(out, 32, "%.1f %s", v, units[u]);
}

/* What the operation shows while the move runs. */
static void say(move *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(move *m, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        const char *p[] = {m->op, msg};
        (void)cp_db_exec(m->c->db, "UPDATE operations SET message = $2, updated_at = now() WHERE id = $1", 2, p, NULL,
                         NULL);
}

/* Ends the move: done runs once, then m is freed. */
static void finish(move *m, cp_move_outcome o, sp_errc code, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void finish(move *m, cp_move_outcome o, sp_errc code, const char *fmt, ...)
{
        _cleanup_error_ sp_error *e = NULL;
        if (o != CP_MOVE_DONE) {
                va_list ap;
                va_start(ap, fmt);
                sp_error_setv(&e, code, 0, fmt, ap);
                va_end(ap);
                if (o != CP_MOVE_NO_WORKER)
                        m->c->moves_failed_total++;
                sp_log_kv(o == CP_MOVE_NO_WORKER ? SP_LOG_INFO : SP_LOG_WARN,
                          SP_KV("sandbox_id", m->sbx, "operation_id", m->op, "from", m->from_name, "to",
                                m->to.name[0] ? m->to.name : "-"),
                          "move: %s", e->message);
        }
        cp_move_result r = {.bytes = m->bytes};
        snprintf(r.to, sizeof(r.to), "%s", m->to.worker_id);
        snprintf(r.to_name, sizeof(r.to_name), "%s", m->to.name);
        snprintf(r.from_name, sizeof(r.from_name), "%s", m->from_name);
        m->done(m->userdata, o, o == CP_MOVE_DONE ? &r : NULL, e);
        move_free(m);
}

/* A failed call to a worker: what the operation does next. A worker that
 * does not have the method yet (an older one) or the sandbox cannot serve
 * the move; an invalid request will not become valid; anything else
 * (unreachable, timeout, internal, I/O, a file that did not match its
 * digest, a refused read) may pass, and is tried again. */
static void call_failed(move *m, const char *what, const char *worker, const sp_error *err)
{
        /* too_large: the sandbox holds more than can be packed, or than the new worker has room for
         * (an export or import repeated would only fill a disk again). */
        bool final = err->code == SP_E_NOT_FOUND || err->code == SP_E_INVALID || err->code == SP_E_CONFLICT ||
                     err->code == SP_E_UNSUPPORTED || err->code == SP_E_METHOD || err->code == SP_E_TOO_LARGE;
        finish(m, final ? CP_MOVE_FAILED : CP_MOVE_RETRY, err->code, "%s on %s: %s", what, worker, err->message);
}

typedef struct old_copy {
        cp_ctrl *c;
        char key[80]; /* "orphan:<sandbox id>" */
} old_copy;

static void on_old_copy_deleted(json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        old_copy *x = userdata;
        if (err && err->code != SP_E_NOT_FOUND)
                sp_log_kv(SP_LOG_WARN, SP_KV("sandbox_id", x->key + 7),
                          "move: removing the old copy: %s (reconciliation removes it later)", err->message);
        cp__inflight_del(x->c, x->key);
        free(x);
}

/* Step 5: A's copy goes (best effort), under the key reconciliation uses
 * for the orphan it would otherwise be. */
static void delete_old_copy(move *m)
{
        sp_rpc_client *cli = cp__worker_client(m->c, m->from);
        old_copy *x = cli ? calloc(1, sizeof(*x)) : NULL;
        if (!x)
                return;
        x->c = m->c;
        snprintf(x->key, sizeof(x->key), "orphan:%s", m->sbx);
        if (!cp__inflight_add(m->c, x->key)) {
                free(x);
                return;
        }
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_wk_sandbox_ref_schema, &(pr_wk_sandbox_ref){.id = m->sbx});
        if (sp_rpc_client_call(cli, "DeleteSandbox", req, 60000, on_old_copy_deleted, x, NULL) < 0) {
                cp__inflight_del(m->c, x->key);
                free(x);
        }
}

/* Step 4: the sandbox becomes B's, with the record of the move. */
static void switch_over(move *m)
{
        char bytes[24];
        snprintf(bytes, sizeof(bytes), "%" PRId64, m->bytes);
        const char *sp[] = {m->sbx, m->from, m->to.worker_id};
        const char *rec[] = {m->sbx, m->tenant, m->op, m->from, m->to.worker_id, bytes};
        const char *aud[] = {m->sbx, m->tenant, m->op, m->from_name, m->to.name, bytes, m->from, m->to.worker_id};
        char hb[32], msg[400];
        human(hb, m->bytes);
        snprintf(msg, sizeof(msg), "moved from %s to %s (%s%s)", m->from_name, m->to.name, hb,
                 m->from_store ? ", from the artifact store" : "");
        const char *opp[] = {m->op, m->from_name, m->to.name, bytes, m->from, m->to.worker_id, msg};
        const cp_db_stmt txn[] = {
                {"UPDATE sandboxes SET worker_id = $3, updated_at = now() WHERE id = $1 AND worker_id = $2 "
                 "AND deleted_at IS NULL",
                 3, sp, false},
                {"INSERT INTO sandbox_moves (sandbox_id, tenant_id, operation_id, from_worker, to_worker, bytes) "
                 "VALUES ($1, $2, $3, $4, $5, $6::bigint)",
                 6, rec, true},
                {"INSERT INTO audit_log (tenant_id, action, target, detail) VALUES ($2, 'sandbox.move', $1, "
                 "jsonb_build_object('operation', $3::text, 'from', $4::text, 'to', $5::text, 'bytes', $6::bigint, "
                 "'from_worker_id', $7::text, 'to_worker_id', $8::text))",
                 8, aud, true},
                {"UPDATE operations SET message = $7, updated_at = now(), request = (request - 'move_to') || "
                 "jsonb_build_object('moved', jsonb_build_object('from', $2::text, 'to', $3::text, 'bytes', "
                 "$4::bigint, 'from_worker_id', $5::text, 'to_worker_id', $6::text), 'moved_message', $7::text) "
                 "WHERE id = $1",
                 7, opp, true},
                /* Last: it may change no row (a sandbox that never ran a command). */
                {"UPDATE sessions SET worker_id = $3, updated_at = now() WHERE sandbox_id = $1 AND worker_id = $2", 3,
                 sp, true},
        };
        _cleanup_error_ sp_error *e = NULL;
        int ran = cp_db_txn(m->c->db, txn, SP_ARRAY_SIZE(txn), &e);
        if (ran < 0) {
                finish(m, CP_MOVE_RETRY, e->code, "recording the move: %s", e->message);
                return;
        }
        if (ran < 2) {
                /* Not A's any more: another leader finished this move, or the
                 * sandbox is gone. */
                _cleanup_pgresult_ PGresult *res = NULL;
                const char *p[] = {m->sbx};
                bool ours =
                        cp_db_exec(m->c->db, "SELECT worker_id FROM sandboxes WHERE id = $1", 1, p, &res, NULL) == 0 &&
                        PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), m->to.worker_id) == 0;
                if (!ours) {
                        finish(m, CP_MOVE_FAILED, SP_E_CONFLICT, "the sandbox is no longer on %s", m->from_name);
                        return;
                }
        } else {
                m->c->moves_total++;
                m->c->move_bytes_total += (uint64_t)(m->bytes > 0 ? m->bytes : 0);
                sp_log_kv(SP_LOG_INFO,
                          SP_KV("sandbox_id", m->sbx, "operation_id", m->op, "from", m->from_name, "to", m->to.name,
                                "from_worker_id", m->from, "to_worker_id", m->to.worker_id, "bytes", bytes),
                          "moved from %s to %s (%s%s)", m->from_name, m->to.name, hb,
                          m->from_store ? ", from the artifact store" : "");
        }
        if (!m->from_store)
                delete_old_copy(m);
        finish(m, CP_MOVE_DONE, SP_OK, "moved");
}

/* Remembers a worker that refused the sandbox (failed_precondition: not its
 * backend or accelerator), so that the next attempt chooses another; returns
 * how many have refused it. */
static int remember_refusal(move *m)
{
        const char *p[] = {m->op, m->to.worker_id};
        _cleanup_pgresult_ PGresult *res = NULL;
        if (cp_db_exec(m->c->db,
                       "UPDATE operations SET request = (request - 'move_to') || jsonb_build_object('move_avoid', "
                       "coalesce(request->'move_avoid', '[]'::jsonb) || to_jsonb($2::text)) WHERE id = $1 "
                       "RETURNING jsonb_array_length(request->'move_avoid')",
                       2, p, &res, NULL) < 0 ||
            PQntuples(res) != 1)
                return 0;
        return atoi(PQgetvalue(res, 0, 0));
}

static void on_imported(json_object *resp, const sp_error *err, void *userdata)
{
        move *m = userdata;
        if (err && err->code == SP_E_PRECONDITION && m->from_store && strstr(err->message, "holds no copy")) {
                /* Another worker would find none either: the store is one directory. */
                finish(m, CP_MOVE_FAILED, err->code, "its worker %s is unreachable and %s", m->from_name, err->message);
                return;
        }
        if (err && err->code == SP_E_PRECONDITION) {
                int n = remember_refusal(m);
                if (n >= CP_MOVE_MAX_REFUSALS)
                        finish(m, CP_MOVE_FAILED, err->code, "%d workers refused it; the last, %s: %s", n, m->to.name,
                               err->message);
                else
                        finish(m, CP_MOVE_RETRY, err->code, "%s cannot take it (%s); trying another worker", m->to.name,
                               err->message);
                return;
        }
        if (err) {
                call_failed(m, "ImportSandbox", m->to.name, err);
                return;
        }
        pr_wk_sandbox sb;
        _cleanup_error_ sp_error *e = NULL;
        if (pr_msg_decode(&pr_wk_sandbox_schema, resp, &sb, &e) < 0 || strcmp(sb.id, m->sbx) != 0 ||
            strcmp(sb.state, "suspended") != 0) {
                finish(m, CP_MOVE_RETRY, SP_E_INTERNAL, "ImportSandbox on %s answered %s", m->to.name,
                       e ? e->message : "another sandbox, or one that is not suspended");
                return;
        }
        switch_over(m);
}

/* Step 3: B takes it, from A or from the store. */
static void import(move *m)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_rpc_client *cli = cp__worker_client(m->c, m->to.worker_id);
        if (!cli) {
                finish(m, CP_MOVE_RETRY, SP_E_UNAVAILABLE, "no connection to %s", m->to.name);
                return;
        }
        char hb[32];
        human(hb, m->bytes);
        if (m->from_store)
                say(m,
                    "moving it to %s: its worker %s is unreachable; %s is reading its copy (%s) from the artifact "
                    "store",
                    m->to.name, m->from_name, m->to.name, hb);
        else
                say(m, "moving it to %s: %s is fetching %s from %s", m->to.name, m->to.name, hb, m->from_name);
        /* The sandbox as this control plane knows it: the holder's record is not taken for its resources,
         * tenant, environment, egress or secrets (proto/spec/worker-rpc.md). */
        _cleanup_json_ json_object *spec = NULL;
        int64_t generation = 0;
        if (cp_sandbox_create_request(m->c->db, m->c->cfg.keyring, m->sbx, &spec, &generation, &e) < 0) {
                finish(m, CP_MOVE_RETRY, e->code, "the spec of %s: %s", m->sbx, e->message);
                return;
        }
        pr_wk_import_sandbox q = {.id = m->sbx, .spec = spec};
        if (m->from_store) {
                q.from.store = true;
        } else {
                q.from.worker = m->from_name;
                q.from.address = m->from_address;
                q.manifest = m->manifest;
        }
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_wk_import_sandbox_schema, &q);
        if (sp_rpc_client_call(cli, "ImportSandbox", req, IMPORT_TIMEOUT_MS, on_imported, m, &e) < 0)
                finish(m, CP_MOVE_RETRY, e->code, "ImportSandbox on %s: %s", m->to.name, e->message);
}

static void on_exported(json_object *resp, const sp_error *err, void *userdata)
{
        move *m = userdata;
        if (err) {
                call_failed(m, "ExportSandbox", m->from_name, err);
                return;
        }
        pr_wk_manifest mf;
        _cleanup_error_ sp_error *e = NULL;
        if (pr_msg_decode(&pr_wk_manifest_schema, resp, &mf, &e) < 0) {
                finish(m, CP_MOVE_RETRY, SP_E_INTERNAL, "ExportSandbox on %s: its manifest: %s", m->from_name,
                       e->message);
                return;
        }
        if (strcmp(mf.id, m->sbx) != 0 || strcmp(mf.backend, m->backend) != 0) {
                finish(m, CP_MOVE_FAILED, SP_E_INTERNAL,
                       "ExportSandbox on %s answered the manifest of %.64s (backend %.16s), not of %s (backend %s)",
                       m->from_name, mf.id, mf.backend, m->sbx, m->backend);
                return;
        }
        m->bytes = mf.bytes;
        m->manifest = json_object_get(resp);
        import(m);
}

/* Why a move cannot start, into *err; logged; m freed. Returns NULL. */
static cp_move *refuse(move *m, cp_move_outcome o, cp_move_outcome *ret, sp_error **err, sp_errc code, const char *fmt,
                       ...) __attribute__((format(printf, 6, 7)));
static cp_move *refuse(move *m, cp_move_outcome o, cp_move_outcome *ret, sp_error **err, sp_errc code, const char *fmt,
                       ...)
{
        _cleanup_error_ sp_error *e = NULL;
        va_list ap;
        va_start(ap, fmt);
        sp_error_setv(&e, code, 0, fmt, ap);
        va_end(ap);
        if (o != CP_MOVE_NO_WORKER)
                m->c->moves_failed_total++;
        sp_log_kv(o == CP_MOVE_NO_WORKER ? SP_LOG_DEBUG : SP_LOG_WARN,
                  SP_KV("sandbox_id", m->sbx, "operation_id", m->op, "from", m->from_name[0] ? m->from_name : "-"),
                  "move: %s", e->message);
        *ret = o;
        sp_error_move(err, &e);
        move_free(m);
        return NULL;
}

/* Where the sandbox is and what the operation remembers of earlier attempts. */
#define MOVE_SELECT \
        "SELECT s.worker_id, coalesce(w.name, w.id), coalesce(w.address, ''), s.template_id, s.spec::text, " \
        "coalesce(s.backend, w.backend, 'jail'), s.tenant_id, o.request->>'move_to', " \
        "coalesce(o.request->'move_avoid', '[]'::jsonb)::text, w.state, s.stored_bytes FROM sandboxes s " \
        "JOIN workers w ON w.id = s.worker_id, operations o WHERE s.id = $1 AND o.id = $2 AND s.deleted_at IS NULL"

cp_move *cp__move_prepare(cp_ctrl *c, const char *op, const char *sbx, cp_move_outcome *ret, sp_error **err)
{
        move *m = calloc(1, sizeof(*m));
        if (!m) {
                *ret = CP_MOVE_RETRY;
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        *m = (move){.c = c};
        snprintf(m->op, sizeof(m->op), "%s", op);
        snprintf(m->sbx, sizeof(m->sbx), "%s", sbx);
        _cleanup_pgresult_ PGresult *res = NULL;
        _cleanup_error_ sp_error *e = NULL;
        const char *p[] = {sbx, op};
        if (cp_db_exec(c->db, MOVE_SELECT, 2, p, &res, &e) < 0)
                return refuse(m, CP_MOVE_RETRY, ret, err, e->code, "%s", e->message);
        if (PQntuples(res) != 1)
                return refuse(m, CP_MOVE_FAILED, ret, err, SP_E_CONFLICT, "the sandbox has no worker to move it from");
        snprintf(m->from, sizeof(m->from), "%s", PQgetvalue(res, 0, 0));
        snprintf(m->from_name, sizeof(m->from_name), "%s", PQgetvalue(res, 0, 1));
        snprintf(m->from_address, sizeof(m->from_address), "%s", PQgetvalue(res, 0, 2));
        snprintf(m->backend, sizeof(m->backend), "%s", PQgetvalue(res, 0, 5));
        snprintf(m->tenant, sizeof(m->tenant), "%s", PQgetvalue(res, 0, 6));
        if (strcmp(PQgetvalue(res, 0, 9), "unreachable") == 0) {
                if (PQgetisnull(res, 0, 10))
                        return refuse(m, CP_MOVE_RETRY, ret, err, SP_E_UNAVAILABLE,
                                      "its worker %s is unreachable and it has no stored copy", m->from_name);
                m->from_store = true;
                m->bytes = strtoll(PQgetvalue(res, 0, 10), NULL, 10);
        }

        /* Never back to A, nor to a worker that refused it. */
        const char *exclude[1 + CP_MOVE_MAX_REFUSALS] = {m->from};
        size_t nexclude = 1;
        _cleanup_json_ json_object *avoid = NULL;
        const char *at = PQgetvalue(res, 0, 8);
        if (sp_json_parse(at, strlen(at), &avoid, NULL) == 0 && json_object_is_type(avoid, json_type_array))
                for (size_t i = 0; i < json_object_array_length(avoid) && nexclude < SP_ARRAY_SIZE(exclude); i++)
                        exclude[nexclude++] = json_object_get_string(json_object_array_get_idx(avoid, i));
        const char *prefer = PQgetisnull(res, 0, 7) ? NULL : PQgetvalue(res, 0, 7);
        if (cp_placement_choose_other(c->db, PQgetvalue(res, 0, 3), PQgetvalue(res, 0, 4), m->backend, exclude,
                                      nexclude, prefer, m->from_store, &m->to, &e) < 0) {
                /* "no other worker …", from the scheduler's reasons. */
                const char *why = e ? e->message : "", *prefix = "no worker can place it: ";
                if (strncmp(why, prefix, strlen(prefix)) == 0)
                        why += strlen(prefix);
                if (e && e->code == SP_E_LIMIT)
                        return refuse(m, CP_MOVE_NO_WORKER, ret, err, SP_E_LIMIT,
                                      "no other worker with the %s backend%s has room: %s", m->backend,
                                      m->from_store ? " and the artifact store" : "", why);
                return refuse(m, CP_MOVE_NO_WORKER, ret, err, e ? e->code : SP_E_UNAVAILABLE,
                              "no other worker with the %s backend%s can take it: %s", m->backend,
                              m->from_store ? " and the artifact store" : "", why);
        }
        return m;
}

void cp__move_run(cp_move *mv, cp_move_done_fn done, void *userdata)
{
        move *m = mv;
        m->done = done;
        m->userdata = userdata;
        const char *mp[] = {m->op, m->to.worker_id};
        (void)cp_db_exec(m->c->db,
                         "UPDATE operations SET request = request || jsonb_build_object('move_to', $2::text) "
                         "WHERE id = $1",
                         2, mp, NULL, NULL);
        if (m->from_store) {
                import(m);
                return;
        }
        sp_rpc_client *cli = cp__worker_client(m->c, m->from);
        if (!cli) {
                finish(m, CP_MOVE_RETRY, SP_E_UNAVAILABLE, "no connection to %s", m->from_name);
                return;
        }
        say(m, "moving it to %s: %s is packing its artifacts", m->to.name, m->from_name);
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *req =
                pr_msg_encode(&pr_wk_export_sandbox_schema, &(pr_wk_export_sandbox){.id = m->sbx, .to = m->to.name});
        if (sp_rpc_client_call(cli, "ExportSandbox", req, EXPORT_TIMEOUT_MS, on_exported, m, &e) < 0)
                finish(m, CP_MOVE_RETRY, e->code, "ExportSandbox on %s: %s", m->from_name, e->message);
}

cp_move *cp__move_free(cp_move *mv)
{
        if (mv)
                move_free(mv);
        return NULL;
}
