/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the egress gateway's ClientHello reader (gateway/wire/
 * sni.h). Beyond not crashing or reading past the input: an OK name is in
 * normal form and no IP literal; every result but NEED_MORE and OK/NO_SNI
 * says why; a decided ClientHello reads the same from exactly the bytes up
 * to its end, and any shorter prefix (one chosen by the input) asks for more.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/sni.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gw_sni_result parse(const uint8_t *data, size_t size, gw_sni_info *info)
{
        /* An exact-size copy, so that reads past the end are caught. */
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy)
                abort();
        memcpy(copy, data, size);
        gw_sni_result r = gw_sni_parse(copy, size, info);
        free(copy);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        gw_sni_info info;
        gw_sni_result r = parse(data, size, &info);
        size_t nlen = strlen(info.name);
        if (gw_sni_is_tls(data, size) == 0 && r != GW_SNI_NOT_TLS)
                abort();
        switch (r) {
        case GW_SNI_OK: {
                char again[GW_NAME_MAX + 1];
                if (info.reason || nlen == 0 || gw_name_normalize(info.name, nlen, 0, again, NULL) != (int)nlen ||
                    strcmp(again, info.name) != 0 || gw_name_is_ip_literal(info.name, nlen))
                        abort();
                break;
        }
        case GW_SNI_NO_SNI:
                if (info.reason || nlen)
                        abort();
                break;
        case GW_SNI_NEED_MORE:
                if (info.reason || nlen || size >= GW_SNI_MAX)
                        abort();
                return 0;
        case GW_SNI_NOT_TLS:
        case GW_SNI_MALFORMED:
        case GW_SNI_REFUSED:
                if (!info.reason || nlen)
                        abort();
                return 0;
        default:
                abort();
        }
        /* A ClientHello was read: it ends within the input and the bound. */
        if (info.hello_end == 0 || info.hello_end > size || info.hello_end > GW_SNI_MAX)
                abort();
        gw_sni_info exact;
        if (parse(data, info.hello_end, &exact) != r || strcmp(exact.name, info.name) != 0)
                abort();
        size_t cut = size >= 2 ? ((size_t)data[size - 1] << 8 | data[size - 2]) % info.hello_end : 0;
        if (parse(data, cut, &exact) != GW_SNI_NEED_MORE || parse(data, info.hello_end - 1, &exact) != GW_SNI_NEED_MORE)
                abort();
        return 0;
}
