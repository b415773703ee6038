/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The host's registry of the uid ranges direct-mode clusters give their
 * sandboxes (docs/operations.md, "Several clusters on one host").
 *
 * A worker maps each sandbox's ids onto 65536 host uids of its own, from
 * --uid-base up (65536 per slot). Two clusters on one host with the same
 * base would give their sandboxes the same host uids: root in a sandbox of
 * one would own the files and processes of a sandbox of the other. So each
 * direct-mode cluster reserves a range of its own in one file per host,
 * keyed by its state directory (its canonical path), kept for as long as
 * the cluster exists (its sandboxes' files are owned by those uids across
 * restarts and reboots, hence /var/lib and not /run) and given back by
 * `spacectl down --purge`. A range whose state directory no longer holds a
 * cluster (its direct.json is gone) is reclaimed by the next reservation.
 *
 * The file is JSON, {"ranges":[{"state_dir":…,"base":…,"count":…}]},
 * changed under an exclusive lock on "<file>.lock" and replaced atomically.
 * A file that cannot be read as one is an error naming it, never
 * overwritten: a range handed out twice is what this exists to prevent.
 *
 * Not thread-safe (one caller per process); processes are serialized by
 * the lock.
 */
#ifndef SPACECTL_UIDRANGE_H
#define SPACECTL_UIDRANGE_H

#include <stdint.h>

#include "space/error.h"

#define CTL_UIDRANGE_REGISTRY "/var/lib/space/uid-ranges.json"
/* Ranges lie in [CTL_UIDRANGE_FIRST, CTL_UIDRANGE_END): from the worker's
 * default --uid-base to below the ids Linux reserves (65535 per 64 Ki, and
 * (uid_t)-1), and start at most at CTL_UIDRANGE_BASE_MAX. */
#define CTL_UIDRANGE_FIRST UINT32_C(0x10000000)
#define CTL_UIDRANGE_END UINT32_C(0xFFFF0000)
#define CTL_UIDRANGE_ALIGN UINT32_C(65536)
/* The highest base the worker takes (its --uid-base bound). */
#define CTL_UIDRANGE_BASE_MAX UINT32_C(0xF0000000)

/* The registry in use: $SPACE_DIRECT_UID_REGISTRY when set and not empty,
 * else CTL_UIDRANGE_REGISTRY. Borrowed. */
const char *ctl_uidrange_registry(void);

/* Reserves count host uids (a multiple of CTL_UIDRANGE_ALIGN) for the
 * cluster in state_dir (an existing directory) in registry, and writes its
 * first uid to *ret_base. The cluster's own range when it has one (its
 * count must be at least count: SP_E_CONFLICT otherwise); else preferred
 * when it is free (0: no preference), else the lowest free range. SP_E_LIMIT
 * when no range is free; SP_E_INVALID for a registry that is not one;
 * SP_E_IO for file trouble. *ret_base untouched on failure. */
int ctl_uidrange_reserve(const char *registry, const char *state_dir, uint32_t count, uint32_t preferred,
                         uint32_t *ret_base, sp_error **err);

/* Gives back the range of the cluster in state_dir (none: nothing to do).
 * state_dir need not exist any more. */
int ctl_uidrange_release(const char *registry, const char *state_dir, sp_error **err);

#endif
