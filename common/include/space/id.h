/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Random, prefixed object ids: "<prefix>_<20 chars of Crockford-style base32>"
 * (100 bits from getrandom), e.g. "sbx_k3v9w0q8e2m5t7z1c4h6".
 */
#ifndef SPACE_ID_H
#define SPACE_ID_H

#include <stdbool.h>
#include <stddef.h>

#include "space/error.h"

#define SP_ID_RANDOM_CHARS 20
#define SP_ID_PREFIX_MAX 8
#define SP_ID_MAX (SP_ID_PREFIX_MAX + 1 + SP_ID_RANDOM_CHARS + 1)

/* Writes a new id into out (at least SP_ID_MAX bytes). prefix: 1-8 chars [a-z]. */
int sp_id_new(const char *prefix, char out[static SP_ID_MAX], sp_error **err);
/* True if s is a well-formed id with that prefix (NULL prefix: any prefix). */
bool sp_id_valid(const char *s, const char *prefix);
/* Fills p with n cryptographically random bytes. */
int sp_random_bytes(void *p, size_t n, sp_error **err);

#endif
