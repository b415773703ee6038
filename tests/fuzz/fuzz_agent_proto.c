/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the agent protocol decoder as the agent and worker run it —
 * frames over an arbitrary split of the stream, and every OPEN / CONTROL
 * payload through the request validators. */
#include <stdint.h>
#include <stdlib.h>

#include "space/agent_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_frame(const pr_agent_frame *f, void *ud, sp_error **err)
{
        (void)ud;
        if (f->type == PR_AGENT_OPEN) {
                pr_agent_request r;
                if (pr_agent_request_parse(f->payload, f->length, &r, err) == 0) {
                        json_object *j = pr_agent_request_to_json(&r);
                        json_object_put(j);
                        pr_agent_request_free(&r);
                }
        } else if (f->type == PR_AGENT_CONTROL) {
                pr_agent_control c;
                pr_agent_control_parse(f->payload, f->length, &c, err);
        } else if (f->type == PR_AGENT_WINDOW) {
                uint32_t credit;
                pr_agent_window_decode(f, &credit, err);
        }
        if (err && *err) {
                sp_error_free(*err);
                *err = NULL;
        }
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        /* The first byte chooses where the stream is split. */
        size_t cut = size ? data[0] % (size + 1) : 0;
        pr_agent_decoder d = {0};
        sp_error *e = NULL;
        if (pr_agent_decoder_feed(&d, data, cut, on_frame, NULL, &e) == 0)
                pr_agent_decoder_feed(&d, data + cut, size - cut, on_frame, NULL, &e);
        sp_error_free(e);
        pr_agent_decoder_free(&d);
        return 0;
}
