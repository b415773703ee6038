/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: space-e2b's reading of the data plane's attach stream
 * (compat/e2b/attach.h), as process.c relays it: server-sent events
 * translated into envd ProcessEvents until the stream ends. The first byte
 * says whether the session has a PTY; the rest is the stream, fed whole,
 * in pieces whose sizes come from the input, and byte by byte. The three
 * must relay the same events and end the same way; every event keeps its
 * bounds and every ProcessEvent is one of data, end or keepalive.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attach.h"
#include "space/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct relay {
        bool pty, ended;
        sp_error *stream_error;
        sp_buf log;
} relay;

static void check_event(json_object *ev, bool pty, bool end)
{
        if (!json_object_is_type(ev, json_type_object) || json_object_object_length(ev) != 1)
                abort();
        json_object *v = NULL;
        if (json_object_object_get_ex(ev, "data", &v)) {
                json_object *s = NULL;
                if (end || json_object_object_length(v) != 1 ||
                    (pty ? !json_object_object_get_ex(v, "pty", &s)
                         : !json_object_object_get_ex(v, "stdout", &s) &&
                                     !json_object_object_get_ex(v, "stderr", &s)) ||
                    !json_object_is_type(s, json_type_string))
                        abort();
        } else if (json_object_object_get_ex(ev, "end", &v)) {
                json_object *x = NULL, *st = NULL;
                if (!end || !json_object_object_get_ex(v, "exitCode", &x) || !json_object_is_type(x, json_type_int) ||
                    !json_object_object_get_ex(v, "exited", &x) || !json_object_is_type(x, json_type_boolean) ||
                    !json_object_object_get_ex(v, "status", &st) || !json_object_is_type(st, json_type_string))
                        abort();
        } else if (end || !json_object_object_get_ex(ev, "keepalive", &v)) {
                abort();
        }
}

static int on_event(const char *event, const char *data, size_t len, void *userdata)
{
        relay *r = userdata;
        if ((event && strlen(event) > E2B_ATTACH_MAX_NAME) || len > E2B_ATTACH_MAX_DATA || data[len] != '\0')
                abort();
        json_object *ev = NULL;
        bool end = false;
        if (e2b_attach_event(event, data, len, r->pty, &ev, &end, &r->stream_error) < 0) {
                if (ev || end || !r->stream_error ||
                    (r->stream_error->code != SP_E_UNAVAILABLE && r->stream_error->code != SP_E_INTERNAL))
                        abort();
                return -1;
        }
        if (r->stream_error)
                abort();
        if (ev) {
                check_event(ev, r->pty, end);
                sp_buf_append_str(&r->log, json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN), NULL);
                sp_buf_append(&r->log, "\n", 1, NULL);
                json_object_put(ev);
        } else if (end) {
                abort();
        }
        r->ended = end;
        return end;
}

/* Feeds the stream in pieces (0: whole) until it ends; returns how it ended. */
static int run(const uint8_t *data, size_t size, size_t piece, bool pty, sp_buf *log)
{
        relay r = {.pty = pty};
        e2b_attach a = E2B_ATTACH_INIT;
        int rc = 0;
        sp_error *e = NULL;
        for (size_t off = 0; off < size && rc == 0;) {
                size_t n = piece && piece < size - off ? piece : size - off;
                rc = e2b_attach_feed(&a, (const char *)data + off, n, on_event, &r, &e);
                off += n;
        }
        if (a.line.len > E2B_ATTACH_MAX_LINE || a.data.len > E2B_ATTACH_MAX_DATA)
                abort();
        if (rc > 0 && (!r.ended || e || r.stream_error))
                abort();
        if (rc < 0 && !!e == !!r.stream_error)
                abort();
        if (e && e->code != SP_E_TOO_LARGE)
                abort();
        sp_buf_append_str(&r.log, r.stream_error ? r.stream_error->message : e ? e->message : "-", NULL);
        e2b_attach_free(&a);
        sp_error_free(e);
        sp_error_free(r.stream_error);
        *log = r.log;
        return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size == 0)
                return 0;
        bool pty = data[0] & 1;
        size_t piece = (size_t)(data[0] >> 1) % 11 + 1;
        data++;
        size--;
        sp_buf whole, pieces, bytes;
        int r1 = run(data, size, 0, pty, &whole);
        int r2 = run(data, size, piece, pty, &pieces);
        int r3 = run(data, size, 1, pty, &bytes);
        if (r1 != r2 || r1 != r3 || whole.len != pieces.len || whole.len != bytes.len ||
            memcmp(whole.data, pieces.data, whole.len) != 0 || memcmp(whole.data, bytes.data, whole.len) != 0)
                abort();
        sp_buf_free(&whole);
        sp_buf_free(&pieces);
        sp_buf_free(&bytes);
        return 0;
}
