/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Direct mode: a whole single-node cluster on this host (`spacectl up`).
 *
 * Everything lives in one state directory (default /var/lib/space/direct):
 *
 *   direct.json        the settings of the first `up` (ports, database, backend), reused by later runs
 *   run/<c>.pid        the pid of each running component
 *   logs/<c>.log       each component's log
 *   pg/                the private PostgreSQL (data/, socket in run/), unless --database-url names one
 *   controlplane/      admin.key, ca.pem, token-keys.pem
 *   worker/            state/, storage/ (a btrfs loop mount of storage.img)
 *   dataplane/         state/ (its client certificate)
 *   e2b/               secret.key (seals the E2B envd access tokens)
 *
 * Components: postgres, controlplane, worker, dataplane, e2b (space-e2b on
 * 127.0.0.1:3000, or the third port of a block chosen with --api-port). `up` starts what is not running, in dependency order, and waits
 * for each to be ready; `status` reports each; `down` stops them (reverse
 * order); `down --purge` also removes every trace: sandboxes' processes and
 * cgroups, mounts, loop devices and the state directory, and gives back the
 * cluster's range of host uids, which `up` reserves for its sandboxes in the
 * host's registry (uidrange.h) so that two clusters never share one.
 */
#ifndef SPACECTL_DIRECT_H
#define SPACECTL_DIRECT_H

#include <stdbool.h>
#include <stdio.h>

#include "space/error.h"

typedef struct ctl_direct_opts {
        const char *state_dir; /* NULL: /var/lib/space/direct */
        const char *bin_dir; /* where the space-* binaries are; NULL: next to spacectl */
        const char *database_url; /* an existing PostgreSQL (first up only); NULL: a private one */
        const char *backend; /* NULL or "auto": firecracker with /dev/kvm and a firecracker binary, else jail */
        int api_port; /* 0: defaults (7070 API, 7071 data plane, 7073 RPC, 7074/7075 worker) */
        bool json; /* machine-readable output on stdout */
        bool quiet; /* no progress on stderr */
} ctl_direct_opts;

/* What `up` produced, for the caller to print and to write the CLI profile. */
typedef struct ctl_direct_info {
        char api_url[128];
        char dataplane_url[128];
        char e2b_url[128]; /* space-e2b: E2B_API_URL and E2B_SANDBOX_URL */
        char admin_key[256];
        char ca_file[512];
} ctl_direct_info;

/* Starts whatever is not running and waits until all of it is ready. */
int ctl_direct_up(const ctl_direct_opts *o, ctl_direct_info *info, sp_error **err);
/* The URL of the cluster's space-e2b (E2B_API_URL and E2B_SANDBOX_URL) into
 * out. Errors: SP_E_NOT_FOUND when there is no cluster in the state directory. */
int ctl_direct_e2b_url(const ctl_direct_opts *o, char *out, size_t n, sp_error **err);
/* Prints each component's state (running/stopped, pid, address, health) to
 * out; returns the number of components that are not healthy. */
int ctl_direct_status(const ctl_direct_opts *o, FILE *out, sp_error **err);
/* Stops every component (reverse order, SIGTERM then SIGKILL after a grace
 * period). With purge, also removes sandboxes, cgroups, mounts, loop devices
 * and the state directory. */
int ctl_direct_down(const ctl_direct_opts *o, bool purge, sp_error **err);

#endif
