/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: base64 decoding (both alphabets) must never crash, and what it
 * accepts must re-encode to the canonical form of the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        for (int url = 0; url < 2; url++) {
                sp_buf dec = SP_BUF_INIT, enc = SP_BUF_INIT, again = SP_BUF_INIT;
                sp_error *e = NULL;
                if (sp_base64_decode(&dec, (const char *)data, size, url, &e) == 0) {
                        sp_base64_encode(&enc, dec.data, dec.len, url, NULL);
                        if (sp_base64_decode(&again, enc.data, enc.len, url, NULL) != 0 || again.len != dec.len ||
                            (dec.len && memcmp(again.data, dec.data, dec.len) != 0))
                                abort();
                }
                sp_error_free(e);
                sp_buf_free(&dec);
                sp_buf_free(&enc);
                sp_buf_free(&again);
        }
        return 0;
}
