/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A worker's sandbox network (docs/networking.md): the pool its sandboxes'
 * links take their addresses from, the worker's nftables table (nft.h) that
 * lets a sandbox reach nothing but the node's egress gateway, the gateway
 * itself (gateway.h: started, supervised, told each sandbox's profile), and
 * the audit trail of both (the gateway's decisions and the table's drops,
 * read over NFLOG).
 *
 * The backends call the plumbing: the jail when its init exists and before
 * it runs anything (wk_net_sandbox_up with the init's pid), after a restart
 * for the sandboxes it adopts, and when a sandbox stops. The node calls the
 * policy: which sandbox (ids, tenant) has which egress profile.
 *
 * A sandbox's slot (its wk_box_spec.id_slot) picks its link: host end
 * <ifprefix><slot>, addresses from --sandbox-cidr (link.h). Not thread-safe:
 * the worker's event loop calls it.
 */
#ifndef SPACE_WORKER_NET_NET_H
#define SPACE_WORKER_NET_NET_H

#include <json-c/json.h>
#include <stdint.h>
#include <sys/types.h>

#include "net/gateway.h"
#include "net/link.h"
#include "space/buf.h"
#include "space/error.h"

struct event_base;
typedef struct wk_net wk_net;

typedef struct wk_net_config {
        const char *cidr; /* the sandboxes' network; NULL: WK_NET_DEFAULT_CIDR */
        const char *ifprefix; /* host ends' prefix; NULL: WK_NET_HOST_PREFIX */
        /* The firewall and the gateway; with base NULL, links only. */
        struct event_base *base;
        uint16_t gateway_tcp_port, gateway_dns_port, log_group;
        const char *gateway_program; /* NULL: someone else runs the gateway */
        const char *gateway_socket, *gateway_pid_path;
        const char *const *gateway_args; /* more arguments for it */
        /* Each audit record: the gateway's decisions and the firewall's drops
         * ({"op":"audit","kind":"packet","rule":"space:input",...}). Borrowed. */
        void (*on_audit)(json_object *rec, void *ud);
        void *ud;
} wk_net_config;

/* Checks the configuration; with base, installs the table (replacing one
 * left by an earlier run: re-adopted sandboxes are added again), opens the
 * NFLOG reader and starts (or finds) the gateway. */
int wk_net_new(const wk_net_config *cfg, wk_net **ret, sp_error **err);
/* Frees; the table and the gateway stay (a restarted worker takes them over). */
void wk_net_free(wk_net *n);
static inline void wk_net_freep(wk_net **n)
{
        wk_net_free(*n);
}

/* The pool (for the worker's report and its checks of slots). */
const wk_net_pool *wk_net_pool_of(const wk_net *n);
/* The sandbox address of slot, dotted ("" past the pool). */
void wk_net_address(const wk_net *n, uint32_t slot, char out[16]);
/* Its host end's address: the sandbox's gateway and resolver. */
void wk_net_host_address(const wk_net *n, uint32_t slot, char out[16]);
/* Its host end's name ("" past the pool). */
void wk_net_host_if(const wk_net *n, uint32_t slot, char out[IF_NAMESIZE]);

/* What a sandbox's record keeps of its link ({"host_if", "address"}), or
 * NULL past the pool. */
json_object *wk_net_link_record(const wk_net *n, uint32_t slot);

/* Gives the sandbox whose init is pid (in its own network namespace) its
 * link and registers it with the firewall. On failure nothing is left. */
int wk_net_sandbox_up(wk_net *n, uint32_t slot, pid_t pid, sp_error **err);
/* The same into the network namespace netns_fd (a jail's restore makes it before its tree). */
int wk_net_sandbox_up_netns(wk_net *n, uint32_t slot, int netns_fd, sp_error **err);
/* After a worker restart: the sandbox keeps its link, which is made again if
 * it went missing; saved_if, when it names another host end (the worker's
 * network changed), is removed; it is registered with the firewall again. */
int wk_net_sandbox_adopt(wk_net *n, uint32_t slot, pid_t pid, const char *saved_if, sp_error **err);
/* The same for a VM (link.h, "A VM's network"): netns_fd is the namespace
 * wk_net_vm_netns made, which gets the link and the routing between it and
 * the VM's tap. wk_net_sandbox_down undoes it (the namespace itself ends
 * with the VM's tap). */
int wk_net_vm_up(wk_net *n, uint32_t slot, int netns_fd, sp_error **err);
int wk_net_vm_adopt(wk_net *n, uint32_t slot, int netns_fd, const char *saved_if, sp_error **err);
/* The sandbox has stopped: takes its link and registration away (missing ones are no error). */
void wk_net_sandbox_down(wk_net *n, uint32_t slot);

/* Tells the gateway the sandbox's ids, egress profile and secrets (see
 * gateway.h's wk_gw_set; done may be NULL). Without a gateway, done gets
 * NULL at once. */
void wk_net_sandbox_policy(wk_net *n, uint32_t slot, const char *sandbox_id, const char *tenant_id,
                           json_object *profile, json_object *secrets, wk_gw_done done, void *ud);
/* wk_gw_secrets_missing of the sandbox (-1: not known, or no gateway). */
int wk_net_secrets_missing(wk_net *n, uint32_t slot);
/* The sandbox is gone: the gateway forgets it. */
void wk_net_sandbox_forget(wk_net *n, uint32_t slot);

/* For space-worker --purge: stops the gateway named by gw_pid_path (may be
 * NULL), deletes the firewall's table of ifprefix and every host end named
 * <ifprefix><digits>. Counts the links removed. Goes on past a failed step;
 * returns the first failure. */
int wk_net_purge(const char *ifprefix, const char *gw_pid_path, unsigned *ret_links, sp_error **err);

/* Prometheus lines: the firewall's drops by rule, the gateway's state. */
void wk_net_metrics(wk_net *n, sp_buf *out);

#endif
