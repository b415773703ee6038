/* SPDX-License-Identifier: Apache-2.0 */
/* A worker's sandbox network (see net.h). */
#include "net/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/netfilter.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/nflog.h"
#include "net/nft.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

/* Firewall-log records per sandbox link and second; beyond, they are
 * counted, and the next record says how many were left out. */
#define PACKET_RECORDS_PER_S 20
#define RATE_SLOTS 1024 /* links tracked at once (by hash of the name) */
/* Deleted sandboxes' firewall elements go in one commit at most this long
 * after the first of them (a commit takes milliseconds, on the worker's loop;
 * the timer runs all the time, as job threads add to the list). */
#define ELEMENT_GC_US (500 * 1000)

typedef struct rate {
        char ifname[IF_NAMESIZE];
        int64_t window; /* its second (monotonic) */
        uint32_t n; /* records in it */
        uint32_t suppressed; /* left out since the last record written */
} rate;

struct wk_net {
        /* Held over the firewall's elements and the slots' state: sandboxes
         * are made and removed on the worker's job threads (node/jobs.c). */
        pthread_mutex_t mu;
        wk_net_pool pool;
        char table[WK_NFT_TABLE_MAX + 1];
        wk_nft_config nft;
        bool firewall; /* the table is ours to program */
        wk_nflog *nflog;
        struct event *nflog_ev;
        wk_gw *gw;
        void (*on_audit)(json_object *rec, void *ud);
        void *ud;
        rate *rates; /* RATE_SLOTS */
        uint64_t suppressed_total;
        /* Slots whose link is up (a bit each), and slots whose firewall
         * element waits for the next batched delete. */
        uint8_t *up;
        uint32_t nslots;
        uint32_t *gc;
        size_t ngc, gc_cap;
        struct event *gc_ev;
        uint64_t element_batches;
};

static bool slot_up(const wk_net *n, uint32_t slot)
{
        return slot < n->nslots && (n->up[slot / 8] & (1u << (slot % 8)));
}

static void slot_set_up(wk_net *n, uint32_t slot, bool up)
{
        if (slot >= n->nslots)
                return;
        if (up)
                n->up[slot / 8] |= (uint8_t)(1u << (slot % 8));
        else
                n->up[slot / 8] &= (uint8_t) ~(1u << (slot % 8));
}

/* Whether a record of ifname goes in now (and, through *suppressed, how
 * many before it were left out). */
static bool record_allowed(wk_net *n, const char *ifname, uint32_t *suppressed)
{
        *suppressed = 0;
        if (!n->rates)
                return true;
        uint32_t h = 2166136261u;
        for (const char *p = ifname; *p; p++)
                h = (h ^ (uint8_t)*p) * 16777619u;
        rate *r = &n->rates[h % RATE_SLOTS];
        int64_t now = sp_now_mono_us() / 1000000;
        if (strcmp(r->ifname, ifname) != 0) {
                snprintf(r->ifname, sizeof(r->ifname), "%s", ifname);
                r->window = now;
                r->n = 0;
                r->suppressed = 0;
        } else if (r->window != now) {
                r->window = now;
                r->n = 0;
        }
        if (r->n >= PACKET_RECORDS_PER_S) {
                r->suppressed++;
                n->suppressed_total++;
                return false;
        }
        r->n++;
        *suppressed = r->suppressed;
        r->suppressed = 0;
        return true;
}

static int on_drop(const wk_nflog_record *r, void *ud)
{
        wk_net *n = ud;
        uint32_t suppressed = 0;
        if (!n->on_audit || !record_allowed(n, r->indev_name, &suppressed))
                return 0;
        char src[INET6_ADDRSTRLEN] = "", dst[INET6_ADDRSTRLEN] = "";
        if (r->family)
                inet_ntop(r->family, &r->saddr, src, sizeof(src));
        if (r->family)
                inet_ntop(r->family, &r->daddr, dst, sizeof(dst));
        const char *proto = r->protocol == IPPROTO_TCP      ? "tcp"
                            : r->protocol == IPPROTO_UDP    ? "udp"
                            : r->protocol == IPPROTO_ICMP   ? "icmp"
                            : r->protocol == IPPROTO_ICMPV6 ? "icmpv6"
                                                            : "ip";
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "op", json_object_new_string("audit"));
        json_object_object_add(o, "time_us", json_object_new_int64(sp_now_real_us()));
        json_object_object_add(o, "kind", json_object_new_string("packet"));
        json_object_object_add(o, "source", json_object_new_string(src));
        json_object_object_add(o, "interface", json_object_new_string(r->indev_name));
        json_object_object_add(o, "destination", json_object_new_string(dst));
        json_object_object_add(o, "proto", json_object_new_string(proto));
        if (r->dport)
                json_object_object_add(o, "port", json_object_new_int(r->dport));
        json_object_object_add(o, "decision", json_object_new_string("refused"));
        json_object_object_add(o, "rule", json_object_new_string(r->prefix));
        if (suppressed)
                json_object_object_add(o, "suppressed_before", json_object_new_int64(suppressed));
        n->on_audit(o, n->ud);
        return 0;
}

/* The batched delete of the firewall elements of slots still down. */
static void gc_run(wk_net *n)
{
        if (!n->ngc)
                return;
        size_t k = 0;
        _cleanup_free_ const char **names = calloc(n->ngc, sizeof(*names));
        _cleanup_free_ struct in_addr *addrs = calloc(n->ngc, sizeof(*addrs));
        _cleanup_free_ wk_net_link *links = calloc(n->ngc, sizeof(*links));
        if (!names || !addrs || !links)
                return; /* tried again with the next one */
        for (size_t i = 0; i < n->ngc; i++) {
                if (slot_up(n, n->gc[i]) || wk_net_link_of(&n->pool, n->gc[i], &links[k], NULL) < 0)
                        continue; /* up again: its element is its own once more */
                names[k] = links[k].host_if;
                addrs[k] = links[k].sandbox_addr;
                k++;
        }
        n->ngc = 0;
        _cleanup_error_ sp_error *e = NULL;
        if (wk_nft_sandbox_del_many(&n->nft, names, addrs, k, &e) < 0)
                sp_log_warn("sandbox firewall: removing %zu elements: %s", k, e->message);
        n->element_batches++;
}

static void on_gc(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_net *n = ud;
        pthread_mutex_lock(&n->mu);
        gc_run(n);
        pthread_mutex_unlock(&n->mu);
}

static void on_nflog(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        wk_net *n = ud;
        _cleanup_error_ sp_error *e = NULL;
        for (int i = 0; i < 16; i++) {
                int r = wk_nflog_read(n->nflog, on_drop, n, &e);
                if (r <= 0)
                        break;
        }
        if (e)
                sp_log_warn("firewall log: %s", e->message);
}

int wk_net_new(const wk_net_config *cfg, wk_net **ret, sp_error **err)
{
        wk_net_pool pool;
        if (wk_net_pool_parse(cfg->cidr ? cfg->cidr : WK_NET_DEFAULT_CIDR, &pool, err) < 0 ||
            (cfg->ifprefix && wk_net_pool_set_ifprefix(&pool, cfg->ifprefix, err) < 0))
                return -SP_E_INVALID;
        wk_net *n = calloc(1, sizeof(*n));
        if (!n)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        pthread_mutex_init(&n->mu, NULL);
        n->pool = pool;
        n->on_audit = cfg->on_audit;
        n->ud = cfg->ud;
        if (!cfg->base) {
                *ret = n;
                return 0;
        }
        snprintf(n->table, sizeof(n->table), "space_%s", pool.ifprefix);
        n->nft = (wk_nft_config){.table = n->table,
                                 .if_prefix = n->pool.ifprefix,
                                 .pool = pool,
                                 .gateway_tcp_port = cfg->gateway_tcp_port,
                                 .gateway_dns_port = cfg->gateway_dns_port,
                                 .log_group = cfg->log_group};
        if (wk_nft_config_validate(&n->nft, err) < 0 || wk_nft_install(&n->nft, err) < 0) {
                free(n);
                return sp_error_wrap(err, "sandbox firewall");
        }
        n->firewall = true;
        n->nslots = pool.prefix_len >= 31 ? 1 : 1u << (31 - pool.prefix_len);
        n->up = calloc(n->nslots / 8 + 1, 1);
        n->rates = calloc(RATE_SLOTS, sizeof(*n->rates));
        n->gc_ev = event_new(cfg->base, -1, EV_PERSIST, on_gc, n);
        struct timeval every = {.tv_sec = 0, .tv_usec = ELEMENT_GC_US};
        if (!n->up || !n->rates || !n->gc_ev || event_add(n->gc_ev, &every) < 0) {
                wk_net_free(n);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (wk_nflog_open(cfg->log_group, &n->nflog, err) < 0) {
                wk_net_free(n);
                return sp_error_wrap(err, "sandbox firewall log");
        }
        n->nflog_ev = event_new(cfg->base, wk_nflog_fd(n->nflog), EV_READ | EV_PERSIST, on_nflog, n);
        if (!n->nflog_ev || event_add(n->nflog_ev, NULL) < 0) {
                wk_net_free(n);
                return sp_error_set(err, SP_E_LIMIT, "sandbox firewall log: cannot watch it");
        }
        wk_gw_config gc = {.program = cfg->gateway_program,
                           .socket_path = cfg->gateway_socket,
                           .args = cfg->gateway_args,
                           .pid_path = cfg->gateway_pid_path,
                           .on_audit = cfg->on_audit,
                           .ud = cfg->ud};
        if (wk_gw_new(cfg->base, &gc, &n->gw, err) < 0) {
                wk_net_free(n);
                return sp_error_wrap(err, "egress gateway");
        }
        *ret = n;
        return 0;
}

void wk_net_free(wk_net *n)
{
        if (!n)
                return;
        if (n->nflog_ev)
                event_free(n->nflog_ev);
        gc_run(n);
        if (n->gc_ev)
                event_free(n->gc_ev);
        pthread_mutex_destroy(&n->mu);
        free(n->gc);
        free(n->up);
        free(n->rates);
        wk_nflog_free(n->nflog);
        wk_gw_free(n->gw);
        free(n);
}

const wk_net_pool *wk_net_pool_of(const wk_net *n)
{
        return &n->pool;
}

void wk_net_address(const wk_net *n, uint32_t slot, char out[16])
{
        wk_net_link l;
        out[0] = '\0';
        if (wk_net_link_of(&n->pool, slot, &l, NULL) == 0)
                inet_ntop(AF_INET, &l.sandbox_addr, out, 16);
}

void wk_net_host_address(const wk_net *n, uint32_t slot, char out[16])
{
        wk_net_link l;
        out[0] = '\0';
        if (wk_net_link_of(&n->pool, slot, &l, NULL) == 0)
                inet_ntop(AF_INET, &l.host_addr, out, 16);
}

void wk_net_host_if(const wk_net *n, uint32_t slot, char out[IF_NAMESIZE])
{
        wk_net_link l;
        out[0] = '\0';
        if (wk_net_link_of(&n->pool, slot, &l, NULL) == 0)
                snprintf(out, IF_NAMESIZE, "%s", l.host_if);
}

json_object *wk_net_link_record(const wk_net *n, uint32_t slot)
{
        wk_net_link l;
        if (wk_net_link_of(&n->pool, slot, &l, NULL) < 0)
                return NULL;
        char addr[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &l.sandbox_addr, addr, sizeof(addr));
        json_object *o = json_object_new_object();
        json_object_object_add(o, "host_if", json_object_new_string(l.host_if));
        json_object_object_add(o, "address", json_object_new_string(addr));
        return o;
}

static int open_netns(pid_t pid, int *ret, sp_error **err)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
        *ret = open(path, O_RDONLY | O_CLOEXEC);
        if (*ret < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "the network namespace of process %d", (int)pid);
        return 0;
}

static int firewall_add(wk_net *n, uint32_t slot, const wk_net_link *l, sp_error **err)
{
        if (!n->firewall)
                return 0;
        pthread_mutex_lock(&n->mu);
        int r = wk_nft_sandbox_add(&n->nft, l->host_if, l->sandbox_addr, err);
        if (r >= 0)
                slot_set_up(n, slot, true);
        pthread_mutex_unlock(&n->mu);
        return r < 0 ? -SP_E_IO : 0;
}

/* The link into the namespace netns_fd, and its registration. */
static int sandbox_up(wk_net *n, uint32_t slot, int netns_fd, bool vm, sp_error **err)
{
        wk_net_link l;
        if (wk_net_link_of(&n->pool, slot, &l, err) < 0)
                return -SP_E_LIMIT;
        if (wk_net_link_create(&l, netns_fd, err) < 0)
                return -SP_E_IO;
        if ((vm && wk_net_vm_router(&l, netns_fd, err) < 0) || firewall_add(n, slot, &l, err) < 0) {
                wk_net_link_delete(&l, NULL);
                return -SP_E_IO;
        }
        return 0;
}

int wk_net_sandbox_up(wk_net *n, uint32_t slot, pid_t pid, sp_error **err)
{
        _cleanup_close_ int fd = -1;
        if (open_netns(pid, &fd, err) < 0)
                return -SP_E_IO;
        return sandbox_up(n, slot, fd, false, err);
}

int wk_net_sandbox_up_netns(wk_net *n, uint32_t slot, int netns_fd, sp_error **err)
{
        return sandbox_up(n, slot, netns_fd, false, err);
}

int wk_net_vm_up(wk_net *n, uint32_t slot, int netns_fd, sp_error **err)
{
        return sandbox_up(n, slot, netns_fd, true, err);
}

/* Adoption: the link is made again only where it went missing (a VM's routing
 * lives in its namespace, which lives with the VM). */
static int sandbox_adopt(wk_net *n, uint32_t slot, pid_t pid, int netns_fd, const char *saved_if, sp_error **err)
{
        wk_net_link l;
        if (wk_net_link_of(&n->pool, slot, &l, err) < 0)
                return -SP_E_LIMIT;
        if (saved_if && *saved_if && strcmp(saved_if, l.host_if) != 0) {
                wk_net_link old = {0};
                snprintf(old.host_if, sizeof(old.host_if), "%s", saved_if);
                _cleanup_error_ sp_error *e = NULL;
                if (wk_net_link_delete(&old, &e) < 0)
                        sp_log_warn("sandbox link %s: %s", saved_if, e->message);
        }
        if (!wk_net_link_exists(&l)) {
                sp_log_warn("sandbox link %s was missing: making it again", l.host_if);
                if (pid > 0)
                        return wk_net_sandbox_up(n, slot, pid, err);
                /* A VM whose namespace is another's network now (its link's address changed) gets its routing
                 * again too. */
                return sandbox_up(n, slot, netns_fd, true, err);
        }
        return firewall_add(n, slot, &l, err) < 0 ? -SP_E_IO : 0;
}

int wk_net_sandbox_adopt(wk_net *n, uint32_t slot, pid_t pid, const char *saved_if, sp_error **err)
{
        return sandbox_adopt(n, slot, pid, -1, saved_if, err);
}

int wk_net_vm_adopt(wk_net *n, uint32_t slot, int netns_fd, const char *saved_if, sp_error **err)
{
        return sandbox_adopt(n, slot, 0, netns_fd, saved_if, err);
}

void wk_net_sandbox_down(wk_net *n, uint32_t slot)
{
        wk_net_link l;
        if (wk_net_link_of(&n->pool, slot, &l, NULL) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        if (wk_net_link_delete(&l, &e) < 0)
                sp_log_warn("sandbox link %s: %s", l.host_if, e->message);
        if (!n->firewall)
                return;
        /* Its element (its link's name and address) goes with others in one
         * commit, unless the slot is up again by then. Until then it lets
         * nothing through: no link of that name exists. */
        pthread_mutex_lock(&n->mu);
        slot_set_up(n, slot, false);
        if (n->ngc == n->gc_cap) {
                size_t cap = n->gc_cap ? n->gc_cap * 2 : 64;
                uint32_t *g = realloc(n->gc, cap * sizeof(*g));
                if (!g) {
                        if (wk_nft_sandbox_del(&n->nft, l.host_if, l.sandbox_addr, &e) < 0)
                                sp_log_warn("sandbox firewall %s: %s", l.host_if, e->message);
                        pthread_mutex_unlock(&n->mu);
                        return;
                }
                n->gc = g;
                n->gc_cap = cap;
        }
        n->gc[n->ngc++] = slot;
        pthread_mutex_unlock(&n->mu);
}

void wk_net_sandbox_policy(wk_net *n, uint32_t slot, const char *sandbox_id, const char *tenant_id,
                           json_object *profile, json_object *secrets, wk_gw_done done, void *ud)
{
        char addr[16];
        wk_net_address(n, slot, addr);
        if (!n->gw || !addr[0]) {
                if (done)
                        done(NULL, ud);
                return;
        }
        wk_gw_set(n->gw, addr, sandbox_id, tenant_id, profile, secrets, done, ud);
}

int wk_net_secrets_missing(wk_net *n, uint32_t slot)
{
        char addr[16];
        wk_net_address(n, slot, addr);
        return n->gw && addr[0] ? wk_gw_secrets_missing(n->gw, addr) : -1;
}

void wk_net_sandbox_forget(wk_net *n, uint32_t slot)
{
        char addr[16];
        wk_net_address(n, slot, addr);
        if (n->gw && addr[0])
                wk_gw_del(n->gw, addr);
}

void wk_net_metrics(wk_net *n, sp_buf *out)
{
        if (!n->firewall)
                return;
        wk_nft_counters c;
        _cleanup_error_ sp_error *e = NULL;
        if (wk_nft_counters_read(&n->nft, &c, &e) == 0) {
                sp_buf_appendf(out, NULL,
                               "# HELP space_worker_firewall_drops_total Packets from or to sandboxes the firewall "
                               "dropped, by rule.\n# TYPE space_worker_firewall_drops_total counter\n");
                for (int i = 0; i < WK_NFT_DROP__MAX; i++)
                        sp_buf_appendf(out, NULL, "space_worker_firewall_drops_total{rule=\"%s\"} %llu\n",
                                       wk_nft_drop_name((wk_nft_drop)i), (unsigned long long)c.packets[i]);
        }
        sp_buf_appendf(out, NULL,
                       "# HELP space_worker_gateway_connected Whether the worker is connected to its egress gateway.\n"
                       "# TYPE space_worker_gateway_connected gauge\nspace_worker_gateway_connected %d\n"
                       "# HELP space_worker_gateway_starts_total Egress gateway starts by this worker.\n"
                       "# TYPE space_worker_gateway_starts_total counter\nspace_worker_gateway_starts_total %u\n"
                       "# HELP space_worker_firewall_log_overruns_total Firewall log records the kernel dropped.\n"
                       "# TYPE space_worker_firewall_log_overruns_total counter\n"
                       "space_worker_firewall_log_overruns_total %llu\n"
                       "# HELP space_worker_firewall_log_suppressed_total Firewall log records left out: over %d "
                       "per sandbox and second.\n"
                       "# TYPE space_worker_firewall_log_suppressed_total counter\n"
                       "space_worker_firewall_log_suppressed_total %llu\n"
                       "# HELP space_worker_firewall_element_batches_total Commits that removed deleted sandboxes' "
                       "firewall elements.\n"
                       "# TYPE space_worker_firewall_element_batches_total counter\n"
                       "space_worker_firewall_element_batches_total %llu\n",
                       n->gw && wk_gw_connected(n->gw) ? 1 : 0, n->gw ? wk_gw_starts(n->gw) : 0,
                       (unsigned long long)(n->nflog ? wk_nflog_overruns(n->nflog) : 0), PACKET_RECORDS_PER_S,
                       (unsigned long long)n->suppressed_total, (unsigned long long)n->element_batches);
}

int wk_net_purge(const char *ifprefix, const char *gw_pid_path, unsigned *ret_links, sp_error **err)
{
        wk_net_pool pool;
        int r = 0;
        *ret_links = 0;
        if (wk_net_pool_parse(WK_NET_DEFAULT_CIDR, &pool, err) < 0 ||
            wk_net_pool_set_ifprefix(&pool, ifprefix ? ifprefix : WK_NET_HOST_PREFIX, err) < 0)
                return -SP_E_INVALID;
        _cleanup_error_ sp_error *e = NULL;
        if (gw_pid_path && wk_gw_kill(gw_pid_path, &e) < 0 && r == 0) {
                r = -SP_E_IO;
                sp_error_move(err, &e);
        }
        char table[WK_NFT_TABLE_MAX + 1];
        snprintf(table, sizeof(table), "space_%s", pool.ifprefix);
        /* Only the table's name matters to its removal; the rest just passes the checks. */
        wk_nft_config c = {.table = table,
                           .if_prefix = pool.ifprefix,
                           .pool = pool,
                           .gateway_tcp_port = 1,
                           .gateway_dns_port = 2,
                           .log_group = 1};
        e = sp_error_free(e);
        if (wk_nft_remove(&c, &e) < 0 && r == 0) {
                r = -SP_E_IO;
                sp_error_move(err, &e);
        }
        _cleanup_closedir_ DIR *d = opendir("/sys/class/net");
        struct dirent *de;
        size_t n = strlen(pool.ifprefix);
        while (d && (de = readdir(d))) {
                if (strncmp(de->d_name, pool.ifprefix, n) != 0 || !de->d_name[n])
                        continue;
                bool digits = true;
                for (const char *p = de->d_name + n; *p && digits; p++)
                        digits = *p >= '0' && *p <= '9';
                if (!digits || strlen(de->d_name) >= IF_NAMESIZE)
                        continue;
                wk_net_link l = {0};
                memcpy(l.host_if, de->d_name, strlen(de->d_name));
                e = sp_error_free(e);
                if (wk_net_link_delete(&l, &e) == 0)
                        (*ret_links)++;
                else if (r == 0) {
                        r = -SP_E_IO;
                        sp_error_move(err, &e);
                }
        }
        return r;
}
