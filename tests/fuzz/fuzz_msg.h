/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The check every message-codec fuzz target makes of one schema (space/msg.h):
 * a refusal is SP_E_INVALID; a decoded message's arrays of messages decode
 * element by element with their sub-schema; and it re-encodes to one that
 * decodes again and encodes the same. Aborts otherwise.
 */
#ifndef SPACE_FUZZ_MSG_H
#define SPACE_FUZZ_MSG_H

#include <stdalign.h>
#include <stddef.h>
#include <stdlib.h>

#include "space/msg.h"

typedef struct {
        alignas(max_align_t) unsigned char b[1024];
} fuzz_msg_buf;

static void fuzz_msg_one(const pr_schema *s, json_object *o)
{
        fuzz_msg_buf a, b;
        sp_error *e = NULL;
        if (pr_msg_decode(s, o, a.b, &e) < 0) {
                if (!e || e->code != SP_E_INVALID)
                        abort();
                sp_error_free(e);
                return;
        }
        for (size_t i = 0; i < s->nfields; i++) {
                const pr_field *f = &s->fields[i];
                json_object *arr = f->kind == PR_ARRAY ? *(json_object **)(void *)(a.b + f->offset) : NULL;
                for (size_t k = 0; arr && k < json_object_array_length(arr); k++) {
                        fuzz_msg_buf el;
                        if (pr_msg_decode(f->sub, json_object_array_get_idx(arr, k), el.b, NULL) < 0)
                                abort();
                }
        }
        json_object *enc = pr_msg_encode(s, a.b);
        if (pr_msg_decode(s, enc, b.b, NULL) < 0)
                abort();
        json_object *again = pr_msg_encode(s, b.b);
        if (!json_object_equal(enc, again))
                abort();
        json_object_put(again);
        json_object_put(enc);
}

#endif
