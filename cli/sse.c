/* SPDX-License-Identifier: Apache-2.0 */
/* Server-sent events: the incremental parser (see sse.h). */
#include "sse.h"

#include <string.h>

void ctl_sse_init(ctl_sse_parser *p)
{
        memset(p, 0, sizeof(*p));
        p->line.limit = CTL_SSE_MAX_LINE;
        /* The data's trailing '\n' is counted and removed at dispatch. */
        p->data.limit = CTL_SSE_MAX_DATA + 1;
}

void ctl_sse_reset(ctl_sse_parser *p)
{
        sp_buf_clear(&p->line);
        sp_buf_clear(&p->data);
        p->type[0] = p->id[0] = '\0';
        p->has_id = p->has_data = false;
        p->skip_lf = p->started = false;
}

void ctl_sse_free(ctl_sse_parser *p)
{
        sp_buf_free(&p->line);
        sp_buf_free(&p->data);
        ctl_sse_init(p);
}

static int dispatch(ctl_sse_parser *p, ctl_sse_cb cb, void *userdata, sp_error **err)
{
        int r = 0;
        if (p->has_data) {
                /* Every data line appended a '\n'; the last one is not part of the data. */
                p->data.len--;
                p->data.data[p->data.len] = '\0';
                r = cb(&(ctl_sse_event){.type = p->type[0] ? p->type : "message",
                                        .id = p->has_id ? p->id : NULL,
                                        .data = p->data.data,
                                        .data_len = p->data.len},
                       userdata, err);
        }
        sp_buf_clear(&p->data);
        p->type[0] = p->id[0] = '\0';
        p->has_id = p->has_data = false;
        return r;
}

static int set_name(char *dst, const char *field, const char *v, size_t n, sp_error **err)
{
        if (n > CTL_SSE_MAX_NAME || memchr(v, '\0', n))
                return sp_error_set(err, SP_E_INVALID, "an event's %s is longer than %d bytes or holds a NUL", field,
                                    CTL_SSE_MAX_NAME);
        memcpy(dst, v, n);
        dst[n] = '\0';
        return 0;
}

/* One complete line, without its line end. */
static int line(ctl_sse_parser *p, const char *s, size_t n, ctl_sse_cb cb, void *userdata, sp_error **err)
{
        if (!p->started) {
                p->started = true;
                if (n >= 3 && memcmp(s, "\xef\xbb\xbf", 3) == 0) {
                        s += 3;
                        n -= 3;
                }
        }
        if (n == 0)
                return dispatch(p, cb, userdata, err);
        if (s[0] == ':')
                return 0;
        const char *colon = memchr(s, ':', n);
        size_t flen = colon ? (size_t)(colon - s) : n;
        const char *v = colon ? colon + 1 : s + n;
        size_t vlen = colon ? n - flen - 1 : 0;
        if (vlen > 0 && v[0] == ' ') {
                v++;
                vlen--;
        }
        if (flen == 4 && memcmp(s, "data", 4) == 0) {
                p->has_data = true;
                if (sp_buf_append(&p->data, v, vlen, NULL) < 0 || sp_buf_append(&p->data, "\n", 1, NULL) < 0)
                        return sp_error_set(err, SP_E_TOO_LARGE, "an event's data is longer than %d bytes",
                                            CTL_SSE_MAX_DATA);
        } else if (flen == 5 && memcmp(s, "event", 5) == 0) {
                return set_name(p->type, "type", v, vlen, err);
        } else if (flen == 2 && memcmp(s, "id", 2) == 0) {
                p->has_id = true;
                return set_name(p->id, "id", v, vlen, err);
        }
        return 0;
}

int ctl_sse_feed(ctl_sse_parser *p, const void *data, size_t len, ctl_sse_cb cb, void *userdata, sp_error **err)
{
        const char *s = data;
        size_t i = 0;
        while (i < len) {
                if (p->skip_lf) {
                        p->skip_lf = false;
                        if (s[i] == '\n') {
                                i++;
                                continue;
                        }
                }
                size_t j = i;
                while (j < len && s[j] != '\n' && s[j] != '\r')
                        j++;
                if (sp_buf_append(&p->line, s + i, j - i, NULL) < 0)
                        return sp_error_set(err, SP_E_TOO_LARGE, "an event-stream line is longer than %d bytes",
                                            CTL_SSE_MAX_LINE);
                if (j == len)
                        break;
                p->skip_lf = s[j] == '\r';
                i = j + 1;
                int r = line(p, p->line.data ? p->line.data : "", p->line.len, cb, userdata, err);
                sp_buf_clear(&p->line);
                if (r < 0)
                        return r;
        }
        return 0;
}
