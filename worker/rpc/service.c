/* SPDX-License-Identifier: Apache-2.0 */
/* Sandboxes, templates and the node: the unary methods. */
#include <string.h>

#include "rpc/service.h"
#include "rpc/service_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/pki.h"

wk_service_ctx wk__svc;

int wk__fail(sp_rpc_call *call, sp_error *e)
{
        sp_rpc_call_fail(call, e);
        sp_error_free(e);
        return -1;
}

static const char *str(json_object *req, const char *field, size_t max, sp_error **err)
{
        const char *s = NULL;
        if (sp_json_get_string(req, field, true, max, &s, err) < 0)
                return NULL;
        return s;
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

static void h_create(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        static const char *const fields[] = {"id", "template", "resources", "env", "hostname", "warm", NULL};
        wk_sandbox_request r = {.allow_warm = true};
        json_object *res = NULL;
        int64_t mem_mb = 0, disk_mb = 0;
        if (sp_json_check_fields(req, fields, &e) < 0 || !(r.id = str(req, "id", 64, &e)) ||
            !(r.template_name = str(req, "template", 64, &e)) ||
            sp_json_get_object(req, "resources", false, &res, &e) < 0 ||
            sp_json_get_string_map(req, "env", false, 1024, 256, 65536, &r.env, &e) < 0 ||
            sp_json_get_string(req, "hostname", false, 63, &r.hostname, &e) < 0 ||
            sp_json_get_bool(req, "warm", false, &r.allow_warm, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        if (res) {
                static const char *const rf[] = {"cpu_millis", "memory_mb", "pids", "disk_mb", NULL};
                if (sp_json_check_fields(res, rf, &e) < 0 ||
                    sp_json_get_int(res, "cpu_millis", false, 0, 256000, &r.cpu_millis, &e) < 0 ||
                    sp_json_get_int(res, "memory_mb", false, 0, 1 << 20, &mem_mb, &e) < 0 ||
                    sp_json_get_int(res, "pids", false, 0, 1 << 22, &r.pids_max, &e) < 0 ||
                    sp_json_get_int(res, "disk_mb", false, 0, 1 << 24, &disk_mb, &e) < 0) {
                        sp_error_wrap(&e, "field 'resources'");
                        wk__fail(call, e);
                        return;
                }
        }
        r.memory_bytes = mem_mb << 20;
        r.disk_bytes = disk_mb << 20;
        wk_sandbox *sb;
        if (wk_node_sandbox_create(wk__svc.node, &r, &sb, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        _cleanup_json_ json_object *o = wk_sandbox_to_json(sb);
        sp_rpc_call_reply(call, o, NULL);
}

typedef int (*id_op)(wk_node *n, const char *id, sp_error **err);

static void by_id(sp_rpc_call *call, json_object *req, id_op op, bool reply_with_sandbox)
{
        sp_error *e = NULL;
        static const char *const fields[] = {"id", NULL};
        const char *id;
        if (sp_json_check_fields(req, fields, &e) < 0 || !(id = str(req, "id", 64, &e)) ||
            (op && op(wk__svc.node, id, &e) < 0)) {
                wk__fail(call, e);
                return;
        }
        if (reply_with_sandbox)
                reply_sandbox(call, id);
        else
                sp_rpc_call_reply(call, NULL, NULL);
}

static void h_get(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id(call, req, NULL, true);
}
static void h_delete(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id(call, req, wk_node_sandbox_delete, false);
}
static void h_pause(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id(call, req, wk_node_sandbox_pause, true);
}
static void h_resume(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id(call, req, wk_node_sandbox_resume, true);
}
static void h_suspend(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id(call, req, wk_node_sandbox_suspend, true);
}
static void h_restore(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        by_id(call, req, wk_node_sandbox_restore, true);
}

static void h_list(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)req;
        (void)ud;
        _cleanup_json_ json_object *o = wk_node_sandboxes_json(wk__svc.node);
        sp_rpc_call_reply(call, o, NULL);
}

static void h_stats(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        const char *id;
        _cleanup_json_ json_object *o = NULL;
        if (!(id = str(req, "id", 64, &e)) || wk_node_sandbox_stats(wk__svc.node, id, &o, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, o, NULL);
}

static void h_node_info(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)req;
        (void)ud;
        _cleanup_json_ json_object *o = wk_node_info_json(wk__svc.node);
        sp_rpc_call_reply(call, o, NULL);
}

static void h_set_warm(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        const char *tpl;
        int64_t size = 0;
        if (!(tpl = str(req, "template", 64, &e)) || sp_json_get_int(req, "size", true, 0, 100000, &size, &e) < 0 ||
            wk_node_set_warm(wk__svc.node, tpl, size, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, NULL, NULL);
}

static void h_templates(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)req;
        (void)ud;
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

static void send_progress(sp_rpc_call *call, const char *message)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "event", json_object_new_string("progress"));
        json_object_object_add(o, "message", json_object_new_string(message));
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
        _cleanup_json_ json_object *extra = json_object_new_object();
        json_object_object_add(extra, "template", wk_node_template_json(wk__svc.node, ic->name));
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
        static const char *const fields[] = {"name", "source", "path", "suite", "mirror", "max_bytes", NULL};
        int64_t max_bytes = 0;
        wk_template_import_req r = {0};
        if (sp_json_check_fields(req, fields, &e) < 0 || !(r.name = str(req, "name", 64, &e)) ||
            !(r.source = str(req, "source", 16, &e)) || sp_json_get_string(req, "path", false, 4096, &r.path, &e) < 0 ||
            sp_json_get_string(req, "suite", false, WK_DEBOOTSTRAP_SUITE_MAX, &r.suite, &e) < 0 ||
            sp_json_get_string(req, "mirror", false, WK_DEBOOTSTRAP_MIRROR_MAX, &r.mirror, &e) < 0 ||
            sp_json_get_int(req, "max_bytes", false, 1, INT64_MAX, &max_bytes, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        r.max_bytes = (uint64_t)max_bytes;
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
        const char *name;
        if (!(name = str(req, "name", 64, &e)) || wk_node_template_delete(wk__svc.node, name, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        sp_rpc_call_reply(call, NULL, NULL);
}

int wk_service_register(sp_rpc_server *srv, wk_node *node, const wk_service_options *opts, sp_error **err)
{
        wk__svc.node = node;
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
                {"NodeInfo", cp, false, h_node_info, NULL},
                {"SetWarmPool", cp, false, h_set_warm, NULL},
                {"ListTemplates", cp, false, h_templates, NULL},
                {"ImportTemplate", cp, true, h_import, NULL},
                {"UploadTemplate", cpdp, true, wk__h_upload_template, NULL},
                {"ReadTemplateArtifact", cp, true, wk__h_read_template_artifact, NULL},
                {"DeleteTemplate", cp, false, h_template_delete, NULL},
                {"Exec", cp, false, wk__h_exec, NULL},
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
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(methods); i++)
                if (sp_rpc_server_register(srv, &methods[i], err) < 0)
                        return sp_error_wrap(err, "register %s", methods[i].name);
        return 0;
}
