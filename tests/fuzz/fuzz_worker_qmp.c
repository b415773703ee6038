/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the QMP client (worker/backend/qmp.h) over bytes from a QEMU
 * that may be the guest's. Each line of the input, and the whole input as
 * one line, goes through wk_qmp_parse_line(): it never crashes or reads past
 * the line, fails with an error and a cleared message, or returns a message
 * that keeps the header's promises. Then the input is what a client reads
 * from its socket (greeting, a command, an event awaited): whatever it
 * holds, each call returns, with an error when it fails. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend/qmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Fits a socketpair's buffer, so the stream can be written before it is read. */
#define STREAM_MAX (64u << 10)

static void check_line(const char *line, size_t n)
{
        /* An exact-size copy: a read past n is caught by ASan. */
        char *copy = malloc(n ? n : 1);
        if (!copy)
                abort();
        memcpy(copy, line, n);
        wk_qmp_msg m;
        sp_error *e = NULL;
        int rc = wk_qmp_parse_line(copy, n, &m, &e);
        if (rc < 0) {
                if (rc != -SP_E_INVALID || !e || !e->message[0] || m.obj || m.kind)
                        abort();
                sp_error_free(e);
        } else {
                if (rc != 0 || e || !m.obj || m.id < -1)
                        abort();
                switch (m.kind) {
                case WK_QMP_GREETING:
                        if (!json_object_is_type(m.value, json_type_object) || m.has_id)
                                abort();
                        break;
                case WK_QMP_RETURN:
                        break;
                case WK_QMP_ERROR:
                        if (!m.error_class || !m.error_desc)
                                abort();
                        break;
                case WK_QMP_EVENT:
                        if (!m.event || !m.event[0] || m.has_id ||
                            (m.value && !json_object_is_type(m.value, json_type_object)))
                                abort();
                        break;
                default:
                        abort();
                }
                if (!m.has_id && m.id != -1)
                        abort();
        }
        wk_qmp_msg_clear(&m);
        /* Without an error to fill, the same answer. */
        if (wk_qmp_parse_line(copy, n, &m, NULL) != rc)
                abort();
        wk_qmp_msg_clear(&m);
        free(copy);
}

static void check_client(const uint8_t *data, size_t size)
{
        int sv[2];
        if (size > STREAM_MAX || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return;
        if (write(sv[1], data, size) != (ssize_t)size)
                abort();
        /* The end of the stream after it; the client's commands still go in. */
        shutdown(sv[1], SHUT_WR);
        wk_qmp *q = NULL;
        sp_error *e = NULL;
        if (wk_qmp_connect_fd(sv[0], 1000, &q, &e) < 0) {
                if (!e || q)
                        abort();
                sp_error_free(e);
                close(sv[1]);
                return;
        }
        json_object *r = NULL;
        if (wk_qmp_execute(q, "query-status", NULL, 1000, &r, &e) < 0) {
                if (!e || r)
                        abort();
                e = sp_error_free(e);
        } else {
                if (!r)
                        abort();
                json_object_put(r);
        }
        json_object *d = NULL;
        if (wk_qmp_wait_event(q, "STOP", 0, &d, &e) < 0) {
                if (!e || d)
                        abort();
                sp_error_free(e);
        } else {
                if (!json_object_is_type(d, json_type_object))
                        abort();
                json_object_put(d);
        }
        wk_qmp_close(q);
        close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *p = (const char *)data;
        check_line(p, size);
        for (size_t start = 0; start < size;) {
                const char *nl = memchr(p + start, '\n', size - start);
                size_t end = nl ? (size_t)(nl - p) : size;
                if (nl || start > 0)
                        check_line(p + start, end - start);
                start = end + 1;
        }
        check_client(data, size);
        return 0;
}
