/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the resynchronising scan of a reconnected agent transport —
 * over any split of the stream it must stop exactly after the first magic
 * (as memmem finds it), or consume everything when there is none. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/agent_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size == 0)
                return 0;
        size_t cut = data[0] % size;
        const uint8_t *p = data + 1;
        size_t n = size - 1;
        cut = cut > n ? n : cut;
        pr_agent_sync s = {0};
        size_t used = pr_agent_sync_feed(&s, p, cut);
        if (!s.done)
                used += pr_agent_sync_feed(&s, p + cut, n - cut);
        const uint8_t *m = memmem(p, n, PR_AGENT_SYNC_MAGIC, PR_AGENT_SYNC_LEN);
        size_t want = m ? (size_t)(m - p) + PR_AGENT_SYNC_LEN : n;
        if (used != want || s.done != (m != NULL))
                abort();
        return 0;
}
