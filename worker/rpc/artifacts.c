/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Moving a suspended sandbox between workers (proto/spec/worker-rpc.md):
 * ExportSandbox makes its artifacts and names the worker that may read them;
 * ReadSandboxArtifact streams one of them, holes and zero blocks left out;
 * ImportSandbox fetches every file from the worker that holds it, as that
 * worker's peer over the cluster's mTLS (the holder must present the name
 * the control plane gave), resuming what an earlier attempt fetched, then
 * has the node check and install them (node/artifact.c); or, from the
 * artifact store, has the node read and check the store's copy
 * (node/store.c). DeleteStoredSandbox removes a gone worker's copy there.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node/artifact_files.h"
#include "rpc/service_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/tls.h"
#include "space/worker_rpc.h"

#define FETCH_TIMEOUT_MS (60 * 60 * 1000)

/* ---- ExportSandbox ---- */

static void export_done(json_object *manifest, const sp_error *err, void *ud)
{
        sp_rpc_call *call = ud;
        if (err)
                sp_rpc_call_fail(call, err);
        else
                sp_rpc_call_reply(call, manifest, NULL);
        sp_rpc_call_unref(call);
}

void wk__h_export_sandbox(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_export_sandbox q = {0};
        if (pr_msg_decode(&pr_wk_export_sandbox_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        int r = wk_node_sandbox_export(wk__svc.node, q.id, q.to, export_done, sp_rpc_call_ref(call), &e);
        if (r < 0) {
                sp_rpc_call_unref(call);
                wk__fail(call, e);
        }
}

/* ---- ReadSandboxArtifact ---- */

typedef struct artifact_stream {
        sp_rpc_call *call;
        int fd;
        uint64_t size, next; /* the file's size; where the next block is looked for */
        uint8_t frame[8 + WK_ARTIFACT_BLOCK];
} artifact_stream;

static void as_pump(artifact_stream *as)
{
        for (;;) {
                uint64_t off = 0;
                size_t n = 0;
                _cleanup_error_ sp_error *e = NULL;
                int r = wk_artifact_next_block(as->fd, as->next, as->size, &off, as->frame + 8, &n, &e);
                if (r < 0) {
                        sp_rpc_call_fail(as->call, e);
                        return;
                }
                if (r == 0) {
                        pr_wk_sandbox_artifact_trailer t = {.ok = true, .bytes = (int64_t)as->size};
                        _cleanup_json_ json_object *extra = pr_msg_encode(&pr_wk_sandbox_artifact_trailer_schema, &t);
                        sp_rpc_call_end(as->call, extra, NULL);
                        return;
                }
                for (int i = 0; i < 8; i++)
                        as->frame[i] = (uint8_t)(off >> (56 - 8 * i));
                as->next = off + WK_ARTIFACT_BLOCK;
                int s = sp_rpc_call_send(as->call, SP_RPC_FRAME_DATA, as->frame, 8 + n, NULL);
                if (s < 0 || s == 1)
                        return; /* over (on_close frees), or full (on_writable goes on) */
        }
}

static void as_writable(sp_rpc_call *call, void *ud)
{
        (void)call;
        as_pump(ud);
}

static void as_closed(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        artifact_stream *as = ud;
        sp_close(as->fd);
        sp_rpc_call_unref(as->call);
        free(as);
}

void wk__h_read_sandbox_artifact(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_read_sandbox_artifact q = {0};
        if (pr_msg_decode(&pr_wk_read_sandbox_artifact_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        /* Another worker reads only what an export granted it. */
        if (sp_rpc_call_role(call) == SP_ROLE_WORKER &&
            !wk_node_sandbox_export_allowed(wk__svc.node, q.id, sp_rpc_call_peer_name(call))) {
                sp_rpc_call_failf(call, SP_E_PERMISSION, "sandbox %s's artifacts were not exported to worker %s", q.id,
                                  sp_rpc_call_peer_name(call) ? sp_rpc_call_peer_name(call) : "?");
                return;
        }
        if (q.offset % WK_ARTIFACT_BLOCK != 0) {
                sp_rpc_call_failf(call, SP_E_INVALID, "field 'offset' must be a multiple of %d", WK_ARTIFACT_BLOCK);
                return;
        }
        uint64_t size = 0;
        int fd = wk_node_artifact_file_open(wk__svc.node, q.id, q.name, &size, &e);
        if (fd < 0) {
                wk__fail(call, e);
                return;
        }
        if ((uint64_t)q.offset > size) {
                sp_close(fd);
                sp_rpc_call_failf(call, SP_E_INVALID, "field 'offset' is past the file's %llu bytes",
                                  (unsigned long long)size);
                return;
        }
        artifact_stream *as = calloc(1, sizeof(*as));
        if (!as) {
                sp_close(fd);
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        as->fd = fd;
        as->size = size;
        as->next = (uint64_t)q.offset;
        as->call = sp_rpc_call_ref(call);
        static const sp_rpc_call_ops ops = {.on_writable = as_writable, .on_close = as_closed};
        sp_rpc_call_set_ops(call, &ops, as);
        as_pump(as);
}

/* ---- ImportSandbox ---- */

typedef struct fetch {
        sp_rpc_call *call;
        wk_node_import *imp;
        sp_rpc_client *cli;
        char id[PR_WK_ID_MAX + 1], from[PR_WK_ID_MAX + 1];
        size_t i, n;
        const char *name; /* the file being fetched (the manifest's) */
        uint64_t bytes, written_to; /* its size; the end of the last block written */
        int fd;
        uint64_t fetched; /* bytes written by this attempt */
        uint64_t claimed; /* the manifest's bytes: the holder may send no more */
        bool failed;
} fetch;

static void client_free_cb(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        sp_rpc_client_free(ud);
}

static void fetch_free(fetch *f)
{
        sp_close(f->fd);
        if (f->cli) /* not from a callback of its own */
                event_base_once(wk_node_event_base(wk__svc.node), -1, EV_TIMEOUT, client_free_cb, f->cli, NULL);
        sp_rpc_call_unref(f->call);
        free(f);
}

static void fetch_fail(fetch *f, const sp_error *e)
{
        sp_log_warn_kv(SP_KV("sandbox_id", f->id), "import from worker %s: %s", f->from, e->message);
        wk_node_import_abort(f->imp);
        f->imp = NULL;
        sp_rpc_call_fail(f->call, e);
        fetch_free(f);
}

static void imported(wk_sandbox *sb, const sp_error *err, void *ud)
{
        fetch *f = ud;
        f->imp = NULL; /* freed by the node */
        if (err) {
                sp_log_warn_kv(SP_KV("sandbox_id", f->id), "import from worker %s: %s", f->from, err->message);
                sp_rpc_call_fail(f->call, err);
        } else {
                sp_log_info_kv(SP_KV("sandbox_id", f->id), "moved here from worker %s (%llu bytes fetched)", f->from,
                               (unsigned long long)f->fetched);
                _cleanup_json_ json_object *o = wk_sandbox_to_json(sb);
                sp_rpc_call_reply(f->call, o, NULL);
        }
        fetch_free(f);
}

static void fetch_next(fetch *f);

static void on_block(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        fetch *f = ud;
        if (type != SP_RPC_FRAME_DATA || f->failed)
                return;
        uint64_t off = 0;
        for (int i = 0; i < 8 && n >= 8; i++)
                off = (off << 8) | p[i];
        if (n < 8 || n - 8 > WK_ARTIFACT_BLOCK || off % WK_ARTIFACT_BLOCK != 0 || off < f->written_to ||
            off + (n - 8) > f->bytes || f->fetched + (n - 8) > f->claimed + WK_ARTIFACT_BLOCK) {
                f->failed = true;
                sp_rpc_stream_cancel(s);
                _cleanup_error_ sp_error *e = NULL;
                sp_error_set(&e, SP_E_INVALID,
                             "worker %s sent a block of %s out of order or bounds, or more than its manifest says",
                             f->from, f->name);
                fetch_fail(f, e);
                return;
        }
        const uint8_t *d = p + 8;
        size_t left = n - 8;
        uint64_t at = off;
        while (left > 0) {
                ssize_t w = pwrite(f->fd, d, left, (off_t)at);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0) {
                        f->failed = true;
                        sp_rpc_stream_cancel(s);
                        _cleanup_error_ sp_error *e = NULL;
                        sp_error_set_errno(&e, SP_E_IO, w < 0 ? errno : ENOSPC, "write %s", f->name);
                        fetch_fail(f, e);
                        return;
                }
                d += w;
                left -= (size_t)w;
                at += (uint64_t)w;
        }
        f->written_to = at;
        f->fetched += n - 8;
}

static void on_file_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        fetch *f = ud;
        if (f->failed)
                return;
        _cleanup_error_ sp_error *e = NULL;
        pr_wk_sandbox_artifact_trailer t = {0};
        if (err) {
                sp_error_set(&e, err->code, "fetching %s from worker %s: %s", f->name, f->from, err->message);
        } else if (pr_msg_decode(&pr_wk_sandbox_artifact_trailer_schema, trailer, &t, &e) < 0 ||
                   (uint64_t)t.bytes != f->bytes) {
                sp_error_free(e);
                e = NULL;
                sp_error_set(&e, SP_E_IO, "worker %s's %s is not the size its manifest says", f->from, f->name);
        } else if (ftruncate(f->fd, (off_t)f->bytes) < 0) {
                sp_error_set_errno(&e, SP_E_IO, errno, "size %s", f->name);
        }
        if (e) {
                fetch_fail(f, e);
                return;
        }
        sp_close(f->fd);
        f->fd = -1;
        f->i++;
        fetch_next(f);
}

static void fetch_next(fetch *f)
{
        _cleanup_error_ sp_error *e = NULL;
        for (; f->i < f->n; f->i++) {
                char path[PATH_MAX];
                if (wk_node_import_file(f->imp, f->i, &f->name, &f->bytes, path, sizeof(path), &e) < 0) {
                        fetch_fail(f, e);
                        return;
                }
                int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
                struct stat st;
                if (fd < 0 || fstat(fd, &st) < 0) {
                        sp_error_set_errno(&e, SP_E_IO, errno, "stage %s", f->name);
                        sp_close(fd);
                        fetch_fail(f, e);
                        return;
                }
                if ((uint64_t)st.st_size == f->bytes) {
                        /* Fetched by an earlier attempt (its digest is checked with the rest). */
                        close(fd);
                        continue;
                }
                /* From the last whole block an earlier attempt wrote. */
                uint64_t from = (uint64_t)st.st_size > f->bytes
                                        ? 0
                                        : (uint64_t)st.st_size / WK_ARTIFACT_BLOCK * WK_ARTIFACT_BLOCK;
                if (ftruncate(fd, (off_t)from) < 0) {
                        sp_error_set_errno(&e, SP_E_IO, errno, "stage %s", f->name);
                        close(fd);
                        fetch_fail(f, e);
                        return;
                }
                f->fd = fd;
                f->written_to = from;
                pr_wk_read_sandbox_artifact q = {.id = f->id, .name = f->name, .offset = (int64_t)from};
                _cleanup_json_ json_object *req = pr_msg_encode(&pr_wk_read_sandbox_artifact_schema, &q);
                static const sp_rpc_stream_ops ops = {.on_frame = on_block, .on_end = on_file_end};
                if (!sp_rpc_client_stream(f->cli, "ReadSandboxArtifact", req, FETCH_TIMEOUT_MS, &ops, f, &e)) {
                        fetch_fail(f, e);
                        return;
                }
                return;
        }
        wk_node_import *imp = f->imp;
        wk_node_import_finish(imp, imported, f);
}

/* The holder must be the worker the control plane named. */
static int verify_holder(SSL *ssl, void *ud, sp_error **err)
{
        fetch *f = ud;
        sp_role role;
        _cleanup_free_ char *name = NULL;
        if (sp_tls_peer_identity(ssl, &role, &name, err) < 0)
                return -SP_E_UNAUTHENTICATED;
        if (role != SP_ROLE_WORKER || !name || strcmp(name, f->from) != 0)
                return sp_error_set(err, SP_E_PERMISSION, "the worker at that address is %s, not %s", name ? name : "?",
                                    f->from);
        return 0;
}

/* From the artifact store: the node reads and checks the copy. */
static void imported_from_store(wk_sandbox *sb, const sp_error *err, void *ud)
{
        sp_rpc_call *call = ud;
        if (err) {
                sp_rpc_call_fail(call, err);
        } else {
                _cleanup_json_ json_object *o = wk_sandbox_to_json(sb);
                sp_rpc_call_reply(call, o, NULL);
        }
        sp_rpc_call_unref(call);
}

void wk__h_import_sandbox(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_import_sandbox q = {0};
        pr_wk_create_sandbox spec = {0};
        if (pr_msg_decode(&pr_wk_import_sandbox_schema, req, &q, &e) < 0 || pr_wk_import_sandbox_check(&q, &e) < 0 ||
            (q.spec && pr_msg_decode(&pr_wk_create_sandbox_schema, q.spec, &spec, &e) < 0 &&
             sp_error_wrap(&e, "field 'spec'") < 0) ||
            (spec.egress && wk__egress_check(spec.egress, &e) < 0)) {
                wk__fail(call, e);
                return;
        }
        if (q.from.store) {
                if (wk_node_store_import(wk__svc.node, q.id, q.spec, imported_from_store, sp_rpc_call_ref(call), &e) <
                    0) {
                        sp_rpc_call_unref(call);
                        wk__fail(call, e);
                }
                return;
        }
        if (!wk__svc.peer_ctx && !wk__svc.allow_unauthenticated) {
                sp_rpc_call_failf(call, SP_E_UNAVAILABLE, "this worker has no cluster certificate to fetch with");
                return;
        }
        wk_node_import *imp = NULL;
        int r = wk_node_import_begin(wk__svc.node, q.id, q.manifest, q.spec, &imp, &e);
        if (r < 0) {
                wk__fail(call, e);
                return;
        }
        if (r == 1) {
                wk_sandbox *sb = wk_node_sandbox_find(wk__svc.node, q.id);
                _cleanup_json_ json_object *o = sb ? wk_sandbox_to_json(sb) : NULL;
                if (o)
                        sp_rpc_call_reply(call, o, NULL);
                else
                        sp_rpc_call_failf(call, SP_E_INTERNAL, "sandbox %s vanished", q.id);
                return;
        }
        fetch *f = calloc(1, sizeof(*f));
        if (!f) {
                wk_node_import_abort(imp);
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        f->fd = -1;
        f->imp = imp;
        f->call = sp_rpc_call_ref(call);
        f->n = wk_node_import_count(imp);
        json_object *claimed = NULL;
        if (json_object_object_get_ex(q.manifest, "bytes", &claimed))
                f->claimed = (uint64_t)json_object_get_int64(claimed);
        snprintf(f->id, sizeof(f->id), "%s", q.id);
        snprintf(f->from, sizeof(f->from), "%s", q.from.worker);
        f->cli = sp_rpc_client_new(wk_node_event_base(wk__svc.node), q.from.address, wk__svc.peer_ctx, &e);
        if (!f->cli) {
                fetch_fail(f, e);
                sp_error_free(e);
                return;
        }
        if (wk__svc.peer_ctx)
                sp_rpc_client_set_verify_fn(f->cli, verify_holder, f);
        sp_log_info_kv(SP_KV("sandbox_id", f->id), "importing from worker %s at %s: %zu files", f->from, q.from.address,
                       f->n);
        fetch_next(f);
}

/* ---- DeleteStoredSandbox ---- */

static void store_forgotten(const sp_error *err, void *ud)
{
        sp_rpc_call *call = ud;
        if (err) {
                sp_rpc_call_fail(call, err);
        } else {
                _cleanup_json_ json_object *o = json_object_new_object();
                sp_rpc_call_reply(call, o, NULL);
        }
        sp_rpc_call_unref(call);
}

void wk__h_delete_stored_sandbox(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_delete_stored_sandbox q = {0};
        if (pr_msg_decode(&pr_wk_delete_stored_sandbox_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        if (wk_node_store_forget(wk__svc.node, q.id, q.holder, store_forgotten, sp_rpc_call_ref(call), &e) < 0) {
                sp_rpc_call_unref(call);
                wk__fail(call, e);
        }
}
