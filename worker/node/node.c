/* SPDX-License-Identifier: Apache-2.0 */
/* The node: opening and closing, templates, capacity. */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <json-c/linkhash.h>

#include "node/node_internal.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"
#include "space/worker_rpc.h"

void wk__path(char *out, size_t n, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = vsnprintf(out, n, fmt, ap);
        va_end(ap);
        if (r < 0 || (size_t)r >= n)
                out[0] = '\0'; /* callers' paths are bounded by validated names */
}

size_t wk_node_slot_capacity(int64_t slots)
{
        /* Room for the warm pool and suspended sandboxes beyond the live slots. */
        return (size_t)(slots > 0 ? slots : 1) * 2 + 16;
}

size_t wk__slot_capacity(const wk_node *n)
{
        return wk_node_slot_capacity(n->cfg.slots);
}

size_t wk__live_count(const wk_node *n)
{
        size_t c = 0;
        for (const wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                if (sb->state != WK_SB_SUSPENDED || sb->busy) /* busy: a restore may be starting it */
                        c++;
        return c;
}

/* *ret = a copy of s, or NULL for NULL; -1 when out of memory. */
static int strdup_opt(const char *s, char **ret)
{
        *ret = NULL;
        return s && !(*ret = strdup(s)) ? -1 : 0;
}

bool wk__template_name_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > WK_NAME_MAX || s[0] == '.')
                return false;
        for (size_t i = 0; i < n; i++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", s[i]))
                        return false;
        return true;
}

wk_template *wk__template_find(wk_node *n, const char *name)
{
        for (wk_template *t = n->templates; t; t = t->next)
                if (strcmp(t->name, name) == 0)
                        return t;
        return NULL;
}

bool wk_node_template_exists(wk_node *n, const char *name)
{
        return wk__template_find(n, name) != NULL;
}

static int template_persist(wk_node *n, wk_template *t, sp_error **err)
{
        char path[PATH_MAX];
        wk__path(path, sizeof(path), "%s/templates/%s.json", n->state_dir, t->name);
        _cleanup_buf_ sp_buf meta = SP_BUF_INIT;
        if (wk_template_meta_to_json(t->meta, &meta, err) < 0)
                return -SP_E_INTERNAL;
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object *m = NULL;
        if (sp_json_parse(meta.data, meta.len, &m, err) < 0)
                return -SP_E_INTERNAL;
        json_object_object_add(o, "name", json_object_new_string(t->name));
        json_object_object_add(o, "created_us", json_object_new_int64(t->created_us));
        json_object_object_add(o, "warm", json_object_new_int64(t->warm_target));
        json_object_object_add(o, "meta", m);
        json_object_object_add(o, "bytes", json_object_new_int64(t->bytes));
        if (t->artifact_format) {
                json_object *a = json_object_new_object();
                json_object_object_add(a, "format",
                                       json_object_new_string(wk_template_source_name(t->artifact_format)));
                json_object_object_add(a, "bytes", json_object_new_int64(t->artifact_bytes));
                json_object_object_add(o, "artifact", a);
        }
        const char *text = sp_json_str(o);
        return sp_file_write_atomic(path, text, strlen(text), 0600, err);
}

/* The template's "artifact": {"format":"tar"|"oci","bytes":N} (uploaded templates). */
static void load_artifact(wk_template *t, json_object *o, const char *path)
{
        json_object *a = NULL;
        const char *format = NULL;
        wk_template_source f;
        _cleanup_error_ sp_error *e = NULL;
        if (sp_json_get_object(o, "artifact", false, &a, &e) < 0 || !a)
                goto out;
        if (sp_json_get_string(a, "format", true, 8, &format, &e) < 0 ||
            sp_json_get_int(a, "bytes", true, 0, INT64_MAX, &t->artifact_bytes, &e) < 0)
                goto out;
        if (wk_template_source_parse(format, &f) < 0 || (f != WK_TEMPLATE_SOURCE_TAR && f != WK_TEMPLATE_SOURCE_OCI)) {
                sp_error_set(&e, SP_E_INVALID, "unknown artifact format '%s'", format);
                goto out;
        }
        t->artifact_format = f;
out:
        if (e)
                sp_log_warn("template %s: ignoring its artifact: %s", path, e->message);
}

static int template_persist(wk_node *n, wk_template *t, sp_error **err);

/* Templates recorded before their size was kept are measured once, at the
 * start (on the loop: before the daemon serves), and their records updated. */
static void templates_measure_unknown(wk_node *n)
{
        for (wk_template *t = n->templates; t; t = t->next) {
                if (t->bytes >= 0)
                        continue;
                uint64_t bytes = 0;
                _cleanup_free_ char *rootfs = NULL;
                _cleanup_error_ sp_error *e = NULL;
                if (!(rootfs = wk_storage_template_rootfs(n->storage, t->name, &e)) ||
                    wk_template_measure(rootfs, &bytes, &e) < 0) {
                        sp_log_warn_kv(SP_KV("template", t->name), "cannot measure the template: %s", e->message);
                        t->bytes = 0;
                        continue;
                }
                t->bytes = (int64_t)bytes;
                if (template_persist(n, t, &e) < 0)
                        sp_log_warn_kv(SP_KV("template", t->name), "recording the template's size: %s", e->message);
        }
}

static int templates_load(wk_node *n, sp_error **err)
{
        char dir[PATH_MAX];
        wk__path(dir, sizeof(dir), "%s/templates", n->state_dir);
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", dir);
        struct dirent *de;
        while ((de = readdir(d))) {
                size_t len = strlen(de->d_name);
                if (len < 6 || strcmp(de->d_name + len - 5, ".json") != 0)
                        continue;
                char path[PATH_MAX];
                wk__path(path, sizeof(path), "%s/%s", dir, de->d_name);
                _cleanup_buf_ sp_buf text = SP_BUF_INIT;
                _cleanup_json_ json_object *o = NULL;
                _cleanup_error_ sp_error *e = NULL;
                const char *name = NULL;
                json_object *meta = NULL;
                wk_template *t = calloc(1, sizeof(*t));
                if (!t)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                if (sp_file_read(path, 1 << 20, &text, &e) < 0 || sp_json_parse(text.data, text.len, &o, &e) < 0 ||
                    sp_json_get_string(o, "name", true, WK_NAME_MAX, &name, &e) < 0 ||
                    sp_json_get_object(o, "meta", true, &meta, &e) < 0 ||
                    wk_template_meta_parse(sp_json_str(meta), strlen(sp_json_str(meta)), &t->meta, &e) < 0) {
                        sp_log_warn("skipping template %s: %s", path, e ? e->message : "invalid");
                        free(t);
                        continue;
                }
                snprintf(t->name, sizeof(t->name), "%s", name);
                t->warm_target = -1;
                sp_json_get_int(o, "created_us", false, 0, INT64_MAX, &t->created_us, NULL);
                sp_json_get_int(o, "warm", false, -1, 1000, &t->warm_target, NULL);
                load_artifact(t, o, path);
                t->bytes = -1;
                sp_json_get_int(o, "bytes", false, 0, INT64_MAX, &t->bytes, NULL);
                t->next = n->templates;
                n->templates = t;
        }
        return 0;
}

wk_backend *wk__backend_named(wk_node *n, const char *name)
{
        for (size_t i = 0; name && i < n->nbackends; i++)
                if (strcmp(n->backends[i]->ops->name, name) == 0)
                        return n->backends[i];
        return NULL;
}

/* The accelerator of the node's VM backend (NULL: none). */
static const char *node_accel(const wk_node *n)
{
        for (size_t i = 0; i < n->nbackends; i++)
                if (n->backends[i]->ops->accel)
                        return n->backends[i]->ops->accel(n->backends[i]);
        return NULL;
}

int wk_node_open(struct event_base *base, const wk_node_config *cfg, wk_backend *const *backends, size_t nbackends,
                 wk_node **ret, sp_error **err)
{
        if (nbackends < 1 || nbackends > WK_NODE_BACKENDS_MAX)
                return sp_error_set(err, SP_E_INVALID, "a worker runs 1 to %d backends", WK_NODE_BACKENDS_MAX);
        wk_node *n = calloc(1, sizeof(*n));
        if (!n)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        n->base = base;
        n->cfg = *cfg;
        for (size_t i = 0; i < nbackends; i++)
                n->backends[i] = backends[i];
        n->nbackends = nbackends;
        n->backend = backends[0];
        n->state_dir = strdup(cfg->state_dir);
        n->storage = cfg->storage;
        n->node_id = strdup(cfg->node_id ? cfg->node_id : "node");
        n->slots_used = calloc(wk__slot_capacity(n), 1);
        n->import_root =
                cfg->template_import_root && *cfg->template_import_root ? strdup(cfg->template_import_root) : NULL;
        n->cfg.state_dir = n->state_dir;
        n->cfg.node_id = n->node_id;
        n->cfg.template_import_root = n->import_root;
        bool copied = strdup_opt(cfg->debootstrap_program, &n->debootstrap_program) == 0 &&
                      strdup_opt(cfg->debootstrap_mirror && *cfg->debootstrap_mirror ? cfg->debootstrap_mirror : NULL,
                                 &n->debootstrap_mirror) == 0 &&
                      strdup_opt(cfg->agent_path, &n->agent_path) == 0;
        n->cfg.debootstrap_program = n->debootstrap_program;
        n->cfg.debootstrap_mirror = n->debootstrap_mirror;
        n->cfg.agent_path = n->agent_path;
        if (!n->state_dir || !n->node_id || !n->slots_used || !copied ||
            (cfg->template_import_root && *cfg->template_import_root && !n->import_root)) {
                wk_node_free(n);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        static const char *const subdirs[] = {"templates", "sandboxes"};
        for (size_t i = 0; i < 2; i++) {
                char p[PATH_MAX];
                wk__path(p, sizeof(p), "%s/%s", n->state_dir, subdirs[i]);
                if (sp_mkdir_p(p, 0700, err) < 0)
                        goto fail;
        }
        n->cfg.artifact_store = NULL;
        if (cfg->artifact_store && *cfg->artifact_store && wk__store_open(n, cfg->artifact_store, err) < 0)
                goto fail;
        n->cfg.artifact_store = n->store_dir;
        if (wk_jobs_new(base, cfg->jobs ? cfg->jobs : 4, &n->jobs, err) < 0 || templates_load(n, err) < 0 ||
            wk__sandbox_load_all(n, err) < 0)
                goto fail;
        wk__templates_sweep(n);
        wk__artifacts_recover(n);
        wk__imports_stale_sweep(n);
        templates_measure_unknown(n);
        wk__warm_schedule(n);
        wk__store_start(n);
        *ret = n;
        return 0;
fail:
        wk_node_free(n);
        return -SP_E_IO;
}

struct event_base *wk_node_event_base(wk_node *n)
{
        return n->base;
}

void wk_node_free(wk_node *n)
{
        if (!n)
                return;
        wk__imports_cancel_all(n);
        wk__uploads_abort_all(n);
        /* The jobs under way end first (their sandboxes then are what they
         * made, or nothing); those not started are cancelled. */
        wk_jobs_free(n->jobs);
        n->jobs = NULL;
        while (n->sandboxes) {
                wk_sandbox *sb = n->sandboxes;
                n->sandboxes = sb->next;
                wk__sandbox_free(sb);
        }
        while (n->templates) {
                wk_template *t = n->templates;
                n->templates = t->next;
                wk_template_meta_free(t->meta);
                free(t);
        }
        if (n->session_index)
                lh_table_free(n->session_index);
        if (n->warm_timer)
                event_free(n->warm_timer);
        wk__store_free(n);
        free(n->slots_used);
        free(n->state_dir);
        free(n->node_id);
        free(n->import_root);
        free(n->debootstrap_program);
        free(n->debootstrap_mirror);
        free(n->agent_path);
        free(n);
}

static void templates_changed(wk_node *n)
{
        if (n->templates_changed)
                n->templates_changed(n->templates_changed_ud);
}

void wk_node_set_templates_changed(wk_node *n, wk_node_templates_changed_fn fn, void *userdata)
{
        n->templates_changed = fn;
        n->templates_changed_ud = userdata;
}

int wk__template_name_free(wk_node *n, const char *name, sp_error **err)
{
        if (!wk__template_name_ok(name))
                return sp_error_set(err, SP_E_INVALID, "invalid template name '%.64s' (1-64 of [A-Za-z0-9._-])", name);
        if (wk__template_find(n, name))
                return sp_error_set(err, SP_E_CONFLICT, "template %s already exists", name);
        if (wk__upload_under_way(n, name))
                return sp_error_set(err, SP_E_CONFLICT, "template %s is being uploaded", name);
        if (wk__import_under_way(n, name))
                return sp_error_set(err, SP_E_CONFLICT, "template %s is being imported", name);
        return 0;
}

int wk__template_record(wk_node *n, const char *name, wk_template_meta *meta, wk_template_source artifact_format,
                        int64_t artifact_bytes, int64_t bytes, sp_error **err)
{
        wk_template *t = NULL;
        if (wk_storage_template_seal(n->storage, name, err) < 0)
                goto fail;
        if (!(t = calloc(1, sizeof(*t)))) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                goto fail;
        }
        snprintf(t->name, sizeof(t->name), "%s", name);
        t->meta = meta;
        t->created_us = sp_now_real_us();
        t->warm_target = -1;
        t->artifact_format = artifact_format;
        t->artifact_bytes = artifact_bytes;
        t->bytes = bytes;
        if (template_persist(n, t, err) < 0)
                goto fail;
        t->next = n->templates;
        n->templates = t;
        sp_log_info_kv(SP_KV("template", name), "template ready");
        wk__warm_schedule(n);
        wk__vm_base_ahead(n, name);
        templates_changed(n);
        return 0;
fail:
        free(t);
        wk_template_meta_free(meta);
        wk_storage_template_delete(n->storage, name, NULL);
        return sp_error_wrap(err, "template %s", name);
}

int wk__template_make(wk_node *n, const char *name, wk__template_fill_fn fill, void *ud, sp_error **err)
{
        if (wk__template_name_free(n, name, err) < 0)
                return -SP_E_CONFLICT;
        _cleanup_free_ char *dest = NULL;
        if (wk_storage_template_create(n->storage, name, &dest, err) < 0)
                return sp_error_wrap(err, "template %s", name);
        static const wk__fill_ctx none = {0};
        wk_template_meta *meta = NULL;
        uint64_t bytes = 0;
        if (fill(dest, ud, &none, &meta, err) < 0 || wk_template_measure(dest, &bytes, err) < 0) {
                wk_template_meta_free(meta);
                wk_storage_template_delete(n->storage, name, NULL);
                return sp_error_wrap(err, "template %s", name);
        }
        return wk__template_record(n, name, meta, 0, 0, (int64_t)bytes, err);
}

static int fill_base(const char *dest, void *ud, const wk__fill_ctx *ctx, wk_template_meta **ret, sp_error **err)
{
        (void)ctx;
        wk_base_opts opts = {.agent_path = ud};
        return wk_template_build_base(&opts, dest, ret, err);
}

int wk_node_template_add_base(wk_node *n, const char *name, const char *agent_path, sp_error **err)
{
        return wk__template_make(n, name, fill_base, (void *)agent_path, err);
}

/* One import's request, owned by the import (its thread reads it). */
typedef struct {
        wk_template_source source;
        int fd; /* dir, tar, oci: the source, opened beneath the import root */
        wk_template_limits limits;
        wk__pool_watch pool; /* limits.room's */
        char *suite, *mirror, *packages, *user, *program, *agent_path;
} import_args;

static void import_args_free(void *ud)
{
        import_args *a = ud;
        if (!a)
                return;
        sp_close(a->fd);
        free(a->suite);
        free(a->mirror);
        free(a->packages);
        free(a->user);
        free(a->program);
        free(a->agent_path);
        free(a);
}

static int fill_import(const char *dest, void *ud, const wk__fill_ctx *ctx, wk_template_meta **ret, sp_error **err)
{
        import_args *a = ud;
        a->limits.cancel = ctx->cancel;
        a->pool.bound = ctx->bound;
        switch (a->source) {
        case WK_TEMPLATE_SOURCE_DIR:
                return wk_template_import_dir_fd(a->fd, dest, &a->limits, NULL, ret, err);
        case WK_TEMPLATE_SOURCE_TAR:
                return wk_template_import_tar_fd(a->fd, dest, &a->limits, NULL, ret, err);
        case WK_TEMPLATE_SOURCE_OCI:
                return wk_template_import_oci_fd(a->fd, dest, NULL, &a->limits, NULL, ret, err);
        case WK_TEMPLATE_SOURCE_DEBOOTSTRAP: {
                wk_debootstrap_opts o = {
                        .suite = a->suite,
                        .mirror = a->mirror,
                        .packages = a->packages,
                        .user = a->user,
                        .program = a->program,
                        .timeout_sec = a->limits.max_seconds ? a->limits.max_seconds : WK_TEMPLATE_DEFAULT_MAX_SECONDS,
                        .progress = ctx->progress,
                        .userdata = ctx->progress_ud,
                        .cancel = ctx->cancel,
                };
                return wk_template_import_debootstrap(&o, dest, ret, err);
        }
        case WK_TEMPLATE_SOURCE_BASE:
                return fill_base(dest, a->agent_path, ctx, ret, err);
        }
        return sp_error_set(err, SP_E_INTERNAL, "unknown template source");
}

/* Checks the request's fields for its source and opens what it names. */
static int import_args_make(wk_node *n, const wk_template_import_req *req, import_args *a, sp_error **err)
{
        const char *src = req->source ? req->source : "";
        if (wk_template_source_parse(src, &a->source) < 0)
                return sp_error_set(err, SP_E_INVALID,
                                    "unknown template source '%.32s' (base, dir, tar, oci, debootstrap)", src);
        bool host_path = a->source == WK_TEMPLATE_SOURCE_DIR || a->source == WK_TEMPLATE_SOURCE_TAR ||
                         a->source == WK_TEMPLATE_SOURCE_OCI;
        bool debootstrap = a->source == WK_TEMPLATE_SOURCE_DEBOOTSTRAP;
        if (host_path && (!req->path || !*req->path))
                return sp_error_set(err, SP_E_INVALID, "a template import from %s needs a path", src);
        if (!host_path && req->path)
                return sp_error_set(err, SP_E_INVALID, "field 'path' does not go with source %s", src);
        if (debootstrap && (!req->suite || !*req->suite))
                return sp_error_set(err, SP_E_INVALID, "a template import from debootstrap needs a suite");
        if (!debootstrap && (req->suite || req->mirror || req->packages || req->user))
                return sp_error_set(err, SP_E_INVALID, "field '%s' goes with source debootstrap only",
                                    req->suite      ? "suite"
                                    : req->mirror   ? "mirror"
                                    : req->packages ? "packages"
                                                    : "user");
        /* Each import gets its own deadline from the configured seconds. */
        a->limits = n->cfg.template_limits;
        a->limits.deadline_us = 0;
        if (debootstrap) {
                /* Checked now, so that a bad suite or mirror fails the call. */
                wk_debootstrap_opts o = {.suite = req->suite,
                                         .mirror = req->mirror ? req->mirror : n->debootstrap_mirror,
                                         .packages = req->packages,
                                         .user = req->user,
                                         .program = n->debootstrap_program};
                _cleanup_strv_free_ char **argv = NULL;
                if (wk_debootstrap_argv(&o, "/checked", &argv, err) < 0)
                        return -SP_E_INVALID;
                if (strdup_opt(o.suite, &a->suite) < 0 || strdup_opt(o.mirror, &a->mirror) < 0 ||
                    strdup_opt(o.packages, &a->packages) < 0 || strdup_opt(o.user, &a->user) < 0 ||
                    strdup_opt(o.program, &a->program) < 0)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (a->source == WK_TEMPLATE_SOURCE_BASE) {
                if (!n->agent_path)
                        return sp_error_set(err, SP_E_PRECONDITION, "this worker has no agent to build base with");
                if (strdup_opt(n->agent_path, &a->agent_path) < 0)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (host_path) {
                bool dir = a->source != WK_TEMPLATE_SOURCE_TAR;
                a->fd = wk_template_source_open(n->import_root, req->path, dir, err);
                if (a->fd < 0)
                        return a->fd;
        }
        return 0;
}

int wk_node_template_import(wk_node *n, const wk_template_import_req *req, const wk_import_ops *ops, void *userdata,
                            wk_import **ret, sp_error **err)
{
        if (wk__template_name_free(n, req->name, err) < 0)
                return -SP_E_CONFLICT;
        import_args *a = calloc(1, sizeof(*a));
        if (!a)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        a->fd = -1;
        if (import_args_make(n, req, a, err) < 0) {
                import_args_free(a);
                return sp_error_wrap(err, "template %s", req->name);
        }
        wk__import_spec spec = {.name = req->name, .fill = fill_import, .fill_ud = a, .fill_free = import_args_free};
        /* Before anything is written: debootstrap is checked against the
         * bound only once it is done, so at least the pool must have room. */
        if (wk__import_bound(n, req->max_bytes, 0, &spec.bound, err) < 0) {
                import_args_free(a);
                return sp_error_wrap(err, "template %s", req->name);
        }
        a->limits.max_bytes = spec.bound.max_bytes;
        a->limits.room = wk__pool_room_check;
        a->limits.room_ud = &a->pool;
        a->pool.reserve = n->cfg.storage_reserve;
        return wk__import_start(n, &spec, ops, userdata, ret, err);
}

int wk_node_template_delete(wk_node *n, const char *name, wk_node_deleted_fn done, void *userdata, sp_error **err)
{
        wk_template *t = wk__template_find(n, name);
        if (!t) {
                /* Not a template yet: its import stops, its upload fails. */
                int r = wk__import_cancel(n, name, done, userdata, err);
                if (r != 0)
                        return r;
                if (wk__upload_cancel(n, name))
                        return 0;
                return sp_error_set(err, SP_E_NOT_FOUND, "template %s not found", name);
        }
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                if (strcmp(sb->template_name, name) == 0 && !sb->warm)
                        return sp_error_set(err, SP_E_CONFLICT, "template %s is used by sandbox %s", name, sb->id);
        /* Warm sandboxes of the template go with it. */
        for (wk_sandbox *sb = n->sandboxes, *next; sb; sb = next) {
                next = sb->next;
                if (sb->warm && strcmp(sb->template_name, name) == 0)
                        wk_node_sandbox_delete(n, sb->id, NULL, NULL, NULL);
        }
        if (wk_storage_template_delete(n->storage, name, err) < 0)
                return sp_error_wrap(err, "delete template %s", name);
        char path[PATH_MAX];
        wk__path(path, sizeof(path), "%s/templates/%s.json", n->state_dir, name);
        unlink(path);
        /* After the record: an artifact left by a crash here has no template
         * and goes at the next start (wk__artifacts_recover). */
        _cleanup_error_ sp_error *e = NULL;
        if (t->artifact_format && wk_storage_artifact_remove(n->storage, name, &e) < 0)
                sp_log_warn_kv(SP_KV("template", name), "removing the template's artifact: %s", e->message);
        for (wk_template **p = &n->templates; *p; p = &(*p)->next)
                if (*p == t) {
                        *p = t->next;
                        break;
                }
        wk_template_meta_free(t->meta);
        free(t);
        sp_log_info_kv(SP_KV("template", name), "template deleted");
        templates_changed(n);
        return 0;
}

/* The Template answer (worker-rpc.md); ts holds its created_at. */
static void template_answer(const wk_template *t, pr_wk_template *a, char ts[static 32])
{
        sp_time_format_rfc3339(t->created_us, ts);
        *a = (pr_wk_template){
                .name = t->name,
                .source = wk_template_source_name(t->meta->source),
                .created_at = ts,
                .workdir = t->meta->workdir,
                .user = t->meta->user,
                .digest = t->meta->digest[0] ? t->meta->digest : NULL,
                .bytes = t->bytes,
                .artifact_bytes = t->artifact_format ? t->artifact_bytes : -1,
                .format = t->artifact_format ? wk_template_source_name(t->artifact_format) : NULL,
        };
}

bool wk_node_template_answer(wk_node *n, const char *name, pr_wk_template *ret, char ts[static 32])
{
        wk_template *t = wk__template_find(n, name);
        if (t)
                template_answer(t, ret, ts);
        return t != NULL;
}

json_object *wk_node_templates_json(wk_node *n)
{
        json_object *arr = json_object_new_array();
        for (wk_template *t = n->templates; t; t = t->next) {
                char ts[32];
                pr_wk_template a;
                template_answer(t, &a, ts);
                json_object_array_add(arr, pr_msg_encode(&pr_wk_template_schema, &a));
        }
        _cleanup_json_ json_object *list = arr;
        return pr_msg_encode(&pr_wk_template_list_schema, &(pr_wk_template_list){.templates = list});
}

json_object *wk_node_template_bytes_json(wk_node *n)
{
        json_object *o = json_object_new_object();
        for (wk_template *t = n->templates; t; t = t->next)
                json_object_object_add(o, t->name, json_object_new_int64(t->bytes));
        return o;
}

/* The NodeInfo answer (worker-rpc.md). */
json_object *wk_node_info_json(wk_node *n)
{
        pr_wk_node_info a = {
                .id = n->node_id,
                .backend = n->backend->ops->name,
                .accel = node_accel(n),
                .capacity = {.cpu_millis = n->cfg.cpu_millis,
                             .memory_bytes = n->cfg.memory_bytes,
                             .slots = n->cfg.slots,
                             .disk_bytes = -1},
                .used = {.disk_bytes = -1},
        };
        _cleanup_json_ json_object *warm = json_object_new_object();
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next) {
                if (sb->state == WK_SB_SUSPENDED)
                        continue;
                a.used.slots++;
                a.used.cpu_millis += sb->cpu_millis;
                a.used.memory_bytes += sb->memory_bytes;
                if (sb->warm && !sb->busy && sb->state == WK_SB_RUNNING) {
                        json_object *c = NULL;
                        int64_t have =
                                json_object_object_get_ex(warm, sb->template_name, &c) ? json_object_get_int64(c) : 0;
                        json_object_object_add(warm, sb->template_name, json_object_new_int64(have + 1));
                }
        }
        /* The storage pool: its size, and what is in use (quotas overcommit, as
         * snapshots share their template's blocks: the scheduler compares a
         * sandbox's quota with what is really free). */
        struct statvfs vfs;
        if (statvfs(n->storage->dir, &vfs) == 0) {
                a.capacity.disk_bytes = (int64_t)vfs.f_blocks * (int64_t)vfs.f_frsize;
                a.used.disk_bytes = (int64_t)(vfs.f_blocks - vfs.f_bavail) * (int64_t)vfs.f_frsize;
        }
        _cleanup_json_ json_object *names = json_object_new_array();
        for (wk_template *t = n->templates; t; t = t->next)
                json_object_array_add(names, json_object_new_string(t->name));
        a.warm = warm;
        a.templates = names;
        _cleanup_json_ json_object *backends = json_object_new_array();
        for (size_t i = 0; i < n->nbackends; i++)
                json_object_array_add(backends, json_object_new_string(n->backends[i]->ops->name));
        a.backends = backends;
        /* The job queue (requests waiting; warm refills yield to them): the
         * control plane's scheduler avoids a worker whose threads are all taken. */
        if (n->jobs) {
                unsigned threads, user, background, running;
                wk_jobs_counts(n->jobs, &threads, &user, &background, &running);
                a.has_jobs = true;
                a.jobs = (pr_wk_node_jobs){.threads = threads, .running = running, .queued = user};
        }
        return pr_msg_encode(&pr_wk_node_info_schema, &a);
}
