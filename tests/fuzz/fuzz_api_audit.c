/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the audit log's cursor and query (controlplane/api/request_audit.h)
 * over arbitrary bytes. The first byte selects: a cursor alone (the rest is
 * the text), or a whole query (the rest split at newlines into tenant_id,
 * key_id, object_type, object_id, action, outcome, since, until, limit and
 * cursor; missing parts are NULL). Failures must set an error and leave the
 * output zeroed; a decoded cursor must encode back to the same text, and a
 * decoded query must hold within every documented bound. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/request_audit.h"
#include "space/cleanup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok)
{
        if (!ok)
                abort();
}

static void cursor(const char *s)
{
        cp_audit_pos p = {1, 1};
        sp_error *e = NULL;
        int r = cp_audit_cursor_decode(s, &p, &e);
        check((r < 0) == (e != NULL));
        if (r < 0) {
                check(r == -SP_E_INVALID && p.xid == 0 && p.id == 0);
        } else {
                check(p.xid >= 1 && p.xid <= (uint64_t)INT64_MAX && p.id >= 1);
                char again[CP_AUDIT_CURSOR_MAX + 1];
                check(cp_audit_cursor_encode(&p, again, sizeof(again), NULL) == 0 && strcmp(again, s) == 0);
        }
        sp_error_free(e);
}

static void query(char *s)
{
        const char *parts[10] = {NULL};
        for (size_t i = 0; i < 10 && s; i++) {
                parts[i] = s;
                s = strchr(s, '\n');
                if (s)
                        *s++ = '\0';
        }
        cp_audit_params p = {parts[0], parts[1], parts[2], parts[3], parts[4],
                             parts[5], parts[6], parts[7], parts[8], parts[9]};
        cp_audit_query q;
        sp_error *e = NULL;
        int r = cp_req_audit_query(&p, &q, &e);
        check((r < 0) == (e != NULL));
        if (r < 0) {
                check(r == -SP_E_INVALID);
                const unsigned char *b = (const unsigned char *)&q;
                for (size_t i = 0; i < sizeof(q); i++)
                        check(b[i] == 0);
        } else {
                check(q.limit >= 1 && q.limit <= CP_AUDIT_LIMIT_MAX);
                check(strlen(q.object_id) <= CP_AUDIT_OBJECT_MAX && strlen(q.action) <= CP_AUDIT_ACTION_MAX);
                check(!q.action_prefix || q.action[strlen(q.action) - 1] == '.');
                check(!q.outcome[0] || strcmp(q.outcome, "ok") == 0 || strcmp(q.outcome, "denied") == 0 ||
                      strcmp(q.outcome, "failed") == 0);
                check(q.has_cursor == (p.cursor && p.cursor[0]));
        }
        sp_error_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size == 0)
                return 0;
        _cleanup_free_ char *s = strndup((const char *)data + 1, size - 1);
        if (!s)
                return 0;
        if (data[0] % 2 == 0)
                cursor(s);
        else
                query(s);
        return 0;
}
