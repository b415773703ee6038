/* SPDX-License-Identifier: Apache-2.0 */
/* The server name of a TLS ClientHello (see sni.h). */
#include "wire/sni.h"

#include <string.h>

#include "wire/wire.h"

#define TLS_CT_HANDSHAKE 22
#define TLS_HS_CLIENT_HELLO 1
#define TLS_RECORD_HEADER 5
#define TLS_RECORD_MAX 16384 /* 2^14, RFC 8446 §5.1 */
#define TLS_EXT_SERVER_NAME 0x0000
#define TLS_EXT_ECH 0xfe0d
#define TLS_EXT_ESNI 0xffce
#define SNI_HOST_NAME 0

static gw_sni_result stop(gw_sni_info *ret, gw_sni_result r, const char *reason)
{
        ret->name[0] = '\0';
        ret->reason = reason;
        return r;
}

int gw_sni_is_tls(const uint8_t *data, size_t len)
{
        if (len == 0)
                return -1;
        return data[0] == TLS_CT_HANDSHAKE;
}

/* The server_name extension's body: exactly one host_name. */
static gw_sni_result read_server_name(gw__rd ext, gw_sni_info *ret)
{
        gw__rd list, name;
        uint8_t type;
        if (!gw__rd_vec16(&ext, &list) || ext.n != 0 || list.n == 0)
                return stop(ret, GW_SNI_MALFORMED, "malformed server_name extension");
        if (!gw__rd_u8(&list, &type) || !gw__rd_vec16(&list, &name) || name.n == 0)
                return stop(ret, GW_SNI_MALFORMED, "malformed server_name entry");
        if (list.n != 0)
                return stop(ret, GW_SNI_REFUSED, "more than one name in server_name");
        if (type != SNI_HOST_NAME)
                return stop(ret, GW_SNI_REFUSED, "server_name entry is not a host_name");
        const char *s = (const char *)name.p;
        if (memchr(s, '\0', name.n))
                return stop(ret, GW_SNI_REFUSED, "NUL in server name");
        if (gw_name_is_ip_literal(s, name.n))
                return stop(ret, GW_SNI_REFUSED, "server name is an IP literal");
        const char *why;
        if (gw_name_normalize(s, name.n, 0, ret->name, &why) < 0)
                return stop(ret, GW_SNI_REFUSED, why);
        return GW_SNI_OK;
}

/* The ClientHello's body (after the 4-byte handshake header). */
static gw_sni_result read_client_hello(gw__rd r, gw_sni_info *ret)
{
        uint16_t version;
        gw__rd sid, suites, comp, exts;
        if (!gw__rd_u16(&r, &version) || !gw__rd_skip(&r, 32))
                return stop(ret, GW_SNI_MALFORMED, "ClientHello too short");
        ret->hello_version = version;
        if (version >> 8 != 3)
                return stop(ret, GW_SNI_MALFORMED, "ClientHello version is not 3.x");
        if (!gw__rd_vec8(&r, &sid) || sid.n > 32)
                return stop(ret, GW_SNI_MALFORMED, "malformed legacy_session_id");
        if (!gw__rd_vec16(&r, &suites) || suites.n < 2 || suites.n % 2)
                return stop(ret, GW_SNI_MALFORMED, "malformed cipher_suites");
        if (!gw__rd_vec8(&r, &comp) || comp.n < 1)
                return stop(ret, GW_SNI_MALFORMED, "malformed legacy_compression_methods");
        if (r.n == 0)
                return stop(ret, GW_SNI_NO_SNI, NULL); /* TLS 1.2 without extensions */
        if (!gw__rd_vec16(&r, &exts) || r.n != 0)
                return stop(ret, GW_SNI_MALFORMED, "extensions do not end the ClientHello");
        bool have_name = false;
        while (exts.n) {
                uint16_t type;
                gw__rd body;
                if (!gw__rd_u16(&exts, &type) || !gw__rd_vec16(&exts, &body))
                        return stop(ret, GW_SNI_MALFORMED, "malformed extension");
                if (type == TLS_EXT_ECH)
                        return stop(ret, GW_SNI_REFUSED, "Encrypted Client Hello");
                if (type == TLS_EXT_ESNI)
                        return stop(ret, GW_SNI_REFUSED, "encrypted server name (ESNI)");
                if (type != TLS_EXT_SERVER_NAME)
                        continue;
                if (have_name)
                        return stop(ret, GW_SNI_REFUSED, "more than one server_name extension");
                gw_sni_result s = read_server_name(body, ret);
                if (s != GW_SNI_OK)
                        return s;
                have_name = true;
        }
        /* Later extensions may still refuse; only now is the name final. */
        return have_name ? GW_SNI_OK : stop(ret, GW_SNI_NO_SNI, NULL);
}

gw_sni_result gw_sni_parse(const uint8_t *data, size_t len, gw_sni_info *ret)
{
        memset(ret, 0, sizeof(*ret));
        if (len == 0)
                return GW_SNI_NEED_MORE;
        if (data[0] != TLS_CT_HANDSHAKE)
                return stop(ret, GW_SNI_NOT_TLS, "not a TLS handshake record");
        if (len >= 3)
                ret->record_version = gw__get16(data + 1);

        /* Reassemble the handshake message from whole records. */
        uint8_t msg[GW_SNI_MAX];
        size_t have = 0, need = 0, off = 0;
        for (;;) {
                if (off < len && data[off] != TLS_CT_HANDSHAKE)
                        return stop(ret, GW_SNI_REFUSED, "a record other than handshake before the ClientHello");
                if (off + 1 < len && data[off + 1] != 3)
                        return stop(ret, GW_SNI_MALFORMED, "record version is not 3.x");
                if (off + TLS_RECORD_HEADER > GW_SNI_MAX)
                        return stop(ret, GW_SNI_REFUSED, "ClientHello larger than 16384 bytes");
                if (off + TLS_RECORD_HEADER > len)
                        return GW_SNI_NEED_MORE;
                size_t rlen = gw__get16(data + off + 3);
                if (rlen == 0 || rlen > TLS_RECORD_MAX)
                        return stop(ret, GW_SNI_MALFORMED, "handshake record of a bad length");
                size_t end = off + TLS_RECORD_HEADER + rlen;
                if (end > GW_SNI_MAX)
                        return stop(ret, GW_SNI_REFUSED, "ClientHello larger than 16384 bytes");
                if (end > len)
                        return GW_SNI_NEED_MORE;
                /* have + rlen <= end - TLS_RECORD_HEADER < GW_SNI_MAX */
                memcpy(msg + have, data + off + TLS_RECORD_HEADER, rlen);
                have += rlen;
                off = end;
                if (need == 0 && have >= 4) {
                        if (msg[0] != TLS_HS_CLIENT_HELLO)
                                return stop(ret, GW_SNI_MALFORMED, "first handshake message is not a ClientHello");
                        need = 4 + ((size_t)msg[1] << 16 | (size_t)msg[2] << 8 | msg[3]);
                        if (need + TLS_RECORD_HEADER > GW_SNI_MAX)
                                return stop(ret, GW_SNI_REFUSED, "ClientHello larger than 16384 bytes");
                }
                if (need != 0 && have >= need)
                        break;
        }
        if (have != need)
                return stop(ret, GW_SNI_MALFORMED, "more handshake data in the ClientHello's last record");
        ret->hello_end = off;
        return read_client_hello(gw__rd_make(msg + 4, need - 4), ret);
}

const char *gw_sni_result_name(gw_sni_result r)
{
        switch (r) {
        case GW_SNI_NEED_MORE:
                return "need_more";
        case GW_SNI_OK:
                return "ok";
        case GW_SNI_NO_SNI:
                return "no_sni";
        case GW_SNI_NOT_TLS:
                return "not_tls";
        case GW_SNI_MALFORMED:
                return "malformed";
        case GW_SNI_REFUSED:
                return "refused";
        }
        return "unknown";
}
