/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the egress gateway's Host reader (gateway/wire/
 * http_host.h). The first byte holds the flags, the rest is the client's
 * bytes. Beyond not crashing or reading past the input: an OK host is in
 * normal form (or an IP literal, never with GW_HTTP_REFUSE_IP) with a port;
 * the head reads the same from exactly its own bytes, and any shorter
 * prefix (one chosen by the input) asks for more.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/http_host.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static gw_http_result parse(const uint8_t *data, size_t size, unsigned flags, gw_http_request *req)
{
        /* An exact-size copy, so that reads past the end are caught. */
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy)
                abort();
        memcpy(copy, data, size);
        gw_http_result r = gw_http_host_parse(copy, size, flags, req);
        free(copy);
        return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        unsigned flags = data[0] & 1 ? GW_HTTP_REFUSE_IP : 0;
        data++;
        size--;
        gw_http_request req;
        gw_http_result r = parse(data, size, flags, &req);
        size_t hlen = strlen(req.host);
        if (r != GW_HTTP_OK) {
                if (hlen || req.method[0] || (r == GW_HTTP_NEED_MORE) != (req.reason == NULL))
                        abort();
                if (r == GW_HTTP_NEED_MORE && size >= GW_HTTP_MAX_HEAD)
                        abort();
                return 0;
        }
        if (req.reason || hlen == 0 || req.port == 0 || req.method[0] == '\0' || req.minor_version < 0 ||
            req.minor_version > 9)
                abort();
        if (req.host_is_ip) {
                if (flags & GW_HTTP_REFUSE_IP)
                        abort();
        } else {
                char again[GW_NAME_MAX + 1];
                if (gw_name_normalize(req.host, hlen, 0, again, NULL) != (int)hlen || strcmp(again, req.host) != 0)
                        abort();
        }
        if (req.head_len < 4 || req.head_len > size || req.head_len > GW_HTTP_MAX_HEAD ||
            memcmp(data + req.head_len - 4, "\r\n\r\n", 4) != 0)
                abort();
        gw_http_request exact;
        if (parse(data, req.head_len, flags, &exact) != GW_HTTP_OK || strcmp(exact.host, req.host) != 0 ||
            exact.port != req.port || strcmp(exact.method, req.method) != 0)
                abort();
        size_t cut = size >= 2 ? ((size_t)data[size - 1] << 8 | data[size - 2]) % req.head_len : 0;
        if (parse(data, cut, flags, &exact) != GW_HTTP_NEED_MORE ||
            parse(data, req.head_len - 1, flags, &exact) != GW_HTTP_NEED_MORE)
                abort();
        return 0;
}
