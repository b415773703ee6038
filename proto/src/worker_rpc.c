/* SPDX-License-Identifier: Apache-2.0 */
/* Worker RPC requests: one schema per request shape (worker_rpc.h). The
 * bounds are the worker's; the file fields' are the agent's, which the
 * worker hands them to (agent_proto.c). */
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
};
#undef R
const pr_schema pr_wk_create_sandbox_schema = PR_SCHEMA("CreateSandbox", create_sandbox_fields);

static const pr_field sandbox_ref_fields[] = {PR_F_STRING(pr_wk_sandbox_ref, "id", id, true, PR_WK_ID_MAX)};
const pr_schema pr_wk_sandbox_ref_schema = PR_SCHEMA("SandboxRef", sandbox_ref_fields);

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

/* The file fields, with the agent's bounds. */
#define R pr_wk_file
#define F_SANDBOX PR_F_STRING(R, "sandbox_id", sandbox_id, true, PR_WK_ID_MAX)
#define F_PATH PR_F_STRING(R, "path", path, true, PR_AGENT_MAX_PATH)
#define F_USER PR_F_STRING(R, "user", user, false, PR_WK_USER_MAX)
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
static const pr_field write_file_fields[] = {F_SANDBOX, F_PATH, F_USER, F_MODE(false),
                                             PR_F_BOOL(R, "append", append, false)};
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
        return pr_msg_decode(s, obj, out, err);
}

#define R pr_wk_import_template
static const pr_field import_template_fields[] = {
        PR_F_STRING(R, "name", name, true, PR_WK_ID_MAX),
        PR_F_STRING(R, "source", source, true, 16),
        PR_F_STRING(R, "path", path, false, PR_WK_PATH_MAX),
        PR_F_STRING(R, "suite", suite, false, PR_WK_SUITE_MAX),
        PR_F_STRING(R, "mirror", mirror, false, PR_WK_MIRROR_MAX),
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

static const pr_field set_warm_pool_fields[] = {
        PR_F_STRING(pr_wk_set_warm_pool, "template", template_name, true, PR_WK_ID_MAX),
        PR_F_INT(pr_wk_set_warm_pool, "size", size, true, 0, 100000, 0),
};
const pr_schema pr_wk_set_warm_pool_schema = PR_SCHEMA("SetWarmPool", set_warm_pool_fields);

#define M(name, schema, type, stream) \
        { \
                name, &schema, sizeof(type), stream \
        }
const pr_method pr_worker_methods[] = {
        M("CreateSandbox", pr_wk_create_sandbox_schema, pr_wk_create_sandbox, false),
        M("GetSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false),
        M("ListSandboxes", pr_wk_empty_schema, pr_wk_empty, false),
        M("DeleteSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false),
        M("PauseSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false),
        M("ResumeSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false),
        M("SuspendSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false),
        M("RestoreSandbox", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false),
        M("SandboxStats", pr_wk_sandbox_ref_schema, pr_wk_sandbox_ref, false),
        M("Exec", pr_wk_exec_schema, pr_wk_exec, false),
        M("GetSession", pr_wk_session_ref_schema, pr_wk_session_ref, false),
        M("ListSessions", pr_wk_list_sessions_schema, pr_wk_list_sessions, false),
        M("SignalSession", pr_wk_signal_session_schema, pr_wk_signal_session, false),
        M("KillSession", pr_wk_session_ref_schema, pr_wk_session_ref, false),
        M("ResizeSession", pr_wk_resize_session_schema, pr_wk_resize_session, false),
        M("CloseStdin", pr_wk_session_ref_schema, pr_wk_session_ref, false),
        M("AttachSession", pr_wk_attach_session_schema, pr_wk_attach_session, true),
        M("WriteStdin", pr_wk_write_stdin_schema, pr_wk_write_stdin, true),
        M("StatFile", pr_wk_stat_file_schema, pr_wk_file, false),
        M("ListDir", pr_wk_list_dir_schema, pr_wk_file, false),
        M("MakeDir", pr_wk_make_dir_schema, pr_wk_file, false),
        M("MovePath", pr_wk_move_path_schema, pr_wk_file, false),
        M("RemovePath", pr_wk_remove_path_schema, pr_wk_file, false),
        M("ChmodPath", pr_wk_chmod_path_schema, pr_wk_file, false),
        M("ReadFile", pr_wk_read_file_schema, pr_wk_file, true),
        M("WriteFile", pr_wk_write_file_schema, pr_wk_file, true),
        M("ImportTemplate", pr_wk_import_template_schema, pr_wk_import_template, true),
        M("UploadTemplate", pr_wk_upload_template_schema, pr_wk_upload_template, true),
        M("ReadTemplateArtifact", pr_wk_template_ref_schema, pr_wk_template_ref, true),
        M("ListTemplates", pr_wk_empty_schema, pr_wk_empty, false),
        M("DeleteTemplate", pr_wk_template_ref_schema, pr_wk_template_ref, false),
        M("NodeInfo", pr_wk_empty_schema, pr_wk_empty, false),
        M("SetWarmPool", pr_wk_set_warm_pool_schema, pr_wk_set_warm_pool, false),
};
#undef M
const size_t pr_worker_nmethods = sizeof(pr_worker_methods) / sizeof(pr_worker_methods[0]);

const pr_method *pr_worker_method(const char *name)
{
        for (size_t i = 0; i < pr_worker_nmethods; i++)
                if (strcmp(pr_worker_methods[i].name, name) == 0)
                        return &pr_worker_methods[i];
        return NULL;
}
