/* SPDX-License-Identifier: Apache-2.0 */
/* The raw attach format's frames: header encoding and an incremental decoder. */
#include <string.h>

#include "space/attach_frames.h"

void sp_attach_frame_header(uint8_t out[SP_ATTACH_FRAME_HEADER_SIZE], uint8_t type, uint32_t len)
{
        out[0] = type;
        out[1] = (uint8_t)(len >> 24);
        out[2] = (uint8_t)(len >> 16);
        out[3] = (uint8_t)(len >> 8);
        out[4] = (uint8_t)len;
}

void sp_attach_frames_init(sp_attach_frames *d, size_t max_json)
{
        memset(d, 0, sizeof(*d));
        d->max_json = max_json ? max_json : SP_ATTACH_FRAME_JSON_MAX;
}

void sp_attach_frames_free(sp_attach_frames *d)
{
        sp_buf_free(&d->payload);
}

void sp_attach_frames_reset(sp_attach_frames *d)
{
        size_t max = d->max_json;
        sp_buf payload = d->payload;
        sp_buf_clear(&payload);
        memset(d, 0, sizeof(*d));
        d->max_json = max;
        d->payload = payload;
}

static bool is_output(uint8_t type)
{
        return type == SP_ATTACH_FRAME_STDOUT || type == SP_ATTACH_FRAME_STDERR;
}

int sp_attach_frames_next(sp_attach_frames *d, const uint8_t *p, size_t n, size_t *ret_used, sp_attach_chunk *ret,
                          sp_error **err)
{
        size_t used = 0;
        *ret_used = 0;
        if (d->failed)
                return sp_error_set(err, SP_E_TOO_LARGE, "the attach stream sent an oversized frame");
        for (;;) {
                if (!d->in_payload) {
                        /* A whole frame completed by the previous call leaves its payload buffered. */
                        if (d->header_len == 0)
                                sp_buf_clear(&d->payload);
                        size_t take = SP_ATTACH_FRAME_HEADER_SIZE - d->header_len;
                        if (take > n - used)
                                take = n - used;
                        if (take)
                                memcpy(d->header + d->header_len, p + used, take);
                        d->header_len += take;
                        used += take;
                        if (d->header_len < SP_ATTACH_FRAME_HEADER_SIZE) {
                                *ret_used = used;
                                return 0;
                        }
                        d->left = (uint32_t)d->header[1] << 24 | (uint32_t)d->header[2] << 16 |
                                  (uint32_t)d->header[3] << 8 | d->header[4];
                        if (!is_output(d->header[0]) && d->left > d->max_json) {
                                d->failed = true;
                                *ret_used = used;
                                return sp_error_set(err, SP_E_TOO_LARGE,
                                                    "the attach stream sent a frame of type %u of %u bytes (at most "
                                                    "%zu)",
                                                    d->header[0], d->left, d->max_json);
                        }
                        d->in_payload = true;
                }
                uint8_t type = d->header[0];
                size_t avail = n - used;
                if (is_output(type)) {
                        if (d->left == 0) { /* an empty output frame: nothing to hand out */
                                d->in_payload = false;
                                d->header_len = 0;
                                continue;
                        }
                        if (avail == 0) {
                                *ret_used = used;
                                return 0;
                        }
                        size_t take = avail < d->left ? avail : d->left;
                        d->left -= (uint32_t)take;
                        *ret = (sp_attach_chunk){.type = type, .data = p + used, .len = take, .last = d->left == 0};
                        used += take;
                        if (d->left == 0) {
                                d->in_payload = false;
                                d->header_len = 0;
                        }
                        *ret_used = used;
                        return 1;
                }
                if (d->payload.len == 0 && avail >= d->left) {
                        /* The whole payload is in this input: hand it out without a copy. */
                        *ret = (sp_attach_chunk){.type = type, .data = p + used, .len = d->left, .last = true};
                        used += d->left;
                } else {
                        size_t take = avail < d->left ? avail : d->left;
                        sp_buf_append(&d->payload, p + used, take, NULL);
                        used += take;
                        d->left -= (uint32_t)take;
                        if (d->left > 0) {
                                *ret_used = used;
                                return 0;
                        }
                        *ret = (sp_attach_chunk){.type = type,
                                                 .data = (const uint8_t *)d->payload.data,
                                                 .len = d->payload.len,
                                                 .last = true};
                }
                d->left = 0;
                d->in_payload = false;
                d->header_len = 0;
                *ret_used = used;
                return 1;
        }
}

bool sp_attach_frames_partial(const sp_attach_frames *d)
{
        return d->header_len > 0 || d->in_payload;
}
