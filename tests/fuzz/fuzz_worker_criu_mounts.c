/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the check of a CRIU mountpoints image (wk_criu_mounts_check,
 * backend/jail_criu.h), which a worker runs as root on a checkpoint that may
 * have come from another worker before CRIU makes its mounts as host root.
 * Whatever the input: it passes, or fails with SP_E_INVALID and a message;
 * the same input gives the same answer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/jail_criu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* An exact-size copy: a read past size is caught by ASan. */
        uint8_t *in = malloc(size ? size : 1);
        if (!in)
                abort();
        memcpy(in, data, size);
        sp_error *e = NULL, *e2 = NULL;
        int rc = wk_criu_mounts_check(in, size, &e);
        if (rc < 0 && (!e || e->code != SP_E_INVALID || !e->message[0]))
                abort();
        if (rc == 0 && e)
                abort();
        int again = wk_criu_mounts_check(in, size, &e2);
        if ((again < 0) != (rc < 0) || (e && e2 && strcmp(e->message, e2->message) != 0))
                abort();
        sp_error_free(e);
        sp_error_free(e2);
        free(in);
        return 0;
}
