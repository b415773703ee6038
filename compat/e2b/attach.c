/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data plane's attach stream read as envd's ProcessEvents (see
 * attach.h).
 */
#include "attach.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/json.h"

static int field(e2b_attach *a, const char *l, size_t n, e2b_attach_fn fn, void *userdata, sp_error **err)
{
        if (n == 0) {
                int rc = a->event[0] || a->data.len
                                 ? fn(a->event, a->data.data ? a->data.data : "", a->data.len, userdata)
                                 : 0;
                a->event[0] = '\0';
                sp_buf_clear(&a->data);
                return rc;
        }
        if (l[0] == ':')
                return fn(NULL, l + 1, n - 1, userdata);
        const char *colon = memchr(l, ':', n);
        size_t fl = colon ? (size_t)(colon - l) : n;
        const char *v = colon ? colon + 1 : l + n;
        if (v < l + n && *v == ' ')
                v++;
        size_t vl = (size_t)(l + n - v);
        if (fl == 5 && strncmp(l, "event", 5) == 0) {
                snprintf(a->event, sizeof(a->event), "%.*s", (int)(vl < sizeof(a->event) ? vl : sizeof(a->event) - 1),
                         v);
        } else if (fl == 4 && strncmp(l, "data", 4) == 0) {
                size_t sep = a->data.len ? 1 : 0;
                if (a->data.len + sep + vl > E2B_ATTACH_MAX_DATA)
                        return sp_error_set(err, SP_E_TOO_LARGE, "an output event is too large");
                if (sep)
                        sp_buf_append(&a->data, "\n", 1, NULL);
                sp_buf_append(&a->data, v, vl, NULL);
        }
        return 0;
}

int e2b_attach_feed(e2b_attach *a, const char *buf, size_t n, e2b_attach_fn fn, void *userdata, sp_error **err)
{
        while (n > 0) {
                const char *nl = memchr(buf, '\n', n);
                size_t run = nl ? (size_t)(nl - buf) : n;
                if (a->line.len + run > E2B_ATTACH_MAX_LINE)
                        return sp_error_set(err, SP_E_TOO_LARGE, "an output event is too large");
                sp_buf_append(&a->line, buf, run, NULL);
                if (!nl)
                        return 0;
                buf += run + 1;
                n -= run + 1;
                size_t ll = a->line.len;
                if (ll && a->line.data[ll - 1] == '\r')
                        ll--;
                if (a->line.data)
                        a->line.data[ll] = '\0'; /* a comment's text ends here */
                int rc = field(a, a->line.data ? a->line.data : "", ll, fn, userdata, err);
                sp_buf_clear(&a->line);
                if (rc != 0)
                        return rc;
        }
        return 0;
}

void e2b_attach_free(e2b_attach *a)
{
        sp_buf_free(&a->line);
        sp_buf_free(&a->data);
        a->event[0] = '\0';
}

/* {"end": …} for an exit event's data. */
static int end_event(const char *data, size_t len, json_object **ret, sp_error **err)
{
        _cleanup_json_ json_object *x = NULL;
        if (sp_json_parse(data, len, &x, NULL) < 0)
                return sp_error_set(err, SP_E_INTERNAL, "malformed exit event");
        json_object *v = NULL;
        int64_t code = json_object_object_get_ex(x, "code", &v) ? json_object_get_int64(v) : -1;
        int64_t sig = json_object_object_get_ex(x, "signal", &v) ? json_object_get_int64(v) : 0;
        const char *reason = sp_json_member_str(x, "reason");
        char status[96];
        if (sig > 0)
                snprintf(status, sizeof(status), "signal: %s", sig == 9 ? "killed" : "terminated");
        else
                snprintf(status, sizeof(status), "exit status %lld", (long long)code);
        json_object *ev = json_object_new_object(), *end = json_object_new_object();
        json_object_object_add(end, "exitCode", json_object_new_int64(sig > 0 ? -1 : code));
        json_object_object_add(end, "exited", json_object_new_boolean(sig == 0));
        json_object_object_add(end, "status", json_object_new_string(status));
        if (reason && *reason) {
                char why[128];
                snprintf(why, sizeof(why), "killed (%s)", reason);
                json_object_object_add(end, "error", json_object_new_string(why));
        }
        json_object_object_add(ev, "end", end);
        *ret = ev;
        return 0;
}

int e2b_attach_event(const char *event, const char *data, size_t len, bool pty, json_object **ret, bool *ret_end,
                     sp_error **err)
{
        *ret = NULL;
        if (!event) {
                json_object *ev = json_object_new_object();
                json_object_object_add(ev, "keepalive", json_object_new_object());
                *ret = ev;
                return 0;
        }
        if (strcmp(event, "stdout") == 0 || strcmp(event, "stderr") == 0) {
                json_object *ev = json_object_new_object(), *d = json_object_new_object();
                json_object_object_add(d, pty ? "pty" : event, json_object_new_string(data));
                json_object_object_add(ev, "data", d);
                *ret = ev;
                return 0;
        }
        if (strcmp(event, "exit") == 0) {
                if (end_event(data, len, ret, err) < 0)
                        return -1;
                *ret_end = true;
                return 0;
        }
        if (strcmp(event, "error") == 0) {
                _cleanup_json_ json_object *x = NULL;
                const char *msg = NULL;
                json_object *er = NULL;
                if (sp_json_parse(data, len, &x, NULL) == 0)
                        msg = json_object_object_get_ex(x, "error", &er) ? sp_json_member_str(er, "message")
                                                                         : sp_json_member_str(x, "message");
                return sp_error_set(err, SP_E_UNAVAILABLE, "%s", msg ? msg : "the output stream broke off");
        }
        return 0; /* start and anything newer: nothing to say */
}

bool e2b_attach_start_pid(const char *event, const char *data, size_t len, int64_t *ret_pid)
{
        *ret_pid = 0;
        if (!event || strcmp(event, "start") != 0)
                return false;
        _cleanup_json_ json_object *x = NULL;
        json_object *pid = NULL;
        if (sp_json_parse(data, len, &x, NULL) < 0 || !json_object_is_type(x, json_type_object) ||
            !json_object_object_get_ex(x, "pid", &pid) || !json_object_is_type(pid, json_type_int) ||
            json_object_get_int64(pid) <= 0)
                return false;
        *ret_pid = json_object_get_int64(pid);
        return true;
}

bool e2b_attach_session_failed(const char *event, const char *data, size_t len)
{
        if (!event || strcmp(event, "error") != 0)
                return false;
        _cleanup_json_ json_object *x = NULL;
        json_object *er = NULL;
        if (sp_json_parse(data, len, &x, NULL) < 0 || !json_object_is_type(x, json_type_object))
                return false;
        const char *code = json_object_object_get_ex(x, "error", &er) && json_object_is_type(er, json_type_object)
                                   ? sp_json_member_str(er, "code")
                                   : sp_json_member_str(x, "code");
        return code && strcmp(code, "internal") == 0;
}
