/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the data plane's control requests. The first byte picks what
 * the rest is: a resize body, a signal body, or an HTTP request head whose
 * query is read as stdin's, a file GET's or a file PUT's. Accepted values are
 * always within their documented bounds; refusals are always SP_E_INVALID
 * with a message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "route/request.h"
#include "space/http_parser.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void refused(int r, sp_error *e)
{
        if (r < 0 && (!e || e->code != SP_E_INVALID || !e->message[0]))
                abort();
        if (r == 0 && e)
                abort();
        sp_error_free(e);
}

static void query(int which, const uint8_t *data, size_t size)
{
        sp_http_parser *p = sp_http_parser_new(NULL);
        size_t used = 0, blen = 0;
        const char *body = NULL;
        if (sp_http_parser_feed(p, data, size, &used, &body, &blen) == SP_HTTP_PARSE_HEAD) {
                sp_error *e = NULL;
                int r;
                if (which == 2) {
                        bool close = false;
                        r = dp_request_stdin(p, &close, &e);
                } else {
                        dp_file_request f;
                        r = which == 3 ? dp_request_file_get(p, &f, &e) : dp_request_file_put(p, &f, &e);
                        if (r == 0 &&
                            (!f.path || !*f.path || strlen(f.path) > DP_PATH_MAX || f.mode > 07777 ||
                             f.offset > DP_OFFSET_MAX || f.length > DP_OFFSET_MAX ||
                             (f.owner && (!*f.owner || strlen(f.owner) > DP_OWNER_MAX || strpbrk(f.owner, " :")))))
                                abort();
                }
                refused(r, e);
        }
        sp_http_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size == 0 || size > 65536)
                return 0;
        int which = data[0] % 5;
        const char *rest = (const char *)data + 1;
        size_t n = size - 1;
        sp_error *e = NULL;
        if (which == 0) {
                int rows = 0, cols = 0;
                int r = dp_request_resize(rest, n, &rows, &cols, &e);
                if (r == 0 && (rows < DP_PTY_MIN || rows > DP_PTY_MAX || cols < DP_PTY_MIN || cols > DP_PTY_MAX))
                        abort();
                refused(r, e);
        } else if (which == 1) {
                int sig = 0;
                int r = dp_request_signal(rest, n, &sig, &e);
                if (r == 0 && (sig < 1 || sig > 64))
                        abort();
                refused(r, e);
        } else {
                query(which, data + 1, n);
        }
        return 0;
}
