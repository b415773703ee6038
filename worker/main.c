/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-worker: the node daemon. Opens its storage (btrfs, or a loop-mounted
 * btrfs image it makes), re-adopts the sandboxes its state directory names,
 * builds the `base` template on first start, and serves the worker RPC
 * (proto/spec/worker-rpc.md) over mutually authenticated HTTP/2. With
 * --control-plane it joins the cluster (once, with a join token; see
 * cluster/cluster.h) and heartbeats to the control plane.
 *
 * Settings: `space-worker --help` lists every one with its default
 * (flags, SPACE_WORKER_* environment variables, or a --config file).
 */
#include <libgen.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "cluster/cluster.h"
#include "net/net.h"
#include "node/node.h"
#include "rootfs/rootfs.h"
#include "rpc/service.h"
#include "space/cleanup.h"
#include "space/config.h"
#include "space/daemon.h"
#include "space/fileio.h"
#include "space/log.h"
#include "space/pki.h"
#include "space/http.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/tls.h"

typedef struct {
        char *state_dir, *storage_dir, *storage_image, *listen, *tls_ca, *tls_cert, *tls_key, *agent, *node_id;
        char *log_level, *log_format, *backend, *cgroup_parent, *http_listen, *vm_kernel_dir, *accel, *qemu, *criu;
        char *control_plane, *join_token, *join_token_file, *advertise, *labels, *import_root;
        char *debootstrap_program, *debootstrap_mirror, *sandbox_cidr, *net_prefix, *artifact_store;
        char *gateway, *gw_resolver, *gw_upstream_netns, *gw_public_cidrs, *gw_user, *gw_upstream_ca;
        int64_t storage_size, slots, jobs, cpu_millis, memory, session_log, session_log_budget, warm, uid_base;
        int64_t tpl_max_bytes, tpl_max_entries, tpl_timeout, storage_reserve;
        int64_t gw_tcp_port, gw_dns_port, gw_log_group, max_port_conns;
        bool insecure, base_template, purge, network, vm_base_snapshots, vm_bases_ahead, drain_self, uncordon_self;
        int64_t drain_timeout;
} worker_cfg;

static const sp_config_def defs[] = {
        {"state-dir", SP_CONFIG_STRING, "/var/lib/space/worker", offsetof(worker_cfg, state_dir), 0, 0,
         "where the worker keeps its state (sandboxes, sessions, output logs)"},
        {"storage-dir", SP_CONFIG_STRING, "/var/lib/space/storage", offsetof(worker_cfg, storage_dir), 0, 0,
         "root filesystems; must be btrfs, else an image is loop-mounted here"},
        {"storage-image", SP_CONFIG_STRING, "/var/lib/space/storage.img", offsetof(worker_cfg, storage_image), 0, 0,
         "btrfs image file used when storage-dir is not on btrfs"},
        {"storage-size", SP_CONFIG_SIZE, "20G", offsetof(worker_cfg, storage_size), 128 << 20, INT64_C(64) << 40,
         "size of a new storage image (sparse)"},
        {"listen", SP_CONFIG_STRING, "127.0.0.1:7071", offsetof(worker_cfg, listen), 0, 0,
         "RPC address: HOST:PORT or unix:/path"},
        {"http-listen", SP_CONFIG_STRING, "127.0.0.1:7072", offsetof(worker_cfg, http_listen), 0, 0,
         "address of /healthz, /readyz and /metrics (empty: off)"},
        {"tls-ca", SP_CONFIG_STRING, NULL, offsetof(worker_cfg, tls_ca), 0, 0, "cluster CA certificate (PEM file)"},
        {"tls-cert", SP_CONFIG_STRING, NULL, offsetof(worker_cfg, tls_cert), 0, 0,
         "this worker's certificate (role worker, PEM file)"},
        {"tls-key", SP_CONFIG_STRING, NULL, offsetof(worker_cfg, tls_key), 0, 0,
         "this worker's private key (PEM file)"},
        {"control-plane", SP_CONFIG_STRING, NULL, offsetof(worker_cfg, control_plane), 0, 0,
         "HOST:PORT of the control plane to join and heartbeat to (empty: standalone)"},
        {"join-token", SP_CONFIG_STRING, NULL, offsetof(worker_cfg, join_token), 0, 0,
         "bootstrap token for the first join (prefer --join-token-file)"},
        {"join-token-file", SP_CONFIG_STRING, NULL, offsetof(worker_cfg, join_token_file), 0, 0,
         "file holding the bootstrap token for the first join"},
        {"advertise", SP_CONFIG_STRING, NULL, offsetof(worker_cfg, advertise), 0, 0,
         "HOST:PORT the control plane dials for this worker's RPC (default: --listen)"},
        {"labels", SP_CONFIG_STRING, "", offsetof(worker_cfg, labels), 0, 0,
         "labels for placement, KEY=VALUE,KEY=VALUE"},
        {"insecure", SP_CONFIG_BOOL, "false", offsetof(worker_cfg, insecure), 0, 0,
         "serve cleartext HTTP/2 without authentication (loopback or unix socket only; development and tests)"},
        {"agent", SP_CONFIG_STRING, NULL, offsetof(worker_cfg, agent), 0, 0,
         "path of the static space-agent (default: next to this binary)"},
        {"backend", SP_CONFIG_STRING, "jail", offsetof(worker_cfg, backend), 0, 0,
         "isolation backend: jail (namespaces) or qemu (a microvm per sandbox), or several, comma-separated, "
         "the first serving creates that name none (jail,qemu; docs/backends.md)"},
        {"criu", SP_CONFIG_STRING, "auto", offsetof(worker_cfg, criu), 0, 0,
         "jail: auto (the CRIU scripts/criu installs, /var/lib/space/criu/criu, when it is there) or a CRIU's "
         "path: a suspend checkpoints the jail with its processes; off: a jail's suspend keeps its files only "
         "(docs/backends.md, \"What a jail keeps across a suspend\")"},
        {"vm-kernel-dir", SP_CONFIG_STRING, "/var/lib/space/vm-kernel", offsetof(worker_cfg, vm_kernel_dir), 0, 0,
         "qemu: the guest kernel and its modules (scripts/vm-kernel installs them)"},
        {"accel", SP_CONFIG_STRING, "auto", offsetof(worker_cfg, accel), 0, 0,
         "qemu: auto (KVM when a probe guest answers, else TCG), kvm or tcg"},
        {"qemu", SP_CONFIG_STRING, "/usr/bin/qemu-system-x86_64", offsetof(worker_cfg, qemu), 0, 0,
         "qemu: the QEMU binary"},
        {"vm-base-snapshots", SP_CONFIG_BOOL, "true", offsetof(worker_cfg, vm_base_snapshots), 0, 0,
         "qemu: start a template's VMs from its base snapshot (made after the first create that booted; "
         "docs/backends.md); off: every create boots"},
        {"vm-bases-ahead", SP_CONFIG_BOOL, "true", offsetof(worker_cfg, vm_bases_ahead), 0, 0,
         "qemu: make a template's base snapshot for the default machine (1 vCPU, 512 MiB, 2 GiB disk) when "
         "the template arrives, before any create"},
        {"cgroup-parent", SP_CONFIG_STRING, "space", offsetof(worker_cfg, cgroup_parent), 0, 0,
         "cgroup under which every sandbox gets its own group"},
        {"sandbox-network", SP_CONFIG_BOOL, "false", offsetof(worker_cfg, network), 0, 0,
         "give each sandbox a network link to this host (docs/networking.md); off: loopback only"},
        {"sandbox-cidr", SP_CONFIG_STRING, WK_NET_DEFAULT_CIDR, offsetof(worker_cfg, sandbox_cidr), 0, 0,
         "the sandboxes' addresses on this node (A.B.C.D/N, a /31 each); distinct per worker on one host"},
        {"net-prefix", SP_CONFIG_STRING, WK_NET_HOST_PREFIX, offsetof(worker_cfg, net_prefix), 0, 0,
         "name prefix of the sandboxes' host-side interfaces (1-7 of a-z0-9); distinct per worker on one host"},
        {"gateway", SP_CONFIG_STRING, "", offsetof(worker_cfg, gateway), 0, 0,
         "the space-gateway program the worker runs and restarts (default: next to this binary; \"none\": the "
         "gateway is run by others and only reached on its control socket)"},
        {"gateway-tcp-port", SP_CONFIG_INT, "7078", offsetof(worker_cfg, gw_tcp_port), 1, 65535,
         "port of the gateway's TCP relay on the host ends' addresses; distinct per worker on one host"},
        {"gateway-dns-port", SP_CONFIG_INT, "7079", offsetof(worker_cfg, gw_dns_port), 1, 65535,
         "UDP port of the gateway's DNS server; distinct per worker on one host"},
        {"gateway-log-group", SP_CONFIG_INT, "7078", offsetof(worker_cfg, gw_log_group), 1, 65535,
         "NFLOG group of the firewall's drops; distinct per worker on one host"},
        {"gateway-resolver", SP_CONFIG_STRING, "", offsetof(worker_cfg, gw_resolver), 0, 0,
         "the DNS server the gateway asks (IP or IP:PORT; empty: the host's first nameserver)"},
        {"gateway-upstream-netns", SP_CONFIG_STRING, "", offsetof(worker_cfg, gw_upstream_netns), 0, 0,
         "network namespace the gateway makes its upstream connections in (tests confine it to their own "
         "internet; empty: the host's)"},
        {"gateway-public-cidrs", SP_CONFIG_STRING, "", offsetof(worker_cfg, gw_public_cidrs), 0, 0,
         "private networks the gateway treats as public (A.B.C.D/N,...; a test's own internet)"},
        {"gateway-upstream-ca-file", SP_CONFIG_STRING, "", offsetof(worker_cfg, gw_upstream_ca), 0, 0,
         "CA certificates (PEM) the hosts secrets are injected for are checked against (empty: the system's "
         "store; tests name their own internet's CA)"},
        {"gateway-user", SP_CONFIG_STRING, "nobody", offsetof(worker_cfg, gw_user), 0, 0,
         "user the gateway runs as once its sockets are made"},
        {"node-id", SP_CONFIG_STRING, NULL, offsetof(worker_cfg, node_id), 0, 0,
         "this node's name (default: hostname)"},
        {"max-port-connections", SP_CONFIG_INT, "4096", offsetof(worker_cfg, max_port_conns), 1, 1000000,
         "connections to ports inside sandboxes (ingress, ConnectPort) open at once on this node"},
        {"slots", SP_CONFIG_INT, "256", offsetof(worker_cfg, slots), 1, 100000, "most sandboxes on this node"},
        {"jobs", SP_CONFIG_INT, "4", offsetof(worker_cfg, jobs), 1, 256,
         "threads that make and remove sandboxes, off the event loop (beyond them, creates and deletes wait in a "
         "queue: space_worker_jobs_queued); warm-pool refills never take the last free one"},
        {"cpu-millis", SP_CONFIG_INT, "0", offsetof(worker_cfg, cpu_millis), 0, INT64_C(1) << 40,
         "CPU capacity reported to the scheduler (0: all CPUs)"},
        {"memory", SP_CONFIG_SIZE, "0", offsetof(worker_cfg, memory), 0, INT64_C(1) << 50,
         "memory capacity reported to the scheduler (0: all memory)"},
        {"session-log-size", SP_CONFIG_SIZE, "64M", offsetof(worker_cfg, session_log), 1 << 20, INT64_C(1) << 40,
         "output kept per command session before the command is held back"},
        {"session-log-budget", SP_CONFIG_SIZE, "256M", offsetof(worker_cfg, session_log_budget), 1 << 20,
         INT64_C(1) << 50,
         "disk for the output logs of all of one sandbox's sessions: the oldest ended sessions' logs are reclaimed "
         "first, then running commands are held back and new sessions refused"},
        {"warm", SP_CONFIG_INT, "0", offsetof(worker_cfg, warm), 0, 100000,
         "warm sandboxes kept per template unless the control plane says otherwise"},
        {"uid-base", SP_CONFIG_INT, "268435456", offsetof(worker_cfg, uid_base), 65536, INT64_C(0xF0000000),
         "first host uid of the ranges given to sandboxes (65536 each)"},
        {"template-import-root", SP_CONFIG_STRING, "", offsetof(worker_cfg, import_root), 0, 0,
         "the only directory templates are imported from (dir, tar, oci paths resolve beneath it; empty: none)"},
        {"template-max-bytes", SP_CONFIG_SIZE, "16G", offsetof(worker_cfg, tpl_max_bytes), 1 << 20, INT64_C(16) << 40,
         "most bytes of files one template import may write"},
        {"storage-reserve", SP_CONFIG_SIZE, "1G", offsetof(worker_cfg, storage_reserve), 0, INT64_C(16) << 40,
         "free space of the storage pool that template imports leave alone, at most a tenth of the pool (an "
         "import that would eat into it fails)"},
        {"artifact-store", SP_CONFIG_STRING, "", offsetof(worker_cfg, artifact_store), 0, 0,
         "a directory on storage every worker mounts (NFS, …) where suspended sandboxes are copied, so that another "
         "worker can wake them when this one is gone for good (docs/backends.md); empty: none"},
        {"template-max-entries", SP_CONFIG_INT, "1000000", offsetof(worker_cfg, tpl_max_entries), 1, 100000000,
         "most files, directories and links one template import may create"},
        {"template-import-timeout", SP_CONFIG_INT, "1200", offsetof(worker_cfg, tpl_timeout), 1, 86400,
         "seconds one template import may take"},
        {"debootstrap-mirror", SP_CONFIG_STRING, "", offsetof(worker_cfg, debootstrap_mirror), 0, 0,
         "Debian mirror (http:// or https:// URL) for debootstrap templates whose request names none (empty: "
         "debootstrap's own default)"},
        {"debootstrap-program", SP_CONFIG_STRING, "/usr/sbin/debootstrap", offsetof(worker_cfg, debootstrap_program), 0,
         0, "the debootstrap program (an absolute path) that builds debootstrap templates"},
        {"purge", SP_CONFIG_BOOL, "false", offsetof(worker_cfg, purge), 0, 0,
         "remove everything a stopped worker left on this host and exit: its sandboxes' processes and cgroups under "
         "--cgroup-parent, the mounts beneath --state-dir and --storage-dir, the --storage-image loop device, and "
         "those directories and the image"},
        {"drain-self", SP_CONFIG_BOOL, "false", offsetof(worker_cfg, drain_self), 0, 0,
         "ask the control plane (--control-plane), with this worker's own certificate from --state-dir, to drain "
         "this worker, wait until its sandboxes have moved away, and exit (a node's shutdown hook; exit 0 also when "
         "the worker never joined)"},
        {"uncordon-self", SP_CONFIG_BOOL, "false", offsetof(worker_cfg, uncordon_self), 0, 0,
         "undo a drain that this worker asked for itself (--drain-self) and exit; an operator's cordon or drain "
         "stays"},
        {"drain-timeout", SP_CONFIG_DURATION, "25m", offsetof(worker_cfg, drain_timeout), 1000000,
         INT64_C(86400) * 1000000, "how long --drain-self waits for the drain (and both for the control plane)"},
        {"base-template", SP_CONFIG_BOOL, "true", offsetof(worker_cfg, base_template), 0, 0,
         "build the `base` template (busybox and the agent) if it is missing"},
        SP_DAEMON_LOG_SETTINGS(worker_cfg),
        SP_CONFIG_END,
};

static wk_node *node;
static sp_rpc_server *srv;
static wk_cluster *cluster;

static void h_healthz(sp_http_request *req, void *ud)
{
        (void)ud;
        sp_http_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
}

static void h_readyz(sp_http_request *req, void *ud)
{
        (void)ud;
        _cleanup_error_ sp_error *e = NULL;
        if (!wk_node_ready(node, &e)) {
                sp_http_reply_error(req, e);
                return;
        }
        sp_http_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
}

static void h_metrics(sp_http_request *req, void *ud)
{
        (void)ud;
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        wk_node_metrics(node, &out, NULL);
        sp_rpc_server_stats st;
        sp_rpc_server_get_stats(srv, &st);
        sp_buf_appendf(
                &out, NULL,
                "# HELP space_worker_rpc_connections Open RPC connections.\n"
                "# TYPE space_worker_rpc_connections gauge\nspace_worker_rpc_connections %llu\n"
                "# HELP space_worker_rpc_calls_total RPC calls dispatched.\n"
                "# TYPE space_worker_rpc_calls_total counter\nspace_worker_rpc_calls_total %llu\n"
                "# HELP space_worker_port_connections Connections to ports inside sandboxes (ConnectPort) open.\n"
                "# TYPE space_worker_port_connections gauge\nspace_worker_port_connections %lld\n",
                (unsigned long long)st.connections_open, (unsigned long long)st.calls_started,
                (long long)wk_service_port_connections());
        if (cluster)
                sp_buf_appendf(&out, NULL,
                               "# HELP space_worker_control_plane_up Whether the last heartbeat was accepted.\n"
                               "# TYPE space_worker_control_plane_up gauge\nspace_worker_control_plane_up %d\n",
                               wk_cluster_connected(cluster) ? 1 : 0);
        sp_http_reply(req, 200, "text/plain; version=0.0.4", out.data, out.len);
}

/* A program installed next to this one. */
static char *default_sibling(const char *name)
{
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        if (n <= 0)
                return NULL;
        self[n] = '\0';
        char *path = NULL;
        if (asprintf(&path, "%s/%s", dirname(self), name) < 0)
                return NULL;
        return path;
}

static char *default_agent(void)
{
        return default_sibling("space-agent");
}

/* The gateway's decisions and the firewall's drops go to the sandbox's egress log. */
static void on_egress_audit(json_object *rec, void *ud)
{
        (void)ud;
        if (node)
                wk_node_egress_record(node, rec);
}

static bool loopback_only(const char *addr)
{
        return strncmp(addr, "unix:", 5) == 0 || strncmp(addr, "127.", 4) == 0 || strncmp(addr, "[::1]:", 6) == 0 ||
               strncmp(addr, "localhost:", 10) == 0;
}

/* The CA, certificate and key files given with --tls-*. */
static int load_tls_files(const worker_cfg *c, sp_join_creds *ret, sp_error **err)
{
        if (!(ret->ca_pem = sp_pki_pem_load(c->tls_ca, err)) || !(ret->cert_pem = sp_pki_pem_load(c->tls_cert, err)) ||
            !(ret->key_pem = sp_pki_pem_load(c->tls_key, err))) {
                sp_join_creds_free(ret);
                return -SP_E_IO;
        }
        return 0;
}

static SSL_CTX *make_tls(const sp_join_creds *creds, sp_error **err)
{
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {
                .ca_pem = creds->ca_pem,
                .cert_pem = creds->cert_pem,
                .key_pem = creds->key_pem,
                /* Workers: only ReadSandboxArtifact takes them (what an export granted). */
                .peer_roles = SP_ROLE_CONTROLPLANE | SP_ROLE_DATAPLANE | SP_ROLE_WORKER,
                .alpn = alpn,
        };
        return sp_tls_server_ctx_new(&tc, err);
}

/* The client context toward other workers (fetching a sandbox that moves here). */
static SSL_CTX *make_peer_tls(const sp_join_creds *creds, sp_error **err)
{
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {
                .ca_pem = creds->ca_pem,
                .cert_pem = creds->cert_pem,
                .key_pem = creds->key_pem,
                .peer_roles = SP_ROLE_WORKER,
                .alpn = alpn,
        };
        return sp_tls_client_ctx_new(&tc, err);
}

/* An address the control plane can dial: not a unix socket, not a wildcard. */
static bool dialable(const char *addr)
{
        return strncmp(addr, "unix:", 5) != 0 && strncmp(addr, "0.0.0.0:", 8) != 0 && strncmp(addr, "[::]:", 5) != 0 &&
               strncmp(addr, ":", 1) != 0;
}

/* The options of --control-plane, checked; NULL token when none was given. */
static int cluster_options(const worker_cfg *c, wk_cluster_config *cc, json_object **labels, char **token,
                           sp_error **err)
{
        if (c->insecure)
                return sp_error_set(err, SP_E_INVALID,
                                    "--insecure cannot be used with --control-plane: cluster traffic is always mTLS");
        if (c->join_token && c->join_token_file)
                return sp_error_set(err, SP_E_INVALID, "give --join-token or --join-token-file, not both");
        if (!c->tls_cert != !c->tls_key || (c->tls_cert && !c->tls_ca))
                return sp_error_set(err, SP_E_INVALID, "--tls-cert and --tls-key go together, with --tls-ca");
        cc->advertise = c->advertise ? c->advertise : c->listen;
        if (!dialable(cc->advertise))
                return sp_error_set(err, SP_E_INVALID, "the control plane cannot dial %s: set --advertise HOST:PORT",
                                    cc->advertise);
        if (wk_cluster_parse_labels(c->labels, labels, err) < 0)
                return sp_error_wrap(err, "--labels");
        cc->labels = *labels;
        if (c->join_token_file)
                return sp_join_read_token(c->join_token_file, token, err);
        if (c->join_token && !(*token = strdup(c->join_token)))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 0;
}

static int identity(SSL *ssl, void *ud, unsigned *ret_role, char **ret_name, sp_error **err)
{
        (void)ud;
        sp_role role;
        if (sp_tls_peer_identity(ssl, &role, ret_name, err) < 0)
                return -SP_E_UNAUTHENTICATED;
        *ret_role = (unsigned)role;
        return 0;
}

/* --drain-self and --uncordon-self: 0 when done (or nothing to do), 1 on failure. */
static int self_admin(const worker_cfg *c, const char *name)
{
        _cleanup_error_ sp_error *e = NULL;
        if (c->drain_self && c->uncordon_self) {
                sp_log_error("give --drain-self or --uncordon-self, not both");
                return 2;
        }
        if (!c->control_plane || !*c->control_plane) {
                sp_log_error("--drain-self and --uncordon-self need --control-plane");
                return 2;
        }
        wk_cluster_config cc = {.control_plane = c->control_plane, .name = name, .state_dir = c->state_dir};
        sp_join_creds creds = {0};
        char crt[PATH_MAX];
        snprintf(crt, sizeof(crt), "%s/tls/worker.crt", c->state_dir);
        _cleanup_free_ char *ca = NULL;
        int r = 0;
        struct stat sd;
        if (c->tls_cert) {
                r = load_tls_files(c, &creds, &e);
        } else if (stat(c->state_dir, &sd) < 0 || !S_ISDIR(sd.st_mode)) {
                /* A mistyped hook must not pass for a drain that had nothing to do. */
                sp_log_error("--state-dir %s is not a directory", c->state_dir);
                return 1;
        } else if (access(crt, F_OK) < 0) {
                sp_log_info("worker %s has not joined (no certificate in %s/tls): nothing to %s", name, c->state_dir,
                            c->drain_self ? "drain" : "undo");
                return 0;
        } else if (c->tls_ca && !(ca = sp_pki_pem_load(c->tls_ca, &e))) {
                r = -SP_E_IO;
        } else {
                r = wk_cluster_credentials(&cc, ca, NULL, &creds, &e);
        }
        /* The certificate says who this is (with --tls-cert, whatever --node-id says). */
        sp_pki_cert_info info;
        if (r == 0 && sp_pki_cert_inspect(creds.cert_pem, &info, &e) == 0)
                cc.name = info.name;
        if (r == 0)
                r = wk_cluster_self_admin(&cc, &creds, c->drain_self, c->drain_timeout, &e);
        sp_join_creds_free(&creds);
        if (r < 0) {
                sp_log_error("%s", e->message);
                return 1;
        }
        return 0;
}

static void worker_cfg_freep(worker_cfg *c)
{
        sp_config_free(defs, c);
}

int main(int argc, char **argv)
{
        _cleanup_(worker_cfg_freep) worker_cfg c = {0};
        _cleanup_error_ sp_error *e = NULL;
        /* SIGPIPE keeps its default: the sandboxes inherit it. */
        sp_daemon_config dc = {
                .program = "space-worker", .component = "worker", .env_prefix = "SPACE_WORKER", .defs = defs};
        int r = sp_daemon_setup(&dc, &c, argc, argv);
        if (r != SP_DAEMON_GO_ON)
                return r;
        if (geteuid() != 0) {
                sp_log_error("space-worker must run as root (namespaces, mounts, cgroups)");
                return 1;
        }
        if (c.purge) {
                wk_purge_config pc = {.state_dir = c.state_dir,
                                      .storage_dir = c.storage_dir,
                                      .storage_image = c.storage_image,
                                      .cgroup_parent = c.cgroup_parent};
                wk_purge_stats st = {0};
                /* The network first: the gateway's pid lives in the state directory. */
                char gw_pid[PATH_MAX];
                snprintf(gw_pid, sizeof(gw_pid), "%s/gateway.pid", c.state_dir);
                unsigned links = 0;
                _cleanup_error_ sp_error *ne = NULL;
                if (wk_net_purge(c.net_prefix, gw_pid, &links, &ne) < 0)
                        sp_log_warn("purge: network: %s", ne->message);
                if (links)
                        sp_log_info("purge: removed %u sandbox links", links);
                r = wk_purge(&pc, &st, &e);
                sp_log_info("purge: killed %u processes, removed %u cgroups, unmounted %u, detached %u loop devices",
                            st.processes, st.cgroups, st.mounts, st.loops);
                if (r < 0) {
                        sp_log_error("%s", e->message);
                        return 1;
                }
                return 0;
        }
        if (c.drain_self || c.uncordon_self) {
                char self[256] = "node";
                gethostname(self, sizeof(self) - 1);
                return self_admin(&c, c.node_id ? c.node_id : self);
        }
        /* --backend: one, or several, comma-separated; the first is the default. */
        const char *names[WK_NODE_BACKENDS_MAX];
        size_t nnames = 0;
        _cleanup_free_ char *blist = strdup(c.backend ? c.backend : "");
        char *bsave = NULL;
        for (char *t = blist ? strtok_r(blist, ",", &bsave) : NULL; t; t = strtok_r(NULL, ",", &bsave)) {
                if (strcmp(t, "jail") != 0 && strcmp(t, "qemu") != 0) {
                        sp_log_error("unknown backend '%s' (available: jail, qemu)", t);
                        return 2;
                }
                for (size_t i = 0; i < nnames; i++)
                        if (strcmp(names[i], t) == 0) {
                                sp_log_error("backend '%s' is named twice in --backend", t);
                                return 2;
                        }
                if (nnames == WK_NODE_BACKENDS_MAX) {
                        sp_log_error("--backend names at most %d backends", WK_NODE_BACKENDS_MAX);
                        return 2;
                }
                names[nnames++] = t;
        }
        if (nnames == 0) {
                sp_log_error("--backend names no backend (available: jail, qemu)");
                return 2;
        }
        if (strcmp(c.accel, "auto") != 0 && strcmp(c.accel, "kvm") != 0 && strcmp(c.accel, "tcg") != 0) {
                sp_log_error("--accel is auto, kvm or tcg, not '%s'", c.accel);
                return 2;
        }
        if (c.insecure && !loopback_only(c.listen)) {
                sp_log_error("--insecure serves without authentication: listen on 127.0.0.1, [::1] or a unix socket");
                return 2;
        }
        if (c.control_plane && !*c.control_plane) {
                free(c.control_plane);
                c.control_plane = NULL;
        }
        if (!c.control_plane && !c.insecure && (!c.tls_ca || !c.tls_cert || !c.tls_key)) {
                sp_log_error("TLS needs --tls-ca, --tls-cert and --tls-key (or --control-plane to join a cluster, "
                             "or --insecure for local development)");
                return 2;
        }
        char host[256] = "node";
        gethostname(host, sizeof(host) - 1);
        wk_cluster_config cc = {
                .control_plane = c.control_plane,
                .name = c.node_id ? c.node_id : host,
                .backend = names[0],
                .state_dir = c.state_dir,
        };
        _cleanup_json_ json_object *labels = NULL;
        _cleanup_free_ char *token = NULL;
        if (c.control_plane && cluster_options(&c, &cc, &labels, &token, &e) < 0) {
                sp_log_error("%s", e->message);
                return 2;
        }
        {
                /* A bad program or mirror fails the start, not each build. */
                wk_debootstrap_opts o = {.suite = "stable",
                                         .mirror = *c.debootstrap_mirror ? c.debootstrap_mirror : NULL,
                                         .program = c.debootstrap_program};
                _cleanup_strv_free_ char **argv_check = NULL;
                if (wk_debootstrap_argv(&o, "/check", &argv_check, &e) < 0) {
                        sp_log_error("--debootstrap-program or --debootstrap-mirror: %s", e->message);
                        return 2;
                }
        }
        _cleanup_free_ char *agent = c.agent ? strdup(c.agent) : default_agent();
        struct stat st;
        if (!agent || stat(agent, &st) < 0 || !(st.st_mode & S_IXUSR)) {
                sp_log_error("space-agent not found at %s (set --agent)", agent ? agent : "?");
                return 1;
        }
        if (sp_mkdir_p(c.state_dir, 0700, &e) < 0) {
                sp_log_error("state: %s", e->message);
                return 1;
        }
        /* Credentials before anything slow: a bad token fails at once. */
        sp_join_creds creds = {0};
        if (!c.insecure) {
                _cleanup_free_ char *ca = NULL;
                int r2 = 0;
                if (c.tls_cert)
                        r2 = load_tls_files(&c, &creds, &e);
                else if (c.tls_ca && !(ca = sp_pki_pem_load(c.tls_ca, &e)))
                        r2 = -SP_E_IO;
                else
                        r2 = wk_cluster_credentials(&cc, ca, token, &creds, &e);
                if (token)
                        sp_explicit_bzero(token, strlen(token));
                if (r2 < 0) {
                        sp_log_error("tls: %s", e->message);
                        return 1;
                }
        }

        wk_storage *storage = NULL;
        if (wk_storage_open(c.storage_dir, c.storage_image, (uint64_t)c.storage_size, &storage, &e) < 0) {
                sp_log_error("storage: %s", e->message);
                return 1;
        }
        sp_log_info_kv(SP_KV("storage", c.storage_dir), "storage ready (%s)", wk_storage_origin_name(storage->origin));
        if (wk_quota_enable(storage->dir, &e) < 0) {
                /* Sandboxes asking for a disk limit will then be refused with this reason. */
                sp_log_warn("disk quotas unavailable: %s", e->message);
                e = sp_error_free(e);
        }

        sp_daemon d = {0};
        if (sp_daemon_loop_new(&d, &e) < 0) {
                sp_log_error("%s", e->message);
                return 1;
        }
        wk_net *net = NULL;
        if (c.network) {
                char gw_sock[PATH_MAX], gw_pid[PATH_MAX], tcp[32], dns[32], forbid[64], res[160], netns[PATH_MAX + 32],
                        pub[600], user[96], logf[64], ca[PATH_MAX + 32];
                snprintf(gw_sock, sizeof(gw_sock), "%s/gateway.sock", c.state_dir);
                snprintf(gw_pid, sizeof(gw_pid), "%s/gateway.pid", c.state_dir);
                snprintf(tcp, sizeof(tcp), "--tcp-port=%lld", (long long)c.gw_tcp_port);
                snprintf(dns, sizeof(dns), "--dns-port=%lld", (long long)c.gw_dns_port);
                snprintf(forbid, sizeof(forbid), "--forbid-cidrs=%s", c.sandbox_cidr);
                snprintf(res, sizeof(res), "--resolver=%s", c.gw_resolver);
                snprintf(netns, sizeof(netns), "--upstream-netns=%s", c.gw_upstream_netns);
                snprintf(pub, sizeof(pub), "--public-cidrs=%s", c.gw_public_cidrs);
                snprintf(user, sizeof(user), "--user=%s", c.gw_user);
                snprintf(logf, sizeof(logf), "--log-format=%s", c.log_format);
                snprintf(ca, sizeof(ca), "--upstream-ca-file=%s", c.gw_upstream_ca);
                const char *gw_args[] = {tcp, dns, forbid, res, netns, pub, user, logf, ca, NULL};
                _cleanup_free_ char *gw_prog = !c.gateway || !*c.gateway        ? default_sibling("space-gateway")
                                               : strcmp(c.gateway, "none") == 0 ? NULL
                                                                                : strdup(c.gateway);
                wk_net_config ncfg = {.cidr = c.sandbox_cidr,
                                      .ifprefix = c.net_prefix,
                                      .base = d.base,
                                      .gateway_tcp_port = (uint16_t)c.gw_tcp_port,
                                      .gateway_dns_port = (uint16_t)c.gw_dns_port,
                                      .log_group = (uint16_t)c.gw_log_group,
                                      .gateway_program = gw_prog,
                                      .gateway_socket = gw_sock,
                                      .gateway_pid_path = gw_pid,
                                      .gateway_args = gw_args,
                                      .on_audit = on_egress_audit};
                if (wk_net_new(&ncfg, &net, &e) < 0) {
                        sp_log_error("sandbox network: %s", e->message);
                        return 2;
                }
                uint32_t need = (uint32_t)wk_node_slot_capacity(c.slots), have = wk_net_pool_slots(wk_net_pool_of(net));
                if (have < need) {
                        sp_log_error("sandbox network: --sandbox-cidr=%s has addresses for %u sandboxes; --slots=%lld "
                                     "needs %u (a /31 each, warm and suspended ones included)",
                                     c.sandbox_cidr, have, (long long)c.slots, need);
                        return 2;
                }
        }
        wk_backend *backends[WK_NODE_BACKENDS_MAX] = {0};
        char vm_state[PATH_MAX];
        snprintf(vm_state, sizeof(vm_state), "%s/vm", c.state_dir);
        wk_backend_config bc = {.agent_path = agent,
                                .cgroup_parent = c.cgroup_parent,
                                .uid_base = (uid_t)c.uid_base,
                                .uid_count = 65536,
                                .net = net,
                                .qemu_path = c.qemu,
                                .vm_kernel_dir = c.vm_kernel_dir,
                                .vm_state_dir = vm_state,
                                .accel = c.accel,
                                .no_base_snapshots = !c.vm_base_snapshots,
                                .criu_path = strcmp(c.criu, "off") == 0    ? NULL
                                             : strcmp(c.criu, "auto") == 0 ? "/var/lib/space/criu/criu"
                                                                           : c.criu};
        for (size_t i = 0; i < nnames; i++)
                if ((strcmp(names[i], "qemu") == 0 ? wk_backend_qemu_new(&bc, &backends[i], &e)
                                                   : wk_backend_jail_new(&bc, &backends[i], &e)) < 0) {
                        sp_log_error("backend %s: %s", names[i], e->message);
                        for (size_t k = 0; k < i; k++)
                                backends[k]->ops->free(backends[k]);
                        return 1;
                }

        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        wk_node_config nc = {
                .state_dir = c.state_dir,
                .net = net,
                .storage = storage,
                .node_id = cc.name,
                .slots = c.slots,
                .jobs = (unsigned)c.jobs,
                .cpu_millis = c.cpu_millis ? c.cpu_millis : ncpu * 1000,
                .memory_bytes = c.memory ? c.memory : (int64_t)pages * psize,
                .session_log_bytes = c.session_log,
                .session_log_budget = c.session_log_budget,
                .vm_bases_ahead = c.vm_bases_ahead && c.vm_base_snapshots,
                .default_warm = c.warm,
                .template_import_root = c.import_root,
                .template_limits = {.max_bytes = (uint64_t)c.tpl_max_bytes,
                                    .max_entries = (uint64_t)c.tpl_max_entries,
                                    .max_seconds = (unsigned)c.tpl_timeout},
                .storage_reserve = (uint64_t)c.storage_reserve,
                .artifact_store = c.artifact_store,
                .debootstrap_program = c.debootstrap_program,
                .debootstrap_mirror = c.debootstrap_mirror,
                .agent_path = agent,
        };
        if (wk_node_open(d.base, &nc, backends, nnames, &node, &e) < 0) {
                sp_log_error("node: %s", e->message);
                return 1;
        }
        struct stat rst;
        if (!c.import_root || !*c.import_root)
                sp_log_info("no template import root: templates from host paths are refused");
        else if (stat(c.import_root, &rst) < 0 || !S_ISDIR(rst.st_mode))
                sp_log_warn_kv(SP_KV("import_root", c.import_root),
                               "the template import root is not a directory: imports will fail");
        if (c.base_template && !wk_node_template_exists(node, "base")) {
                sp_log_info("building the base template");
                if (wk_node_template_add_base(node, "base", agent, &e) < 0) {
                        sp_log_error("base template: %s", e->message);
                        return 1;
                }
        }

        SSL_CTX *ctx = NULL, *peer_ctx = NULL;
        if (!c.insecure && (!(ctx = make_tls(&creds, &e)) || !(peer_ctx = make_peer_tls(&creds, &e)))) {
                sp_log_error("tls: %s", e->message);
                return 1;
        }
        srv = sp_rpc_server_new(d.base, ctx, &e);
        wk_service_options so = {
                .allow_unauthenticated = c.insecure, .max_port_connections = c.max_port_conns, .peer_ctx = peer_ctx};
        if (!srv || wk_service_register(srv, node, &so, &e) < 0 || sp_rpc_server_listen(srv, c.listen, &e) < 0) {
                sp_log_error("rpc: %s", e->message);
                return 1;
        }
        if (ctx)
                sp_rpc_server_set_identity_fn(srv, identity, NULL);
        if (c.control_plane && wk_cluster_start(d.base, node, &cc, &creds, &cluster, &e) < 0) {
                sp_log_error("cluster: %s", e->message);
                return 1;
        }
        sp_join_creds_free(&creds);
        sp_http_server *http = NULL;
        if (c.http_listen && *c.http_listen) {
                http = sp_http_server_new(d.base, NULL, &e);
                if (!http || sp_http_route(http, "GET", "/healthz", h_healthz, NULL, &e) < 0 ||
                    sp_http_route(http, "GET", "/readyz", h_readyz, NULL, &e) < 0 ||
                    sp_http_route(http, "GET", "/metrics", h_metrics, NULL, &e) < 0 ||
                    sp_http_server_listen(http, c.http_listen, NULL, &e) < 0) {
                        sp_log_error("http: %s", e->message);
                        return 1;
                }
        }
        if (sp_daemon_stop_on_signals(&d, "sandboxes keep running and are re-adopted on restart", &e) < 0) {
                sp_log_error("%s", e->message);
                return 1;
        }
        sp_log_info_kv(SP_KV("listen", c.listen, "node", nc.node_id), "worker ready (%s)",
                       c.insecure ? "insecure: no TLS" : "mTLS");

        sp_daemon_run(&d);

        wk_cluster_free(cluster);
        sp_http_server_free(http);
        sp_rpc_server_free(srv);
        wk_node_free(node);
        node = NULL;
        for (size_t i = 0; i < nnames; i++)
                backends[i]->ops->free(backends[i]);
        wk_net_free(net);
        wk_storage_free(storage);
        sp_daemon_loop_free(&d);
        if (ctx)
                SSL_CTX_free(ctx);
        if (peer_ctx)
                SSL_CTX_free(peer_ctx);
        return 0;
}
