/* SPDX-License-Identifier: Apache-2.0 */
/* Sandboxes, templates and the node: the unary methods. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc/service.h"
#include "rpc/service_internal.h"
#include "policy/profile.h"
#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"
#include "space/pki.h"
#include "space/worker_rpc.h"

_Static_assert(PR_WK_SUITE_MAX == WK_DEBOOTSTRAP_SUITE_MAX, "ImportTemplate suite bound");
_Static_assert(PR_WK_MIRROR_MAX == WK_DEBOOTSTRAP_MIRROR_MAX, "ImportTemplate mirror bound");
_Static_assert(PR_WK_PACKAGES_MAX == WK_DEBOOTSTRAP_PACKAGES_MAX, "ImportTemplate packages bound");
_Static_assert(PR_WK_USER_NAME_MAX == WK_DEBOOTSTRAP_USER_MAX, "ImportTemplate user bound");

wk_service_ctx wk__svc;

int wk__fail(sp_rpc_call *call, sp_error *e)
{
        sp_rpc_call_fail(call, e);
        sp_error_free(e);
        return -1;
}

void wk__call_finish_from_exit(sp_rpc_call *call, json_object *result, bool streaming)
{
        if (json_object_object_get_ex(result, "error", NULL)) {
                sp_errc code = SP_E_INTERNAL;
                _cleanup_free_ char *msg = NULL;
                const char *text = sp_json_str(result);
                if (sp_error_shape_decode(text, strlen(text), &code, &msg, NULL) < 0)
                        msg = strdup("the agent failed");
                sp_rpc_call_failf(call, code, "%s", msg ? msg : "error");
                return;
        }
        if (streaming)
                sp_rpc_call_end(call, result, NULL);
        else
                sp_rpc_call_reply(call, result, NULL);
}

static void reply_sandbox(sp_rpc_call *call, const char *id)
{
        wk_sandbox *sb = wk_node_sandbox_find(wk__svc.node, id);
        if (!sb) {
                sp_rpc_call_failf(call, SP_E_NOT_FOUND, "sandbox %s not found", id);
                return;
        }
        _cleanup_json_ json_object *o = wk_sandbox_to_json(sb);
        sp_rpc_call_reply(call, o, NULL);
}

/* The profile as the gateway will read it (the control plane checked who may
 * allow private addresses). */
int wk__egress_check(json_object *egress, sp_error **err)
{
        _cleanup_(gw_profile_unrefp) gw_profile *p = NULL;
        if (gw_profile_resolve(egress, true, &p, err) < 0)
                return sp_error_wrap(err, "field 'egress'");
        return 0;
}

/* A create's answer (now, or once its job is done). */
static void created(wk_sandbox *sb, const sp_error *err, void *ud)
{
        sp_rpc_call *call = ud;
        if (!sb) {
                sp_rpc_call_fail(call, err);
        } else {
                _cleanup_json_ json_object *o = wk_sandbox_to_json(sb);
                sp_rpc_call_reply(call, o, NULL);
        }
}

static void created_later(wk_sandbox *sb, const sp_error *err, void *ud)
{
        created(sb, err, ud);
        sp_rpc_call_unref(ud);
}

static void h_create(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_create_sandbox q = {0};
        if (pr_msg_decode(&pr_wk_create_sandbox_schema, req, &q, &e) < 0 ||
            (q.egress && wk__egress_check(q.egress, &e) < 0)) {
                wk__fail(call, e);
                return;
        }
        wk_sandbox_request r = {
                .id = q.id,
                .template_name = q.template_name,
                .env = q.env,
                .hostname = q.hostname,
                .allow_warm = q.warm,
                .backend = q.backend,
                .tenant_id = q.tenant_id,
                .egress = q.egress,
                .secrets = q.secrets,
                .egress_generation = q.egress_generation,
                .cpu_millis = q.resources.cpu_millis,
                .pids_max = q.resources.pids,
                .memory_bytes = q.resources.memory_mb << 20,
                .disk_bytes = q.resources.disk_mb << 20,
        };
        wk_sandbox *sb = NULL;
        sp_rpc_call_ref(call);
        int rc = wk_node_sandbox_create(wk__svc.node, &r, created_later, call, &sb, &e);
        if (rc != 1)
                sp_rpc_call_unref(call);
        if (rc < 0) {
                wk__fail(call, e);
                return;
        }
        if (rc == 0)
                created(sb, NULL, call);
}

typedef int (*id_op)(wk_node *n, const char *id, sp_error **err);

static void by_id(sp_rpc_call *call, json_object *req, id_op op, bool reply_with_sandbox)
{
        sp_error *e = NULL;
        pr_wk_sandbox_ref q = {0};
        if (pr_msg_decode(&pr_wk_sandbox_ref_schema, req, &q, &e) < 0 || (op && op(wk__svc.node, q.id, &e) < 0)) {
                wk__fail(call, e);
                return;
        }
        if (reply_with_sandbox)
                reply_sandbox(call, q.id);
        else
                sp_rpc_call_reply(call, NULL, NULL);
}

static void h_get(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id(call, req, NULL, true);
}
static void deleted(const sp_error *err, void *ud)
{
        sp_rpc_call *call = ud;
        if (err)
                sp_rpc_call_fail(call, err);
        else
                sp_rpc_call_reply(call, NULL, NULL);
        sp_rpc_call_unref(call);
}

static void h_delete(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_sandbox_ref q = {0};
        if (pr_msg_decode(&pr_wk_sandbox_ref_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_ref(call);
        if (wk_node_sandbox_delete(wk__svc.node, q.id, deleted, call, &e) < 0) {
                sp_rpc_call_unref(call);
                wk__fail(call, e);
        }
}
typedef int (*id_job)(wk_node *n, const char *id, wk_node_done_fn done, void *ud, sp_error **err);

typedef struct id_job_call {
        sp_rpc_call *call;
        char id[PR_WK_ID_MAX + 1];
} id_job_call;

static void id_job_done(const sp_error *err, void *ud)
{
        id_job_call *x = ud;
        if (err)
                sp_rpc_call_fail(x->call, err);
        else
                reply_sandbox(x->call, x->id);
        sp_rpc_call_unref(x->call);
        free(x);
}

/* A sandbox job: answered with the sandbox once it is done. */
static void id_job_start(sp_rpc_call *call, const char *id, id_job op)
{
        sp_error *e = NULL;
        id_job_call *x = calloc(1, sizeof(*x));
        if (!x) {
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        x->call = sp_rpc_call_ref(call);
        snprintf(x->id, sizeof(x->id), "%s", id);
        int r = op(wk__svc.node, id, id_job_done, x, &e);
        if (r == 1)
                return;
        sp_rpc_call_unref(call);
        free(x);
        if (r < 0)
                wk__fail(call, e);
        else
                reply_sandbox(call, id);
}

static void by_id_job(sp_rpc_call *call, json_object *req, id_job op)
{
        sp_error *e = NULL;
        pr_wk_sandbox_ref q = {0};
        if (pr_msg_decode(&pr_wk_sandbox_ref_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        id_job_start(call, q.id, op);
}

static void h_pause(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id_job(call, req, wk_node_sandbox_pause);
}
static void h_resume(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id_job(call, req, wk_node_sandbox_resume);
}
static void h_suspend(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_suspend_req q = {0};
        if (pr_msg_decode(&pr_wk_suspend_req_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        id_job_start(call, q.id, q.processes ? wk_node_sandbox_suspend : wk_node_sandbox_stop);
}
static void h_restore(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id_job(call, req, wk_node_sandbox_restore);
}

/* Decodes a request of no fields; fails the call if it has any. */
static int no_fields(sp_rpc_call *call, json_object *req)
{
        sp_error *e = NULL;
        pr_wk_empty q = {0};
        return pr_msg_decode(&pr_wk_empty_schema, req, &q, &e) < 0 ? wk__fail(call, e) : 0;
}

static void h_list(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        if (no_fields(call, req) < 0)
                return;
        _cleanup_json_ json_object *o = wk_node_sandboxes_json(wk__svc.node);
        sp_rpc_call_reply(call, o, NULL);
}

static void h_stats(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_sandbox_ref q = {0};
        _cleanup_json_ json_object *o = NULL;
        if (pr_msg_decode(&pr_wk_sandbox_ref_schema, req, &q, &e) < 0 ||
            wk_node_sandbox_stats(wk__svc.node, q.id, &o, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, o, NULL);
}

static void h_node_info(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        if (no_fields(call, req) < 0)
                return;
        _cleanup_json_ json_object *o = wk_node_info_json(wk__svc.node);
        sp_rpc_call_reply(call, o, NULL);
}

static void h_set_warm(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_set_warm_pool q = {0};
        if (pr_msg_decode(&pr_wk_set_warm_pool_schema, req, &q, &e) < 0 ||
            wk_node_set_warm(wk__svc.node, q.template_name, q.size, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, NULL, NULL);
}

/* The answer, {} or the error, to a call held (sp_rpc_call_ref) until now:
 * a delete that waited for its template's import to stop, an egress profile
 * the gateway took. */
static void reply_later(const sp_error *err, void *ud)
{
        sp_rpc_call *call = ud;
        if (err)
                sp_rpc_call_fail(call, err);
        else
                sp_rpc_call_reply(call, NULL, NULL);
        sp_rpc_call_unref(call);
}

static void h_set_egress(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_set_egress q = {0};
        if (pr_msg_decode(&pr_wk_set_egress_schema, req, &q, &e) < 0 || wk__egress_check(q.egress, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_ref(call);
        if (wk_node_sandbox_set_egress(wk__svc.node, q.id, q.egress, q.secrets, q.egress_generation, reply_later, call,
                                       &e) < 0) {
                sp_rpc_call_unref(call);
                wk__fail(call, e);
        }
}

static void h_egress_log(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_get_egress_log q = {0};
        _cleanup_json_ json_object *o = NULL;
        if (pr_msg_decode(&pr_wk_get_egress_log_schema, req, &q, &e) < 0 ||
            wk_node_egress_log(wk__svc.node, q.id, &q, &o, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, o, NULL);
}

static void h_templates(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        if (no_fields(call, req) < 0)
                return;
        _cleanup_json_ json_object *o = wk_node_templates_json(wk__svc.node);
        sp_rpc_call_reply(call, o, NULL);
}

/* ImportTemplate streams (worker-rpc.md): progress lines while the import
 * runs off the loop (node.h), then the trailer with the Template. A caller
 * that goes away detaches: the import goes on. */
typedef struct {
        sp_rpc_call *call;
        wk_import *imp; /* NULL once done */
        char name[65];
} import_call;

json_object *wk__template_trailer(const pr_schema *s, const char *name, int64_t bytes)
{
        char ts[32];
        pr_wk_template_trailer t = {.ok = true, .bytes = bytes};
        if (!wk_node_template_answer(wk__svc.node, name, &t.template_, ts)) {
                pr_msg_init(&pr_wk_template_schema, &t.template_);
                t.template_.name = name;
        }
        return pr_msg_encode(s, &t);
}

static void send_progress(sp_rpc_call *call, const char *message)
{
        _cleanup_json_ json_object *o =
                pr_msg_encode(&pr_wk_progress_event_schema, &(pr_wk_message_event){"progress", message});
        sp_rpc_call_send_json(call, o, NULL); /* a call that went away gets no more */
}

static void import_progress(const char *line, void *ud)
{
        import_call *ic = ud;
        send_progress(ic->call, line);
}

static void import_done(const sp_error *err, void *ud)
{
        import_call *ic = ud;
        ic->imp = NULL;
        if (err) {
                sp_rpc_call_fail(ic->call, err);
                return;
        }
        send_progress(ic->call, "imported");
        _cleanup_json_ json_object *extra = wk__template_trailer(&pr_wk_import_trailer_schema, ic->name, 0);
        sp_rpc_call_end(ic->call, extra, NULL); /* the caller went away: the template stays imported */
}

static void import_closed(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        import_call *ic = ud;
        wk_import_detach(ic->imp);
        sp_rpc_call_unref(ic->call);
        free(ic);
}

static void h_import(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_import_template q = {0};
        if (pr_msg_decode(&pr_wk_import_template_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        wk_template_import_req r = {
                .name = q.name,
                .source = q.source,
                .path = q.path,
                .suite = q.suite,
                .mirror = q.mirror,
                .packages = q.packages,
                .user = q.user,
                .max_bytes = (uint64_t)q.max_bytes,
        };
        import_call *ic = calloc(1, sizeof(*ic));
        if (!ic) {
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        snprintf(ic->name, sizeof(ic->name), "%s", r.name);
        static const wk_import_ops iops = {.progress = import_progress, .done = import_done};
        if (wk_node_template_import(wk__svc.node, &r, &iops, ic, &ic->imp, &e) < 0) {
                free(ic);
                wk__fail(call, e);
                return;
        }
        static const sp_rpc_call_ops ops = {.on_close = import_closed};
        ic->call = sp_rpc_call_ref(call);
        sp_rpc_call_set_ops(call, &ops, ic);
}

static void h_template_delete(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_template_ref q = {0};
        if (pr_msg_decode(&pr_wk_template_ref_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        /* Answered once a running import of it has stopped (node.h). */
        int r = wk_node_template_delete(wk__svc.node, q.name, reply_later, sp_rpc_call_ref(call), &e);
        if (r == 1)
                return;
        sp_rpc_call_unref(call);
        if (r < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, NULL, NULL);
}

/* Per-sandbox order: a unary call on a sandbox a job is making or removing
 * waits for the job (and the calls queued before it), then runs as if it had
 * come then. */
typedef struct gated_call {
        sp_rpc_handler_fn fn;
        void *ud;
        sp_rpc_call *call;
        json_object *req;
} gated_call;

#define GATED_MAX 24
static struct {
        sp_rpc_handler_fn fn;
        void *ud;
} gated[GATED_MAX];
static size_t ngated;

static void gate_run(sp_rpc_handler_fn fn, void *fn_ud, sp_rpc_call *call, json_object *req);

static void gate_again(void *ud)
{
        gated_call *g = ud;
        gate_run(g->fn, g->ud, g->call, g->req);
        json_object_put(g->req);
        sp_rpc_call_unref(g->call);
        free(g);
}

static void gate_run(sp_rpc_handler_fn fn, void *fn_ud, sp_rpc_call *call, json_object *req)
{
        const char *id = sp_json_member_str(req, "sandbox_id");
        if (!id)
                id = sp_json_member_str(req, "id");
        if (id && wk_node_sandbox_busy(wk__svc.node, id)) {
                gated_call *g = calloc(1, sizeof(*g));
                if (g) {
                        *g = (gated_call){
                                .fn = fn, .ud = fn_ud, .call = sp_rpc_call_ref(call), .req = json_object_get(req)};
                        if (wk_node_sandbox_after(wk__svc.node, id, gate_again, g) == 0)
                                return;
                        json_object_put(g->req);
                        sp_rpc_call_unref(g->call);
                        free(g);
                }
                sp_rpc_call_failf(call, SP_E_UNAVAILABLE, "sandbox %s is busy", id);
                return;
        }
        fn(call, req, fn_ud);
}

static void gate(sp_rpc_call *call, json_object *req, void *ud)
{
        size_t i = (size_t)(uintptr_t)ud;
        gate_run(gated[i].fn, gated[i].ud, call, req);
}

int wk_service_register(sp_rpc_server *srv, wk_node *node, const wk_service_options *opts, sp_error **err)
{
        wk__svc.node = node;
        wk__svc.allow_unauthenticated = opts && opts->allow_unauthenticated;
        wk__svc.peer_ctx = opts ? opts->peer_ctx : NULL;
        wk__svc.max_port_connections =
                opts && opts->max_port_connections > 0 ? opts->max_port_connections : WK_DEFAULT_MAX_PORT_CONNECTIONS;
        uint32_t cp = SP_ROLE_CONTROLPLANE | (opts->allow_unauthenticated ? SP_RPC_UNAUTHENTICATED : 0);
        uint32_t cpdp = cp | SP_ROLE_DATAPLANE;
        const sp_rpc_method methods[] = {
                {"CreateSandbox", cp, false, h_create, NULL},
                {"GetSandbox", cp, false, h_get, NULL},
                {"ListSandboxes", cp, false, h_list, NULL},
                {"DeleteSandbox", cp, false, h_delete, NULL},
                {"PauseSandbox", cp, false, h_pause, NULL},
                {"ResumeSandbox", cp, false, h_resume, NULL},
                {"SuspendSandbox", cp, false, h_suspend, NULL},
                {"RestoreSandbox", cp, false, h_restore, NULL},
                {"SandboxStats", cp, false, h_stats, NULL},
                {"ExportSandbox", cp, false, wk__h_export_sandbox, NULL},
                {"ReadSandboxArtifact", cp | SP_ROLE_WORKER, true, wk__h_read_sandbox_artifact, NULL},
                {"ImportSandbox", cp, false, wk__h_import_sandbox, NULL},
                {"DeleteStoredSandbox", cp, false, wk__h_delete_stored_sandbox, NULL},
                {"NodeInfo", cp, false, h_node_info, NULL},
                {"SetWarmPool", cp, false, h_set_warm, NULL},
                {"SetEgress", cp, false, h_set_egress, NULL},
                {"GetEgressLog", cp, false, h_egress_log, NULL},
                {"ListTemplates", cp, false, h_templates, NULL},
                {"ImportTemplate", cp, true, h_import, NULL},
                {"UploadTemplate", cpdp, true, wk__h_upload_template, NULL},
                {"ReadTemplateArtifact", cp, true, wk__h_read_template_artifact, NULL},
                {"DeleteTemplate", cp, false, h_template_delete, NULL},
                {"Exec", cp, false, wk__h_exec, NULL},
                {"ExecStream", cp, true, wk__h_exec, (void *)"stream"},
                {"GetSession", cpdp, false, wk__h_get_session, NULL},
                {"ListSessions", cp, false, wk__h_list_sessions, NULL},
                {"SignalSession", cpdp, false, wk__h_signal, NULL},
                {"KillSession", cpdp, false, wk__h_kill, NULL},
                {"ResizeSession", cpdp, false, wk__h_resize, NULL},
                {"CloseStdin", cpdp, false, wk__h_close_stdin, NULL},
                {"AttachSession", cpdp, true, wk__h_attach, NULL},
                {"WriteStdin", cpdp, true, wk__h_write_stdin, NULL},
                {"StatFile", cpdp, false, wk__h_file_simple, (void *)"stat"},
                {"ListDir", cpdp, false, wk__h_file_simple, (void *)"list"},
                {"MakeDir", cpdp, false, wk__h_file_simple, (void *)"mkdir"},
                {"MovePath", cpdp, false, wk__h_file_simple, (void *)"move"},
                {"RemovePath", cpdp, false, wk__h_file_simple, (void *)"remove"},
                {"ChmodPath", cpdp, false, wk__h_file_simple, (void *)"chmod"},
                {"ReadFile", cpdp, true, wk__h_read_file, NULL},
                {"WriteFile", cpdp, true, wk__h_write_file, NULL},
                {"ConnectPort", cpdp, true, wk__h_connect_port, NULL},
        };
        /* Unary calls on one sandbox go through the gate (CreateSandbox too: a
         * retried create of an id being made answers once it is). */
        static const char *const on_a_sandbox[] = {
                "CreateSandbox",  "GetSandbox",    "DeleteSandbox", "PauseSandbox", "ResumeSandbox", "SuspendSandbox",
                "RestoreSandbox", "SandboxStats",  "SetEgress",     "Exec",         "StatFile",      "ListDir",
                "ExportSandbox",  "ImportSandbox", "MakeDir",       "MovePath",     "RemovePath",    "ChmodPath"};
        ngated = 0;
        for (size_t i = 0; i < SP_ARRAY_SIZE(methods); i++) {
                sp_rpc_method m = methods[i];
                for (size_t k = 0; k < SP_ARRAY_SIZE(on_a_sandbox) && !m.streaming && ngated < GATED_MAX; k++)
                        if (strcmp(m.name, on_a_sandbox[k]) == 0) {
                                gated[ngated].fn = m.handler;
                                gated[ngated].ud = m.userdata;
                                m.handler = gate;
                                m.userdata = (void *)(uintptr_t)ngated++;
                                break;
                        }
                if (sp_rpc_server_register(srv, &m, err) < 0)
                        return sp_error_wrap(err, "register %s", m.name);
        }
        return 0;
}
