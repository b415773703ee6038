/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: space-e2b's control-plane REST requests (compat/e2b/
 * request.h). An input starting with '?' is a list query: its lines are
 * limit, nextToken, metadata and state (a line "-" or a missing line: the
 * parameter is absent). The list target must stay a clean request target —
 * only unreserved characters, '/', '?', '=', '&' and percent escapes, at
 * most 8 metadata pairs — and want at least one state. Any other input is
 * a JSON body, decoded for create and for both timeouts: the create body
 * names a template, a timeout of 0 to 30 days and an end action, and the
 * ingress mode is "public" or "token"; the body is also read as the public
 * API's template, sandbox and session (compat/e2b/view.h): a template's view
 * names it, and the logs answer serialises with at most its limit of
 * entries. An input starting with '!' is a logs query: lines start and
 * limit; what is accepted is a start of 0 or more and a limit of 1 to the
 * bound. Every input is also read as an ingress URL template: a domain
 * found is non-empty, fits, is made of host characters only and ends the
 * URL's host.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "space/json.h"
#include "view.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void refused(sp_error *e)
{
        if (!e || e->code != SP_E_INVALID)
                abort();
        sp_error_free(e);
}

static bool target_char(char c)
{
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
               (c && strchr("-_.~/?=&%", c));
}

static void list(char *text)
{
        char *field[4] = {NULL, NULL, NULL, NULL};
        char *p = text + 1;
        for (int i = 0; i < 4 && p; i++) {
                char *nl = strchr(p, '\n');
                if (nl)
                        *nl = '\0';
                field[i] = strcmp(p, "-") == 0 ? NULL : p;
                p = nl ? nl + 1 : NULL;
        }
        sp_buf target = SP_BUF_INIT;
        bool running = false, paused = false;
        sp_error *e = NULL;
        if (e2b_request_list(field[0], field[1], field[2], field[3], &target, &running, &paused, &e) == 0) {
                if (strncmp(target.data, "/v1/sandboxes?limit=", 20) != 0 || (!running && !paused))
                        abort();
                size_t pairs = 0;
                for (const char *m = target.data; (m = strstr(m, "&metadata.")); m++)
                        pairs++;
                if (pairs > E2B_REQUEST_MAX_METADATA)
                        abort();
                for (size_t i = 0; i < target.len; i++)
                        if (!target_char(target.data[i]))
                                abort();
        } else {
                refused(e);
        }
        sp_buf_free(&target);
}

static void logs_query(char *text)
{
        char *start = text + 1, *limit = strchr(start, '\n');
        if (limit)
                *limit++ = '\0';
        int64_t s = -1;
        size_t n = 0;
        sp_error *e = NULL;
        if (e2b_request_logs(start, limit, E2B_VIEW_LOGS_MAX, &s, &n, &e) == 0) {
                if (s < 0 || n < 1 || n > E2B_VIEW_LOGS_MAX)
                        abort();
        } else {
                refused(e);
        }
}

/* in read as what the public API answers: E2B's views of it. */
static void views(json_object *in)
{
        json_object *t = e2b_view_template(in, "0.5.7"), *id = NULL;
        if (t && (!json_object_object_get_ex(t, "templateID", &id) || !json_object_is_type(id, json_type_string) ||
                  !json_object_to_json_string_ext(t, JSON_C_TO_STRING_PLAIN)))
                abort();
        json_object_put(t);
        e2b_view_logs l;
        e2b_view_logs_init(&l);
        e2b_view_logs_sandbox(&l, in);
        e2b_view_logs_session(&l, in);
        for (size_t limit = 1; limit <= 4; limit += 3) {
                json_object *out = e2b_view_logs_answer(&l, 0, limit), *logs = NULL, *entries = NULL;
                if (!json_object_object_get_ex(out, "logs", &logs) ||
                    !json_object_object_get_ex(out, "logEntries", &entries) ||
                    json_object_array_length(logs) != json_object_array_length(entries) ||
                    json_object_array_length(logs) > limit ||
                    !json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN))
                        abort();
                json_object_put(out);
        }
        e2b_view_logs_free(&l);
}

static void body(const char *text, size_t size)
{
        json_object *in = NULL;
        sp_error *e = NULL;
        if (e2b_request_body(text, size, &in, &e) < 0) {
                refused(e);
                return;
        }
        if (!json_object_is_type(in, json_type_object))
                abort();
        views(in);
        json_object *out = NULL, *v = NULL;
        if (e2b_request_create(in, "base-template", &out, &e) == 0) {
                if (!json_object_object_get_ex(out, "template", &v) || !*json_object_get_string(v) ||
                    !json_object_object_get_ex(out, "timeout_s", &v) || json_object_get_int64(v) < 0 ||
                    json_object_get_int64(v) > E2B_REQUEST_MAX_TIMEOUT_S ||
                    !json_object_object_get_ex(out, "end_action", &v) ||
                    (strcmp(json_object_get_string(v), "kill") != 0 &&
                     strcmp(json_object_get_string(v), "suspend") != 0) ||
                    !json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN))
                        abort();
                json_object_put(out);
        } else {
                refused(e);
                e = NULL;
        }
        const char *mode = NULL;
        if (e2b_request_ingress(in, &mode, &e) == 0) {
                if (strcmp(mode, "public") != 0 && strcmp(mode, "token") != 0)
                        abort();
        } else {
                refused(e);
                e = NULL;
        }
        for (int required = 0; required < 2; required++) {
                int64_t t = 0;
                if (e2b_request_timeout(in, required, &t, &e) == 0) {
                        if (t > E2B_REQUEST_MAX_TIMEOUT_S || t < -1 || (required && t < 0))
                                abort();
                } else {
                        refused(e);
                        e = NULL;
                }
        }
        json_object_put(in);
}

static void domain(const char *url)
{
        char out[E2B_DOMAIN_MAX];
        memset(out, 'x', sizeof(out));
        if (!e2b_ingress_domain(url, out, sizeof(out))) {
                if (out[0] != '\0')
                        abort();
                return;
        }
        size_t n = strlen(out);
        if (n == 0 || n >= sizeof(out) ||
            strspn(out, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") != n)
                abort();
        /* The host is "{port}-<first label>.<domain>", ended by '/', '?', '#' or the end. */
        const char *host = strstr(url, "://") + 3;
        size_t len = strcspn(host, "/?#");
        if (strncmp(host, "{port}-", 7) != 0 || len < n + 1 || memcmp(host + len - n, out, n) != 0 ||
            host[len - n - 1] != '.' || memchr(host, '.', len - n - 1))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *text = malloc(size + 1);
        if (!text)
                return 0;
        memcpy(text, data, size);
        text[size] = '\0';
        if (size > 0 && text[0] == '?')
                list(text);
        else if (size > 0 && text[0] == '!')
                logs_query(text);
        else
                body(text, size);
        domain(text);
        free(text);
        return 0;
}
