/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The node: everything one worker owns — templates, sandboxes (through a
 * backend), their agents and command sessions, the warm pool — with its
 * state on disk so that a restarted daemon re-adopts what runs.
 *
 * Layout (storage: see rootfs/rootfs.h):
 *   <storage>/templates/<name>/rootfs read-only subvolume (root filesystem)
 *   <storage>/sandboxes/<key>/rootfs  writable snapshot of a template, with its disk quota
 *   <storage>/artifacts/<name>        the archive an uploaded template came from (as long as the template)
 *   <storage>/artifacts/<name>.part   an upload being received; .unpack: an OCI archive being unpacked
 *   <state>/templates/<name>.json     template metadata (and its artifact's format)
 *   <state>/sandboxes/<id>/sandbox.json   spec and status (written atomically)
 *   <state>/sandboxes/<id>/run/       runtime dir: agent.sock, staging mount point
 *   <state>/sandboxes/<id>/sessions/<session id>/   session.json and its output log
 *
 * All calls run on the daemon's event loop. Lifecycle calls complete before
 * they return (a jail starts in milliseconds); template imports run on
 * threads of their own and report back on the loop (wk_node_template_import).
 * Errors carry the code the RPC layer reports.
 */
#ifndef WK_NODE_H
#define WK_NODE_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/backend.h"
#include "session/session.h"
#include "template/template.h"
#include "space/buf.h"
#include "space/error.h"
#include "space/worker_rpc.h"

struct event_base;
typedef struct wk_node wk_node;
typedef struct wk_sandbox wk_sandbox;

struct wk_storage;

struct wk_net;

typedef struct wk_node_config {
        const char *state_dir;
        /* The sandboxes' network (net/net.h: links, firewall, gateway), borrowed;
         * NULL: loopback only, and egress profiles are kept but enforce nothing. */
        struct wk_net *net;
        struct wk_storage *storage; /* rootfs/rootfs.h: templates and sandbox root filesystems (borrowed) */
        const char *node_id;
        int64_t slots; /* most sandboxes at once */
        int64_t cpu_millis; /* capacity reported to the scheduler */
        int64_t memory_bytes;
        int64_t session_log_bytes; /* per session */
        int64_t session_log_budget; /* per sandbox, all its sessions' logs together (0: none) */
        bool vm_bases_ahead; /* a VM backend: a template's base for the default machine when it arrives */
        int64_t default_warm; /* warm sandboxes per template unless set */
        /* Host-path template imports (dir, tar, oci) open their source beneath
         * this directory only (wk_template_source_open); NULL or "": refused.
         * Copied by wk_node_open. */
        const char *template_import_root;
        wk_template_limits template_limits; /* bounds on every import (zero fields: defaults) */
        /* Free space of the storage pool that imports leave alone (at most a
         * tenth of the pool): an import is bounded by the pool's free space
         * less this (statvfs). */
        uint64_t storage_reserve;
        /* debootstrap imports: the program (NULL: /usr/sbin/debootstrap) and
         * the mirror when a request names none (NULL: debootstrap's own
         * default). Copied by wk_node_open. */
        const char *debootstrap_program;
        const char *debootstrap_mirror;
        const char *agent_path; /* for base imports (copied) */
        /* Threads that make and remove sandboxes (jobs.h; 0: 4): creates and
         * deletes beyond them wait in a queue (/metrics). */
        unsigned jobs;
        /* The artifact store (store.c, docs/backends.md): a directory on
         * storage every worker mounts, where suspended sandboxes are copied so
         * that another worker can take them when this one is gone. NULL or "":
         * none. Copied by wk_node_open. */
        const char *artifact_store;
} wk_node_config;

typedef enum wk_sandbox_state {
        WK_SB_CREATING = 0,
        WK_SB_RUNNING,
        WK_SB_PAUSED,
        WK_SB_SUSPENDED,
        WK_SB_FAILED,
} wk_sandbox_state;

typedef struct wk_sandbox_request {
        const char *id;
        const char *template_name;
        int64_t cpu_millis, memory_bytes, pids_max, disk_bytes;
        json_object *env; /* object of strings applied to every command; may be NULL */
        const char *hostname; /* NULL: derived from the id */
        const char *tenant_id; /* for the egress gateway's audit records; may be NULL */
        json_object *egress; /* the egress profile (docs/networking.md); NULL: {"name":"none"} */
        json_object *secrets; /* its credential bindings (docs/secrets.md); NULL: none */
        int64_t egress_generation; /* which change of its egress this is (0: not said) */
        bool allow_warm; /* claim a warm sandbox if one is ready */
        const char *backend; /* one of the node's backends by name; NULL: its first */
} wk_sandbox_request;

/* How many sandbox slots a node with --slots=slots uses at most (live,
 * warm and suspended sandboxes): each may need an address. */
size_t wk_node_slot_capacity(int64_t slots);

/* Opens the node: reads templates and sandboxes from disk and re-adopts what runs. */
#define WK_NODE_BACKENDS_MAX 4
/* backends: the worker's (1 to WK_NODE_BACKENDS_MAX, distinct names), the first the default. */
int wk_node_open(struct event_base *base, const wk_node_config *cfg, wk_backend *const *backends, size_t nbackends,
                 wk_node **ret, sp_error **err);
/* Frees the node's memory; sandboxes keep running (a restart re-adopts them). */
void wk_node_free(wk_node *n);
/* The loop the node runs on. */
struct event_base *wk_node_event_base(wk_node *n);

/* Templates. */
/* Builds the base template synchronously, on the calling (loop) thread: for
 * the daemon's start, before it serves. */
int wk_node_template_add_base(wk_node *n, const char *name, const char *agent_path, sp_error **err);

/* Template imports run off the event loop: the node creates the template's
 * subvolume on the loop, fills it on a thread of the import's own (the
 * importers in template/ are thread-safe on distinct destinations), and seals
 * and records it back on the loop, so that heartbeats and every other call go
 * on while an import takes minutes.
 *
 * While an import of name runs, the name is taken: another import or upload
 * of it are SP_E_CONFLICT; sandboxes of it are SP_E_NOT_FOUND (it is not a
 * template yet), and it is in no list. A delete of it cancels it
 * (wk_node_template_delete).
 *
 * The callbacks run on the loop. progress receives the import's output lines
 * (debootstrap's), at most WK_IMPORT_PROGRESS_PER_S a second: the latest line
 * when several came. done runs once, with err NULL when the template is
 * recorded; the import is freed after it returns. A caller that no longer
 * wants them (its call went away) detaches: the import goes on, its result is
 * logged. (An import is only started with all its input at hand: a path, a
 * suite, an upload's whole archive; whoever no longer wants the template
 * deletes it.)
 *
 * wk_node_free cancels the imports under way and waits for their threads
 * (each stops at its next file, debootstrap within a fraction of a second);
 * a template cut short by a crash has no record and is removed at the next
 * start (wk_node_open). */
#define WK_IMPORT_PROGRESS_PER_S 4
typedef struct wk_import wk_import;
typedef struct wk_import_ops {
        void (*progress)(const char *line, void *userdata); /* optional */
        void (*done)(const sp_error *err, void *userdata);
} wk_import_ops;
/* Stops the callbacks of imp (NULL allowed); the import goes on. */
void wk_import_detach(wk_import *imp);

typedef struct wk_template_import_req {
        const char *name;
        const char *source; /* "base", "dir", "tar", "oci" or "debootstrap" */
        const char *path; /* dir, tar, oci: resolved beneath the node's template import root */
        const char *suite; /* debootstrap: e.g. "bookworm" */
        const char *mirror; /* debootstrap, optional: NULL takes the node's debootstrap mirror */
        const char *packages; /* debootstrap, optional: comma-separated, installed with the base system */
        const char *user; /* debootstrap, optional: a login user made in it */
        /* Optional (0: none): the most the template's files may hold, e.g.
         * what is left of its tenant's template storage. */
        uint64_t max_bytes;
} wk_template_import_req;

/* Starts importing template req->name (see above): dir, tar and oci from a
 * path beneath the node's template import root (see wk_node_config; errors
 * never name a host path), debootstrap from a Debian suite (with the node's
 * debootstrap program and, unless req->mirror, its mirror), base from the
 * node's agent. Bounded by the node's template limits (debootstrap by their
 * max_seconds), by req->max_bytes and by the storage pool's free space less
 * the node's storage reserve: the least of the three bounds what the
 * importers write, and what the template holds once imported (measured for
 * every source) must be within it, else the import fails naming the bound
 * (SP_E_TOO_LARGE; at once when there is no room at all). Fails at once (nothing started, no callback) for a bad
 * request, a taken name or an unopenable source; else *ret (may be NULL)
 * identifies the import until its done callback. */
int wk_node_template_import(wk_node *n, const wk_template_import_req *req, const wk_import_ops *ops, void *userdata,
                            wk_import **ret, sp_error **err);
/* Deletes the template, its warm sandboxes and its upload artifact, and
 * returns 0; SP_E_CONFLICT while sandboxes use it, SP_E_NOT_FOUND.
 *
 * A template still being imported is no template yet: its import is
 * cancelled (the importers stop at their next entry or 4 MiB, debootstrap's
 * process group is killed within a quarter second) and the delete is done
 * once the import's thread has ended and nothing of the template is left
 * (never recorded, whatever the thread achieved): it returns 1 and calls
 * done then, on the loop, with err NULL (or why the template's directory
 * could not be removed). The import's own done callback fails. A template
 * still being uploaded (before the archive is whole): its partial file goes
 * now and the upload fails at its next write or at its end; returns 0. done
 * runs only when 1 is returned. */
typedef void (*wk_node_deleted_fn)(const sp_error *err, void *userdata);
int wk_node_template_delete(wk_node *n, const char *name, wk_node_deleted_fn done, void *userdata, sp_error **err);
/* {"templates":[Template…]} (worker_rpc.h's pr_wk_template_list_schema), and
 * one Template in *ret (false when there is none; its created_at is written
 * to ts, its other strings are the template's own), with bytes what its files
 * hold on disk. */
json_object *wk_node_templates_json(wk_node *n);
bool wk_node_template_answer(wk_node *n, const char *name, pr_wk_template *ret, char ts[static 32]);
bool wk_node_template_exists(wk_node *n, const char *name);

/* Called (on the loop, inside the node call) each time a template was added
 * or deleted, e.g. for the cluster to send a heartbeat at once. fn NULL
 * removes it. One hook per node. */
typedef void (*wk_node_templates_changed_fn)(void *userdata);
void wk_node_set_templates_changed(wk_node *n, wk_node_templates_changed_fn fn, void *userdata);

/* Template uploads (UploadTemplate). An upload receives an archive's bytes
 * into <storage>/artifacts/<name>.part and, once whole, imports it as
 * template name, keeping the archive as the template's artifact.
 *
 * wk_node_upload_begin: format "tar" (a rootfs tarball, plain or compressed)
 * or "oci" (a tar of an OCI image layout); max_bytes bounds the archive (0:
 * the node's template max_bytes, which also bounds it). SP_E_CONFLICT when
 * the node has the template or an upload of that name is under way,
 * SP_E_INVALID for a bad name, format or max_bytes (names ending in ".part"
 * or ".unpack" are the upload's own files and refused). max_stored (0:
 * none) bounds what the template may hold on this worker, its archive and
 * its files together (the tenant's template storage left): the archive may
 * be at most that, and its files at most the rest (see
 * wk_node_template_import for the other bounds and the refusal). *ret
 * belongs to the caller until wk_upload_finish() or wk_upload_abort().
 *
 * wk_upload_write: appends n bytes; SP_E_TOO_LARGE past max_bytes, SP_E_IO.
 * After a failure the caller aborts.
 *
 * wk_upload_finish: starts importing the archive as an import (above): on
 * the import's thread the file is synced, renamed to artifacts/<name> and
 * imported (bounded by the node's template limits); ops->done follows. Frees
 * u in every case; on failure (at once, or in done) nothing of the upload is
 * left (partial file, artifact, scratch directory, template).
 * *ret_bytes: the archive's size.
 *
 * wk_upload_abort: removes everything the upload made and frees u (NULL
 * allowed). */
typedef struct wk_upload wk_upload;
int wk_node_upload_begin(wk_node *n, const char *name, const char *format, uint64_t max_bytes, uint64_t max_stored,
                         wk_upload **ret, sp_error **err);
int wk_upload_write(wk_upload *u, const void *p, size_t n, sp_error **err);
int wk_upload_finish(wk_upload *u, const wk_import_ops *ops, void *userdata, wk_import **ret, uint64_t *ret_bytes,
                     sp_error **err);
void wk_upload_abort(wk_upload *u);
/* The upper bound (and default) of an upload's max_bytes. */
uint64_t wk_node_upload_max_bytes(const wk_node *n);

/* Opens the artifact of template name for reading (O_RDONLY | O_CLOEXEC;
 * the caller closes it) with its format ("tar" or "oci", static).
 * SP_E_NOT_FOUND when the template has no artifact (imported from a path) or
 * does not exist. */
int wk_node_artifact_open(wk_node *n, const char *name, const char **ret_format, sp_error **err);
/* {"<name>": bytes, …} of the artifacts the node holds (may be empty). */
json_object *wk_node_artifacts_json(wk_node *n);
/* {"<name>": bytes, …}: what each template's files hold on disk (its
 * artifact not included). */
json_object *wk_node_template_bytes_json(wk_node *n);

/* Sandboxes.
 *
 * Creates and deletes run their blocking steps (snapshot, cgroups,
 * namespaces, links, firewall elements, the agent's start; and their undoing)
 * on the node's job threads (jobs.h), so the loop keeps serving meanwhile.
 * While such a job runs the sandbox is busy: it is listed (creating, or as it
 * was while deleted), another create of its id is SP_E_CONFLICT, and calls
 * that must see it whole wait (wk_node_sandbox_after) in the order they came. */
typedef void (*wk_node_sandbox_done_fn)(wk_sandbox *sb, const sp_error *err, void *userdata);
typedef void (*wk_node_done_fn)(const sp_error *err, void *userdata);
/* 0: made now (a warm sandbox claimed), *ret set, done not called; 1: being
 * made, done follows on the loop (sb NULL and err set on failure, when
 * nothing of it is left); < 0: refused at once, nothing done. */
int wk_node_sandbox_create(wk_node *n, const wk_sandbox_request *req, wk_node_sandbox_done_fn done, void *userdata,
                           wk_sandbox **ret, sp_error **err);
wk_sandbox *wk_node_sandbox_find(wk_node *n, const char *id);
/* Whether a job is making or removing sandbox id (warm ones included). */
bool wk_node_sandbox_busy(wk_node *n, const char *id);
/* Calls fn(ud) on the loop once the job on sandbox id has ended (after the
 * ones queued before it); -1 when it is not busy (fn is not called). */
int wk_node_sandbox_after(wk_node *n, const char *id, void (*fn)(void *ud), void *userdata);
/* Counts connections to a sandbox's ports and their bytes (in: to the
 * sandbox), for SandboxStats; a sandbox that is gone is not counted. */
/* Counts a port connection: 1 when it opens (no bytes yet), 0 with its bytes when it ends. */
void wk_node_sandbox_count_ports(wk_node *n, const char *id, int64_t connections, int64_t bytes_in, int64_t bytes_out);

/* Why sandbox id is busy now (docs/worker.md "Activity"), for the heartbeat:
 * a new array of reasons — "session" (a command runs), "attached" (a client
 * reads a session's output), "ingress" (a connection to one of its ports is
 * open), "cpu" (it used over WK_BUSY_CPU_PERCENT of a CPU since the last
 * call) — or NULL when it is idle or not running. */
#define WK_BUSY_CPU_PERCENT 5
json_object *wk_node_sandbox_activity(wk_node *n, const char *id);
/* 1: being deleted, done (may be NULL) follows on the loop with err NULL once
 * nothing of it is left (or why its box could not be destroyed: it stays,
 * failed); < 0: refused at once (SP_E_NOT_FOUND), done not called. */
int wk_node_sandbox_delete(wk_node *n, const char *id, wk_node_done_fn done, void *userdata, sp_error **err);
/* Pause and resume freeze and thaw the box, suspend and restore stop and
 * start it, all on a job thread (a VM's answer may be slow): 0 when it is so
 * already (done not called), 1 when done follows on the loop (err NULL: it
 * is paused, running again, suspended), < 0 refused at once. */
int wk_node_sandbox_pause(wk_node *n, const char *id, wk_node_done_fn done, void *userdata, sp_error **err);
int wk_node_sandbox_resume(wk_node *n, const char *id, wk_node_done_fn done, void *userdata, sp_error **err);
int wk_node_sandbox_suspend(wk_node *n, const char *id, wk_node_done_fn done, void *userdata, sp_error **err);
/* A suspend that keeps the sandbox's files only (a stop): its processes end
 * even where the backend could keep them (a jail's checkpoint). */
int wk_node_sandbox_stop(wk_node *n, const char *id, wk_node_done_fn done, void *userdata, sp_error **err);
int wk_node_sandbox_restore(wk_node *n, const char *id, wk_node_done_fn done, void *userdata, sp_error **err);
int wk_node_sandbox_stats(wk_node *n, const char *id, json_object **ret, sp_error **err);
/* Moving a suspended sandbox (artifact.c; worker-rpc.md ExportSandbox,
 * ReadSandboxArtifact, ImportSandbox). Export makes its artifacts on a job
 * thread and lets worker `to` read them: done gets the Manifest (borrowed) or
 * an error; returns 1 (done follows) or < 0. */
typedef void (*wk_node_export_done_fn)(json_object *manifest, const sp_error *err, void *userdata);
int wk_node_sandbox_export(wk_node *n, const char *id, const char *to, wk_node_export_done_fn done, void *userdata,
                           sp_error **err);
/* Whether the worker whose certificate is named peer may read id's artifacts. */
bool wk_node_sandbox_export_allowed(wk_node *n, const char *id, const char *peer);
/* Opens artifact `name` of suspended sandbox id (read-only) and its size. */
int wk_node_artifact_file_open(wk_node *n, const char *id, const char *name, uint64_t *ret_size, sp_error **err);
/* Checks an artifact's name: "storage/<file>" (*ret_storage) or "state/<path>"; *ret_rel the rest. */
int wk_artifact_name_check(const char *name, bool *ret_storage, const char **ret_rel, sp_error **err);
/* An import: begin checks the manifest against this worker and makes the
 * staging area (1: the sandbox is here and suspended already, nothing to
 * do); the caller fetches each file (wk_node_import_file: its name, size and
 * staging path) and then finishes (done on the loop with the sandbox or an
 * error; the import is freed) or aborts (what was fetched stays for the next
 * attempt). */
typedef struct wk_node_import wk_node_import;
typedef void (*wk_node_import_done_fn)(wk_sandbox *sb, const sp_error *err, void *userdata);
/* spec (optional): the sandbox as the control plane knows it (a CreateSandbox
 * request): the imported record's template, tenant, resources, environment,
 * egress and secrets become its. */
int wk_node_import_begin(wk_node *n, const char *id, json_object *manifest, json_object *spec, wk_node_import **ret,
                         sp_error **err);
size_t wk_node_import_count(const wk_node_import *imp);
int wk_node_import_file(wk_node_import *imp, size_t i, const char **ret_name, uint64_t *ret_bytes, char *path,
                        size_t len, sp_error **err);
void wk_node_import_finish(wk_node_import *imp, wk_node_import_done_fn done, void *userdata);
void wk_node_import_abort(wk_node_import *imp);

/* The artifact store (store.c; worker-rpc.md ImportSandbox from.store and
 * DeleteStoredSandbox). Whether the node has one. */
bool wk_node_has_artifact_store(const wk_node *n);
/* Imports sandbox id from the store's copy: its manifest is read on a job
 * thread and checked as wk_node_import_begin() checks one, each file copied
 * into the staging area and checked against its digest, the sandbox
 * installed as any import and the copy taken as this worker's (it stays
 * stored). done as wk_node_import_finish()'s; returns 1 (done follows) or
 * < 0: SP_E_PRECONDITION without a store (done then says so too when the
 * store holds no copy of id). */
int wk_node_store_import(wk_node *n, const char *id, json_object *spec, wk_node_import_done_fn done, void *userdata,
                         sp_error **err);
/* Removes the store's copy of id if the worker named holder holds it (a
 * worker that is gone); nothing when there is none or another holds it.
 * Returns 1 (done follows) or < 0 (SP_E_PRECONDITION without a store,
 * SP_E_INVALID, SP_E_CONFLICT for a sandbox of this worker's own). */
int wk_node_store_forget(wk_node *n, const char *id, const char *holder, wk_node_done_fn done, void *userdata,
                         sp_error **err);

json_object *wk_sandbox_to_json(const wk_sandbox *sb);
json_object *wk_node_sandboxes_json(wk_node *n);
const char *wk_sandbox_state_name(wk_sandbox_state st);
wk_sandbox_state wk_sandbox_get_state(const wk_sandbox *sb);

/* Sessions. The request is an agent exec request without "op"/"session". */
int wk_node_exec(wk_node *n, const char *sandbox_id, const char *session_id, json_object *exec_request,
                 int64_t timeout_ms, wk_session **ret, sp_error **err);
wk_session *wk_node_session_find(wk_node *n, const char *session_id);
json_object *wk_node_sessions_json(wk_node *n, const char *sandbox_id);

/* The agent of a sandbox, for file operations (NULL with an error if not connected). */
wk_agent_link *wk_node_agent(wk_node *n, const char *sandbox_id, sp_error **err);

/* Warm pool. */
int wk_node_set_warm(wk_node *n, const char *template_name, int64_t size, sp_error **err);
json_object *wk_node_info_json(wk_node *n);
/* Appends the node's metrics in Prometheus text format (sandboxes by state,
 * warm sandboxes by template, sessions by state, slots). */
int wk_node_metrics(wk_node *n, sp_buf *out, sp_error **err);

/* Egress (docs/networking.md). Gives a running sandbox another egress
 * profile and its secrets (the whole list; NULL: none): done is called once
 * the gateway has them (or with why not; they are kept and applied when the
 * gateway is back). A generation older than the sandbox's (both > 0) is a
 * change that arrived late: done at once, nothing taken. */
typedef void (*wk_node_egress_done)(const sp_error *err, void *ud);
int wk_node_sandbox_set_egress(wk_node *n, const char *id, json_object *egress, json_object *secrets,
                               int64_t generation, wk_node_egress_done done, void *ud, sp_error **err);
/* Whether the values of the sandbox's secrets are on neither this worker nor
 * its gateway (the control plane then sends them again). */
bool wk_node_sandbox_secrets_missing(wk_node *n, const char *id);
/* Files one audit record (the gateway's decision or the firewall's drop) in
 * the egress log of the sandbox it names by id or by source address. */
void wk_node_egress_record(wk_node *n, json_object *rec);
/* Records of the sandbox's egress log, oldest first, as {"records": [...],
 * "more": bool}: those q's decision and kind (when not NULL) keep, the last
 * q->limit older than q->before_us or the first q->limit newer than
 * q->after_us (GetEgressLog, proto/spec/worker-rpc.md). q->id is ignored. */
int wk_node_egress_log(wk_node *n, const char *id, const pr_wk_get_egress_log *q, json_object **ret, sp_error **err);
/* True when the node can serve: its storage answers. */
bool wk_node_ready(wk_node *n, sp_error **err);

/* ---- purge ---------------------------------------------------------------
 * space-worker --purge: what a stopped worker leaves on its host, taken away
 * (node/purge.c). */
typedef struct wk_purge_config {
        const char *state_dir, *storage_dir, *storage_image; /* absolute; NULL or "" to leave */
        const char *cgroup_parent; /* relative to the cgroup roots; NULL or "" to leave */
} wk_purge_config;

typedef struct wk_purge_stats {
        unsigned processes, cgroups, mounts, loops;
} wk_purge_stats;

/* Kills the sandboxes under the cgroup parent and removes their groups,
 * unmounts everything beneath the directories, detaches the image's loop
 * device and removes the directories and the image. Goes on past a failed
 * step; returns the first failure (SP_E_CONFLICT: something stayed). */
int wk_purge(const wk_purge_config *cfg, wk_purge_stats *ret, sp_error **err);

#endif
