/* SPDX-License-Identifier: Apache-2.0 */
/* AttachSession frames to attach events (either format's; frames.c encodes them). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attach/attach.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/rpc.h"

void dp_attach_queue_pop(dp_attach_queue *q)
{
        dp_attach_event *ev = q->head;
        if (!ev)
                return;
        q->head = ev->next;
        if (!q->head)
                q->tail = NULL;
        q->bytes -= ev->data.len;
        sp_buf_free(&ev->data);
        free(ev);
}

void dp_attach_queue_clear(dp_attach_queue *q)
{
        while (q->head)
                dp_attach_queue_pop(q);
}

/* A new event at the end of q (allocation failure aborts, as sp_buf does). */
static dp_attach_event *push(dp_attach_queue *q, const char *name, uint64_t id, bool has_id)
{
        dp_attach_event *ev = calloc(1, sizeof(*ev));
        if (!ev)
                abort();
        ev->name = name;
        ev->id = id;
        ev->has_id = has_id;
        if (q->tail)
                q->tail->next = ev;
        else
                q->head = ev;
        q->tail = ev;
        return ev;
}

static void push_json(dp_attach_queue *q, const char *name, uint64_t id, bool has_id, json_object *o)
{
        dp_attach_event *ev = push(q, name, id, has_id);
        sp_buf_append_str(&ev->data, sp_json_str(o), NULL);
        q->bytes += ev->data.len;
}

void dp_attach_error_event(dp_attach_queue *q, sp_errc code, const char *message)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "code", json_object_new_string(sp_errc_name(code)));
        json_object_object_add(o, "message", json_object_new_string(message));
        push_json(q, "error", 0, false, o);
}

static int decode_data(const uint8_t *p, size_t n, uint64_t *offset, dp_attach_queue *q, sp_error **err)
{
        if (n < 9 || (p[0] != 1 && p[0] != 2))
                return sp_error_set(err, SP_E_INTERNAL, "the worker sent a malformed output frame");
        uint64_t at = 0;
        for (int i = 0; i < 8; i++)
                at = at << 8 | p[1 + i];
        if (at != *offset)
                return sp_error_set(err, SP_E_INTERNAL,
                                    "the worker sent output at offset %" PRIu64 ", expected %" PRIu64, at, *offset);
        const char *name = p[0] == 1 ? "stdout" : "stderr";
        const uint8_t *bytes = p + 9;
        size_t left = n - 9, max = q->event_max ? q->event_max : DP_ATTACH_EVENT_MAX;
        while (left > 0) {
                size_t k = left < max ? left : max;
                at += k;
                dp_attach_event *ev = push(q, name, at, true);
                ev->stream = p[0];
                sp_buf_append(&ev->data, bytes, k, NULL);
                q->bytes += ev->data.len;
                bytes += k;
                left -= k;
        }
        *offset = at;
        return 0;
}

static int decode_json(const uint8_t *p, size_t n, const char *session_id, uint64_t start, uint64_t offset,
                       dp_attach_queue *q, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        const char *event = NULL;
        if (sp_json_parse((const char *)p, n, &o, NULL) < 0 || !json_object_is_type(o, json_type_object) ||
            sp_json_get_string(o, "event", true, 32, &event, NULL) < 0)
                return sp_error_set(err, SP_E_INTERNAL, "the worker sent a malformed event");
        _cleanup_json_ json_object *out = json_object_new_object();
        if (strcmp(event, "start") == 0) {
                int64_t pid = 0;
                if (sp_json_get_int(o, "pid", true, 0, INT32_MAX, &pid, NULL) < 0)
                        return sp_error_set(err, SP_E_INTERNAL, "the worker sent a start event without a pid");
                json_object_object_add(out, "session_id", json_object_new_string(session_id));
                json_object_object_add(out, "pid", json_object_new_int64(pid));
                push_json(q, "start", start, true, out);
                return 0;
        }
        if (strcmp(event, "exit") == 0) {
                int64_t code = 0, sig = 0;
                bool oom = false, killed = false;
                const char *reason = NULL;
                if (sp_json_get_int(o, "code", true, INT32_MIN, INT32_MAX, &code, NULL) < 0 ||
                    sp_json_get_int(o, "signal", false, 0, 128, &sig, NULL) < 0 ||
                    sp_json_get_bool(o, "oom", false, &oom, NULL) < 0 ||
                    sp_json_get_bool(o, "killed", false, &killed, NULL) < 0 ||
                    sp_json_get_string(o, "reason", false, 32, &reason, NULL) < 0)
                        return sp_error_set(err, SP_E_INTERNAL, "the worker sent a malformed exit event");
                json_object_object_add(out, "code", json_object_new_int64(code));
                json_object_object_add(out, "signal", json_object_new_int64(sig));
                json_object_object_add(out, "oom", json_object_new_boolean(oom));
                json_object_object_add(out, "killed", json_object_new_boolean(killed));
                json_object_object_add(out, "reason", json_object_new_string(reason ? reason : ""));
                push_json(q, "exit", offset, true, out);
                return 1;
        }
        if (strcmp(event, "error") == 0) {
                const char *message = NULL;
                if (sp_json_get_string(o, "message", false, 4096, &message, NULL) < 0)
                        return sp_error_set(err, SP_E_INTERNAL, "the worker sent a malformed error event");
                dp_attach_error_event(q, SP_E_INTERNAL, message ? message : "the session failed");
                return 1;
        }
        return 0;
}

int dp_attach_decode(int frame_type, const uint8_t *p, size_t n, const char *session_id, uint64_t start,
                     uint64_t *offset, dp_attach_queue *q, sp_error **err)
{
        if (frame_type == SP_RPC_FRAME_DATA)
                return decode_data(p, n, offset, q, err);
        if (frame_type == SP_RPC_FRAME_JSON)
                return decode_json(p, n, session_id, start, *offset, q, err);
        return sp_error_set(err, SP_E_INTERNAL, "the worker sent an unexpected frame");
}
