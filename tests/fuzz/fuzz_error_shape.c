/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: decoding the error shape that clients read from every HTTP
 * and RPC error response. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/error_shape.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        sp_errc code;
        char *msg = NULL;
        sp_error *e = NULL;
        if (sp_error_shape_decode((const char *)data, size, &code, &msg, &e) == 0) {
                if (!msg || code <= SP_OK || code >= SP_E__MAX)
                        abort();
                /* re-encode and decode again: same code and message */
                sp_buf b = SP_BUF_INIT;
                sp_errc code2;
                char *msg2 = NULL;
                if (sp_error_shape_encode(&b, code, msg, NULL) < 0 ||
                    sp_error_shape_decode(b.data, b.len, &code2, &msg2, NULL) < 0 || code2 != code ||
                    strcmp(msg, msg2) != 0)
                        abort();
                free(msg2);
                sp_buf_free(&b);
        }
        free(msg);
        sp_error_free(e);
        return 0;
}
