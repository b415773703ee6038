/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Worker RPC (proto/spec/worker-rpc.md): the request of every method as a C
 * struct and its schema (msg.h), which the worker decodes and its callers
 * encode; and every answer of a fixed shape (the sandbox, session, template
 * and node answers, the stream events and trailers), which the worker
 * encodes and its callers decode. Strings and JSON values of a decoded request are borrowed from the
 * decoded object. Fields the worker hands on to the agent (Exec's argv, env,
 * cwd, user, pty, stdin) are PR_JSON: the agent checks them.
 *
 * pr_worker_methods lists every method with its request and answer schemas;
 * tests/unit/proto/test_worker_rpc.c checks it against the spec's tables.
 */
#ifndef SPACE_WORKER_RPC_H
#define SPACE_WORKER_RPC_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/msg.h"

#define PR_WK_ID_MAX 64 /* sandbox and session ids, template names */
#define PR_WK_PATH_MAX 4096
#define PR_WK_USER_MAX 64
#define PR_WK_SUITE_MAX 64 /* ImportTemplate suite (worker: WK_DEBOOTSTRAP_SUITE_MAX) */
#define PR_WK_MIRROR_MAX 2048 /* ImportTemplate mirror (worker: WK_DEBOOTSTRAP_MIRROR_MAX) */
/* What a sandbox gets when its create names no resources (the public API's defaults: a worker
 * makes its templates' VM base snapshots for this machine ahead of any create). */
#define PR_WK_DEFAULT_CPU_MILLIS 1000
#define PR_WK_DEFAULT_MEMORY_MB 512
#define PR_WK_DEFAULT_DISK_MB 2048
#define PR_WK_DEFAULT_PIDS 1024
#define PR_WK_PACKAGES_MAX 2048 /* ImportTemplate packages (worker: WK_DEBOOTSTRAP_PACKAGES_MAX) */
#define PR_WK_USER_NAME_MAX 32 /* ImportTemplate user (worker: WK_DEBOOTSTRAP_USER_MAX) */
#define PR_WK_ENV_MAX 1024 /* CreateSandbox env entries */
#define PR_WK_EXEC_TIMEOUT_MAX_MS (INT64_C(30) * 24 * 3600 * 1000)

/* ListSandboxes, ListTemplates, NodeInfo: no fields. */
typedef struct pr_wk_empty {
        char unused;
} pr_wk_empty;

/* CreateSandbox */
typedef struct pr_wk_resources {
        int64_t cpu_millis, memory_mb, pids, disk_mb; /* 0: the worker's default */
} pr_wk_resources;

typedef struct pr_wk_create_sandbox {
        const char *id;
        const char *template_name; /* "template" */
        pr_wk_resources resources;
        json_object *env; /* string map */
        const char *hostname;
        bool warm; /* default true */
        const char *tenant_id; /* for the egress gateway's audit records */
        json_object *egress; /* the egress profile (gateway/policy/profile.h); absent: {"name":"none"} */
        /* the sandbox's credential bindings (gateway/policy/secret.h), an
         * array of {"id","name","placeholder","hosts","inject","value",
         * "rate_per_min","expires_at"} with the values; absent: none. The
         * worker keeps the values in memory only. */
        json_object *secrets;
        /* Which change of its egress (profile and secrets) this is: a worker
         * never takes an older one after a newer (0: not said). */
        int64_t egress_generation;
        const char *backend; /* one the worker runs (NodeInfo backends); absent: its default */
} pr_wk_create_sandbox;

/* SetEgress: a running sandbox's new egress profile and its whole list of
 * credential bindings (secrets, as CreateSandbox's: it replaces the list the
 * sandbox had; absent: none); answered once the node's gateway enforces it. */
typedef struct pr_wk_set_egress {
        const char *id;
        json_object *egress;
        json_object *secrets; /* the whole list again (as CreateSandbox's); absent: none */
        int64_t egress_generation; /* as CreateSandbox's: an older one than the sandbox has is not taken */
} pr_wk_set_egress;

/* GetEgressLog: records of a sandbox's egress log, oldest first, only those
 * with `decision` and `kind` when given: the last `limit` (1-1000, default
 * 100) of those older than `before_us` (when not 0), or, with `after_us`, the
 * first `limit` of those newer than it. Answer {"records":[...], "more":
 * bool} — more: there are further records the limit left out (older ones;
 * newer ones with after_us). */
typedef struct pr_wk_get_egress_log {
        const char *id;
        int64_t limit;
        const char *decision;
        const char *kind;
        int64_t before_us; /* 0: none */
        int64_t after_us; /* 0: none */
} pr_wk_get_egress_log;
/* One record: the fields every kind has; the rest (name, destination,
 * port, bytes, …: docs/networking.md) are read from the JSON. */
typedef struct pr_wk_egress_record {
        int64_t time_us;
        const char *kind; /* dns, tcp, packet */
        const char *decision; /* allowed, refused, would-refuse */
        const char *rule;
} pr_wk_egress_record;
typedef struct pr_wk_egress_log {
        json_object *records; /* array of EgressRecord */
        bool more;
} pr_wk_egress_log;

/* GetSandbox, DeleteSandbox, Pause/Resume/Suspend/RestoreSandbox, SandboxStats */
typedef struct pr_wk_sandbox_ref {
        const char *id;
} pr_wk_sandbox_ref;

/* SuspendSandbox: processes (default true) false: keep its files only (a
 * stop: a jail's processes end without a checkpoint). */
typedef struct pr_wk_suspend_req {
        const char *id;
        bool processes;
} pr_wk_suspend_req;

/* Exec */
typedef struct pr_wk_exec {
        const char *sandbox_id, *session_id;
        int64_t timeout_ms; /* 0: none */
        json_object *argv, *env, *cwd, *user, *pty, *stdin_open; /* for the agent ("stdin" is stdin_open) */
} pr_wk_exec;

/* GetSession, KillSession, CloseStdin */
typedef struct pr_wk_session_ref {
        const char *session_id;
} pr_wk_session_ref;

typedef struct pr_wk_list_sessions {
        const char *sandbox_id;
} pr_wk_list_sessions;

typedef struct pr_wk_signal_session {
        const char *session_id;
        int64_t signal;
} pr_wk_signal_session;

typedef struct pr_wk_resize_session {
        const char *session_id;
        int64_t rows, cols;
} pr_wk_resize_session;

typedef struct pr_wk_attach_session {
        const char *session_id;
        int64_t offset;
} pr_wk_attach_session;

typedef struct pr_wk_write_stdin {
        const char *session_id;
        bool close;
} pr_wk_write_stdin;

/* ConnectPort */
typedef struct pr_wk_connect_port {
        const char *sandbox_id;
        int64_t port; /* 1-65535 */
        int64_t window; /* 0: the agent's default */
} pr_wk_connect_port;

/* The file methods share one struct; each method's schema names the fields
 * it takes (absent values: NULL, false, limit 0, mode -1, length -1, window 0).
 * A zeroed struct is not absent (it says mode 0): start from PR_WK_FILE_INIT
 * or pr_wk_file_init(), and decode with pr_wk_file_decode(), which leaves the
 * members a method does not take absent (pr_msg_decode leaves them as they
 * were). */
typedef struct pr_wk_file {
        const char *sandbox_id;
        const char *path, *from, *to, *user;
        const char *owner; /* act as root, give what is created to this user (excludes user) */
        int64_t limit, mode, offset, length, window;
        bool follow, parents, recursive, append;
} pr_wk_file;

/* Every member of a pr_wk_file at its absent value, as an initialiser:
 * pr_wk_file q = PR_WK_FILE_INIT; then set the members the method takes. */
#define PR_WK_FILE_INIT \
        { \
                .mode = -1, .length = -1 \
        }

/* Sets every member of f to its absent value (as PR_WK_FILE_INIT). */
void pr_wk_file_init(pr_wk_file *f);

/* pr_msg_decode of a file method's request (s, one of the file schemas) into
 * out, every member the method does not take left at its absent value. */
int pr_wk_file_decode(const pr_schema *s, json_object *obj, pr_wk_file *out, sp_error **err);

/* ImportTemplate */
typedef struct pr_wk_import_template {
        const char *name, *source, *path, *suite, *mirror;
        const char *packages, *user; /* debootstrap: comma-separated package names; a login user to make */
        int64_t max_bytes; /* 0: no bound of its own */
} pr_wk_import_template;

/* UploadTemplate (max_bytes is bounded by the worker's --template-max-bytes too) */
typedef struct pr_wk_upload_template {
        const char *name, *format;
        int64_t max_bytes, max_stored_bytes; /* 0: absent */
} pr_wk_upload_template;

/* ReadTemplateArtifact, DeleteTemplate */
typedef struct pr_wk_template_ref {
        const char *name;
} pr_wk_template_ref;

/* ExportSandbox: `to` is the name of the worker (its certificate's) that may
 * then read the sandbox's artifacts with ReadSandboxArtifact. */
typedef struct pr_wk_export_sandbox {
        const char *id, *to;
} pr_wk_export_sandbox;

/* ReadSandboxArtifact */
typedef struct pr_wk_read_sandbox_artifact {
        const char *id, *name;
        int64_t offset;
} pr_wk_read_sandbox_artifact;

/* ImportSandbox.from */
typedef struct pr_wk_import_from {
        const char *worker; /* the holder's name (its certificate's) */
        const char *address; /* HOST:PORT of its worker RPC */
        /* Instead of worker and address: read the sandbox from this worker's
         * artifact store (its --artifact-store), manifest and files. */
        bool store;
} pr_wk_import_from;

/* ImportSandbox: manifest is ExportSandbox's answer, as it came (absent, and
 * not allowed, when from.store: the store's manifest is read); spec (optional)
 * the sandbox as the control plane knows it, a CreateSandbox request: what the
 * imported record says of it is replaced by that (the holder's word is not
 * taken for its resources, tenant, environment or egress). */
typedef struct pr_wk_import_sandbox {
        const char *id;
        pr_wk_import_from from;
        json_object *manifest;
        json_object *spec;
} pr_wk_import_sandbox;

/* The rule ImportSandbox's schema cannot state: `from` is either {worker,
 * address} (both) with a manifest, or {store: true} alone without one.
 * SP_E_INVALID naming the field otherwise. */
int pr_wk_import_sandbox_check(const pr_wk_import_sandbox *q, sp_error **err);

/* DeleteStoredSandbox: the artifact store's copy of id goes if holder (a
 * worker's name) holds it. */
typedef struct pr_wk_delete_stored_sandbox {
        const char *id, *holder;
} pr_wk_delete_stored_sandbox;

typedef struct pr_wk_set_warm_pool {
        const char *template_name; /* "template" */
        int64_t size;
} pr_wk_set_warm_pool;

/* ---- Answers ----
 *
 * Every answer schema is open (PR_SCHEMA_OPEN): a newer worker may add a
 * field without breaking an older control plane. The worker encodes its
 * answers with them; the control plane decodes them. Timestamps are RFC 3339
 * strings (PR_WK_TIME_MAX). An optional integer whose 0 is a value (output
 * offsets, artifact bytes, disk) is -1 when absent. */
#define PR_WK_TIME_MAX 40
#define PR_WK_MESSAGE_MAX 4096 /* error and progress messages */
#define PR_WK_LIST_MAX 100000 /* sandboxes, sessions, templates in one answer */

/* Sandbox.resources: always all four. */
typedef struct pr_wk_sandbox_resources {
        int64_t cpu_millis, memory_mb, pids, disk_mb;
} pr_wk_sandbox_resources;

/* Sandbox.suspend: what a suspended sandbox kept; why (optional): why its
 * processes were not kept where the backend can keep them (a jail without
 * CRIU, or one CRIU could not checkpoint). */
typedef struct pr_wk_suspend {
        bool memory, filesystem;
        const char *why;
} pr_wk_suspend;

/* Sandbox: the answer of CreateSandbox, GetSandbox, Pause/Resume/Suspend/RestoreSandbox. */
typedef struct pr_wk_sandbox {
        const char *id, *template_name /* "template" */, *state, *backend, *hostname, *created_at;
        pr_wk_sandbox_resources resources;
        bool has_suspend; /* suspend is present (suspended sandboxes) */
        pr_wk_suspend suspend;
        const char *error; /* why it failed */
        /* Its last restore lost the processes its suspend had kept (it started
         * from its files instead): why. */
        const char *restore_why;
        bool agent_connected;
        /* Its copy in the worker's artifact store is whole (a suspended
         * sandbox only), and the bytes of its manifest (0 and left out: not). */
        bool stored;
        int64_t stored_bytes;
} pr_wk_sandbox;

/* ListSandboxes: {"sandboxes":[Sandbox…]} */
typedef struct pr_wk_sandbox_list {
        json_object *sandboxes; /* array of pr_wk_sandbox_schema */
} pr_wk_sandbox_list;

/* SandboxStats */
typedef struct pr_wk_sandbox_stats {
        int64_t cpu_ns, memory_bytes, memory_peak_bytes, pids, oom_kills;
        /* connections to its ports since the worker started, and their bytes (0 from an older worker) */
        int64_t port_connections, port_bytes_in, port_bytes_out;
} pr_wk_sandbox_stats;

/* Session.exit, and the fields of AttachSession's exit event. */
typedef struct pr_wk_exit {
        int64_t code, signal;
        bool oom, killed;
        const char *reason; /* "memory", "time", "disk", "killed"; NULL for none */
} pr_wk_exit;

/* Session: the answer of Exec and GetSession. */
typedef struct pr_wk_session {
        const char *id, *sandbox_id, *state, *created_at, *started_at, *ended_at, *error;
        int64_t pid; /* 0: not started */
        bool has_exit; /* exit is present (state exited) */
        pr_wk_exit exit;
        int64_t output_start, output_end; /* -1: absent (no log) */
        bool output_reclaimed;
} pr_wk_session;

/* ListSessions: {"sessions":[Session…]} */
typedef struct pr_wk_session_list {
        json_object *sessions; /* array of pr_wk_session_schema */
} pr_wk_session_list;

/* Template */
typedef struct pr_wk_template {
        const char *name, *source, *created_at, *workdir, *user, *digest, *format;
        int64_t bytes;
        int64_t artifact_bytes; /* -1: absent (not uploaded) */
} pr_wk_template;

/* ListTemplates: {"templates":[Template…]} */
typedef struct pr_wk_template_list {
        json_object *templates; /* array of pr_wk_template_schema */
} pr_wk_template_list;

/* NodeInfo.capacity and .used */
typedef struct pr_wk_node_resources {
        int64_t cpu_millis, memory_bytes, slots;
        int64_t disk_bytes; /* -1: absent (the storage pool could not be measured) */
} pr_wk_node_resources;

/* NodeInfo */
/* NodeInfo's "jobs": the worker's job threads and what waits for them. */
typedef struct pr_wk_node_jobs {
        int64_t threads, running, queued;
} pr_wk_node_jobs;

typedef struct pr_wk_node_info {
        const char *id, *backend;
        const char *accel; /* a VM backend's: "kvm" or "tcg"; NULL for the jail */
        pr_wk_node_resources capacity, used;
        bool has_jobs;
        pr_wk_node_jobs jobs;
        json_object *warm; /* {template: count} */
        json_object *templates; /* [name…] */
        json_object *backends; /* [name…]: every backend it runs, `backend` (the default) first */
} pr_wk_node_info;

/* ListDir: the entries are the agent's stat results. */
typedef struct pr_wk_dir_list {
        json_object *entries;
        bool truncated;
} pr_wk_dir_list;

/* AttachSession's JSON frames: {"event":"start","pid":N}, {"event":"exit",…exit}
 * and {"event":"error","message":…} (a session that failed); ImportTemplate's
 * {"event":"progress","message":…}. */
typedef struct pr_wk_start_event {
        const char *event;
        int64_t pid;
} pr_wk_start_event;

typedef struct pr_wk_exit_event {
        const char *event;
        int64_t code, signal;
        bool oom, killed;
        const char *reason;
} pr_wk_exit_event;

typedef struct pr_wk_message_event { /* "error" and "progress" */
        const char *event, *message;
} pr_wk_message_event;

/* The END trailers ({"ok":true,…}); ok is always true in a trailer that is not an error. */
typedef struct pr_wk_written_trailer { /* WriteStdin */
        bool ok;
        int64_t written;
} pr_wk_written_trailer;

typedef struct pr_wk_port_trailer { /* ConnectPort */
        bool ok;
        int64_t received, sent;
} pr_wk_port_trailer;

typedef struct pr_wk_size_trailer { /* ReadFile (the agent's) */
        bool ok;
        int64_t size;
} pr_wk_size_trailer;

typedef struct pr_wk_write_trailer { /* WriteFile (the agent's) */
        bool ok;
        int64_t size;
        const char *path; /* the path written, resolved; NULL from a worker older than it */
} pr_wk_write_trailer;

typedef struct pr_wk_template_trailer { /* ImportTemplate; UploadTemplate with bytes */
        bool ok;
        pr_wk_template template_;
        int64_t bytes; /* UploadTemplate: the archive's bytes */
} pr_wk_template_trailer;

/* Manifest.files[]: one file of a suspended sandbox's artifacts. */
#define PR_WK_ARTIFACT_NAME_MAX 200
#define PR_WK_DIGEST_MAX 80
typedef struct pr_wk_artifact_file {
        const char *name; /* "state/…" or "storage/…" */
        int64_t bytes; /* its size (holes included) */
        const char *digest; /* "sha256:<hex>" of its data (worker/node/artifact.c) */
} pr_wk_artifact_file;

/* Manifest: ExportSandbox's answer. */
#define PR_WK_ARTIFACT_FILES_MAX 100000
typedef struct pr_wk_manifest {
        int64_t version; /* 1 */
        const char *id, *backend, *template_name /* "template" */, *accel; /* accel: NULL for the jail */
        bool memory; /* the artifacts hold the sandbox's memory */
        int64_t bytes; /* the files' data, holes not counted */
        json_object *files; /* array of pr_wk_artifact_file_schema */
} pr_wk_manifest;

typedef struct pr_wk_sandbox_artifact_trailer { /* ReadSandboxArtifact */
        bool ok;
        int64_t bytes; /* the file's size */
} pr_wk_sandbox_artifact_trailer;

typedef struct pr_wk_artifact_trailer { /* ReadTemplateArtifact */
        bool ok;
        int64_t bytes;
        const char *format;
} pr_wk_artifact_trailer;

extern const pr_schema pr_wk_sandbox_schema;
extern const pr_schema pr_wk_sandbox_list_schema;
extern const pr_schema pr_wk_sandbox_stats_schema;
extern const pr_schema pr_wk_session_schema;
extern const pr_schema pr_wk_session_list_schema;
extern const pr_schema pr_wk_template_schema;
extern const pr_schema pr_wk_template_list_schema;
extern const pr_schema pr_wk_node_info_schema;
extern const pr_schema pr_wk_dir_list_schema;
extern const pr_schema pr_wk_start_event_schema;
extern const pr_schema pr_wk_exit_event_schema;
extern const pr_schema pr_wk_error_event_schema;
extern const pr_schema pr_wk_progress_event_schema;
extern const pr_schema pr_wk_written_trailer_schema;
extern const pr_schema pr_wk_size_trailer_schema;
extern const pr_schema pr_wk_write_trailer_schema;
extern const pr_schema pr_wk_port_trailer_schema;
extern const pr_schema pr_wk_import_trailer_schema;
extern const pr_schema pr_wk_upload_trailer_schema;
extern const pr_schema pr_wk_artifact_trailer_schema;

/* Every answer schema, with its struct's size (for the tests and the fuzzer). */
typedef struct pr_answer {
        const pr_schema *schema;
        size_t size;
} pr_answer;
extern const pr_answer pr_worker_answers[];
extern const size_t pr_worker_nanswers;

extern const pr_schema pr_wk_empty_schema;
extern const pr_schema pr_wk_create_sandbox_schema;
extern const pr_schema pr_wk_sandbox_ref_schema;
extern const pr_schema pr_wk_suspend_req_schema;
extern const pr_schema pr_wk_exec_schema;
extern const pr_schema pr_wk_session_ref_schema;
extern const pr_schema pr_wk_list_sessions_schema;
extern const pr_schema pr_wk_signal_session_schema;
extern const pr_schema pr_wk_resize_session_schema;
extern const pr_schema pr_wk_attach_session_schema;
extern const pr_schema pr_wk_write_stdin_schema;
extern const pr_schema pr_wk_connect_port_schema;
extern const pr_schema pr_wk_stat_file_schema;
extern const pr_schema pr_wk_list_dir_schema;
extern const pr_schema pr_wk_make_dir_schema;
extern const pr_schema pr_wk_move_path_schema;
extern const pr_schema pr_wk_remove_path_schema;
extern const pr_schema pr_wk_chmod_path_schema;
extern const pr_schema pr_wk_read_file_schema;
extern const pr_schema pr_wk_write_file_schema;
extern const pr_schema pr_wk_import_template_schema;
extern const pr_schema pr_wk_upload_template_schema;
extern const pr_schema pr_wk_template_ref_schema;
extern const pr_schema pr_wk_export_sandbox_schema;
extern const pr_schema pr_wk_read_sandbox_artifact_schema;
extern const pr_schema pr_wk_import_sandbox_schema;
extern const pr_schema pr_wk_delete_stored_sandbox_schema;
extern const pr_schema pr_wk_artifact_file_schema;
extern const pr_schema pr_wk_manifest_schema;
extern const pr_schema pr_wk_sandbox_artifact_trailer_schema;
extern const pr_schema pr_wk_set_warm_pool_schema;
extern const pr_schema pr_wk_set_egress_schema;
extern const pr_schema pr_wk_get_egress_log_schema;
extern const pr_schema pr_wk_egress_log_schema;
extern const pr_schema pr_wk_egress_record_schema;

typedef struct pr_method {
        const char *name;
        const pr_schema *request;
        size_t request_size; /* of the request's struct */
        bool streaming;
        /* The answer: a unary method's body, a streaming method's END trailer;
         * NULL for {} ({"ok":true}) and for the agent's results passed on as they are. */
        const pr_schema *response;
        size_t response_size; /* of the answer's struct */
} pr_method;

extern const pr_method pr_worker_methods[];
extern const size_t pr_worker_nmethods;

/* The method named name, or NULL. */
const pr_method *pr_worker_method(const char *name);

#endif
