/* SPDX-License-Identifier: Apache-2.0 */
/* Cross-file internals of the node (worker/node/). */
#ifndef WK_NODE_INTERNAL_H
#define WK_NODE_INTERNAL_H

#include <event2/event.h>
#include <limits.h>
#include <stdatomic.h>

#include "node/jobs.h"
#include "node/node.h"
#include "rootfs/rootfs.h"
#include "space/id.h"
#include "template/template.h"

#define WK_NAME_MAX 64
/* Sessions a sandbox keeps: at most WK_MAX_SESSIONS_PER_SANDBOX running or
 * with their output (the oldest ended one that nobody reads gives its output
 * up to make room: it is "retired", its exit still answered), and at most
 * WK_MAX_SESSIONS_KEPT in all (the oldest retired one is then forgotten). */
#define WK_MAX_SESSIONS_PER_SANDBOX 1024
#define WK_MAX_SESSIONS_KEPT 16384

typedef struct wk_template {
        char name[WK_NAME_MAX + 1];
        wk_template_meta *meta;
        int64_t created_us;
        int64_t warm_target; /* -1: the node's default */
        /* The machine of its latest create: what its warm VMs are made as (a VM's
         * memory, vCPUs and disk are fixed for its life; warm.c). */
        int64_t warm_cpu_millis, warm_memory_bytes, warm_pids_max, warm_disk_bytes;
        /* Uploaded templates: the artifact's format (TAR or OCI; 0: none, the
         * template came from a path) and its size. */
        wk_template_source artifact_format;
        int64_t artifact_bytes;
        /* What its files hold on disk (wk_template_measure), measured once
         * after its import and kept in its record. */
        int64_t bytes;
        struct wk_template *next;
} wk_template;

/* A call waiting for a sandbox's job to end (per-sandbox order). */
typedef struct wk_waiter {
        void (*fn)(void *ud);
        void *ud;
        struct wk_waiter *next;
} wk_waiter;

typedef struct wk_exec_slot {
        wk_session *session;
        uint64_t oom_kills_before; /* the sandbox's OOM kills when the command started */
        struct event *timeout;
        wk_sandbox *sb;
        wk_session_watch watch;
} wk_exec_slot;

struct wk_sandbox {
        wk_node *node;
        char key[WK_NAME_MAX + 1]; /* directory name: fixed for the sandbox's life */
        char id[WK_NAME_MAX + 1]; /* public id: the key, or the id a warm sandbox was claimed as */
        char template_name[WK_NAME_MAX + 1];
        char hostname[64];
        wk_sandbox_state state;
        char *failure;
        bool warm; /* in the pool, not yet claimed */
        /* A job (jobs.h) is making or removing it: calls on it wait (waiters,
         * in order); deleting: the job removes it. */
        bool busy, deleting;
        wk_waiter *waiters, **waiters_tail;
        int64_t cpu_millis, memory_bytes, pids_max, disk_bytes;
        json_object *env;
        char tenant_id[WK_NAME_MAX + 1];
        json_object *egress; /* its egress profile; NULL: none */
        json_object *secrets; /* its credential bindings (secrets.c): values in memory only; NULL: none */
        int64_t egress_generation; /* of its egress and secrets, as the control plane numbered them (0: none) */
        uint32_t slot;
        int64_t created_us;
        wk_suspend_info suspended;
        wk_restore_info restore_lost; /* its last restore's: why the processes its suspend kept were lost */
        wk_backend *backend; /* one of the node's: what box is */
        wk_box *box;
        wk_agent_link *link;
        struct event *agent_log; /* reads the agent's own log (backend log_fd) */
        struct event *reconnect; /* connects to its agent again (sandbox.c) */
        int64_t link_since_us; /* when its agent connection was taken (monotonic) */
        unsigned link_failures; /* connections in a row that lasted under LINK_STEADY_US: the next waits longer */
        int64_t agent_log_window_ms; /* start of the current rate window */
        uint32_t agent_log_lines, agent_log_dropped; /* in that window */
        char *agent_log_part; /* the start of a line read without its end yet (AGENT_LOG_LINE_MAX) */
        size_t agent_log_part_len;
        wk_exec_slot **execs;
        size_t nexecs, cap_execs;
        wk_session_budget log_budget; /* its sessions' logs together (exec.c) */
        struct event *log_budget_kick; /* lets held-back sessions go on once bytes were freed */
        struct event *spare_timer; /* makes the next session's directory ahead (exec.c) */
        /* Connections to its ports (ConnectPort: ingress) since the worker started, and their bytes. */
        int64_t port_connections, port_bytes_in, port_bytes_out;
        int64_t ports_open; /* those open now */
        /* Its CPU time at the last activity check, and when (monotonic; activity.c). */
        uint64_t activity_cpu_ns;
        int64_t activity_at_us;
        /* The worker (its certificate's name) that may read its artifacts
         * (ExportSandbox; artifact.c), "" for none. */
        char export_to[WK_NAME_MAX + 1];
        bool clock_stale; /* restored from memory: the agent sets its clock once connected */
        /* Why its export was refused as too large (artifact.c): while it stays
         * suspended its files cannot change, so a retry is answered with it at
         * once instead of filling the pool again. NULL: none. */
        char *export_refused;
        /* The artifact store (store.c): its copy there is whole (stored_bytes:
         * its manifest's bytes). store_token names the store job that may
         * record its copy: 0 once a copy under way is stale (it runs again, or
         * goes). After a failure, the next try waits until store_retry_us
         * (monotonic); store_failures in a row double the wait. */
        bool stored;
        int64_t stored_bytes;
        uint64_t store_token;
        int64_t store_retry_us;
        unsigned store_failures;
        struct wk_sandbox *next;
};

struct wk_node {
        struct event_base *base;
        wk_node_config cfg;
        char *state_dir, *node_id, *import_root;
        struct wk_storage *storage;
        /* The backends this worker runs (--backend jail,qemu); the first,
         * backend, serves a create that names none, and the warm pool. */
        wk_backend *backend;
        wk_backend *backends[WK_NODE_BACKENDS_MAX];
        size_t nbackends;
        wk_template *templates;
        wk_sandbox *sandboxes;
        struct lh_table *session_index; /* session id -> wk_exec_slot, every sandbox's (exec.c) */
        uint8_t *slots_used; /* by id slot */
        struct event *warm_timer;
        bool warm_busy; /* a refill is scheduled or making a sandbox */
        wk_jobs *jobs; /* the blocking steps of creates and deletes */
        wk_upload *uploads; /* under way (upload.c) */
        wk_import *imports; /* under way (import.c) */
        struct wk_node_import *moving_in; /* sandboxes being imported from other workers (artifact.c) */
        char *debootstrap_program, *debootstrap_mirror, *agent_path;
        wk_node_templates_changed_fn templates_changed;
        void *templates_changed_ud;
        /* VM base snapshots (vm_base.c): a job making one; no new one before retry_us (monotonic) */
        bool vm_base_busy;
        int64_t vm_base_retry_us;
        uint64_t vm_bases_made, vm_bases_failed, vm_creates_from_base, vm_creates_booted;
        /* The artifact store (store.c): its directory (NULL: none), the jobs
         * copying sandboxes into it, the timer that starts them, counters. */
        char *store_dir;
        struct wk__store_job *storing;
        unsigned nstoring;
        struct event *store_timer;
        uint64_t store_tokens;
        uint64_t store_ok, store_failed, store_stale, store_removed;
};

/* exec.c: the next session's directory, made ahead in sessions/ (and
 * its temporary name); removed with the sandbox's files (sandbox.c) */
#define WK_SESSION_SPARE ".spare"
#define WK_SESSION_SPARE_TMP ".spare.tmp"
/* exec.c: a slot leaves the session index before it is freed */
void wk__session_unindex(wk_exec_slot *x);
/* node.c: the size of the id-slot table, and sandboxes holding resources (not suspended) */
size_t wk__slot_capacity(const wk_node *n);
size_t wk__live_count(const wk_node *n);
/* paths */
void wk__path(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* sandbox.c */
/* sandbox.json's object; and written */
json_object *wk__sandbox_record(const wk_sandbox *sb);
int wk__sandbox_persist(wk_sandbox *sb, sp_error **err);
/* By public id, warm ones too. */
wk_sandbox *wk__sandbox_find_any(wk_node *n, const char *id);
int wk__sandbox_load_all(wk_node *n, sp_error **err);
/* Loads (re-adopts) the sandbox whose state is <state>/sandboxes/<key>. */
int wk__sandbox_load_one(wk_node *n, const char *key, sp_error **err);
/* Its job is over: calls waiting on it go on. */
void wk__sandbox_unbusy(wk_sandbox *sb);
/* A free id slot, and one given back. */
int wk__slot_take(wk_node *n, uint32_t *ret, sp_error **err);
void wk__slot_give_back(wk_node *n, uint32_t slot);
/* artifact.c: removes what an export made for the sandbox whose directory is
 * key (a jail's packed root filesystem): it runs again, or is gone (any thread). */
void wk__artifacts_drop(wk_node *n, const char *key);
/* Removes imports abandoned over a day ago (their staging; after loading). */
void wk__imports_stale_sweep(wk_node *n);
/* Removes a directory tree of plain files and directories (ours: staging, a
 * store copy), a bounded depth deep; any thread. */
void wk__tree_remove(const char *path);
/* A suspended sandbox's artifacts and their manifest, as an export makes
 * them (artifact.c) and the artifact store copies them (store.c): init takes
 * what it needs of sb on the loop (its state and storage directories, which
 * the caller may point elsewhere before make); make, on a job thread, packs a
 * jail's root filesystem into storage/rootfs.tar unless it is there and
 * takes every file's size and digest (errors in err); manifest encodes the
 * Manifest (a new reference); clear frees. */
typedef struct wk__artifacts {
        bool jail, memory;
        char backend[16], accel[16], id[WK_NAME_MAX + 1], tpl[WK_NAME_MAX + 1];
        /* state and storage: where the artifacts are made (the store's copy stages its own); rootfs and
         * checkpoint: the sandbox's, which they are made from */
        char state[PATH_MAX], storage[PATH_MAX], rootfs[PATH_MAX], checkpoint[PATH_MAX];
        uint64_t disk_exclusive;
        uint64_t disk_bytes, reserve; /* its quota; the pool's reserve */
        json_object *files;
        int64_t bytes;
        sp_error *err;
} wk__artifacts;
int wk__artifacts_init(wk__artifacts *x, wk_node *n, const wk_sandbox *sb);
void wk__artifacts_make(wk__artifacts *x);
json_object *wk__artifacts_manifest(const wk__artifacts *x);
void wk__artifacts_clear(wk__artifacts *x);
/* store.c: the artifact store. open makes <dir>/sandboxes and the timer
 * (before loading, which reads whether sandboxes are stored); start looks for
 * sandboxes to copy (after loading); free stops the timer (the jobs are the
 * pool's). */
int wk__store_open(wk_node *n, const char *dir, sp_error **err);
void wk__store_start(wk_node *n);
void wk__store_free(wk_node *n);
/* Prometheus lines (space_worker_artifact_store_*), with a store only. */
void wk__store_metrics(wk_node *n, sp_buf *out);
/* artifact.c: the import reads its files from the store's copy at dir
 * instead of having them fetched, and takes the copy as this worker's once
 * installed. */
void wk__import_from_store(wk_node_import *imp, const char *dir);
/* A sandbox became suspended here (a suspend, an import fetched from another
 * worker): its copy is made soon, in the background. */
void wk__store_want(wk_node *n);
/* sb runs again or goes: its copy is stale. Forgets that it is stored and
 * removes the copy in the background (a copy under way is removed when it
 * ends). */
void wk__store_drop(wk_sandbox *sb);
/* Copies the file at from to a new file at to (0600; O_EXCL: to must not
 * exist), with a reflink where the filesystems allow it (FICLONE), else
 * block by block leaving holes and zero blocks out; synced. Any thread. */
int wk__file_copy(const char *from, const char *to, sp_error **err);
/* The store's directory of sandbox id (NULL store: ""). */
void wk__store_path(const wk_node *n, const char *id, char *out, size_t len);
/* Writes <dir>/holder: the worker whose copy dir is (atomically, synced). */
int wk__store_holder_write(const char *dir, const char *holder, sp_error **err);
void wk__sandbox_free(wk_sandbox *sb);
int wk__sandbox_connect_agent(wk_sandbox *sb, sp_error **err);
/* The node's backend of that name, or NULL. */
wk_backend *wk__backend_named(wk_node *n, const char *name);

wk_sandbox *wk__sandbox_make(wk_node *n, const char *template_name, sp_error **err);
/* A sandbox's host name: hostname when given (non-empty), else its id with '_' as '-' (at most 63). */
void wk__hostname_of(const char *hostname, const char *id, char out[static 64]);
/* egress.c */
void wk__egress_apply(wk_sandbox *sb, wk_node_egress_done done, void *ud);
void wk__egress_forget(wk_sandbox *sb);
/* Points the sandbox's /etc/resolv.conf at its gateway (its host end), in the
 * root filesystem at rootfs before it starts; nothing without a network. */
int wk__egress_resolv_conf(wk_sandbox *sb, const char *rootfs, sp_error **err);
/* The same, on any thread: the file at rootfs/etc/resolv.conf names nameserver. */
int wk__resolv_conf_write(const char *rootfs, const char *nameserver, sp_error **err);
/* secrets.c */
bool wk__secrets_any(const wk_sandbox *sb);
/* Adds the variables that point runtimes at the sandbox's CA to its env. */
void wk__secrets_env(wk_sandbox *sb);
/* Makes the CA of sandbox key (named id) and installs it in its root
 * filesystem at rootfs, unless made already (then 0): on any thread. */
int wk__secrets_make_ca(const char *state_dir, const char *key, const char *id, const char *rootfs, sp_error **err);
/* Takes the bindings (checked; NULL or empty: none). */
int wk__secrets_set(wk_sandbox *sb, json_object *secrets, sp_error **err);
/* With secrets: makes the sandbox's CA and installs it in its trust store
 * (and env), once. */
int wk__secrets_ready(wk_sandbox *sb, sp_error **err);
/* What the gateway gets: {"secrets", "ca_cert", "ca_key"}, or NULL. */
json_object *wk__secrets_spec(wk_sandbox *sb);
/* Whether values of its secrets are on neither this worker nor its gateway. */
bool wk__secrets_missing(wk_sandbox *sb);
/* exec.c */
void wk__sessions_load(wk_sandbox *sb);
void wk__sessions_attach(wk_sandbox *sb);
void wk__sessions_detach(wk_sandbox *sb);
/* The sandbox's processes are gone: its unfinished sessions fail with why (wk_session_lose). */
void wk__sessions_lose(wk_sandbox *sb, const char *why);
void wk__sessions_remove_all(wk_sandbox *sb);
/* templates (node.c) */
wk_template *wk__template_find(wk_node *n, const char *name);
bool wk__template_name_ok(const char *name);
/* What a fill function may use: both NULL when it runs on the loop. */
typedef struct wk__fill_ctx {
        const atomic_bool *cancel; /* for the importers' limits (template.h) */
        wk_debootstrap_progress_fn progress; /* reports a line of output (any thread) */
        void *progress_ud;
        /* The import's bound (NULL on the loop): the fill may narrow it
         * (wk__bound_narrow) to the pool's room it finds while it writes, so
         * that the final check and a refusal use it. */
        struct wk__bound *bound;
} wk__fill_ctx;
/* Fills dest (an empty directory) with a root filesystem. */
typedef int (*wk__template_fill_fn)(const char *dest, void *ud, const wk__fill_ctx *ctx, wk_template_meta **ret_meta,
                                    sp_error **err);
/* Whether name can be taken by a new template: valid, not a template, not
 * being uploaded or imported (SP_E_INVALID or SP_E_CONFLICT). */
int wk__template_name_free(wk_node *n, const char *name, sp_error **err);
/* Creates <storage>/templates/<name> as a subvolume, fills it on the calling
 * thread, seals it read-only and records the template. On failure nothing of
 * the template is left. */
int wk__template_make(wk_node *n, const char *name, wk__template_fill_fn fill, void *ud, sp_error **err);
/* Seals the filled template and records it (taking meta in every case, with
 * its artifact when format is TAR or OCI, and bytes: what its files hold);
 * on failure the template's subvolume is deleted. */
int wk__template_record(wk_node *n, const char *name, wk_template_meta *meta, wk_template_source artifact_format,
                        int64_t artifact_bytes, int64_t bytes, sp_error **err);

/* How much one import may write (import.c), and which bound that is, so that
 * a refusal names it: the node's own per-template bound, the caller's (the
 * tenant's template storage left, as the control plane computed it), or the
 * storage pool's free space less the node's reserve. */
typedef enum wk__bound_kind {
        WK__BOUND_NODE = 0,
        WK__BOUND_CALLER,
        WK__BOUND_POOL,
} wk__bound_kind;
typedef struct wk__bound {
        uint64_t max_bytes; /* of the template's files: the least of the three */
        wk__bound_kind kind;
        uint64_t caller; /* the caller's bound as it was given (0: none), for the message */
} wk__bound;
/* How many bytes an upload writes between two looks at the pool's free space. */
#define WK__UPLOAD_ROOM_STEP (UINT64_C(4) << 20)
/* The bound of an import whose caller allows `caller` bytes (0: no bound) of
 * which `used` are already stored (an upload's archive). SP_E_TOO_LARGE,
 * with the message of wk__bound_refuse, when nothing is left. */
int wk__import_bound(wk_node *n, uint64_t caller, uint64_t used, wk__bound *ret, sp_error **err);
/* Sets the refusal of an import past bound b: names the bound, never a path. */
int wk__bound_refuse(const wk__bound *b, sp_error **err);
/* Makes b the pool's bound when room is less than it. */
void wk__bound_narrow(wk__bound *b, uint64_t room);
/* The free space less the reserve (at most a tenth of the pool) of the pool
 * that holds fd, once what was written to it is allocated (syncfs): the
 * import's thread may call it. */
int wk__pool_room(int fd, uint64_t reserve, uint64_t *ret, sp_error **err);
/* The pool as an import's thread watches it while the importers write
 * (wk_template_limits.room = wk__pool_room_check, room_ud = a wk__pool_watch):
 * writing n more bytes must leave the reserve free, else SP_E_TOO_LARGE
 * naming the pool's bound, which bound (may be NULL) is narrowed to. */
typedef struct wk__pool_watch {
        uint64_t reserve; /* the node's storage_reserve */
        wk__bound *bound; /* the import's (wk__fill_ctx.bound), set by the fill */
} wk__pool_watch;
int wk__pool_room_check(void *watch, int fd, uint64_t n, sp_error **err);

/* import.c: the same, with the fill on a thread of its own (node.h). */
typedef struct wk__import_spec {
        const char *name;
        wk__template_fill_fn fill;
        void *fill_ud; /* taken in every case: freed with fill_free (may be NULL) */
        void (*fill_free)(void *fill_ud);
        /* On the loop when the import failed, before ops->done (may be NULL). */
        void (*on_fail)(wk_node *n, const char *name, void *fill_ud);
        wk_template_source artifact_format;
        int64_t artifact_bytes;
        /* The import's bound: fill applies it where it can (the importers'
         * limits); what the template holds is measured after fill and checked
         * against it in every case (debootstrap cannot be bounded mid-way). */
        wk__bound bound;
} wk__import_spec;
int wk__import_start(wk_node *n, const wk__import_spec *spec, const wk_import_ops *ops, void *userdata, wk_import **ret,
                     sp_error **err);
bool wk__import_under_way(wk_node *n, const char *name);
/* Cancels the import of name, if one runs: done (with userdata) is called
 * once its thread has ended and nothing of it is left (see
 * wk_node_template_delete). Returns 1 then, 0 when no import of name runs,
 * < 0 when out of memory. */
int wk__import_cancel(wk_node *n, const char *name, wk_node_deleted_fn done, void *userdata, sp_error **err);
/* Cancels the imports under way and joins their threads (the node is being freed). */
void wk__imports_cancel_all(wk_node *n);
/* Removes templates/<name> subvolumes that have no record: imports a crash cut short. */
void wk__templates_sweep(wk_node *n);
/* upload.c: after the templates were loaded, removes what an upload cut short
 * left (partial files, scratch directories) and artifacts without a template;
 * drops the artifact of a template whose file is gone. */
void wk__artifacts_recover(wk_node *n);
/* Whether an upload of name is under way. */
bool wk__upload_under_way(wk_node *n, const char *name);
/* The template of an upload under way is deleted: its partial file goes now,
 * and the upload fails at its next write or its end (the name stays taken
 * until its caller aborts it). False when no upload of name is under way. */
bool wk__upload_cancel(wk_node *n, const char *name);
/* Aborts the uploads under way (the node is being freed). */
void wk__uploads_abort_all(wk_node *n);
/* warm.c */
void wk__warm_schedule(wk_node *n);
/* Starts making a pool member of template_name in the background (sandbox.c). */
int wk__warm_make(wk_node *n, const char *template_name, wk_node_sandbox_done_fn done, void *ud, sp_error **err);
/* A ready pool member of the template that can serve want (backend fits). */
wk_sandbox *wk__warm_claim(wk_node *n, const char *template_name, const wk_box_spec *want);
/* Pool members that hold a live slot (made, ready or being trimmed): what a request may push out. */
size_t wk__warm_live_count(const wk_node *n);
/* vm_base.c: sb's VM had to boot: make its template's base snapshot for its machine (background). */
void wk__vm_base_want(wk_node *n, const wk_sandbox *sb);
/* A template arrived: its base for the public API's default machine (a create that names no
 * resources), ahead of any create (when cfg.vm_bases_ahead). */
void wk__vm_base_ahead(wk_node *n, const char *template_name);
/* sandbox.c: tells a VM's agent the time, its host name and fresh randomness
 * (after a restore from memory, or a claim of a warm VM). */
void wk__sandbox_refresh(wk_sandbox *sb);

#endif
