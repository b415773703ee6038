/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: the egress gateway's DNS messages (gateway/wire/
 * dns_msg.h). Input: a mode byte (bit 0: the upstream answer is to an AAAA
 * query), a name up to a NUL, then a message. The message is read as a
 * query from a sandbox and as an upstream answer to (its own id, the name);
 * the name is built into an upstream query. Beyond not crashing or reading
 * past the input: an accepted query's name is in normal form; the answers
 * built to it read back (through the upstream parser) with its id, its
 * question and the addresses given; an upstream answer keeps its bounds;
 * an upstream query built for a name reads back as a query for it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/dns_msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t *exact_copy(const uint8_t *data, size_t size)
{
        uint8_t *copy = malloc(size ? size : 1);
        if (!copy)
                abort();
        memcpy(copy, data, size);
        return copy;
}

static void check_answers(const gw_dns_query *q)
{
        uint8_t out[GW_DNS_UDP_MAX];
        gw_dns_answer a;
        ssize_t n = gw_dns_build_error(q, GW_DNS_REFUSED, out, sizeof(out));
        if (n < 12)
                abort();
        if (q->qtype != GW_DNS_TYPE_A && q->qtype != GW_DNS_TYPE_AAAA)
                return;
        if (gw_dns_response_parse(out, (size_t)n, q->id, q->name, q->qtype, &a) != 0 || a.rcode != GW_DNS_REFUSED ||
            a.naddrs != 0)
                abort();
        gw_dns_addr addrs[3];
        for (int i = 0; i < 3; i++) {
                memset(&addrs[i], 0, sizeof(addrs[i]));
                addrs[i].type = q->qtype;
                addrs[i].addr[0] = (uint8_t)(10 + i);
                addrs[i].ttl = (uint32_t)(60 * (3 - i));
        }
        size_t limit = gw_dns_query_udp_limit(q);
        n = gw_dns_build_answer(q, addrs, 3, out, limit);
        if (n < 12 || (size_t)n > limit)
                abort();
        uint8_t *copy = exact_copy(out, (size_t)n);
        int r = gw_dns_response_parse(copy, (size_t)n, q->id, q->name, q->qtype, &a);
        free(copy);
        /* As many as fit, in order. */
        if (r != 0 || a.rcode != GW_DNS_NOERROR || a.naddrs != (size_t)(out[6] << 8 | out[7]) || a.naddrs > 3)
                abort();
        for (size_t i = 0; i < a.naddrs; i++)
                if (a.addrs[i].addr[0] != addrs[i].addr[0] || a.addrs[i].ttl != addrs[i].ttl)
                        abort();
}

static void check_query(const uint8_t *msg, size_t len)
{
        gw_dns_query q;
        int r = gw_dns_query_parse(msg, len, &q);
        if (r == -1)
                return;
        if (r != 0) {
                if (!q.reason || (r != GW_DNS_FORMERR && r != GW_DNS_NOTIMP && r != GW_DNS_REFUSED))
                        abort();
                uint8_t out[GW_DNS_UDP_MAX];
                if (gw_dns_build_error(&q, r, out, sizeof(out)) < 12)
                        abort();
                return;
        }
        size_t n = strlen(q.name);
        char again[GW_NAME_MAX + 1];
        if (q.reason || !q.has_question || n == 0 || q.qname_wire_len != n + 2 ||
            gw_name_normalize(q.name, n, GW_NAME_UNDERSCORE, again, NULL) != (int)n || strcmp(again, q.name) != 0)
                abort();
        check_answers(&q);
}

static void check_response(const uint8_t *msg, size_t len, const char *name, uint16_t qtype)
{
        if (len < 2)
                return;
        gw_dns_answer a;
        uint16_t id = (uint16_t)(msg[0] << 8 | msg[1]);
        if (gw_dns_response_parse(msg, len, id, name, qtype, &a) != 0) {
                if (!a.reason || a.naddrs)
                        abort();
                return;
        }
        if (a.naddrs > GW_DNS_MAX_ADDRS || a.cname_links > GW_DNS_MAX_CNAME || (a.naddrs == 0 && a.min_ttl != 0))
                abort();
        for (size_t i = 0; i < a.naddrs; i++)
                if (a.addrs[i].type != qtype || a.addrs[i].ttl > INT32_MAX || a.addrs[i].ttl < a.min_ttl)
                        abort();
}

static void check_upstream_query(const char *name, uint16_t qtype)
{
        uint8_t out[GW_DNS_UDP_MAX];
        ssize_t n = gw_dns_build_query(0x1234, name, qtype, out, sizeof(out));
        if (n < 0)
                return;
        char norm[GW_NAME_MAX + 1];
        gw_dns_query q;
        if (gw_name_normalize(name, strlen(name), GW_NAME_UNDERSCORE | GW_NAME_TRAILING_DOT, norm, NULL) < 0 ||
            gw_dns_query_parse(out, (size_t)n, &q) != 0 || strcmp(q.name, norm) != 0 || q.qtype != qtype ||
            q.id != 0x1234)
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        uint16_t qtype = data[0] & 1 ? GW_DNS_TYPE_AAAA : GW_DNS_TYPE_A;
        data++;
        size--;
        const uint8_t *nul = memchr(data, '\0', size < 300 ? size : 300);
        if (!nul)
                return 0;
        char name[300];
        size_t nlen = (size_t)(nul - data);
        memcpy(name, data, nlen);
        name[nlen] = '\0';
        data += nlen + 1;
        size -= nlen + 1;

        uint8_t *msg = exact_copy(data, size);
        check_query(msg, size);
        check_response(msg, size, name, qtype);
        free(msg);
        check_upstream_query(name, qtype);
        return 0;
}
