/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-gateway: a worker node's egress gateway (gw.h, docs/networking.md).
 *
 * Start-up order matters: the sockets sandboxes reach (the TCP relay's and
 * DNS's, redirected here by the worker's nftables table), the control socket
 * and the metrics listener are made in the host's network namespace; then,
 * with --upstream-netns, the gateway moves into that namespace, so that
 * every socket it makes afterwards — each upstream connection, the
 * resolver's — can only reach what that namespace routes to (the tests'
 * own internet). Last it drops to --user.
 *
 * Settings: `space-gateway --help`.
 */
#include <event2/event.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gw.h"
#include "tls/tls.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/config.h"
#include "space/daemon.h"
#include "space/http.h"
#include "space/log.h"

typedef struct {
        char *control_socket, *listen_address, *resolver, *upstream_netns, *public_cidrs, *forbid_cidrs, *user,
                *upstream_ca_file;
        char *http_listen, *log_level, *log_format;
        int64_t tcp_port, dns_port, max_conns, conn_rate, dns_rate, dns_name_max, max_connections, sniff_ms, connect_ms,
                idle_s, dns_ms, max_pins;
} gw_cfg;

static const sp_config_def defs[] = {
        {"control-socket", SP_CONFIG_STRING, "/run/space/gateway.sock", offsetof(gw_cfg, control_socket), 0, 0,
         "unix socket the worker tells the gateway its sandboxes on (mode 0600)"},
        {"listen-address", SP_CONFIG_STRING, "0.0.0.0", offsetof(gw_cfg, listen_address), 0, 0,
         "address of the relay and DNS sockets (the worker's nftables table redirects sandboxes' traffic to them "
         "and keeps everything else from them)"},
        {"tcp-port", SP_CONFIG_INT, "7078", offsetof(gw_cfg, tcp_port), 1, 65535,
         "port of the TCP relay (--gateway-tcp-port of the worker)"},
        {"dns-port", SP_CONFIG_INT, "7079", offsetof(gw_cfg, dns_port), 1, 65535,
         "UDP port of the DNS server (--gateway-dns-port of the worker)"},
        {"resolver", SP_CONFIG_STRING, "", offsetof(gw_cfg, resolver), 0, 0,
         "upstream DNS server, IP or IP:PORT (empty: the first nameserver of /etc/resolv.conf)"},
        {"upstream-netns", SP_CONFIG_STRING, "", offsetof(gw_cfg, upstream_netns), 0, 0,
         "network namespace (a path such as /run/netns/NAME) every upstream connection and query is made in; "
         "empty: the gateway's own"},
        {"upstream-ca-file", SP_CONFIG_STRING, "", offsetof(gw_cfg, upstream_ca_file), 0, 0,
         "CA certificates (PEM) the hosts a secret is injected for must have certificates from; empty: the "
         "system's CA store (docs/secrets.md)"},
        {"public-cidrs", SP_CONFIG_STRING, "", offsetof(gw_cfg, public_cidrs), 0, 0,
         "networks to treat as public although their addresses are private (A.B.C.D/N,...; a test's own internet)"},
        {"forbid-cidrs", SP_CONFIG_STRING, "", offsetof(gw_cfg, forbid_cidrs), 0, 0,
         "networks never reached (A.B.C.D/N,...), besides loopback, link-local, multicast and the host's own "
         "addresses; the worker passes its sandbox network"},
        {"user", SP_CONFIG_STRING, "nobody", offsetof(gw_cfg, user), 0, 0,
         "user the gateway runs as once its sockets are made (empty: stay as started)"},
        {"http-listen", SP_CONFIG_STRING, "", offsetof(gw_cfg, http_listen), 0, 0,
         "address of /healthz and /metrics (empty: off)"},
        {"max-conns-per-sandbox", SP_CONFIG_INT, "256", offsetof(gw_cfg, max_conns), 0, 1000000,
         "connections one sandbox may hold open (0: no limit)"},
        {"conn-rate", SP_CONFIG_INT, "50", offsetof(gw_cfg, conn_rate), 0, 1000000,
         "new connections per second per sandbox, with a burst of twice that (0: no limit)"},
        {"dns-rate", SP_CONFIG_INT, "50", offsetof(gw_cfg, dns_rate), 0, 1000000,
         "DNS queries per second per sandbox, with a burst of twice that (0: no limit)"},
        {"dns-name-max", SP_CONFIG_INT, "120", offsetof(gw_cfg, dns_name_max), 0, 253,
         "longest name a sandbox may look up (against tunnelling; 0: 253)"},
        {"max-pins", SP_CONFIG_INT, "4096", offsetof(gw_cfg, max_pins), 1, 1000000,
         "DNS answers kept per sandbox (the oldest are forgotten first)"},
        {"max-connections", SP_CONFIG_INT, "65536", offsetof(gw_cfg, max_connections), 1, 10000000,
         "relayed connections of all sandboxes together"},
        {"sniff-timeout-ms", SP_CONFIG_INT, "1000", offsetof(gw_cfg, sniff_ms), 10, 60000,
         "how long the first bytes of a connection may take (silence: a protocol whose server speaks first)"},
        {"connect-timeout-ms", SP_CONFIG_INT, "10000", offsetof(gw_cfg, connect_ms), 10, 600000,
         "how long dialling a destination may take"},
        {"idle-timeout-s", SP_CONFIG_INT, "900", offsetof(gw_cfg, idle_s), 0, 86400,
         "a relayed connection with no bytes either way for this long is closed (0: never)"},
        {"dns-timeout-ms", SP_CONFIG_INT, "3000", offsetof(gw_cfg, dns_ms), 10, 60000,
         "how long the resolver may take"},
        SP_DAEMON_LOG_SETTINGS(gw_cfg),
        SP_CONFIG_END,
};

static void cfg_freep(gw_cfg *c)
{
        sp_config_free(defs, c);
}

static gw *the_gw;

static void h_healthz(sp_http_request *req, void *ud)
{
        (void)ud;
        sp_http_reply(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
}

static void h_metrics(sp_http_request *req, void *ud)
{
        (void)ud;
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        gw_metrics(the_gw, &out);
        sp_http_reply(req, 200, "text/plain; version=0.0.4", out.data ? out.data : "", out.len);
}

static int resolver_parse(const char *s, struct sockaddr_in *ret, sp_error **err)
{
        char buf[64] = "";
        if (!s || !*s) {
                _cleanup_fclose_ FILE *f = fopen("/etc/resolv.conf", "re");
                char line[256];
                while (f && fgets(line, sizeof(line), f))
                        if (sscanf(line, " nameserver %63s", buf) == 1 && strchr(buf, '.'))
                                break;
                        else
                                buf[0] = '\0';
                if (!buf[0])
                        return sp_error_set(err, SP_E_INVALID,
                                            "no --resolver and no IPv4 nameserver in /etc/resolv.conf");
        } else {
                snprintf(buf, sizeof(buf), "%s", s);
        }
        int port = 53;
        char *colon = strchr(buf, ':');
        if (colon) {
                *colon = '\0';
                port = atoi(colon + 1);
        }
        memset(ret, 0, sizeof(*ret));
        ret->sin_family = AF_INET;
        ret->sin_port = htons((uint16_t)port);
        if (port < 1 || port > 65535 || inet_pton(AF_INET, buf, &ret->sin_addr) != 1)
                return sp_error_set(err, SP_E_INVALID, "resolver '%s' must be IP or IP:PORT", s ? s : buf);
        return 0;
}

static int listen_socket(int type, const char *addr, int port, sp_error **err)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
                return sp_error_set(err, SP_E_INVALID, "listen address '%s' is not an IPv4 address", addr);
        int fd = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        int one = 1;
        /* SO_REUSEADDR for TCP only: for UDP it would let a second gateway bind
         * the same port beside this one and take some of its queries. */
        if (fd < 0 || (type == SOCK_STREAM && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) ||
            bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || (type == SOCK_STREAM && listen(fd, 1024) < 0)) {
                int e = errno;
                if (fd >= 0)
                        close(fd);
                return sp_error_set_errno(err, SP_E_IO, e, "%s %s:%d", type == SOCK_STREAM ? "tcp" : "udp", addr, port);
        }
        return fd;
}

static int control_socket(const char *path, sp_error **err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(sa.sun_path))
                return sp_error_set(err, SP_E_INVALID, "control socket path too long: %s", path);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        unlink(path);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        mode_t old = umask(0177);
        int r = fd < 0 ? -1 : bind(fd, (struct sockaddr *)&sa, sizeof(sa));
        umask(old);
        if (r < 0 || listen(fd, 16) < 0) {
                int e = errno;
                if (fd >= 0)
                        close(fd);
                return sp_error_set_errno(err, SP_E_IO, e, "control socket %s", path);
        }
        return fd;
}

static int enter_netns(const char *path, sp_error **err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "enter the upstream network namespace %s", path);
        return 0;
}

static int drop_to(const char *user, sp_error **err)
{
        if (!user || !*user)
                return 0;
        struct passwd *pw = getpwnam(user);
        if (!pw)
                return sp_error_set(err, SP_E_INVALID, "no user '%s' to run as", user);
        if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
                return sp_error_set_errno(err, SP_E_PERMISSION, errno, "become %s", user);
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return sp_error_set_errno(err, SP_E_PERMISSION, errno, "no new privileges");
        return 0;
}

/* Every few seconds: the host's addresses again (one it gains must never be reached). */
static void on_host_addresses(evutil_socket_t fd, short what, void *ud)
{
        (void)fd;
        (void)what;
        _cleanup_error_ sp_error *e = NULL;
        if (gw_forbid_local_addresses(ud, &e) < 0)
                sp_log_warn("%s", e->message);
}

int main(int argc, char **argv)
{
        _cleanup_(cfg_freep) gw_cfg c = {0};
        _cleanup_error_ sp_error *e = NULL;
        sp_daemon_config dc = {.program = "space-gateway",
                               .component = "gateway",
                               .env_prefix = "SPACE_GATEWAY",
                               .defs = defs,
                               .ignore_sigpipe = true};
        int r = sp_daemon_setup(&dc, &c, argc, argv);
        if (r != SP_DAEMON_GO_ON)
                return r;
        gw g = {.cfg = {.sniff_timeout_ms = (int)c.sniff_ms,
                        .connect_timeout_ms = (int)c.connect_ms,
                        .idle_timeout_ms = (int)(c.idle_s * 1000),
                        .dns_timeout_ms = (int)c.dns_ms,
                        .max_connections = (uint32_t)c.max_connections}};
        gw_limits lim = GW_LIMITS_DEFAULT;
        lim.max_conns = (uint32_t)c.max_conns;
        lim.conn_rate = (uint32_t)c.conn_rate;
        lim.conn_burst = (uint32_t)c.conn_rate * 2;
        lim.dns_rate = (uint32_t)c.dns_rate;
        lim.dns_burst = (uint32_t)c.dns_rate * 2;
        lim.dns_name_max = c.dns_name_max ? (uint32_t)c.dns_name_max : 253;
        lim.max_pins = (uint32_t)c.max_pins;
        if (resolver_parse(c.resolver, &g.cfg.resolver, &e) < 0 ||
            gw_cidr_list_parse(c.public_cidrs, g.cfg.public_cidrs, &g.cfg.n_public, &e) < 0 ||
            gw_cidr_list_parse(c.forbid_cidrs, g.cfg.forbid_cidrs, &g.cfg.n_forbid, &e) < 0) {
                sp_log_error("%s", e->message);
                return 2;
        }
        g.table = gw_table_new(&lim);
        g.rules = json_object_new_object();
        the_gw = &g;
        sp_daemon loop = {0};
        sp_http_server *http = NULL;
        int tcp_fd = -1, udp_fd = -1, ctl_fd = -1;
        r = 1;
        if (!g.table || !g.rules || sp_daemon_loop_new(&loop, &e) < 0)
                goto out;
        g.base = loop.base;
        /* In the host's namespace: what sandboxes and the worker reach. */
        if ((tcp_fd = listen_socket(SOCK_STREAM, c.listen_address, (int)c.tcp_port, &e)) < 0 ||
            (udp_fd = listen_socket(SOCK_DGRAM, c.listen_address, (int)c.dns_port, &e)) < 0 ||
            (ctl_fd = control_socket(c.control_socket, &e)) < 0 || gw_host_addresses_open(&g, &e) < 0 ||
            gw_forbid_local_addresses(&g, &e) < 0)
                goto out;
        g.host_addr_ev = event_new(g.base, -1, EV_PERSIST, on_host_addresses, &g);
        struct timeval every = {.tv_sec = 5};
        if (!g.host_addr_ev || event_add(g.host_addr_ev, &every) < 0)
                goto out;
        if (c.http_listen && *c.http_listen) {
                http = sp_http_server_new(g.base, &(sp_http_config){0}, &e);
                if (!http || sp_http_route(http, "GET", "/healthz", h_healthz, NULL, &e) < 0 ||
                    sp_http_route(http, "GET", "/metrics", h_metrics, NULL, &e) < 0 ||
                    sp_http_server_listen(http, c.http_listen, NULL, &e) < 0)
                        goto out;
        }
        /* TLS for injecting secrets: the upstream CAs are read now, as root. */
        if (gw_tls_new(c.upstream_ca_file, &g.tls, &e) < 0) {
                if (c.upstream_ca_file && *c.upstream_ca_file)
                        goto out;
                sp_log_warn("%s: secrets cannot be injected", e->message);
                sp_error_free(e);
                e = NULL;
        }
        if (gw_ctl_new(&g, ctl_fd, &g.ctl, &e) < 0)
                goto out;
        ctl_fd = -1;
        if (gw_relay_new(&g, tcp_fd, &g.relay, &e) < 0)
                goto out;
        tcp_fd = -1;
        /* From here on every new socket belongs to the upstream namespace. */
        if (c.upstream_netns && *c.upstream_netns && enter_netns(c.upstream_netns, &e) < 0)
                goto out;
        if (gw_dns_new(&g, udp_fd, &g.dns, &e) < 0)
                goto out;
        udp_fd = -1;
        if (drop_to(c.user, &e) < 0 || sp_daemon_stop_on_signals(&loop, NULL, &e) < 0)
                goto out;
        char res[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &g.cfg.resolver.sin_addr, res, sizeof(res));
        sp_log_info_kv(SP_KV("control_socket", c.control_socket, "resolver", res, "upstream_netns",
                             c.upstream_netns ? c.upstream_netns : ""),
                       "gateway ready (tcp %lld, dns %lld)", (long long)c.tcp_port, (long long)c.dns_port);
        sp_daemon_run(&loop);
        r = 0;
out:
        if (r != 0)
                sp_log_error("%s", e ? e->message : "out of memory");
        sp_http_server_free(http);
        gw_relay_free(g.relay);
        gw_dns_free(g.dns);
        gw_tls_free(g.tls);
        gw_ctl_free(g.ctl);
        if (tcp_fd >= 0)
                close(tcp_fd);
        if (udp_fd >= 0)
                close(udp_fd);
        if (ctl_fd >= 0)
                close(ctl_fd);
        if (g.host_addr_ev)
                event_free(g.host_addr_ev);
        if (g.host_nl > 0)
                close(g.host_nl);
        gw_table_free(g.table);
        json_object_put(g.rules);
        sp_daemon_loop_free(&loop);
        return r;
}
