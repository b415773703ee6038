/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Worker RPC (proto/spec/worker-rpc.md): the request of every method as a C
 * struct and its schema (msg.h), which the worker decodes and its callers
 * encode. Strings and JSON values of a decoded request are borrowed from the
 * decoded object. Fields the worker hands on to the agent (Exec's argv, env,
 * cwd, user, pty, stdin) are PR_JSON: the agent checks them.
 *
 * pr_worker_methods lists every method with its request schema;
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
} pr_wk_create_sandbox;

/* GetSandbox, DeleteSandbox, Pause/Resume/Suspend/RestoreSandbox, SandboxStats */
typedef struct pr_wk_sandbox_ref {
        const char *id;
} pr_wk_sandbox_ref;

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

/* The file methods share one struct; each method's schema names the fields
 * it takes (absent values: NULL, false, limit 0, mode -1, length -1, window 0).
 * A zeroed struct is not absent (it says mode 0): start from PR_WK_FILE_INIT
 * or pr_wk_file_init(), and decode with pr_wk_file_decode(), which leaves the
 * members a method does not take absent (pr_msg_decode leaves them as they
 * were). */
typedef struct pr_wk_file {
        const char *sandbox_id;
        const char *path, *from, *to, *user;
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

typedef struct pr_wk_set_warm_pool {
        const char *template_name; /* "template" */
        int64_t size;
} pr_wk_set_warm_pool;

extern const pr_schema pr_wk_empty_schema;
extern const pr_schema pr_wk_create_sandbox_schema;
extern const pr_schema pr_wk_sandbox_ref_schema;
extern const pr_schema pr_wk_exec_schema;
extern const pr_schema pr_wk_session_ref_schema;
extern const pr_schema pr_wk_list_sessions_schema;
extern const pr_schema pr_wk_signal_session_schema;
extern const pr_schema pr_wk_resize_session_schema;
extern const pr_schema pr_wk_attach_session_schema;
extern const pr_schema pr_wk_write_stdin_schema;
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
extern const pr_schema pr_wk_set_warm_pool_schema;

typedef struct pr_method {
        const char *name;
        const pr_schema *request;
        size_t request_size; /* of the request's struct */
        bool streaming;
} pr_method;

extern const pr_method pr_worker_methods[];
extern const size_t pr_worker_nmethods;

/* The method named name, or NULL. */
const pr_method *pr_worker_method(const char *name);

#endif
