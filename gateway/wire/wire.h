/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A bounds-checked cursor over a byte buffer, for the gateway's parsers of
 * binary wire formats (sni.c, dns_msg.c). A read past the end fails and
 * leaves the cursor where it was. Internal to the gateway library.
 */
#ifndef SPACE_GATEWAY_WIRE_WIRE_H
#define SPACE_GATEWAY_WIRE_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gw__rd {
        const uint8_t *p;
        size_t n; /* bytes left */
} gw__rd;

static inline gw__rd gw__rd_make(const uint8_t *p, size_t n)
{
        return (gw__rd){.p = p, .n = n};
}

static inline bool gw__rd_u8(gw__rd *r, uint8_t *v)
{
        if (r->n < 1)
                return false;
        *v = r->p[0];
        r->p++;
        r->n--;
        return true;
}

static inline bool gw__rd_u16(gw__rd *r, uint16_t *v)
{
        if (r->n < 2)
                return false;
        *v = (uint16_t)(r->p[0] << 8 | r->p[1]);
        r->p += 2;
        r->n -= 2;
        return true;
}

static inline bool gw__rd_u24(gw__rd *r, uint32_t *v)
{
        if (r->n < 3)
                return false;
        *v = (uint32_t)r->p[0] << 16 | (uint32_t)r->p[1] << 8 | r->p[2];
        r->p += 3;
        r->n -= 3;
        return true;
}

static inline bool gw__rd_u32(gw__rd *r, uint32_t *v)
{
        if (r->n < 4)
                return false;
        *v = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 | r->p[3];
        r->p += 4;
        r->n -= 4;
        return true;
}

static inline bool gw__rd_skip(gw__rd *r, size_t n)
{
        if (r->n < n)
                return false;
        r->p += n;
        r->n -= n;
        return true;
}

/* Splits the next n bytes off as *sub. */
static inline bool gw__rd_sub(gw__rd *r, size_t n, gw__rd *sub)
{
        if (r->n < n)
                return false;
        *sub = gw__rd_make(r->p, n);
        r->p += n;
        r->n -= n;
        return true;
}

/* Splits off a vector with a 1- or 2-byte length prefix. */
static inline bool gw__rd_vec8(gw__rd *r, gw__rd *sub)
{
        uint8_t n;
        gw__rd save = *r;
        if (gw__rd_u8(r, &n) && gw__rd_sub(r, n, sub))
                return true;
        *r = save;
        return false;
}

static inline bool gw__rd_vec16(gw__rd *r, gw__rd *sub)
{
        uint16_t n;
        gw__rd save = *r;
        if (gw__rd_u16(r, &n) && gw__rd_sub(r, n, sub))
                return true;
        *r = save;
        return false;
}

static inline uint16_t gw__get16(const uint8_t *p)
{
        return (uint16_t)(p[0] << 8 | p[1]);
}

static inline void gw__put16(uint8_t *p, uint16_t v)
{
        p[0] = (uint8_t)(v >> 8);
        p[1] = (uint8_t)v;
}

static inline void gw__put32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

#endif
