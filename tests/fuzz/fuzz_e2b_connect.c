/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: space-e2b's envd requests (compat/e2b/request.h). The first
 * byte chooses a unary body or a stream's envelope; up to the first
 * newline after it comes a header value, used as both Authorization and
 * Connect-Timeout-Ms; the rest is the request body. A decoded message goes
 * through every process.Process and filesystem.Filesystem decoder, and
 * whatever they accept keeps its bounds: argv starts with a command, a
 * timeout is 0 to 30 days, a cwd is never empty, a pid 1 to INT32_MAX, a path 1 to 4096 bytes, a
 * depth 1 to 16, a user at most 64 bytes, and an argument that Start moved
 * into the environment comes back whole from pieces of at most 64 KiB. Refusals are SP_E_INVALID (a
 * selector by tag: SP_E_NOT_FOUND).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "space/cleanup.h"
#include "space/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void refused(sp_error *e, sp_errc code)
{
        if (!e || e->code != code)
                abort();
        sp_error_free(e);
}

static void check_start(json_object *req, const char *user, const char *header)
{
        json_object *body = NULL, *v = NULL, *argv = NULL;
        bool pty = true;
        sp_error *e = NULL;
        if (e2b_request_start(req, user, header, &body, &pty, &e) < 0) {
                refused(e, SP_E_INVALID);
                return;
        }
        if (!json_object_object_get_ex(body, "argv", &argv) || json_object_array_length(argv) < 1 ||
            !json_object_is_type(json_object_array_get_idx(argv, 0), json_type_string) ||
            !*json_object_get_string(json_object_array_get_idx(argv, 0)))
                abort();
        if (!json_object_object_get_ex(body, "stdin", &v) || !json_object_is_type(v, json_type_boolean) ||
            (pty && !json_object_get_boolean(v)))
                abort();
        if (json_object_object_get_ex(body, "pty", &v) != pty)
                abort();
        if (json_object_object_get_ex(body, "timeout_s", &v) &&
            (!header || json_object_get_int64(v) < 0 || json_object_get_int64(v) > E2B_REQUEST_MAX_TIMEOUT_S))
                abort();
        if (json_object_object_get_ex(body, "user", &v) != (user != NULL))
                abort();
        /* A tag is passed on only as a non-empty string. */
        if (json_object_object_get_ex(body, "tag", &v) &&
            (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0))
                abort();
        /* Always a cwd (the user's home when the request names none). */
        if (!json_object_object_get_ex(body, "cwd", &v) || !json_object_is_type(v, json_type_string) ||
            !*json_object_get_string(v))
                abort();
        /* An argument changed on the way is a script moved into the environment:
         * its pieces, in order, are the script. */
        json_object *proc = NULL, *args = NULL, *env = NULL;
        json_object_object_get_ex(req, "process", &proc);
        json_object_object_get_ex(proc, "args", &args);
        for (size_t i = 1; i < json_object_array_length(argv); i++) {
                json_object *in = json_object_array_get_idx(args, i - 1), *out = json_object_array_get_idx(argv, i);
                if (in == out)
                        continue;
                if (!json_object_is_type(in, json_type_string) || !json_object_object_get_ex(body, "env", &env))
                        abort();
                sp_buf joined = SP_BUF_INIT;
                for (size_t k = 0;; k++) {
                        char name[64];
                        snprintf(name, sizeof(name), "%s%zu", E2B_REQUEST_SCRIPT_VAR, k);
                        json_object *piece = json_object_object_get(env, name);
                        if (!piece)
                                break;
                        if (json_object_get_string_len(piece) > E2B_REQUEST_MAX_ARG)
                                abort();
                        sp_buf_append(&joined, json_object_get_string(piece), (size_t)json_object_get_string_len(piece),
                                      NULL);
                }
                if (joined.len != (size_t)json_object_get_string_len(in) ||
                    memcmp(joined.data, json_object_get_string(in), joined.len) != 0)
                        abort();
                sp_buf_free(&joined);
        }
        /* What goes to the public API serialises. */
        if (!json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN))
                abort();
        json_object_put(body);
}

static void check_methods(json_object *req, const char *user, const char *header)
{
        sp_error *e = NULL;
        check_start(req, user, header);
        int64_t pid = 0;
        const char *tag = NULL;
        if (e2b_request_selector(req, &pid, &tag, &e) == 0) {
                if (tag ? pid != 0 || !e2b_request_tag_ok(tag) : pid < 1 || pid > INT32_MAX)
                        abort();
        } else if (!e || (e->code != SP_E_INVALID && e->code != SP_E_NOT_FOUND)) {
                abort();
        } else {
                sp_error_free(TAKE_PTR(e));
        }
        sp_buf bytes = SP_BUF_INIT;
        if (e2b_request_input(req, &bytes, &e) == 0) {
                if (bytes.len > E2B_REQUEST_MAX_INPUT / 4 * 3)
                        abort();
        } else {
                refused(TAKE_PTR(e), SP_E_INVALID);
        }
        sp_buf_free(&bytes);
        int64_t rows = 0, cols = 0;
        e2b_request_resize(req, &rows, &cols);
        const char *sig = NULL;
        if (e2b_request_signal(req, &sig, &e) == 0) {
                if (strlen(sig) > 10)
                        abort();
        } else {
                refused(TAKE_PTR(e), SP_E_INVALID);
        }
        static const char *const keys[] = {"path", "source", "destination"};
        for (size_t i = 0; i < 3; i++) {
                const char *p = NULL;
                if (e2b_request_path(req, keys[i], &p, &e) == 0) {
                        if (!*p || strlen(p) > E2B_REQUEST_MAX_PATH)
                                abort();
                } else {
                        refused(TAKE_PTR(e), SP_E_INVALID);
                }
        }
        int depth = 0;
        if (e2b_request_depth(req, &depth, &e) == 0) {
                if (depth < 1 || depth > E2B_REQUEST_MAX_DEPTH)
                        abort();
        } else {
                refused(TAKE_PTR(e), SP_E_INVALID);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size == 0)
                return 0;
        bool stream = data[0] & 1;
        data++;
        size--;
        const uint8_t *nl = memchr(data, '\n', size);
        size_t hl = nl ? (size_t)(nl - data) : 0;
        char *header = NULL;
        if (nl) {
                if (!(header = malloc(hl + 1)))
                        return 0;
                memcpy(header, data, hl);
                header[hl] = '\0';
                data += hl + 1;
                size -= hl + 1;
        }
        sp_error *e = NULL;
        char *user = NULL;
        if (e2b_request_user(header, &user, &e) == 0) {
                if (user && (!*user || strlen(user) > E2B_REQUEST_MAX_USER || strchr(user, ':')))
                        abort();
        } else if (user) {
                abort();
        } else {
                refused(TAKE_PTR(e), SP_E_INVALID);
        }
        json_object *req = NULL;
        if (e2b_request_message((const char *)data, size, stream, &req, &e) == 0) {
                if (!json_object_is_type(req, json_type_object))
                        abort();
                check_methods(req, user, header);
                json_object_put(req);
        } else {
                refused(TAKE_PTR(e), SP_E_INVALID);
        }
        free(user);
        free(header);
        return 0;
}
