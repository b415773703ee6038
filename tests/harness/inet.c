/* SPDX-License-Identifier: Apache-2.0 */
/* Test harness: a test's own internet (see inet.h). */
#include "inet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/fileio.h"
#include "proc.h"
#include "space/buf.h"

#define MAX_RECORDS 64

typedef struct server {
        const sp_test_inet_record *rec;
        size_t n;
        int logfd;
        SSL_CTX *tls;
} server;

static void logf_(const server *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(const server *s, const char *fmt, ...)
{
        char line[1024];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
        va_end(ap);
        if (n < 0)
                return;
        if ((size_t)n > sizeof(line) - 2)
                n = (int)sizeof(line) - 2;
        line[n++] = '\n';
        (void)!write(s->logfd, line, (size_t)n);
}

static void local_of(int fd, char *out, size_t n, int *port)
{
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        getsockname(fd, (struct sockaddr *)&sa, &sl);
        inet_ntop(AF_INET, &sa.sin_addr, out, (socklen_t)n);
        *port = ntohs(sa.sin_port);
}

/* Logs the request line and the credentials a request carries (what the
 * credential broker's tests look for). */
static void log_request(const server *s, int fd, const char *head)
{
        char addr[INET_ADDRSTRLEN];
        int port = 0;
        local_of(fd, addr, sizeof(addr), &port);
        size_t k = strcspn(head, "\r\n");
        if (k > 0 && k < 600)
                logf_(s, "tcp %s:%d req %.*s", addr, port, (int)k, head);
        for (const char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
                const char *names[] = {"authorization:", "x-api-key:"};
                for (size_t i = 0; i < 2; i++)
                        if (strncasecmp(l + 2, names[i], strlen(names[i])) == 0) {
                                const char *v = l + 2 + strlen(names[i]);
                                while (*v == ' ')
                                        v++;
                                size_t vl = strcspn(v, "\r\n");
                                if (vl < 600)
                                        logf_(s, "tcp %s:%d hdr %.*s %.*s", addr, port, (int)strlen(names[i]) - 1,
                                              names[i], (int)vl, v);
                        }
        }
}

/* Reads a request head (to the empty line) and returns its Host ("-" if none). */
static void read_head(const server *s, SSL *ssl, int fd, char *host, size_t hn)
{
        char buf[8192];
        size_t len = 0;
        snprintf(host, hn, "-");
        while (len < sizeof(buf) - 1) {
                int r = ssl ? SSL_read(ssl, buf + len, (int)(sizeof(buf) - 1 - len))
                            : (int)read(fd, buf + len, sizeof(buf) - 1 - len);
                if (r <= 0)
                        break;
                len += (size_t)r;
                buf[len] = '\0';
                if (strstr(buf, "\r\n\r\n"))
                        break;
        }
        buf[len] = '\0';
        log_request(s, fd, buf);
        for (char *l = strstr(buf, "\r\n"); l; l = strstr(l + 2, "\r\n"))
                if (strncasecmp(l + 2, "host:", 5) == 0) {
                        char *v = l + 7;
                        while (*v == ' ')
                                v++;
                        size_t k = strcspn(v, "\r\n:");
                        snprintf(host, hn, "%.*s", (int)k, v);
                        break;
                }
}

static void respond(SSL *ssl, int fd, const char *body)
{
        char out[1024];
        int n = snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                         strlen(body), body);
        if (ssl)
                SSL_write(ssl, out, n);
        else
                (void)!write(fd, out, (size_t)n);
}

/* TLS on 443: requests one after another on the connection (at most 16),
 * each head logged, its body (Content-Length or chunked) read and counted,
 * each answered; the connection ends after a request saying close. */
typedef struct reader {
        SSL *ssl;
        char buf[65536];
        size_t len;
} reader;

static bool fill(reader *r)
{
        if (r->len >= sizeof(r->buf) - 1)
                return false;
        int n = SSL_read(r->ssl, r->buf + r->len, (int)(sizeof(r->buf) - 1 - r->len));
        if (n <= 0)
                return false;
        r->len += (size_t)n;
        r->buf[r->len] = '\0';
        return true;
}

static void take(reader *r, size_t n)
{
        memmove(r->buf, r->buf + n, r->len - n);
        r->len -= n;
        r->buf[r->len] = '\0';
}

static void serve_tls_requests(server *s, SSL *ssl, int fd, const char *addr, int port)
{
        reader *r = calloc(1, sizeof(*r));
        if (r)
                r->ssl = ssl;
        const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
        for (int i = 0; r && i < 16; i++) {
                char *end;
                while (!(end = strstr(r->buf, "\r\n\r\n")))
                        if (!fill(r))
                                goto out;
                size_t head_len = (size_t)(end - r->buf) + 4;
                char head[8192], host[256] = "-";
                snprintf(head, sizeof(head), "%.*s", (int)(head_len < sizeof(head) ? head_len : sizeof(head) - 1),
                         r->buf);
                take(r, head_len);
                log_request(s, fd, head);
                bool close_it = false, chunked = false;
                long long length = 0;
                for (char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
                        if (strncasecmp(l + 2, "host:", 5) == 0)
                                sscanf(l + 7, " %255[^\r\n:]", host);
                        else if (strncasecmp(l + 2, "content-length:", 15) == 0)
                                length = atoll(l + 17);
                        else if (strncasecmp(l + 2, "transfer-encoding:", 18) == 0 && strcasestr(l + 20, "chunked"))
                                chunked = true;
                        else if (strncasecmp(l + 2, "connection:", 11) == 0 && strcasestr(l + 13, "close"))
                                close_it = true;
                }
                long long got = 0;
                if (chunked) {
                        char *t;
                        while (!(t = strstr(r->buf, "0\r\n\r\n")) || (t != r->buf && t[-1] != '\n'))
                                if (!fill(r))
                                        goto out;
                        got = t - r->buf + 5;
                        take(r, (size_t)got);
                } else {
                        while ((long long)r->len < length)
                                if (!fill(r))
                                        goto out;
                        got = length;
                        take(r, (size_t)length);
                }
                logf_(s, "tcp %s:%d sni=%s host=%s body=%lld", addr, port, sni ? sni : "-", host, got);
                char body[600], out[1024];
                snprintf(body, sizeof(body), "tls %s %s:%d\n", sni ? sni : "-", addr, port);
                int n = snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n%s\r\n%s", strlen(body),
                                 close_it ? "Connection: close\r\n" : "", body);
                SSL_write(ssl, out, n);
                if (close_it)
                        break;
        }
out:
        free(r);
}

static void handle_tcp(server *s, int fd)
{
        struct timeval tv = {.tv_sec = 3};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        char addr[INET_ADDRSTRLEN], host[256], body[600];
        int port = 0;
        local_of(fd, addr, sizeof(addr), &port);
        logf_(s, "accept tcp %s:%d", addr, port);
        if (port == 22) {
                char banner[128];
                int n = snprintf(banner, sizeof(banner), "SSH-2.0-inet %s\r\n", addr);
                (void)!write(fd, banner, (size_t)n);
                logf_(s, "tcp %s:%d banner", addr, port);
                return;
        }
        if (port == 443 || port == 853) {
                SSL *ssl = SSL_new(s->tls);
                SSL_set_fd(ssl, fd);
                if (SSL_accept(ssl) != 1) {
                        char why[256];
                        ERR_error_string_n(ERR_get_error(), why, sizeof(why));
                        logf_(s, "tcp %s:%d tls handshake failed: %s", addr, port, why);
                        SSL_free(ssl);
                        return;
                }
                if (port == 443) {
                        serve_tls_requests(s, ssl, fd, addr, port);
                        SSL_shutdown(ssl);
                        SSL_free(ssl);
                        return;
                }
                const char *sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
                read_head(s, ssl, fd, host, sizeof(host));
                logf_(s, "tcp %s:%d sni=%s host=%s", addr, port, sni ? sni : "-", host);
                snprintf(body, sizeof(body), "tls %s %s:%d\n", sni ? sni : "-", addr, port);
                respond(ssl, fd, body);
                SSL_shutdown(ssl);
                SSL_free(ssl);
                return;
        }
        read_head(s, NULL, fd, host, sizeof(host));
        logf_(s, "tcp %s:%d sni=- host=%s", addr, port, host);
        if (port == 7000) {
                /* Promise a body and send none: the connection stays open, silent, until the other
                 * side ends it (at most a minute). */
                static const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
                (void)!write(fd, head, sizeof(head) - 1);
                struct timeval hold = {.tv_sec = 60};
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &hold, sizeof(hold));
                char b[256];
                while (read(fd, b, sizeof(b)) > 0)
                        ;
                logf_(s, "tcp %s:%d held until the other side closed", addr, port);
                return;
        }
        snprintf(body, sizeof(body), "http %s %s:%d\n", host, addr, port);
        respond(NULL, fd, body);
}

/* A minimal resolver: one question, A records from the table. It answers on
 * every address (a sandbox's query that got through to "another resolver"
 * would be logged with that address), from the address asked. */
static void handle_dns(server *s, int fd)
{
        uint8_t q[512], a[1024];
        struct sockaddr_in from;
        char cbuf[CMSG_SPACE(sizeof(struct in_pktinfo))];
        struct iovec iov = {q, sizeof(q)};
        struct msghdr mh = {.msg_name = &from,
                            .msg_namelen = sizeof(from),
                            .msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = cbuf,
                            .msg_controllen = sizeof(cbuf)};
        ssize_t n = recvmsg(fd, &mh, 0);
        if (n < 12)
                return;
        struct in_pktinfo pi = {0};
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_PKTINFO)
                        memcpy(&pi, CMSG_DATA(c), sizeof(pi));
        char local[INET_ADDRSTRLEN] = "";
        inet_ntop(AF_INET, &pi.ipi_addr, local, sizeof(local));
        char name[256] = "";
        size_t off = 12, nl = 0;
        while (off < (size_t)n && q[off]) {
                size_t l = q[off++];
                if (l > 63 || off + l > (size_t)n || nl + l + 2 > sizeof(name))
                        return;
                if (nl)
                        name[nl++] = '.';
                memcpy(name + nl, q + off, l);
                nl += l;
                off += l;
        }
        name[nl] = '\0';
        if (off + 5 > (size_t)n)
                return;
        off++;
        uint16_t qtype = (uint16_t)(q[off] << 8 | q[off + 1]);
        size_t qend = off + 4;
        logf_(s, "udp %s:53 q=%s type=%u", local, name, qtype);
        memcpy(a, q, qend);
        a[2] = 0x81; /* QR, RD */
        a[3] = 0x80; /* RA */
        a[4] = 0;
        a[5] = 1;
        memset(a + 6, 0, 6);
        size_t len = qend, count = 0;
        bool known = false;
        for (size_t i = 0; i < s->n; i++) {
                if (strcasecmp(s->rec[i].name, name) != 0)
                        continue;
                known = true;
                struct in_addr ia;
                if (qtype != 1 || inet_pton(AF_INET, s->rec[i].addr, &ia) != 1 || len + 16 > sizeof(a))
                        continue;
                uint8_t rr[16] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4};
                memcpy(rr + 12, &ia, 4);
                memcpy(a + len, rr, 16);
                len += 16;
                count++;
        }
        if (!known)
                a[3] |= 3; /* NXDOMAIN */
        a[6] = (uint8_t)(count >> 8);
        a[7] = (uint8_t)count;
        iov = (struct iovec){a, len};
        mh.msg_controllen = sizeof(cbuf);
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        *c = (struct cmsghdr){.cmsg_level = IPPROTO_IP, .cmsg_type = IP_PKTINFO, .cmsg_len = CMSG_LEN(sizeof(pi))};
        pi = (struct in_pktinfo){.ipi_spec_dst = pi.ipi_addr};
        memcpy(CMSG_DATA(c), &pi, sizeof(pi));
        sendmsg(fd, &mh, 0);
}

static void handle_echo(server *s, int fd)
{
        uint8_t b[2048];
        struct sockaddr_in from;
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(fd, b, sizeof(b), 0, (struct sockaddr *)&from, &fl);
        if (n < 0)
                return;
        char addr[INET_ADDRSTRLEN];
        int port = 0;
        local_of(fd, addr, sizeof(addr), &port);
        logf_(s, "udp %s:%d echo", addr, port);
        sendto(fd, b, (size_t)n, 0, (struct sockaddr *)&from, fl);
}

static int listen_on(int type, const char *addr, int port)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, addr, &sa.sin_addr);
        int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || (type == SOCK_STREAM && listen(fd, 128) < 0))
                return -1;
        return fd;
}

static void serve(server *s, int ns_fd)
{
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (setns(ns_fd, CLONE_NEWNET) < 0)
                _exit(2);
        signal(SIGCHLD, SIG_IGN); /* handlers are reaped by the kernel */
        static const int tcp_ports[] = {80, 8080, 443, 853, 22, 53, 7000};
        struct pollfd p[12];
        size_t np = 0;
        for (size_t i = 0; i < sizeof(tcp_ports) / sizeof(tcp_ports[0]); i++)
                p[np++] = (struct pollfd){.fd = listen_on(SOCK_STREAM, "0.0.0.0", tcp_ports[i]), .events = POLLIN};
        p[np++] = (struct pollfd){.fd = listen_on(SOCK_DGRAM, "0.0.0.0", 53), .events = POLLIN};
        int one = 1;
        if (setsockopt(p[np - 1].fd, IPPROTO_IP, IP_PKTINFO, &one, sizeof(one)) < 0)
                _exit(3);
        p[np++] = (struct pollfd){.fd = listen_on(SOCK_DGRAM, "0.0.0.0", 9999), .events = POLLIN};
        for (size_t i = 0; i < np; i++)
                if (p[i].fd < 0)
                        _exit(3);
        logf_(s, "ready");
        for (;;) {
                if (poll(p, np, -1) < 0 && errno != EINTR)
                        _exit(4);
                for (size_t i = 0; i < np; i++) {
                        if (!(p[i].revents & POLLIN))
                                continue;
                        if (i == np - 2) {
                                handle_dns(s, p[i].fd);
                        } else if (i == np - 1) {
                                handle_echo(s, p[i].fd);
                        } else {
                                int c = accept4(p[i].fd, NULL, NULL, SOCK_CLOEXEC);
                                if (c < 0)
                                        continue;
                                pid_t h = fork();
                                if (h == 0) {
                                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                                        handle_tcp(s, c);
                                        close(c);
                                        _exit(0);
                                }
                                close(c);
                        }
                }
        }
}

int sp_test_inet_start(sp_test_inet *in, const char *dir, const sp_test_inet_record *records, size_t n, sp_error **err)
{
        memset(in, 0, sizeof(*in));
        in->ns.fd = -1;
        in->pid = -1;
        if (n > MAX_RECORDS)
                return sp_error_set(err, SP_E_INVALID, "at most %d records", MAX_RECORDS);
        snprintf(in->dir, sizeof(in->dir), "%s", dir);
        snprintf(in->log_path, sizeof(in->log_path), "%s/inet.log", dir);
        snprintf(in->ca_path, sizeof(in->ca_path), "%s/inet-ca.pem", dir);
        if (sp_test_netns_create(&in->ns, err) < 0)
                return -1;
        const char *addrs[MAX_RECORDS + 1];
        size_t na = 0;
        addrs[na++] = SP_TEST_INET_RESOLVER;
        for (size_t i = 0; i < n; i++) {
                bool dup = false;
                for (size_t j = 0; j < na && !dup; j++)
                        dup = strcmp(addrs[j], records[i].addr) == 0;
                if (!dup)
                        addrs[na++] = records[i].addr;
        }
        for (size_t i = 0; i < na; i++) {
                char a[40];
                snprintf(a, sizeof(a), "%s/32", addrs[i]);
                const char *argv[] = {"ip", "addr", "add", a, "dev", "lo", NULL};
                if (sp_test_netns_exec(&in->ns, argv, NULL, 10000, err) != 0) {
                        sp_test_inet_stop(in);
                        return sp_error_set(err, SP_E_IO, "add %s to the internet's loopback", a);
                }
        }
        /* A certificate for every name (RSA, self-signed: its own CA; small TLS
         * clients such as busybox's speak RSA key exchange best). */
        char key_path[320], sans[2048] = "subjectAltName=";
        snprintf(key_path, sizeof(key_path), "%s/inet-key.pem", in->dir);
        for (size_t i = 0; i < n; i++) {
                size_t l = strlen(sans);
                snprintf(sans + l, sizeof(sans) - l, "%sDNS:%s", i ? "," : "", records[i].name);
        }
        const char *req[] = {"openssl", "req",    "-x509",   "-newkey",   "rsa:2048", "-nodes",
                             "-keyout", key_path, "-out",    in->ca_path, "-subj",    "/CN=inet",
                             "-days",   "2",      "-addext", sans,        NULL};
        pid_t op;
        int status = -1;
        if (sp_test_spawn(req, &(sp_test_spawn_opts){.log_path = "/dev/null"}, &op, err) < 0 ||
            sp_test_child_wait(op, 60000, &status, err) < 0 || status != 0) {
                sp_test_inet_stop(in);
                return sp_error_set(err, SP_E_INTERNAL, "openssl req for the internet's certificate (status %d)",
                                    status);
        }
        _cleanup_buf_ sp_buf cert = SP_BUF_INIT, key = SP_BUF_INIT;
        if (sp_file_read(in->ca_path, 1 << 20, &cert, err) < 0 || sp_file_read(key_path, 1 << 20, &key, err) < 0) {
                sp_test_inet_stop(in);
                return -1;
        }
        server s = {.rec = records, .n = n};
        s.logfd = open(in->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        s.tls = SSL_CTX_new(TLS_server_method());
        BIO *cb = BIO_new_mem_buf(cert.data, (int)cert.len), *kb = BIO_new_mem_buf(key.data, (int)key.len);
        X509 *x = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
        EVP_PKEY *pk = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
        /* Busybox's own TLS client (the base template's wget) sends no
         * signature_algorithms: the default it then implies (SHA-1) needs
         * security level 0. A test server only. */
        if (s.tls)
                SSL_CTX_set_security_level(s.tls, 0);
        bool ok = s.logfd >= 0 && s.tls && x && pk && SSL_CTX_use_certificate(s.tls, x) == 1 &&
                  SSL_CTX_use_PrivateKey(s.tls, pk) == 1;
        X509_free(x);
        EVP_PKEY_free(pk);
        BIO_free(cb);
        BIO_free(kb);
        if (!ok) {
                if (s.logfd >= 0)
                        close(s.logfd);
                SSL_CTX_free(s.tls);
                sp_test_inet_stop(in);
                return sp_error_set(err, SP_E_INTERNAL, "the internet's TLS server");
        }
        fflush(NULL);
        in->pid = fork();
        if (in->pid == 0)
                serve(&s, in->ns.fd);
        close(s.logfd);
        SSL_CTX_free(s.tls);
        if (in->pid < 0) {
                sp_test_inet_stop(in);
                return sp_error_set_errno(err, SP_E_LIMIT, errno, "fork the internet's servers");
        }
        for (int i = 0; i < 500; i++) {
                if (sp_test_inet_seen(in, "ready") > 0)
                        return 0;
                if (waitpid(in->pid, NULL, WNOHANG) == in->pid) {
                        in->pid = -1;
                        break;
                }
                usleep(10000);
        }
        sp_test_inet_stop(in);
        return sp_error_set(err, SP_E_INTERNAL, "the internet's servers did not start");
}

void sp_test_inet_stop(sp_test_inet *in)
{
        if (in->pid > 0) {
                kill(in->pid, SIGKILL);
                waitpid(in->pid, NULL, 0);
        }
        in->pid = -1;
        sp_test_netns_destroy(&in->ns);
}

int sp_test_inet_seen(const sp_test_inet *in, const char *needle)
{
        _cleanup_fclose_ FILE *f = fopen(in->log_path, "re");
        char line[1024];
        int n = 0;
        while (f && fgets(line, sizeof(line), f))
                if (strstr(line, needle))
                        n++;
        return n;
}
