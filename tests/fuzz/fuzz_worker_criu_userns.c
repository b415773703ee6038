/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the rewrite of a CRIU userns image's map
 * (wk_criu_userns_remap, backend/jail_criu.h), which a worker runs as root
 * on a checkpoint that may have come from another worker. Whatever the
 * input: it fails with SP_E_INVALID and appends nothing, or succeeds; a
 * success parses again, and mapping it back (when no extent already lay in
 * the target range) gives the same bytes; the identity map changes nothing
 * of a well-formed image's meaning (parsing it twice gives the same bytes). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/jail_criu.h"
#include "space/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* An exact-size copy: a read past size is caught by ASan. */
        uint8_t *in = malloc(size ? size : 1);
        if (!in)
                abort();
        memcpy(in, data, size);
        const uint32_t from = 0x10000000, to = 0x12000000, count = 65536;
        sp_buf out = SP_BUF_INIT, again = SP_BUF_INIT, id1 = SP_BUF_INIT, id2 = SP_BUF_INIT;
        sp_buf_append(&out, "x", 1, NULL); /* appended to: what was there stays */
        sp_error *e = NULL;
        int rc = wk_criu_userns_remap(in, size, from, to, count, &out, &e);
        if (rc < 0) {
                if (rc != -SP_E_INVALID || !e || !e->message[0] || out.len != 1 || out.data[0] != 'x')
                        abort();
                sp_error_free(e);
        } else {
                if (e || out.len < 9 || out.data[0] != 'x')
                        abort();
                /* The result is an image again, and the identity map of it is itself. */
                if (wk_criu_userns_remap((const uint8_t *)out.data + 1, out.len - 1, 0, 0, 0, &id1, NULL) < 0 ||
                    wk_criu_userns_remap((const uint8_t *)id1.data, id1.len, 0, 0, 0, &id2, NULL) < 0 ||
                    id1.len != id2.len || memcmp(id1.data, id2.data, id1.len) != 0)
                        abort();
                /* Mapped back: what the canonical form of the input is, unless some extent lay in the target
                 * range already (then two ranges merged and back is not the way home). */
                sp_buf canon = SP_BUF_INIT, probe = SP_BUF_INIT;
                if (wk_criu_userns_remap(in, size, 0, 0, 0, &canon, NULL) < 0)
                        abort();
                bool clash = wk_criu_userns_remap(in, size, to, from, count, &probe, NULL) == 0 &&
                             (probe.len != canon.len || memcmp(probe.data, canon.data, canon.len) != 0);
                if (!clash) {
                        if (wk_criu_userns_remap((const uint8_t *)out.data + 1, out.len - 1, to, from, count, &again,
                                                 NULL) < 0 ||
                            again.len != canon.len || memcmp(again.data, canon.data, canon.len) != 0)
                                abort();
                }
                sp_buf_free(&canon);
                sp_buf_free(&probe);
        }
        sp_buf_free(&out);
        sp_buf_free(&again);
        sp_buf_free(&id1);
        sp_buf_free(&id2);
        free(in);
        return 0;
}
