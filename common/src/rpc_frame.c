/* SPDX-License-Identifier: Apache-2.0 */
/* RPC stream frames and END trailers: pure codecs, no I/O. */
#include <string.h>

#include "space/cleanup.h"
#include "space/error_shape.h"
#include "space/json.h"
#include "space/rpc.h"

static bool type_valid(unsigned t)
{
        return t == SP_RPC_FRAME_DATA || t == SP_RPC_FRAME_JSON || t == SP_RPC_FRAME_END;
}

int sp_rpc_frame_header(uint8_t out[SP_RPC_FRAME_HEADER_SIZE], sp_rpc_frame_type type, size_t n, sp_error **err)
{
        if (!type_valid((unsigned)type))
                return sp_error_set(err, SP_E_INVALID, "unknown frame type %u", (unsigned)type);
        if (n > SP_RPC_MAX_FRAME)
                return sp_error_set(err, SP_E_TOO_LARGE, "frame of %zu bytes exceeds %u", n, SP_RPC_MAX_FRAME);
        out[0] = (uint8_t)type;
        out[1] = (uint8_t)(n >> 24);
        out[2] = (uint8_t)(n >> 16);
        out[3] = (uint8_t)(n >> 8);
        out[4] = (uint8_t)n;
        return 0;
}

int sp_rpc_frame_append(sp_buf *out, sp_rpc_frame_type type, const void *payload, size_t n, sp_error **err)
{
        uint8_t h[SP_RPC_FRAME_HEADER_SIZE];
        int r = sp_rpc_frame_header(h, type, n, err);
        if (r < 0)
                return r;
        r = sp_buf_reserve(out, sizeof(h) + n, err);
        if (r < 0)
                return r;
        sp_buf_append(out, h, sizeof(h), NULL);
        return sp_buf_append(out, payload, n, err);
}

void sp_rpc_frame_decoder_init(sp_rpc_frame_decoder *d, size_t max_payload)
{
        memset(d, 0, sizeof(*d));
        d->max_payload = max_payload == 0 || max_payload > SP_RPC_MAX_FRAME ? SP_RPC_MAX_FRAME : max_payload;
}

void sp_rpc_frame_decoder_free(sp_rpc_frame_decoder *d)
{
        sp_buf_free(&d->payload);
        d->header_len = 0;
        d->in_payload = false;
}

bool sp_rpc_frame_decoder_partial(const sp_rpc_frame_decoder *d)
{
        return !d->failed && (d->header_len > 0 || d->in_payload);
}

static size_t header_length(const sp_rpc_frame_decoder *d)
{
        return (size_t)d->header[1] << 24 | (size_t)d->header[2] << 16 | (size_t)d->header[3] << 8 | d->header[4];
}

static int fail(sp_rpc_frame_decoder *d, sp_errc code, sp_error **err)
{
        d->failed = true;
        d->fail_code = code;
        sp_buf_free(&d->payload);
        if (code == SP_E_TOO_LARGE)
                return sp_error_set(err, code, "frame payload exceeds %zu bytes", d->max_payload);
        return sp_error_set(err, code, "malformed frame");
}

int sp_rpc_frame_decoder_next(sp_rpc_frame_decoder *d, const uint8_t *p, size_t n, size_t *ret_used, sp_rpc_frame *ret,
                              sp_error **err)
{
        size_t used = 0;
        *ret_used = 0;
        if (d->failed)
                return fail(d, d->fail_code, err);

        /* A frame completed by the previous call leaves its payload buffered. */
        if (!d->in_payload && d->header_len == 0)
                sp_buf_clear(&d->payload);

        if (!d->in_payload) {
                size_t take = SP_RPC_FRAME_HEADER_SIZE - d->header_len;
                if (take > n)
                        take = n;
                if (take)
                        memcpy(d->header + d->header_len, p, take);
                d->header_len += take;
                used += take;
                if (d->header_len < SP_RPC_FRAME_HEADER_SIZE) {
                        *ret_used = used;
                        return 0;
                }
                if (!type_valid(d->header[0])) {
                        *ret_used = used;
                        return fail(d, SP_E_INVALID, err);
                }
                if (header_length(d) > d->max_payload) {
                        *ret_used = used;
                        return fail(d, SP_E_TOO_LARGE, err);
                }
                d->in_payload = true;
                sp_buf_clear(&d->payload);
        }

        size_t want = header_length(d) - d->payload.len;
        size_t avail = n - used;
        if (d->payload.len == 0 && avail >= want) {
                /* The whole payload is in this input: hand it out without a copy. */
                ret->payload = p + used;
                used += want;
        } else {
                size_t take = avail < want ? avail : want;
                if (take && sp_buf_append(&d->payload, p + used, take, err) < 0) {
                        *ret_used = used;
                        return fail(d, SP_E_TOO_LARGE, err);
                }
                used += take;
                if (take < want) {
                        *ret_used = used;
                        return 0;
                }
                ret->payload = (const uint8_t *)d->payload.data;
        }
        ret->type = (sp_rpc_frame_type)d->header[0];
        ret->len = header_length(d);
        if (ret->len == 0)
                ret->payload = (const uint8_t *)"";
        d->in_payload = false;
        d->header_len = 0;
        *ret_used = used;
        return 1;
}

/* ---- trailers -------------------------------------------------------------- */

int sp_rpc_trailer_encode(sp_buf *out, const sp_error *e, json_object *extra, sp_error **err)
{
        if (e)
                return sp_error_shape_encode(out, e->code, e->message, err);
        _cleanup_json_ json_object *root = json_object_new_object();
        if (!root)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        json_object_object_add(root, "ok", json_object_new_boolean(1));
        if (extra && json_object_is_type(extra, json_type_object)) {
                json_object_object_foreach (extra, k, v) {
                        if (strcmp(k, "ok") != 0 && strcmp(k, "error") != 0)
                                json_object_object_add(root, k, json_object_get(v));
                }
        }
        return sp_buf_append_str(out, sp_json_str(root), err);
}

int sp_rpc_trailer_parse(const void *payload, size_t len, json_object **ret, sp_error **err)
{
        _cleanup_json_ json_object *root = NULL;
        int r = sp_json_parse(payload, len, &root, err);
        if (r < 0)
                return sp_error_wrap(err, "stream trailer");
        sp_errc code;
        const char *msg;
        json_object *ok = NULL;
        if (json_object_is_type(root, json_type_object) && json_object_object_get_ex(root, "ok", &ok) &&
            json_object_is_type(ok, json_type_boolean) && json_object_get_boolean(ok) &&
            !json_object_object_get_ex(root, "error", NULL)) {
                *ret = TAKE_PTR(root);
                return 0;
        }
        if (sp_error_shape_get(root, &code, &msg, NULL) == 0)
                return sp_error_set(err, code, "%s", msg);
        return sp_error_set(err, SP_E_INVALID, "stream trailer is neither {\"ok\":true} nor an error");
}
