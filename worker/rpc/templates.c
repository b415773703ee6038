/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template uploads and their artifacts: UploadTemplate reads the archive the
 * client streams into a node upload (worker/node/upload.c) and, at the
 * client's half-close, imports it off the loop (answering when that is done); ReadTemplateArtifact streams an artifact back with
 * the call's flow control. One state per call, freed in on_close.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc/service_internal.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/worker_rpc.h"

#define ARTIFACT_CHUNK (64u * 1024)

/* ---- UploadTemplate ---- */

typedef struct {
        sp_rpc_call *call;
        wk_upload *up; /* NULL once finished or aborted */
        wk_import *imp; /* the import of the received archive, until done */
        uint64_t bytes;
        char name[65];
} upload_call;

/* Fails the call and removes what the upload wrote. */
static void up_fail(upload_call *uc, sp_error *e)
{
        wk_upload_abort(uc->up);
        uc->up = NULL;
        wk__fail(uc->call, e);
}

static void up_frame(sp_rpc_call *call, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)call;
        upload_call *uc = ud;
        sp_error *e = NULL;
        if (!uc->up)
                return;
        if (type != SP_RPC_FRAME_DATA) {
                sp_error_set(&e, SP_E_INVALID, "an upload carries the archive in DATA frames only");
                up_fail(uc, e);
                return;
        }
        if (wk_upload_write(uc->up, p, n, &e) < 0)
                up_fail(uc, e);
}

static void up_imported(const sp_error *err, void *ud)
{
        upload_call *uc = ud;
        uc->imp = NULL;
        if (err) {
                sp_rpc_call_fail(uc->call, err);
                return;
        }
        _cleanup_json_ json_object *extra =
                wk__template_trailer(&pr_wk_upload_trailer_schema, uc->name, (int64_t)uc->bytes);
        sp_rpc_call_end(uc->call, extra, NULL); /* the caller went away: the template stays */
}

/* The whole archive is in: it is imported off the loop (node.h). */
static void up_input_end(sp_rpc_call *call, void *ud)
{
        upload_call *uc = ud;
        sp_error *e = NULL;
        if (!uc->up)
                return;
        static const wk_import_ops iops = {.done = up_imported};
        if (wk_upload_finish(TAKE_PTR(uc->up), &iops, uc, &uc->imp, &uc->bytes, &e) < 0)
                wk__fail(call, e);
}

static void up_closed(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        upload_call *uc = ud;
        /* The client cancelled, or the call ended before its half-close: the
         * upload goes. Once the archive is whole (and counted) its import goes
         * on without the call, within the same bounds: the template is then
         * reported like any other, and whoever no longer wants it deletes it,
         * which cancels the import (wk_node_template_delete). */
        wk_upload_abort(uc->up);
        wk_import_detach(uc->imp);
        sp_rpc_call_unref(uc->call);
        free(uc);
}

void wk__h_upload_template(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_upload_template q = {0};
        int64_t limit = (int64_t)wk_node_upload_max_bytes(wk__svc.node);
        if (pr_msg_decode(&pr_wk_upload_template_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        /* The codec bounds max_bytes by 1 and INT64_MAX; the worker by its --template-max-bytes. */
        if (q.max_bytes > limit) {
                sp_rpc_call_failf(call, SP_E_INVALID, "field 'max_bytes' must be an integer between 1 and %lld",
                                  (long long)limit);
                return;
        }
        upload_call *uc = calloc(1, sizeof(*uc));
        if (!uc) {
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        if (wk_node_upload_begin(wk__svc.node, q.name, q.format, (uint64_t)q.max_bytes, (uint64_t)q.max_stored_bytes,
                                 &uc->up, &e) < 0) {
                free(uc);
                wk__fail(call, e);
                return;
        }
        static const sp_rpc_call_ops ops = {.on_frame = up_frame, .on_input_end = up_input_end, .on_close = up_closed};
        snprintf(uc->name, sizeof(uc->name), "%s", q.name);
        uc->call = sp_rpc_call_ref(call);
        sp_rpc_call_set_ops(call, &ops, uc);
}

/* ---- ReadTemplateArtifact ---- */

typedef struct {
        sp_rpc_call *call;
        int fd;
        const char *format; /* static */
        uint64_t sent;
        uint8_t buf[ARTIFACT_CHUNK];
} artifact_read;

/* Sends chunks until the call is full (on_writable resumes) or the file ends. */
static void ar_pump(artifact_read *ar)
{
        for (;;) {
                ssize_t n = read(ar->fd, ar->buf, sizeof(ar->buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        sp_rpc_call_failf(ar->call, SP_E_IO, "read the artifact: %s", strerror(errno));
                        return;
                }
                if (n == 0) {
                        pr_wk_artifact_trailer t = {.ok = true, .bytes = (int64_t)ar->sent, .format = ar->format};
                        _cleanup_json_ json_object *extra = pr_msg_encode(&pr_wk_artifact_trailer_schema, &t);
                        sp_rpc_call_end(ar->call, extra, NULL);
                        return;
                }
                int r = sp_rpc_call_send(ar->call, SP_RPC_FRAME_DATA, ar->buf, (size_t)n, NULL);
                if (r < 0)
                        return; /* the call is over: on_close frees */
                ar->sent += (uint64_t)n;
                if (r == 1)
                        return;
        }
}

static void ar_writable(sp_rpc_call *call, void *ud)
{
        (void)call;
        ar_pump(ud);
}

static void ar_closed(sp_rpc_call *call, const sp_error *reason, void *ud)
{
        (void)call;
        (void)reason;
        artifact_read *ar = ud;
        sp_close(ar->fd);
        sp_rpc_call_unref(ar->call);
        free(ar);
}

void wk__h_read_template_artifact(sp_rpc_call *call, json_object *req, void *ud)
{
        (void)ud;
        sp_error *e = NULL;
        pr_wk_template_ref q = {0};
        const char *format = NULL;
        if (pr_msg_decode(&pr_wk_template_ref_schema, req, &q, &e) < 0) {
                wk__fail(call, e);
                return;
        }
        int fd = wk_node_artifact_open(wk__svc.node, q.name, &format, &e);
        if (fd < 0) {
                wk__fail(call, e);
                return;
        }
        artifact_read *ar = calloc(1, sizeof(*ar));
        if (!ar) {
                sp_close(fd);
                sp_rpc_call_failf(call, SP_E_LIMIT, "out of memory");
                return;
        }
        ar->fd = fd;
        ar->format = format;
        ar->call = sp_rpc_call_ref(call);
        static const sp_rpc_call_ops ops = {.on_writable = ar_writable, .on_close = ar_closed};
        sp_rpc_call_set_ops(call, &ops, ar);
        ar_pump(ar);
}
