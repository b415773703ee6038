/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: configuration file text. Never crashes; a failure leaves an
 * error naming the source; strings set are freed. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "space/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
        char *s;
        int64_t i, d, z;
        bool b;
} fcfg;

static const sp_config_def defs[] = {
        {"name", SP_CONFIG_STRING, "x", offsetof(fcfg, s), 0, 0, ""},
        {"count", SP_CONFIG_INT, "1", offsetof(fcfg, i), 0, 100, ""},
        {"wait", SP_CONFIG_DURATION, "1s", offsetof(fcfg, d), 0, 0, ""},
        {"size", SP_CONFIG_SIZE, "1M", offsetof(fcfg, z), 0, 0, ""},
        {"on", SP_CONFIG_BOOL, "false", offsetof(fcfg, b), 0, 0, ""},
        SP_CONFIG_END,
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        fcfg c = {0};
        sp_config_defaults(defs, &c, NULL);
        sp_error *e = NULL;
        if (sp_config_parse_text(defs, &c, (const char *)data, size, "fuzz.conf", &e) < 0 && !e)
                abort();
        if (c.i < 0 || c.i > 100)
                abort();
        sp_error_free(e);
        sp_config_free(defs, &c);
        return 0;
}
