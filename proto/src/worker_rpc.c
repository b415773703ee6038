/* SPDX-License-Identifier: Apache-2.0 */
/* Worker RPC requests and answers: one schema per shape (worker_rpc.h). The
 * requests' bounds are the worker's; the file fields' are the agent's, which
 * the worker hands them to (agent_proto.c). The answers are open and bound
 * only what the worker may send. */
#include <string.h>

#include "space/agent_proto.h"
#include "space/worker_rpc.h"

const pr_schema pr_wk_empty_schema = {.name = "Empty", .fields = NULL, .nfields = 0};

#define R pr_wk_resources
static const pr_field resources_fields[] = {
        PR_F_INT(R, "cpu_millis", cpu_millis, false, 0, 256000, 0),
        PR_F_INT(R, "memory_mb", memory_mb, false, 0, 1 << 20, 0),
        PR_F_INT(R, "pids", pids, false, 0, 1 << 22, 0),
        PR_F_INT(R, "disk_mb", disk_mb, false, 0, 1 << 24, 0),
};
#undef R
static const pr_schema resources_schema = PR_SCHEMA("Resources", resources_fields);

#define R pr_wk_create_sandbox
static const pr_field create_sandbox_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "template", template_name, true, PR_WK_ID_MAX),
        PR_F_OBJECT(R, "resources", resources, &resources_schema),
        PR_F_STRING_MAP(R, "env", env, PR_WK_ENV_MAX, 256, 65536),
        PR_F_STRING(R, "hostname", hostname, false, 63),
        PR_F_BOOL(R, "warm", warm, true),
        PR_F_STRING(R, "tenant_id", tenant_id, false, PR_WK_ID_MAX),
        PR_F_JSON(R, "egress", egress, false),
        PR_F_JSON(R, "secrets", secrets, false),
        PR_F_INT(R, "egress_generation", egress_generation, false, 0, INT64_MAX, 0),
        PR_F_STRING(R, "backend", backend, false, 16),
};
#undef R
const pr_schema pr_wk_create_sandbox_schema = PR_SCHEMA("CreateSandbox", create_sandbox_fields);

static const pr_field sandbox_ref_fields[] = {PR_F_STRING(pr_wk_sandbox_ref, "id", id, true, PR_WK_ID_MAX)};
const pr_schema pr_wk_sandbox_ref_schema = PR_SCHEMA("SandboxRef", sandbox_ref_fields);
static const pr_field suspend_req_fields[] = {
        PR_F_STRING(pr_wk_suspend_req, "id", id, true, PR_WK_ID_MAX),
        PR_F_BOOL(pr_wk_suspend_req, "processes", processes, true),
};
const pr_schema pr_wk_suspend_req_schema = PR_SCHEMA("SuspendRequest", suspend_req_fields);

#define R pr_wk_exec
static const pr_field exec_fields[] = {
        PR_F_STRING(R, "sandbox_id", sandbox_id, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "session_id", session_id, true, PR_WK_ID_MAX),
        PR_F_INT(R, "timeout_ms", timeout_ms, false, 0, PR_WK_EXEC_TIMEOUT_MAX_MS, 0),
        PR_F_JSON(R, "argv", argv, true),
        PR_F_JSON(R, "env", env, false),
        PR_F_JSON(R, "cwd", cwd, false),
        PR_F_JSON(R, "user", user, false),
        PR_F_JSON(R, "pty", pty, false),
        PR_F_JSON(R, "stdin", stdin_open, false),
};
#undef R
const pr_schema pr_wk_exec_schema = PR_SCHEMA("Exec", exec_fields);

static const pr_field session_ref_fields[] = {
        PR_F_STRING(pr_wk_session_ref, "session_id", session_id, true, PR_WK_ID_MAX)};
const pr_schema pr_wk_session_ref_schema = PR_SCHEMA("SessionRef", session_ref_fields);

static const pr_field list_sessions_fields[] = {
        PR_F_STRING(pr_wk_list_sessions, "sandbox_id", sandbox_id, true, PR_WK_ID_MAX)};
const pr_schema pr_wk_list_sessions_schema = PR_SCHEMA("ListSessions", list_sessions_fields);

#define R pr_wk_set_egress
static const pr_field set_egress_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_JSON(R, "egress", egress, true),
        PR_F_JSON(R, "secrets", secrets, false),
        PR_F_INT(R, "egress_generation", egress_generation, false, 0, INT64_MAX, 0),
};
#undef R
const pr_schema pr_wk_set_egress_schema = PR_SCHEMA("SetEgress", set_egress_fields);

#define R pr_wk_get_egress_log
static const pr_field get_egress_log_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_INT(R, "limit", limit, false, 1, 1000, 100),
        PR_F_STRING(R, "decision", decision, false, 16),
        PR_F_STRING(R, "kind", kind, false, 16),
        PR_F_INT(R, "before_us", before_us, false, 0, INT64_MAX, 0),
        PR_F_INT(R, "after_us", after_us, false, 0, INT64_MAX, 0),
};
#undef R
const pr_schema pr_wk_get_egress_log_schema = PR_SCHEMA("GetEgressLog", get_egress_log_fields);

#define R pr_wk_egress_record
static const pr_field egress_record_fields[] = {
        PR_F_INT(R, "time_us", time_us, true, 0, INT64_MAX, 0),
        PR_F_STRING(R, "kind", kind, true, 16),
        PR_F_STRING(R, "decision", decision, true, 16),
        PR_F_STRING(R, "rule", rule, true, 64),
};
#undef R
const pr_schema pr_wk_egress_record_schema = PR_SCHEMA_OPEN("EgressRecord", egress_record_fields);

static const pr_field egress_log_fields[] = {
        PR_F_ARRAY(pr_wk_egress_log, "records", records, true, 1000, &pr_wk_egress_record_schema),
        PR_F_BOOL(pr_wk_egress_log, "more", more, false)};
const pr_schema pr_wk_egress_log_schema = PR_SCHEMA_OPEN("EgressLog", egress_log_fields);

static const pr_field signal_session_fields[] = {
        PR_F_STRING(pr_wk_signal_session, "session_id", session_id, true, PR_WK_ID_MAX),
        PR_F_INT(pr_wk_signal_session, "signal", signal, true, 1, 64, 0),
};
const pr_schema pr_wk_signal_session_schema = PR_SCHEMA("SignalSession", signal_session_fields);

static const pr_field resize_session_fields[] = {
        PR_F_STRING(pr_wk_resize_session, "session_id", session_id, true, PR_WK_ID_MAX),
        PR_F_INT(pr_wk_resize_session, "rows", rows, true, 1, 65535, 0),
        PR_F_INT(pr_wk_resize_session, "cols", cols, true, 1, 65535, 0),
};
const pr_schema pr_wk_resize_session_schema = PR_SCHEMA("ResizeSession", resize_session_fields);

static const pr_field attach_session_fields[] = {
        PR_F_STRING(pr_wk_attach_session, "session_id", session_id, true, PR_WK_ID_MAX),
        PR_F_INT(pr_wk_attach_session, "offset", offset, false, 0, INT64_MAX, 0),
};
const pr_schema pr_wk_attach_session_schema = PR_SCHEMA("AttachSession", attach_session_fields);

static const pr_field write_stdin_fields[] = {
        PR_F_STRING(pr_wk_write_stdin, "session_id", session_id, true, PR_WK_ID_MAX),
        PR_F_BOOL(pr_wk_write_stdin, "close", close, false),
};
const pr_schema pr_wk_write_stdin_schema = PR_SCHEMA("WriteStdin", write_stdin_fields);
static const pr_field connect_port_fields[] = {
        PR_F_STRING(pr_wk_connect_port, "sandbox_id", sandbox_id, true, PR_WK_ID_MAX),
        PR_F_INT(pr_wk_connect_port, "port", port, true, 1, 65535, 0),
        PR_F_INT(pr_wk_connect_port, "window", window, false, 4096, PR_AGENT_MAX_CREDIT, 0),
};
const pr_schema pr_wk_connect_port_schema = PR_SCHEMA("ConnectPort", connect_port_fields);

/* The file fields, with the agent's bounds. */
#define R pr_wk_file
#define F_SANDBOX PR_F_STRING(R, "sandbox_id", sandbox_id, true, PR_WK_ID_MAX)
#define F_PATH PR_F_STRING(R, "path", path, true, PR_AGENT_MAX_PATH)
#define F_USER \
        PR_F_STRING(R, "user", user, false, PR_WK_USER_MAX), PR_F_STRING(R, "owner", owner, false, PR_WK_USER_MAX)
#define F_MODE(req) PR_F_INT(R, "mode", mode, req, 0, 07777, -1)
static const pr_field stat_file_fields[] = {F_SANDBOX, F_PATH, F_USER, PR_F_BOOL(R, "follow", follow, false)};
static const pr_field list_dir_fields[] = {F_SANDBOX, F_PATH, F_USER, PR_F_INT(R, "limit", limit, false, 1, 100000, 0)};
static const pr_field make_dir_fields[] = {F_SANDBOX, F_PATH, F_USER, F_MODE(false),
                                           PR_F_BOOL(R, "parents", parents, false)};
static const pr_field move_path_fields[] = {F_SANDBOX, PR_F_STRING(R, "from", from, true, PR_AGENT_MAX_PATH),
                                            PR_F_STRING(R, "to", to, true, PR_AGENT_MAX_PATH), F_USER};
static const pr_field remove_path_fields[] = {F_SANDBOX, F_PATH, F_USER, PR_F_BOOL(R, "recursive", recursive, false)};
static const pr_field chmod_path_fields[] = {F_SANDBOX, F_PATH, F_USER, F_MODE(true)};
static const pr_field read_file_fields[] = {
        F_SANDBOX,
        F_PATH,
        F_USER,
        PR_F_INT(R, "offset", offset, false, 0, INT64_MAX, 0),
        PR_F_INT(R, "length", length, false, 0, INT64_MAX, -1),
        PR_F_INT(R, "window", window, false, 4096, PR_AGENT_MAX_CREDIT, 0),
};
static const pr_field write_file_fields[] = {F_SANDBOX,
                                             F_PATH,
                                             F_USER,
                                             F_MODE(false),
                                             PR_F_BOOL(R, "append", append, false),
                                             PR_F_BOOL(R, "parents", parents, false)};
#undef F_SANDBOX
#undef F_PATH
#undef F_USER
#undef F_MODE
#undef R
const pr_schema pr_wk_stat_file_schema = PR_SCHEMA("StatFile", stat_file_fields);
const pr_schema pr_wk_list_dir_schema = PR_SCHEMA("ListDir", list_dir_fields);
const pr_schema pr_wk_make_dir_schema = PR_SCHEMA("MakeDir", make_dir_fields);
const pr_schema pr_wk_move_path_schema = PR_SCHEMA("MovePath", move_path_fields);
const pr_schema pr_wk_remove_path_schema = PR_SCHEMA("RemovePath", remove_path_fields);
const pr_schema pr_wk_chmod_path_schema = PR_SCHEMA("ChmodPath", chmod_path_fields);
const pr_schema pr_wk_read_file_schema = PR_SCHEMA("ReadFile", read_file_fields);
const pr_schema pr_wk_write_file_schema = PR_SCHEMA("WriteFile", write_file_fields);

void pr_wk_file_init(pr_wk_file *f)
{
        *f = (pr_wk_file)PR_WK_FILE_INIT;
}

int pr_wk_file_decode(const pr_schema *s, json_object *obj, pr_wk_file *out, sp_error **err)
{
        pr_wk_file_init(out);
        int r = pr_msg_decode(s, obj, out, err);
        if (r < 0)
                return r;
        if (out->user && out->owner)
                return sp_error_set(err, SP_E_INVALID, "%s: fields 'user' and 'owner' are mutually exclusive", s->name);
        return 0;
}

#define R pr_wk_import_template
static const pr_field import_template_fields[] = {
        PR_F_STRING(R, "name", name, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "source", source, true, 16),
        PR_F_STRING(R, "path", path, false, PR_WK_PATH_MAX),
        PR_F_STRING(R, "suite", suite, false, PR_WK_SUITE_MAX),
        PR_F_STRING(R, "mirror", mirror, false, PR_WK_MIRROR_MAX),
        PR_F_STRING(R, "packages", packages, false, PR_WK_PACKAGES_MAX),
        PR_F_STRING(R, "user", user, false, PR_WK_USER_NAME_MAX),
        PR_F_INT(R, "max_bytes", max_bytes, false, 1, INT64_MAX, 0),
};
#undef R
const pr_schema pr_wk_import_template_schema = PR_SCHEMA("ImportTemplate", import_template_fields);

#define R pr_wk_upload_template
static const pr_field upload_template_fields[] = {
        PR_F_STRING(R, "name", name, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "format", format, true, 16),
        PR_F_INT(R, "max_bytes", max_bytes, false, 1, INT64_MAX, 0),
        PR_F_INT(R, "max_stored_bytes", max_stored_bytes, false, 1, INT64_MAX, 0),
};
#undef R
const pr_schema pr_wk_upload_template_schema = PR_SCHEMA("UploadTemplate", upload_template_fields);

static const pr_field template_ref_fields[] = {PR_F_STRING(pr_wk_template_ref, "name", name, true, PR_WK_ID_MAX)};
const pr_schema pr_wk_template_ref_schema = PR_SCHEMA("TemplateRef", template_ref_fields);

#define R pr_wk_export_sandbox
static const pr_field export_sandbox_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "to", to, true, PR_WK_ID_MAX),
};
#undef R
const pr_schema pr_wk_export_sandbox_schema = PR_SCHEMA("ExportSandbox", export_sandbox_fields);

#define R pr_wk_read_sandbox_artifact
static const pr_field read_sandbox_artifact_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "name", name, true, PR_WK_ARTIFACT_NAME_MAX),
        PR_F_INT(R, "offset", offset, false, 0, INT64_MAX, 0),
};
#undef R
const pr_schema pr_wk_read_sandbox_artifact_schema = PR_SCHEMA("ReadSandboxArtifact", read_sandbox_artifact_fields);

#define R pr_wk_import_from
static const pr_field import_from_fields[] = {
        PR_F_STRING(R, "worker", worker, false, PR_WK_ID_MAX),
        PR_F_STRING(R, "address", address, false, 300),
        PR_F_BOOL(R, "store", store, false),
};
#undef R
static const pr_schema import_from_schema = PR_SCHEMA("ImportFrom", import_from_fields);

#define R pr_wk_import_sandbox
static const pr_field import_sandbox_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_OBJECT_REQ(R, "from", from, &import_from_schema),
        PR_F_JSON(R, "manifest", manifest, false),
        PR_F_JSON(R, "spec", spec, false),
};
#undef R
const pr_schema pr_wk_import_sandbox_schema = PR_SCHEMA("ImportSandbox", import_sandbox_fields);

int pr_wk_import_sandbox_check(const pr_wk_import_sandbox *q, sp_error **err)
{
        bool holder = q->from.worker || q->from.address;
        if (q->from.store) {
                if (holder)
                        return sp_error_set(err, SP_E_INVALID, "field 'from' names a worker or the store, not both");
                if (q->manifest)
                        return sp_error_set(err, SP_E_INVALID,
                                            "field 'manifest' is not allowed with 'from.store': the store's is read");
                return 0;
        }
        if (!q->from.worker || !q->from.address)
                return sp_error_set(err, SP_E_INVALID,
                                    "field 'from' must have 'worker' and 'address', or be {\"store\":true}");
        if (!q->manifest)
                return sp_error_set(err, SP_E_INVALID, "missing required field 'manifest'");
        return 0;
}

static const pr_field delete_stored_sandbox_fields[] = {
        PR_F_STRING(pr_wk_delete_stored_sandbox, "id", id, true, PR_WK_ID_MAX),
        PR_F_STRING(pr_wk_delete_stored_sandbox, "holder", holder, true, PR_WK_ID_MAX),
};
const pr_schema pr_wk_delete_stored_sandbox_schema = PR_SCHEMA("DeleteStoredSandbox", delete_stored_sandbox_fields);

static const pr_field set_warm_pool_fields[] = {
        PR_F_STRING(pr_wk_set_warm_pool, "template", template_name, true, PR_WK_ID_MAX),
        PR_F_INT(pr_wk_set_warm_pool, "size", size, true, 0, 100000, 0),
};
const pr_schema pr_wk_set_warm_pool_schema = PR_SCHEMA("SetWarmPool", set_warm_pool_fields);

/* ---- Answers (open) ---- */

#define R pr_wk_sandbox_resources
static const pr_field sandbox_resources_fields[] = {
        PR_F_INT(R, "cpu_millis", cpu_millis, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "memory_mb", memory_mb, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "pids", pids, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "disk_mb", disk_mb, true, 0, INT64_MAX, 0),
};
#undef R
static const pr_schema sandbox_resources_schema = PR_SCHEMA_OPEN("SandboxResources", sandbox_resources_fields);

static const pr_field suspend_fields[] = {
        PR_F_BOOL_REQ(pr_wk_suspend, "memory", memory),
        PR_F_BOOL_REQ(pr_wk_suspend, "filesystem", filesystem),
        PR_F_STRING(pr_wk_suspend, "why", why, false, 512),
};
static const pr_schema suspend_schema = PR_SCHEMA_OPEN("Suspend", suspend_fields);

#define R pr_wk_sandbox
static const pr_field sandbox_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "template", template_name, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "state", state, true, 16),
        PR_F_STRING(R, "backend", backend, false, 16),
        PR_F_STRING(R, "hostname", hostname, false, 63),
        PR_F_STRING(R, "created_at", created_at, true, PR_WK_TIME_MAX),
        PR_F_OBJECT_REQ(R, "resources", resources, &sandbox_resources_schema),
        PR_F_OBJECT_OPT(R, "suspend", suspend, has_suspend, &suspend_schema),
        PR_F_STRING(R, "error", error, false, PR_WK_MESSAGE_MAX),
        PR_F_STRING(R, "restore_why", restore_why, false, 512),
        PR_F_BOOL_REQ(R, "agent_connected", agent_connected),
        PR_F_BOOL(R, "stored", stored, false),
        PR_F_INT(R, "stored_bytes", stored_bytes, false, 0, INT64_MAX, 0),
};
#undef R
const pr_schema pr_wk_sandbox_schema = PR_SCHEMA_OPEN("Sandbox", sandbox_fields);

static const pr_field sandbox_list_fields[] = {
        PR_F_ARRAY(pr_wk_sandbox_list, "sandboxes", sandboxes, true, PR_WK_LIST_MAX, &pr_wk_sandbox_schema)};
const pr_schema pr_wk_sandbox_list_schema = PR_SCHEMA_OPEN("SandboxList", sandbox_list_fields);

#define R pr_wk_sandbox_stats
static const pr_field sandbox_stats_fields[] = {
        PR_F_INT(R, "cpu_ns", cpu_ns, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "memory_bytes", memory_bytes, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "memory_peak_bytes", memory_peak_bytes, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "pids", pids, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "oom_kills", oom_kills, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "port_connections", port_connections, false, 0, INT64_MAX, 0),
        PR_F_INT(R, "port_bytes_in", port_bytes_in, false, 0, INT64_MAX, 0),
        PR_F_INT(R, "port_bytes_out", port_bytes_out, false, 0, INT64_MAX, 0),
};
#undef R
const pr_schema pr_wk_sandbox_stats_schema = PR_SCHEMA_OPEN("SandboxStatsAnswer", sandbox_stats_fields);

/* The exit's fields, in Session.exit and in AttachSession's exit event. */
#define EXIT_FIELDS(R) \
        PR_F_INT(R, "code", code, true, -1, 255, 0), PR_F_INT(R, "signal", signal, true, -1, 255, 0), \
                PR_F_BOOL_REQ(R, "oom", oom), PR_F_BOOL_REQ(R, "killed", killed), \
                PR_F_STRING(R, "reason", reason, false, 256)
static const pr_field exit_fields[] = {EXIT_FIELDS(pr_wk_exit)};
static const pr_schema exit_schema = PR_SCHEMA_OPEN("Exit", exit_fields);

#define R pr_wk_session
static const pr_field session_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "sandbox_id", sandbox_id, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "state", state, true, 16),
        PR_F_INT(R, "pid", pid, false, 1, INT32_MAX, 0),
        PR_F_STRING(R, "created_at", created_at, true, PR_WK_TIME_MAX),
        PR_F_STRING(R, "started_at", started_at, false, PR_WK_TIME_MAX),
        PR_F_STRING(R, "ended_at", ended_at, false, PR_WK_TIME_MAX),
        PR_F_OBJECT_OPT(R, "exit", exit, has_exit, &exit_schema),
        PR_F_STRING(R, "error", error, false, PR_WK_MESSAGE_MAX),
        PR_F_INT(R, "output_start", output_start, false, 0, INT64_MAX, -1),
        PR_F_INT(R, "output_end", output_end, false, 0, INT64_MAX, -1),
        PR_F_BOOL(R, "output_reclaimed", output_reclaimed, false),
};
#undef R
const pr_schema pr_wk_session_schema = PR_SCHEMA_OPEN("Session", session_fields);

static const pr_field session_list_fields[] = {
        PR_F_ARRAY(pr_wk_session_list, "sessions", sessions, true, PR_WK_LIST_MAX, &pr_wk_session_schema)};
const pr_schema pr_wk_session_list_schema = PR_SCHEMA_OPEN("SessionList", session_list_fields);

#define R pr_wk_template
static const pr_field template_fields[] = {
        PR_F_STRING(R, "name", name, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "source", source, true, 16),
        PR_F_STRING(R, "created_at", created_at, true, PR_WK_TIME_MAX),
        PR_F_STRING(R, "workdir", workdir, false, PR_WK_PATH_MAX),
        PR_F_STRING(R, "user", user, false, 256),
        PR_F_STRING(R, "digest", digest, false, 128),
        PR_F_INT(R, "bytes", bytes, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "artifact_bytes", artifact_bytes, false, 0, INT64_MAX, -1),
        PR_F_STRING(R, "format", format, false, 16),
};
#undef R
const pr_schema pr_wk_template_schema = PR_SCHEMA_OPEN("Template", template_fields);

static const pr_field template_list_fields[] = {
        PR_F_ARRAY(pr_wk_template_list, "templates", templates, true, PR_WK_LIST_MAX, &pr_wk_template_schema)};
const pr_schema pr_wk_template_list_schema = PR_SCHEMA_OPEN("TemplateList", template_list_fields);

#define R pr_wk_node_resources
static const pr_field node_resources_fields[] = {
        PR_F_INT(R, "cpu_millis", cpu_millis, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "memory_bytes", memory_bytes, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "slots", slots, true, 0, INT64_MAX, 0),
        PR_F_INT(R, "disk_bytes", disk_bytes, false, 0, INT64_MAX, -1),
};
#undef R
static const pr_schema node_resources_schema = PR_SCHEMA_OPEN("NodeResources", node_resources_fields);

#define R pr_wk_node_jobs
static const pr_field node_jobs_fields[] = {
        PR_F_INT(R, "threads", threads, true, 0, INT32_MAX, 0),
        PR_F_INT(R, "running", running, true, 0, INT32_MAX, 0),
        PR_F_INT(R, "queued", queued, true, 0, INT32_MAX, 0),
};
#undef R
static const pr_schema node_jobs_schema = PR_SCHEMA_OPEN("NodeJobs", node_jobs_fields);

#define R pr_wk_node_info
static const pr_field node_info_fields[] = {
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "backend", backend, true, 16),
        PR_F_STRING(R, "accel", accel, false, 8),
        PR_F_OBJECT_REQ(R, "capacity", capacity, &node_resources_schema),
        PR_F_OBJECT_REQ(R, "used", used, &node_resources_schema),
        PR_F_INT_MAP(R, "warm", warm, true, PR_WK_LIST_MAX, PR_WK_ID_MAX, 0, INT64_MAX),
        PR_F_STRING_ARRAY(R, "templates", templates, true, PR_WK_LIST_MAX, PR_WK_ID_MAX),
        PR_F_OBJECT_OPT(R, "jobs", jobs, has_jobs, &node_jobs_schema),
        PR_F_STRING_ARRAY(R, "backends", backends, false, 4, 16),
};
#undef R
const pr_schema pr_wk_node_info_schema = PR_SCHEMA_OPEN("NodeInfoAnswer", node_info_fields);

static const pr_field dir_list_fields[] = {
        PR_F_JSON(pr_wk_dir_list, "entries", entries, true),
        PR_F_BOOL(pr_wk_dir_list, "truncated", truncated, false),
};
const pr_schema pr_wk_dir_list_schema = PR_SCHEMA_OPEN("DirList", dir_list_fields);

static const pr_field start_event_fields[] = {
        PR_F_STRING(pr_wk_start_event, "event", event, true, 16),
        PR_F_INT(pr_wk_start_event, "pid", pid, true, 1, INT32_MAX, 0),
};
const pr_schema pr_wk_start_event_schema = PR_SCHEMA_OPEN("StartEvent", start_event_fields);

static const pr_field exit_event_fields[] = {PR_F_STRING(pr_wk_exit_event, "event", event, true, 16),
                                             EXIT_FIELDS(pr_wk_exit_event)};
const pr_schema pr_wk_exit_event_schema = PR_SCHEMA_OPEN("ExitEvent", exit_event_fields);
#undef EXIT_FIELDS

static const pr_field message_event_fields[] = {
        PR_F_STRING(pr_wk_message_event, "event", event, true, 16),
        PR_F_STRING(pr_wk_message_event, "message", message, true, 65536),
};
const pr_schema pr_wk_error_event_schema = PR_SCHEMA_OPEN("ErrorEvent", message_event_fields);
const pr_schema pr_wk_progress_event_schema = PR_SCHEMA_OPEN("ProgressEvent", message_event_fields);

static const pr_field written_trailer_fields[] = {
        PR_F_BOOL_REQ(pr_wk_written_trailer, "ok", ok),
        PR_F_INT(pr_wk_written_trailer, "written", written, true, 0, INT64_MAX, 0),
};
const pr_schema pr_wk_written_trailer_schema = PR_SCHEMA_OPEN("WrittenTrailer", written_trailer_fields);
static const pr_field port_trailer_fields[] = {
        PR_F_BOOL_REQ(pr_wk_port_trailer, "ok", ok),
        PR_F_INT(pr_wk_port_trailer, "received", received, true, 0, INT64_MAX, 0),
        PR_F_INT(pr_wk_port_trailer, "sent", sent, true, 0, INT64_MAX, 0),
};
const pr_schema pr_wk_port_trailer_schema = PR_SCHEMA_OPEN("PortTrailer", port_trailer_fields);

static const pr_field size_trailer_fields[] = {
        PR_F_BOOL_REQ(pr_wk_size_trailer, "ok", ok),
        PR_F_INT(pr_wk_size_trailer, "size", size, true, 0, INT64_MAX, 0),
};
const pr_schema pr_wk_size_trailer_schema = PR_SCHEMA_OPEN("SizeTrailer", size_trailer_fields);

static const pr_field write_trailer_fields[] = {
        PR_F_BOOL_REQ(pr_wk_write_trailer, "ok", ok),
        PR_F_INT(pr_wk_write_trailer, "size", size, true, 0, INT64_MAX, 0),
        PR_F_STRING(pr_wk_write_trailer, "path", path, false, PR_AGENT_MAX_PATH),
};
const pr_schema pr_wk_write_trailer_schema = PR_SCHEMA_OPEN("WriteTrailer", write_trailer_fields);

static const pr_field import_trailer_fields[] = {
        PR_F_BOOL_REQ(pr_wk_template_trailer, "ok", ok),
        PR_F_OBJECT_REQ(pr_wk_template_trailer, "template", template_, &pr_wk_template_schema),
};
const pr_schema pr_wk_import_trailer_schema = PR_SCHEMA_OPEN("ImportTrailer", import_trailer_fields);

static const pr_field upload_trailer_fields[] = {
        PR_F_BOOL_REQ(pr_wk_template_trailer, "ok", ok),
        PR_F_OBJECT_REQ(pr_wk_template_trailer, "template", template_, &pr_wk_template_schema),
        PR_F_INT(pr_wk_template_trailer, "bytes", bytes, true, 0, INT64_MAX, 0),
};
const pr_schema pr_wk_upload_trailer_schema = PR_SCHEMA_OPEN("UploadTrailer", upload_trailer_fields);

static const pr_field artifact_trailer_fields[] = {
        PR_F_BOOL_REQ(pr_wk_artifact_trailer, "ok", ok),
        PR_F_INT(pr_wk_artifact_trailer, "bytes", bytes, true, 0, INT64_MAX, 0),
        PR_F_STRING(pr_wk_artifact_trailer, "format", format, true, 16),
};
const pr_schema pr_wk_artifact_trailer_schema = PR_SCHEMA_OPEN("ArtifactTrailer", artifact_trailer_fields);

#define R pr_wk_artifact_file
static const pr_field artifact_file_fields[] = {
        PR_F_STRING(R, "name", name, true, PR_WK_ARTIFACT_NAME_MAX),
        PR_F_INT(R, "bytes", bytes, true, 0, INT64_MAX, 0),
        PR_F_STRING(R, "digest", digest, true, PR_WK_DIGEST_MAX),
};
#undef R
const pr_schema pr_wk_artifact_file_schema = PR_SCHEMA_OPEN("ArtifactFile", artifact_file_fields);

#define R pr_wk_manifest
static const pr_field manifest_fields[] = {
        PR_F_INT(R, "version", version, true, 1, 1, 0),
        PR_F_STRING(R, "id", id, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "backend", backend, true, 16),
        PR_F_STRING(R, "template", template_name, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "accel", accel, false, 16),
        PR_F_BOOL_REQ(R, "memory", memory),
        PR_F_INT(R, "bytes", bytes, true, 0, INT64_MAX, 0),
        PR_F_ARRAY(R, "files", files, true, PR_WK_ARTIFACT_FILES_MAX, &pr_wk_artifact_file_schema),
};
#undef R
const pr_schema pr_wk_manifest_schema = PR_SCHEMA_OPEN("Manifest", manifest_fields);

static const pr_field sandbox_artifact_trailer_fields[] = {
        PR_F_BOOL_REQ(pr_wk_sandbox_artifact_trailer, "ok", ok),
        PR_F_INT(pr_wk_sandbox_artifact_trailer, "bytes", bytes, true, 0, INT64_MAX, 0),
};
const pr_schema pr_wk_sandbox_artifact_trailer_schema =
        PR_SCHEMA_OPEN("SandboxArtifactTrailer", sandbox_artifact_trailer_fields);

#define A(schema, type) \
        { \
                &schema, sizeof(type) \
        }
const pr_answer pr_worker_answers[] = {
        A(pr_wk_sandbox_schema, pr_wk_sandbox),
        A(pr_wk_sandbox_list_schema, pr_wk_sandbox_list),
        A(pr_wk_sandbox_stats_schema, pr_wk_sandbox_stats),
        A(pr_wk_session_schema, pr_wk_session),
        A(pr_wk_session_list_schema, pr_wk_session_list),
        A(pr_wk_template_schema, pr_wk_template),
        A(pr_wk_template_list_schema, pr_wk_template_list),
        A(pr_wk_node_info_schema, pr_wk_node_info),
        A(pr_wk_dir_list_schema, pr_wk_dir_list),
        A(pr_wk_start_event_schema, pr_wk_start_event),
        A(pr_wk_exit_event_schema, pr_wk_exit_event),
        A(pr_wk_error_event_schema, pr_wk_message_event),
        A(pr_wk_progress_event_schema, pr_wk_message_event),
        A(pr_wk_written_trailer_schema, pr_wk_written_trailer),
        A(pr_wk_port_trailer_schema, pr_wk_port_trailer),
        A(pr_wk_size_trailer_schema, pr_wk_size_trailer),
        A(pr_wk_write_trailer_schema, pr_wk_write_trailer),
        A(pr_wk_import_trailer_schema, pr_wk_template_trailer),
        A(pr_wk_upload_trailer_schema, pr_wk_template_trailer),
        A(pr_wk_artifact_trailer_schema, pr_wk_artifact_trailer),
        A(pr_wk_egress_record_schema, pr_wk_egress_record),
        A(pr_wk_egress_log_schema, pr_wk_egress_log),
        A(pr_wk_artifact_file_schema, pr_wk_artifact_file),
        A(pr_wk_manifest_schema, pr_wk_manifest),
        A(pr_wk_sandbox_artifact_trailer_schema, pr_wk_sandbox_artifact_trailer),
};
#undef A
const size_t pr_worker_nanswers = sizeof(pr_worker_answers) / sizeof(pr_worker_answers[0]);

/* ---- Methods ---- */

#define M(name, schema, type, stream) \
        { \
                name, &schema, sizeof(type), stream, NULL, 0 \
        }
#define MR(name, schema, type, stream, answer, atype) \
        { \
                name, &schema, sizeof(type), stream, &answer, sizeof(atype) \
        }
const pr_method pr_worker_methods[] = {
        MR("CreateSandbox", pr_wk_create_sandbox_schema, pr_wk_create_sandbox, false, pr_wk_sandbox_schema,
           pr_wk_sandbox),
        MR("GetSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false, pr_wk_sandbox_schema, pr_wk_sandbox),
        MR("ListSandboxes", pr_wk_empty_schema, pr_wk_empty, false, pr_wk_sandbox_list_schema, pr_wk_sandbox_list),
        M("DeleteSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false),
        MR("PauseSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false, pr_wk_sandbox_schema, pr_wk_sandbox),
        MR("ResumeSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false, pr_wk_sandbox_schema, pr_wk_sandbox),
        MR("SuspendSandbox", pr_wk_suspend_req_schema, pr_wk_suspend_req, false, pr_wk_sandbox_schema, pr_wk_sandbox),
        MR("RestoreSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false, pr_wk_sandbox_schema, pr_wk_sandbox),
        MR("ExportSandbox", pr_wk_export_sandbox_schema, pr_wk_export_sandbox, false, pr_wk_manifest_schema,
           pr_wk_manifest),
        MR("ReadSandboxArtifact", pr_wk_read_sandbox_artifact_schema, pr_wk_read_sandbox_artifact, true,
           pr_wk_sandbox_artifact_trailer_schema, pr_wk_sandbox_artifact_trailer),
        MR("ImportSandbox", pr_wk_import_sandbox_schema, pr_wk_import_sandbox, false, pr_wk_sandbox_schema,
           pr_wk_sandbox),
        M("DeleteStoredSandbox", pr_wk_delete_stored_sandbox_schema, pr_wk_delete_stored_sandbox, false),
        MR("SandboxStats", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false, pr_wk_sandbox_stats_schema,
           pr_wk_sandbox_stats),
        MR("Exec", pr_wk_exec_schema, pr_wk_exec, false, pr_wk_session_schema, pr_wk_session),
        M("ExecStream", pr_wk_exec_schema, pr_wk_exec, true),
        MR("GetSession", pr_wk_session_ref_schema, pr_wk_session_ref, false, pr_wk_session_schema, pr_wk_session),
        MR("ListSessions", pr_wk_list_sessions_schema, pr_wk_list_sessions, false, pr_wk_session_list_schema,
           pr_wk_session_list),
        M("SignalSession", pr_wk_signal_session_schema, pr_wk_signal_session, false),
        M("KillSession", pr_wk_session_ref_schema, pr_wk_session_ref, false),
        M("ResizeSession", pr_wk_resize_session_schema, pr_wk_resize_session, false),
        M("CloseStdin", pr_wk_session_ref_schema, pr_wk_session_ref, false),
        M("AttachSession", pr_wk_attach_session_schema, pr_wk_attach_session, true),
        MR("WriteStdin", pr_wk_write_stdin_schema, pr_wk_write_stdin, true, pr_wk_written_trailer_schema,
           pr_wk_written_trailer),
        MR("ConnectPort", pr_wk_connect_port_schema, pr_wk_connect_port, true, pr_wk_port_trailer_schema,
           pr_wk_port_trailer),
        M("StatFile", pr_wk_stat_file_schema, pr_wk_file, false),
        MR("ListDir", pr_wk_list_dir_schema, pr_wk_file, false, pr_wk_dir_list_schema, pr_wk_dir_list),
        M("MakeDir", pr_wk_make_dir_schema, pr_wk_file, false),
        M("MovePath", pr_wk_move_path_schema, pr_wk_file, false),
        M("RemovePath", pr_wk_remove_path_schema, pr_wk_file, false),
        M("ChmodPath", pr_wk_chmod_path_schema, pr_wk_file, false),
        MR("ReadFile", pr_wk_read_file_schema, pr_wk_file, true, pr_wk_size_trailer_schema, pr_wk_size_trailer),
        MR("WriteFile", pr_wk_write_file_schema, pr_wk_file, true, pr_wk_write_trailer_schema, pr_wk_write_trailer),
        MR("ImportTemplate", pr_wk_import_template_schema, pr_wk_import_template, true, pr_wk_import_trailer_schema,
           pr_wk_template_trailer),
        MR("UploadTemplate", pr_wk_upload_template_schema, pr_wk_upload_template, true, pr_wk_upload_trailer_schema,
           pr_wk_template_trailer),
        MR("ReadTemplateArtifact", pr_wk_template_ref_schema, pr_wk_template_ref, true, pr_wk_artifact_trailer_schema,
           pr_wk_artifact_trailer),
        MR("ListTemplates", pr_wk_empty_schema, pr_wk_empty, false, pr_wk_template_list_schema, pr_wk_template_list),
        M("DeleteTemplate", pr_wk_template_ref_schema, pr_wk_template_ref, false),
        MR("NodeInfo", pr_wk_empty_schema, pr_wk_empty, false, pr_wk_node_info_schema, pr_wk_node_info),
        M("SetWarmPool", pr_wk_set_warm_pool_schema, pr_wk_set_warm_pool, false),
        M("SetEgress", pr_wk_set_egress_schema, pr_wk_set_egress, false),
        MR("GetEgressLog", pr_wk_get_egress_log_schema, pr_wk_get_egress_log, false, pr_wk_egress_log_schema,
           pr_wk_egress_log),
};
#undef M
#undef MR
const size_t pr_worker_nmethods = sizeof(pr_worker_methods) / sizeof(pr_worker_methods[0]);

const pr_method *pr_worker_method(const char *name)
{
        for (size_t i = 0; i < pr_worker_nmethods; i++)
                if (strcmp(pr_worker_methods[i].name, name) == 0)
                        return &pr_worker_methods[i];
        return NULL;
}
