/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Templates on the fleet: a build imports the template on every ready worker
 * (and reconciliation imports it on workers that join later); a delete
 * removes it from every reachable worker that has it (and reconciliation
 * from the others once they are back).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctrl/ctrl_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"
#include "space/worker_rpc.h"

typedef struct import_ctx {
        cp_ctrl *c;
        void (*done)(void *userdata, const sp_error *err);
        void *userdata;
        char op[SP_ID_MAX]; /* the build operation whose message shows progress ("": none) */
        char tpl[SP_ID_MAX];
        int64_t shown_us; /* when the message was last set */
} import_ctx;

#define PROGRESS_EVERY_US 1000000 /* operations.message at most once a second */
#define PROGRESS_MAX 300

/* A progress line from the worker (debootstrap's output): the latest becomes
 * the operation's message, so that whoever waits on it sees the build move. */
static void on_import_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *userdata)
{
        (void)s;
        import_ctx *x = userdata;
        if (type != SP_RPC_FRAME_JSON || !x->op[0])
                return;
        int64_t now = sp_now_mono_us();
        if (x->shown_us && now - x->shown_us < PROGRESS_EVERY_US)
                return;
        _cleanup_json_ json_object *o = NULL;
        pr_wk_message_event ev;
        if (sp_json_parse((const char *)p, n, &o, NULL) < 0 ||
            pr_msg_decode(&pr_wk_progress_event_schema, o, &ev, NULL) < 0 || strcmp(ev.event, "progress") != 0)
                return;
        char text[PROGRESS_MAX + 1];
        snprintf(text, sizeof(text), "%s", ev.message);
        x->shown_us = now;
        const char *params[] = {x->op, text};
        (void)cp_db_exec(x->c->db,
                         "UPDATE operations SET message = $2, updated_at = now() WHERE id = $1 AND state = 'running'",
                         2, params, NULL, NULL);
}

static void on_import_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *userdata)
{
        (void)s;
        import_ctx *x = userdata;
        /* What the template holds on this worker is its size (the largest
         * where workers differ, e.g. debootstrap's downloads over time): it
         * counts against its tenant's template storage, in place of the
         * reservation made for the build. Uploaded templates are sized when
         * the upload is in (reconcile.c): their archive counts too. */
        pr_wk_template_trailer t;
        if (!err && pr_msg_decode(&pr_wk_import_trailer_schema, trailer, &t, NULL) == 0) {
                char b[24];
                snprintf(b, sizeof(b), "%lld", (long long)t.template_.bytes);
                const char *p[] = {x->tpl, b};
                (void)cp_db_exec(x->c->db,
                                 "UPDATE templates SET size_bytes = greatest(coalesce(size_bytes, 0), $2::bigint), "
                                 "updated_at = now() WHERE id = $1 AND spec->>'source' <> 'upload'",
                                 2, p, NULL, NULL);
        }
        x->done(x->userdata, err);
        free(x);
}

/* ---- uploaded templates: copied from a worker that holds the archive ----
 *
 * The archive a tenant uploaded stays on the worker that took it (and on
 * every worker that copied it since): ReadTemplateArtifact on one of them is
 * piped into UploadTemplate on the worker that lacks the template, with
 * backpressure (the source pauses while the destination's queue is full), so
 * that the control plane holds at most one window of the archive. */
typedef struct relay {
        sp_rpc_stream *src, *dst; /* NULL once ended */
        void (*done)(void *userdata, const sp_error *err);
        void *userdata;
        uint64_t bytes;
        bool src_paused;
} relay;

static void relay_finish(relay *r, const sp_error *err)
{
        if (r->src)
                sp_rpc_stream_cancel(r->src);
        if (r->dst)
                sp_rpc_stream_cancel(r->dst);
        r->done(r->userdata, err);
        free(r);
}

static void src_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *userdata)
{
        (void)s;
        relay *r = userdata;
        if (type != SP_RPC_FRAME_DATA || !r->dst)
                return;
        int rc = sp_rpc_stream_send(r->dst, SP_RPC_FRAME_DATA, p, n, NULL);
        if (rc < 0)
                return; /* the destination ended: its on_end finishes */
        r->bytes += n;
        if (rc == 1 && !r->src_paused) {
                r->src_paused = true;
                sp_rpc_stream_pause(r->src);
        }
}

static void src_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *userdata)
{
        (void)s;
        (void)trailer;
        relay *r = userdata;
        r->src = NULL;
        if (err) {
                _cleanup_error_ sp_error *e = NULL;
                sp_error_set(&e, err->code, "copying the uploaded archive from a worker that holds it: %s",
                             err->message);
                relay_finish(r, e);
                return;
        }
        if (r->dst)
                (void)sp_rpc_stream_close_send(r->dst, NULL);
}

static void dst_writable(sp_rpc_stream *s, void *userdata)
{
        (void)s;
        relay *r = userdata;
        if (r->src && r->src_paused) {
                r->src_paused = false;
                sp_rpc_stream_resume(r->src);
        }
}

static void dst_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *userdata)
{
        (void)s;
        (void)trailer;
        relay *r = userdata;
        r->dst = NULL;
        if (!err && r->src) {
                _cleanup_error_ sp_error *e = NULL;
                sp_error_set(&e, SP_E_INTERNAL, "the worker ended the upload before the archive did");
                relay_finish(r, e);
                return;
        }
        relay_finish(r, err);
}

/* A ready worker (not worker_id) that holds the archive of tpl_id, the one
 * that took the upload first. */
static int artifact_holder(cp_ctrl *c, const char *tpl_id, const char *worker_id, char ret[SP_ID_MAX])
{
        _cleanup_pgresult_ PGresult *res = NULL;
        const char *p[] = {tpl_id, worker_id};
        if (cp_db_exec(c->db,
                       "SELECT w.id FROM workers w, templates t WHERE t.id = $1 AND w.id <> $2 "
                       "AND w.state = 'ready' AND coalesce(w.observed->'artifacts', '{}'::jsonb) ? $1 "
                       "ORDER BY (w.id = t.spec->>'worker') DESC, w.id LIMIT 1",
                       2, p, &res, NULL) < 0 ||
            PQntuples(res) != 1)
                return -SP_E_UNAVAILABLE;
        snprintf(ret, SP_ID_MAX, "%s", PQgetvalue(res, 0, 0));
        return 0;
}

static int template_copy(cp_ctrl *c, const char *worker_id, const char *tpl_id, json_object *spec,
                         void (*done)(void *userdata, const sp_error *err), void *userdata)
{
        char holder[SP_ID_MAX];
        sp_rpc_client *to = cp__worker_client(c, worker_id), *from = NULL;
        if (!to || artifact_holder(c, tpl_id, worker_id, holder) < 0 || !(from = cp__worker_client(c, holder)))
                return -SP_E_UNAVAILABLE;
        relay *r = calloc(1, sizeof(*r));
        if (!r)
                return -SP_E_LIMIT;
        r->done = done;
        r->userdata = userdata;
        const char *fmt = sp_json_member_str(spec, "format");
        _cleanup_json_ json_object *up = pr_msg_encode(
                &pr_wk_upload_template_schema, &(pr_wk_upload_template){.name = tpl_id, .format = fmt ? fmt : "tar"});
        _cleanup_json_ json_object *rd =
                pr_msg_encode(&pr_wk_template_ref_schema, &(pr_wk_template_ref){.name = tpl_id});
        static const sp_rpc_stream_ops dst_ops = {.on_writable = dst_writable, .on_end = dst_end};
        static const sp_rpc_stream_ops src_ops = {.on_frame = src_frame, .on_end = src_end};
        r->dst = sp_rpc_client_stream(to, "UploadTemplate", up, 60 * 60 * 1000, &dst_ops, r, NULL);
        if (r->dst)
                r->src = sp_rpc_client_stream(from, "ReadTemplateArtifact", rd, 60 * 60 * 1000, &src_ops, r, NULL);
        if (!r->src) {
                if (r->dst)
                        sp_rpc_stream_cancel(r->dst);
                free(r);
                return -SP_E_UNAVAILABLE;
        }
        sp_log_info_kv(SP_KV("template_id", tpl_id, "worker_id", worker_id, "from", holder),
                       "copying an uploaded template");
        return 0;
}

int cp__template_import(cp_ctrl *c, const char *worker_id, const char *tpl_id, json_object *spec, const char *op,
                        void (*done)(void *userdata, const sp_error *err), void *userdata)
{
        json_object *src = NULL;
        if (json_object_object_get_ex(spec, "source", &src) && strcmp(json_object_get_string(src), "upload") == 0)
                return template_copy(c, worker_id, tpl_id, spec, done, userdata);
        sp_rpc_client *cli = cp__worker_client(c, worker_id);
        if (!cli)
                return -SP_E_UNAVAILABLE;
        /* The spec's source, path, suite, mirror, packages and user (api/templates.c), and the
         * bound a build adds (cp__template_op). */
        json_object *max = NULL;
        pr_wk_import_template q = {
                .name = tpl_id,
                .source = sp_json_member_str(spec, "source"),
                .path = sp_json_member_str(spec, "path"),
                .suite = sp_json_member_str(spec, "suite"),
                .mirror = sp_json_member_str(spec, "mirror"),
                .packages = sp_json_member_str(spec, "packages"),
                .user = sp_json_member_str(spec, "user"),
                .max_bytes = json_object_object_get_ex(spec, "max_bytes", &max) ? json_object_get_int64(max) : 0,
        };
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_wk_import_template_schema, &q);
        import_ctx *x = calloc(1, sizeof(*x));
        if (!x)
                return -SP_E_LIMIT;
        x->c = c;
        x->done = done;
        x->userdata = userdata;
        snprintf(x->op, sizeof(x->op), "%s", op ? op : "");
        snprintf(x->tpl, sizeof(x->tpl), "%s", tpl_id);
        static const sp_rpc_stream_ops ops = {.on_frame = on_import_frame, .on_end = on_import_end};
        if (!sp_rpc_client_stream(cli, "ImportTemplate", req, 30 * 60 * 1000, &ops, x, NULL)) {
                free(x);
                return -SP_E_UNAVAILABLE;
        }
        return 0;
}

/* One build or delete across workers. */
typedef struct fleet_op {
        cp_ctrl *c;
        char op[SP_ID_MAX];
        char tpl[SP_ID_MAX];
        bool build;
        int pending;
        int failed;
        char error[512];
} fleet_op;

static void fleet_op_step(fleet_op *f)
{
        if (--f->pending > 0)
                return;
        cp_ctrl *c = f->c;
        const char *p[] = {f->op, f->tpl, f->error};
        if (f->failed) {
                /* A failed build leaves a failed template; a failed delete leaves
                 * it ready (the workers that refused still have it), with the
                 * reason, so that the delete can be tried again. */
                (void)cp_db_exec(c->db,
                                 f->build ? "UPDATE templates SET state = 'failed', error = $2, updated_at = now(), "
                                            "upload_max_bytes = NULL WHERE id = $1 AND state = 'building'"
                                          : "UPDATE templates SET state = 'ready', error = $2, updated_at = now() "
                                            "WHERE id = $1 AND state = 'deleting'",
                                 2, p + 1, NULL, NULL);
                (void)cp_db_exec(c->db,
                                 "UPDATE operations SET state = 'failed', updated_at = now(), error = "
                                 "jsonb_build_object('code', 'failed', 'message', $2::text) WHERE id = $1",
                                 2, (const char *[]){f->op, f->error}, NULL, NULL);
        } else {
                if (f->build)
                        (void)cp_db_exec(c->db,
                                         "UPDATE templates SET state = 'ready', error = NULL, updated_at = now(), "
                                         "upload_max_bytes = NULL WHERE id = $1 AND state = 'building'",
                                         1, p + 1, NULL, NULL);
                (void)cp_db_exec(c->db,
                                 "UPDATE operations SET state = 'succeeded', message = NULL, updated_at = now(), "
                                 "result = (SELECT api_template(t) FROM templates t WHERE t.id = $2) WHERE id = $1",
                                 2, p, NULL, NULL);
                /* Deleted: the row goes, so the name is free again. A worker that
                 * was unreachable meanwhile drops its copy when it is back
                 * (reconciliation removes templates the database does not know). */
                if (!f->build)
                        (void)cp_db_exec(c->db, "DELETE FROM templates WHERE id = $1", 1, p + 1, NULL, NULL);
        }
        sp_log_info("template %s: %s %s", f->tpl, f->build ? "build" : "delete", f->failed ? "failed" : "done");
        cp__inflight_del(c, f->op);
        free(f);
}

static void fleet_op_done(void *userdata, const sp_error *err)
{
        fleet_op *f = userdata;
        if (err && !(!f->build && err->code == SP_E_NOT_FOUND)) {
                f->failed++;
                snprintf(f->error, sizeof(f->error), "%s", err->message);
        }
        fleet_op_step(f);
}

static void on_delete_template(json_object *resp, const sp_error *err, void *userdata)
{
        (void)resp;
        fleet_op_done(userdata, err);
}

void cp__template_op(cp_ctrl *c, const char *op, const char *kind, const char *tpl_id, int attempts)
{
        (void)attempts;
        bool build = strcmp(kind, "template_build") == 0;
        _cleanup_pgresult_ PGresult *tpl = NULL, *ws = NULL;
        const char *p[] = {tpl_id};
        if (cp_db_exec(c->db, "SELECT spec::text, upload_max_bytes FROM templates WHERE id = $1", 1, p, &tpl, NULL) < 0)
                return;
        if (PQntuples(tpl) != 1) {
                const char *fp[] = {op};
                (void)cp_db_exec(
                        c->db,
                        "UPDATE operations SET state = 'failed', updated_at = now(), error = "
                        "'{\"code\":\"not_found\",\"message\":\"the template no longer exists\"}' WHERE id = $1",
                        1, fp, NULL, NULL);
                return;
        }
        /* Workers that lack it (build), or every reachable one (delete): a
         * worker still importing or receiving it does not list it, and its
         * delete cancels that import, answering once it stopped (not_found:
         * it never had it). So a template is deleted, and no longer counts
         * among its tenant's builds, only once no import of it runs. */
        if (cp_db_exec(c->db,
                       build ? "SELECT id FROM workers WHERE state = 'ready' AND NOT coalesce(observed->'templates', "
                               "'[]'::jsonb) ? $1"
                             : "SELECT id FROM workers WHERE state <> 'unreachable'",
                       build ? 1 : 0, p, &ws, NULL) < 0)
                return;
        if (build && PQntuples(ws) == 0) {
                _cleanup_pgresult_ PGresult *any = NULL;
                if (cp_db_exec(c->db, "SELECT 1 FROM workers WHERE state = 'ready' LIMIT 1", 0, NULL, &any, NULL) < 0)
                        return;
                if (PQntuples(any) == 0) {
                        const char *rp[] = {op};
                        (void)cp_db_exec(c->db,
                                         "UPDATE operations SET message = 'waiting for a ready worker to build on', "
                                         "next_attempt_at = now() + interval '2 seconds' WHERE id = $1",
                                         1, rp, NULL, NULL);
                        return;
                }
        }
        fleet_op *f = calloc(1, sizeof(*f));
        if (!f || !cp__inflight_add(c, op)) {
                free(f);
                return;
        }
        f->c = c;
        f->build = build;
        snprintf(f->op, sizeof(f->op), "%s", op);
        snprintf(f->tpl, sizeof(f->tpl), "%s", tpl_id);
        f->pending = 1; /* held until every call is started */
        const char *up[] = {op};
        (void)cp_db_exec(c->db,
                         "UPDATE operations SET state = 'running', attempts = attempts + 1, updated_at = now() "
                         "WHERE id = $1",
                         1, up, NULL, NULL);
        _cleanup_json_ json_object *spec = NULL;
        const char *s = PQgetvalue(tpl, 0, 0);
        if (sp_json_parse(s, strlen(s), &spec, NULL) < 0)
                spec = json_object_new_object();
        /* A tenant's template being built holds a reservation of its template
         * storage (api/templates.c): the workers import at most that. An
         * upload's copies carry none (the template counted when it was in). */
        if (build && !PQgetisnull(tpl, 0, 1))
                json_object_object_add(spec, "max_bytes",
                                       json_object_new_int64(strtoll(PQgetvalue(tpl, 0, 1), NULL, 10)));
        for (int i = 0; i < PQntuples(ws); i++) {
                const char *wid = PQgetvalue(ws, i, 0);
                f->pending++;
                int r;
                if (build) {
                        r = cp__template_import(c, wid, tpl_id, spec, op, fleet_op_done, f);
                } else {
                        sp_rpc_client *cli = cp__worker_client(c, wid);
                        _cleanup_json_ json_object *req =
                                pr_msg_encode(&pr_wk_template_ref_schema, &(pr_wk_template_ref){.name = tpl_id});
                        r = cli ? sp_rpc_client_call(cli, "DeleteTemplate", req, 60000, on_delete_template, f, NULL)
                                : -SP_E_UNAVAILABLE;
                }
                if (r < 0) {
                        sp_error err = {SP_E_UNAVAILABLE, 0, (char *)"the worker cannot be reached"};
                        fleet_op_done(f, &err);
                }
        }
        fleet_op_step(f);
}
