/* SPDX-License-Identifier: Apache-2.0 */
/* DNS messages for the egress gateway (see dns_msg.h). */
#include "wire/dns_msg.h"

#include <string.h>

#include "wire/wire.h"

#define F_QR 0x8000
#define F_TC 0x0200
#define F_RD 0x0100
#define F_RA 0x0080
#define F_CD 0x0010
#define OPCODE(f) (((f) >> 11) & 0xf)
#define OPT_RR_LEN 11 /* root name, type, class, TTL, RDLENGTH 0 */

/* ---- names ---- */

/* Reads the name at *off of msg[0..len) into canon, in wire form with ASCII
 * letters lowercased, and moves *off past the name as it is written there
 * (up to its first pointer). Pointers only when allow_ptr, each strictly
 * before itself and after the header, at most GW_DNS_MAX_JUMPS. Returns the
 * length of canon (1 for the root) or -1 with *why. */
static int name_read(const uint8_t *msg, size_t len, size_t *off, bool allow_ptr, uint8_t canon[GW_DNS_NAME_WIRE_MAX],
                     const char **why)
{
        size_t pos = *off, out = 0, end = 0;
        bool jumped = false;
        int jumps = 0;
        for (;;) {
                if (pos >= len)
                        return *why = "name runs past the message", -1;
                uint8_t b = msg[pos];
                if ((b & 0xc0) == 0xc0) {
                        if (!allow_ptr)
                                return *why = "compression pointer in a query", -1;
                        if (pos + 1 >= len)
                                return *why = "name runs past the message", -1;
                        size_t target = (size_t)(b & 0x3f) << 8 | msg[pos + 1];
                        if (target >= pos)
                                return *why = "compression pointer not pointing backwards", -1;
                        if (target < GW_DNS_HEADER)
                                return *why = "compression pointer into the header", -1;
                        if (++jumps > GW_DNS_MAX_JUMPS)
                                return *why = "too many compression pointers in a name", -1;
                        if (!jumped)
                                end = pos + 2;
                        jumped = true;
                        pos = target;
                        continue;
                }
                if (b & 0xc0)
                        return *why = "unknown label type", -1;
                if (out + 1 + b > GW_DNS_NAME_WIRE_MAX)
                        return *why = "name longer than 255 bytes", -1;
                canon[out++] = b;
                if (b == 0) {
                        if (!jumped)
                                end = pos + 1;
                        break;
                }
                if (b > len - pos - 1)
                        return *why = "name runs past the message", -1;
                for (size_t i = 0; i < b; i++) {
                        uint8_t c = msg[pos + 1 + i];
                        canon[out++] = c >= 'A' && c <= 'Z' ? (uint8_t)(c + ('a' - 'A')) : c;
                }
                pos += 1 + (size_t)b;
        }
        *off = end;
        return (int)out;
}

/* The text of a lowercased wire name when every label holds only LDH and
 * '_' (so that no byte, '.' included, reads two ways); -1 otherwise. */
static int name_text(const uint8_t *canon, size_t n, char out[GW_NAME_MAX + 1])
{
        size_t o = 0, i = 0;
        while (i < n && canon[i] != 0) {
                uint8_t l = canon[i++];
                if (o > 0)
                        out[o++] = '.';
                for (uint8_t k = 0; k < l; k++, i++) {
                        uint8_t c = canon[i];
                        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
                                return -1;
                        out[o++] = (char)c;
                }
        }
        /* A wire name of at most 255 bytes has at most 253 of text. */
        out[o] = '\0';
        return (int)o;
}

/* The wire form of a name in normal form ("" is the root). */
static size_t name_wire(const char *name, uint8_t wire[GW_DNS_NAME_WIRE_MAX])
{
        size_t o = 0;
        const char *s = name;
        while (*s) {
                const char *dot = strchr(s, '.');
                size_t l = dot ? (size_t)(dot - s) : strlen(s);
                wire[o++] = (uint8_t)l;
                memcpy(wire + o, s, l);
                o += l;
                s += l + (dot ? 1 : 0);
        }
        wire[o++] = 0;
        return o;
}

/* ---- records ---- */

typedef struct rr {
        uint8_t owner[GW_DNS_NAME_WIRE_MAX];
        size_t owner_len;
        uint16_t type, class;
        uint32_t ttl;
        size_t rdata; /* offset of RDATA */
        uint16_t rdlen;
} rr;

static int rr_read(const uint8_t *msg, size_t len, size_t *off, rr *r, const char **why)
{
        int n = name_read(msg, len, off, true, r->owner, why);
        if (n < 0)
                return -1;
        r->owner_len = (size_t)n;
        gw__rd rd = gw__rd_make(msg + *off, len - *off);
        if (!gw__rd_u16(&rd, &r->type) || !gw__rd_u16(&rd, &r->class) || !gw__rd_u32(&rd, &r->ttl) ||
            !gw__rd_u16(&rd, &r->rdlen) || !gw__rd_skip(&rd, r->rdlen))
                return *why = "record runs past the message", -1;
        r->rdata = *off + 10;
        *off = len - rd.n;
        /* RFC 2181 §8: a TTL with the top bit set is read as 0. */
        if (r->ttl > INT32_MAX)
                r->ttl = 0;
        return 0;
}

/* ---- queries from sandboxes ---- */

static int query_fail(gw_dns_query *q, int rcode, const char *why)
{
        q->reason = why;
        return rcode;
}

/* The OPT record, the only additional record a query may carry. */
static int read_opt(const uint8_t *msg, size_t len, size_t *off, gw_dns_query *q)
{
        const char *why;
        rr r;
        if (rr_read(msg, len, off, &r, &why) < 0)
                return query_fail(q, GW_DNS_FORMERR, why);
        if (r.type != GW_DNS_TYPE_OPT || r.owner_len != 1)
                return query_fail(q, GW_DNS_FORMERR, "additional record other than an OPT");
        gw__rd opts = gw__rd_make(msg + r.rdata, r.rdlen);
        while (opts.n) {
                uint16_t code;
                gw__rd data;
                if (!gw__rd_u16(&opts, &code) || !gw__rd_vec16(&opts, &data))
                        return query_fail(q, GW_DNS_FORMERR, "malformed EDNS option");
        }
        q->edns = true;
        q->edns_udp_size = r.class;
        q->edns_version = (uint8_t)(r.ttl >> 16);
        return 0;
}

int gw_dns_query_parse(const uint8_t *msg, size_t len, gw_dns_query *q)
{
        memset(q, 0, sizeof(*q));
        if (len < GW_DNS_HEADER)
                return query_fail(q, -1, "shorter than a DNS header");
        q->id = gw__get16(msg);
        q->flags = gw__get16(msg + 2);
        uint16_t qd = gw__get16(msg + 4), an = gw__get16(msg + 6), ns = gw__get16(msg + 8), ar = gw__get16(msg + 10);
        if (q->flags & F_QR)
                return query_fail(q, -1, "a response, not a query");
        if (OPCODE(q->flags) != 0)
                return query_fail(q, GW_DNS_NOTIMP, "opcode other than QUERY");
        if (qd != 1)
                return query_fail(q, GW_DNS_FORMERR, "not exactly one question");

        size_t off = GW_DNS_HEADER;
        uint8_t canon[GW_DNS_NAME_WIRE_MAX];
        const char *why;
        int n = name_read(msg, len, &off, false, canon, &why);
        if (n < 0)
                return query_fail(q, GW_DNS_FORMERR, why);
        if (len - off < 4)
                return query_fail(q, GW_DNS_FORMERR, "question runs past the message");
        memcpy(q->qname_wire, msg + GW_DNS_HEADER, (size_t)n);
        q->qname_wire_len = (size_t)n;
        q->qtype = gw__get16(msg + off);
        q->qclass = gw__get16(msg + off + 2);
        off += 4;
        q->has_question = true;

        if (q->flags & F_TC)
                return query_fail(q, GW_DNS_FORMERR, "truncated query");
        if (an != 0 || ns != 0)
                return query_fail(q, GW_DNS_FORMERR, "records in the answer or authority section of a query");
        if (ar > 1)
                return query_fail(q, GW_DNS_FORMERR, "more than one additional record");
        if (ar == 1) {
                int r = read_opt(msg, len, &off, q);
                if (r != 0)
                        return r;
        }
        if (off != len)
                return query_fail(q, GW_DNS_FORMERR, "bytes after the last record");

        if (n == 1)
                return query_fail(q, GW_DNS_REFUSED, "query for the root");
        if (name_text(canon, (size_t)n, q->name) < 0)
                return query_fail(q, GW_DNS_REFUSED, "name with characters other than LDH and '_'");
        if (q->qclass != GW_DNS_CLASS_IN)
                return query_fail(q, GW_DNS_REFUSED, "class other than IN");
        return 0;
}

size_t gw_dns_query_udp_limit(const gw_dns_query *q)
{
        if (!q->edns || q->edns_udp_size <= GW_DNS_UDP_PLAIN)
                return GW_DNS_UDP_PLAIN;
        return q->edns_udp_size < GW_DNS_UDP_MAX ? q->edns_udp_size : GW_DNS_UDP_MAX;
}

/* ---- building ---- */

typedef struct wr {
        uint8_t *p;
        size_t cap, n;
        bool full;
} wr;

static void wr_bytes(wr *w, const void *b, size_t n)
{
        if (w->full || w->cap - w->n < n) {
                w->full = true;
                return;
        }
        memcpy(w->p + w->n, b, n);
        w->n += n;
}

static void wr_u16(wr *w, uint16_t v)
{
        uint8_t b[2];
        gw__put16(b, v);
        wr_bytes(w, b, 2);
}

static void wr_u32(wr *w, uint32_t v)
{
        uint8_t b[4];
        gw__put32(b, v);
        wr_bytes(w, b, 4);
}

static void wr_opt(wr *w)
{
        wr_bytes(w, "\0", 1);
        wr_u16(w, GW_DNS_TYPE_OPT);
        wr_u16(w, GW_DNS_UDP_MAX);
        wr_u32(w, 0);
        wr_u16(w, 0);
}

/* Header and question of an answer to q; ANCOUNT 0, patched later. */
static void wr_reply_head(wr *w, const gw_dns_query *q, int rcode)
{
        uint16_t flags = (uint16_t)(F_QR | (q->flags & (F_RD | F_CD)) | F_RA | (rcode & 0xf));
        wr_u16(w, q->id);
        wr_u16(w, flags);
        wr_u16(w, q->has_question ? 1 : 0);
        wr_u16(w, 0);
        wr_u16(w, 0);
        wr_u16(w, q->edns ? 1 : 0);
        if (q->has_question) {
                wr_bytes(w, q->qname_wire, q->qname_wire_len);
                wr_u16(w, q->qtype);
                wr_u16(w, q->qclass);
        }
}

ssize_t gw_dns_build_error(const gw_dns_query *q, int rcode, uint8_t *out, size_t cap)
{
        wr w = {.p = out, .cap = cap};
        wr_reply_head(&w, q, rcode);
        if (q->edns)
                wr_opt(&w);
        return w.full ? -1 : (ssize_t)w.n;
}

static size_t addr_len(uint16_t type)
{
        return type == GW_DNS_TYPE_A ? 4 : type == GW_DNS_TYPE_AAAA ? 16 : 0;
}

ssize_t gw_dns_build_answer(const gw_dns_query *q, const gw_dns_addr *addrs, size_t n, uint8_t *out, size_t cap)
{
        if (!q->has_question)
                return -1;
        for (size_t i = 0; i < n; i++)
                if (addrs[i].type != q->qtype || addr_len(q->qtype) == 0)
                        return -1;
        wr w = {.p = out, .cap = cap};
        wr_reply_head(&w, q, GW_DNS_NOERROR);
        size_t reserve = q->edns ? OPT_RR_LEN : 0;
        if (w.full || w.cap - w.n < reserve)
                return -1;
        w.cap -= reserve;
        uint16_t count = 0;
        size_t rdlen = addr_len(q->qtype);
        for (size_t i = 0; i < n && count < UINT16_MAX; i++) {
                if (w.cap - w.n < 12 + rdlen)
                        break;
                wr_u16(&w, 0xc000 | GW_DNS_HEADER); /* the question's name */
                wr_u16(&w, q->qtype);
                wr_u16(&w, GW_DNS_CLASS_IN);
                wr_u32(&w, addrs[i].ttl > INT32_MAX ? INT32_MAX : addrs[i].ttl);
                wr_u16(&w, (uint16_t)rdlen);
                wr_bytes(&w, addrs[i].addr, rdlen);
                count++;
        }
        w.cap += reserve;
        if (q->edns)
                wr_opt(&w);
        if (w.full)
                return -1;
        gw__put16(out + 6, count);
        return (ssize_t)w.n;
}

ssize_t gw_dns_build_query(uint16_t id, const char *name, uint16_t qtype, uint8_t *out, size_t cap)
{
        char norm[GW_NAME_MAX + 1];
        uint8_t wire[GW_DNS_NAME_WIRE_MAX];
        if (addr_len(qtype) == 0 ||
            gw_name_normalize(name, strlen(name), GW_NAME_UNDERSCORE | GW_NAME_TRAILING_DOT, norm, NULL) < 0)
                return -1;
        size_t wn = name_wire(norm, wire);
        wr w = {.p = out, .cap = cap};
        wr_u16(&w, id);
        wr_u16(&w, F_RD);
        wr_u16(&w, 1);
        wr_u16(&w, 0);
        wr_u16(&w, 0);
        wr_u16(&w, 1);
        wr_bytes(&w, wire, wn);
        wr_u16(&w, qtype);
        wr_u16(&w, GW_DNS_CLASS_IN);
        wr_opt(&w);
        return w.full ? -1 : (ssize_t)w.n;
}

/* ---- answers from upstream ---- */

static int answer_fail(gw_dns_answer *a, const char *why)
{
        a->naddrs = 0;
        a->min_ttl = 0;
        a->reason = why;
        return -1;
}

static void add_addr(gw_dns_answer *a, uint16_t type, const uint8_t *b, uint32_t ttl)
{
        size_t n = addr_len(type);
        for (size_t i = 0; i < a->naddrs; i++)
                if (memcmp(a->addrs[i].addr, b, n) == 0) {
                        if (ttl < a->addrs[i].ttl)
                                a->addrs[i].ttl = ttl;
                        return;
                }
        if (a->naddrs == GW_DNS_MAX_ADDRS)
                return;
        gw_dns_addr *d = &a->addrs[a->naddrs++];
        memset(d, 0, sizeof(*d));
        d->type = type;
        memcpy(d->addr, b, n);
        d->ttl = ttl;
}

int gw_dns_response_parse(const uint8_t *msg, size_t len, uint16_t id, const char *name, uint16_t qtype,
                          gw_dns_answer *a)
{
        memset(a, 0, sizeof(*a));
        char norm[GW_NAME_MAX + 1];
        uint8_t want[GW_DNS_NAME_WIRE_MAX], got[GW_DNS_NAME_WIRE_MAX];
        const char *why;
        if (addr_len(qtype) == 0)
                return answer_fail(a, "query type other than A and AAAA");
        if (gw_name_normalize(name, strlen(name), GW_NAME_UNDERSCORE | GW_NAME_TRAILING_DOT, norm, &why) < 0)
                return answer_fail(a, why);
        size_t want_len = name_wire(norm, want);

        if (len < GW_DNS_HEADER)
                return answer_fail(a, "shorter than a DNS header");
        uint16_t flags = gw__get16(msg + 2), qd = gw__get16(msg + 4), an = gw__get16(msg + 6), ns = gw__get16(msg + 8),
                 ar = gw__get16(msg + 10);
        if (gw__get16(msg) != id)
                return answer_fail(a, "id does not match the query");
        if (!(flags & F_QR) || OPCODE(flags) != 0)
                return answer_fail(a, "not an answer to a QUERY");
        a->rcode = flags & 0xf;
        if (flags & F_TC) {
                a->truncated = true;
                return answer_fail(a, "truncated answer");
        }
        size_t off = GW_DNS_HEADER;
        if (qd == 0 && a->rcode != GW_DNS_NOERROR && an == 0)
                return 0; /* an error answer may leave the question out */
        if (qd != 1)
                return answer_fail(a, "not exactly one question in the answer");
        int n = name_read(msg, len, &off, true, got, &why);
        if (n < 0)
                return answer_fail(a, why);
        if ((size_t)n != want_len || memcmp(got, want, want_len) != 0)
                return answer_fail(a, "question does not match the query");
        if (len - off < 4 || gw__get16(msg + off) != qtype || gw__get16(msg + off + 2) != GW_DNS_CLASS_IN)
                return answer_fail(a, "question does not match the query");
        off += 4;

        /* Every record must be well framed, in every section. */
        size_t answers = off;
        rr r;
        for (uint32_t i = 0; i < (uint32_t)an + ns + ar; i++)
                if (rr_read(msg, len, &off, &r, &why) < 0)
                        return answer_fail(a, why);

        /* Follow the chain from the name asked. */
        uint8_t cur[GW_DNS_NAME_WIRE_MAX];
        size_t cur_len = want_len;
        memcpy(cur, want, want_len);
        uint32_t min_ttl = UINT32_MAX, chain_ttl = UINT32_MAX;
        for (;;) {
                uint8_t next[GW_DNS_NAME_WIRE_MAX];
                size_t next_len = 0;
                uint32_t cname_ttl = 0;
                bool have_addr = false;
                off = answers;
                for (uint16_t i = 0; i < an; i++) {
                        if (rr_read(msg, len, &off, &r, &why) < 0)
                                return answer_fail(a, why);
                        if (r.class != GW_DNS_CLASS_IN || r.owner_len != cur_len || memcmp(r.owner, cur, cur_len) != 0)
                                continue;
                        if (r.type == qtype) {
                                if (r.rdlen != addr_len(qtype))
                                        return answer_fail(a, "address record of a bad length");
                                add_addr(a, qtype, msg + r.rdata, r.ttl);
                                if (r.ttl < min_ttl)
                                        min_ttl = r.ttl;
                                have_addr = true;
                        } else if (r.type == GW_DNS_TYPE_CNAME) {
                                if (next_len)
                                        return answer_fail(a, "two CNAME records for one name");
                                size_t t = r.rdata;
                                int tn = name_read(msg, len, &t, true, next, &why);
                                if (tn < 0)
                                        return answer_fail(a, why);
                                if (t != r.rdata + r.rdlen)
                                        return answer_fail(a, "CNAME target does not fill its record");
                                next_len = (size_t)tn;
                                cname_ttl = r.ttl;
                        }
                }
                if (next_len && have_addr)
                        return answer_fail(a, "a CNAME and addresses for one name");
                if (!next_len)
                        break;
                if (++a->cname_links > GW_DNS_MAX_CNAME)
                        return answer_fail(a, "CNAME chain too long or looping");
                if (cname_ttl < chain_ttl)
                        chain_ttl = cname_ttl;
                memcpy(cur, next, next_len);
                cur_len = next_len;
        }
        /* An address is known for the name asked only while the chain holds. */
        for (size_t i = 0; i < a->naddrs; i++)
                if (a->addrs[i].ttl > chain_ttl)
                        a->addrs[i].ttl = chain_ttl;
        if (chain_ttl < min_ttl)
                min_ttl = chain_ttl;
        a->min_ttl = a->naddrs ? min_ttl : 0;
        return 0;
}
