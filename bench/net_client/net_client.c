/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-bench-net-client: the client side of `bench/run net` (bench/net_bench.c),
 * run unchanged inside a sandbox (through the egress gateway) and in a plain
 * network namespace routed straight to the bench's internet (beside it).
 * Static, plain libc, no resolver library: it asks the DNS server it is given
 * over UDP itself, as a stub resolver does (in a sandbox the query is
 * redirected to the gateway whatever the address).
 *
 *   space-bench-net-client --resolver A.B.C.D --name NAME --port N
 *                          [--verify N] [--dns N] [--setup N] [--get N] [--bytes N] [--interval-ms N]
 *
 * It looks the name up once (not timed; its query sent again each second
 * until answered, at most 5 times), then:
 *   --verify N  one download of N bytes whose every byte is checked (byte p of
 *               the body is 'a' + p % 26, as the bench's server sends it):
 *               "verify <bytes>" (not timed; the relay's integrity)
 *   --dns N     N lookups of NAME's A record, each on a new UDP socket:
 *               "dns <ms>" (query sent → answer read)
 *   --setup N   N connections to the name's address, each sending one small
 *               HTTP/1.1 GET (Connection: close) and reading the answer to its
 *               end: "setup <connect ms> <first byte ms>" (both from just
 *               before connect(): TCP connect, and the first response byte)
 *   --get N     N downloads of GET /bytes/<--bytes> (default 64 MiB):
 *               "get <body bytes> <seconds> <first byte ms>" (seconds from
 *               just before connect() to the last byte)
 * Samples are --interval-ms apart (default 25: under the gateway's default
 * 50 new connections and 50 DNS queries a second per sandbox). Any failure
 * (an error, a timeout, a status other than 200, a short body) is a message on
 * stderr and exit 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define IO_TIMEOUT_MS 10000

static const char *name;
static int port;
static struct in_addr resolver;

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "space-bench-net-client: ");
        vfprintf(stderr, fmt, ap);
        fprintf(stderr, "\n");
        va_end(ap);
        exit(1);
}

/* Waits up to ms for events on fd: false when the time ran out. */
static bool wait_fd_for(int fd, short events, int ms, const char *what)
{
        struct pollfd p = {.fd = fd, .events = events};
        int r;
        while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
                ;
        if (r < 0)
                die("%s: poll: %s", what, strerror(errno));
        return r > 0;
}

static void wait_fd(int fd, short events, const char *what)
{
        if (!wait_fd_for(fd, events, IO_TIMEOUT_MS, what))
                die("%s: timed out", what);
}

/* ---- DNS: one A question, the first A record of the answer ---- */

static size_t dns_query(uint8_t *q, uint16_t id)
{
        size_t n = 0;
        q[n++] = (uint8_t)(id >> 8);
        q[n++] = (uint8_t)id;
        q[n++] = 0x01; /* RD */
        q[n++] = 0;
        q[n++] = 0;
        q[n++] = 1; /* one question */
        memset(q + n, 0, 6);
        n += 6;
        for (const char *l = name; *l;) {
                size_t k = strcspn(l, ".");
                q[n++] = (uint8_t)k;
                memcpy(q + n, l, k);
                n += k;
                l += k;
                if (*l == '.')
                        l++;
        }
        q[n++] = 0;
        q[n++] = 0;
        q[n++] = 1; /* A */
        q[n++] = 0;
        q[n++] = 1; /* IN */
        return n;
}

/* Skips a (possibly compressed) name at off; returns the offset after it, or 0. */
static size_t dns_skip_name(const uint8_t *a, size_t n, size_t off)
{
        while (off < n) {
                uint8_t l = a[off];
                if (l == 0)
                        return off + 1;
                if ((l & 0xc0) == 0xc0)
                        return off + 2 <= n ? off + 2 : 0;
                off += 1 + (size_t)l;
        }
        return 0;
}

/* Looks NAME up. A timed lookup (ret_ms) sends its query once: a lost one
 * is a failure, never a slow sample. The first, untimed lookup sends it again
 * every second, up to FIRST_TRIES times, as a stub resolver does (glibc's
 * "options timeout:1 attempts:5"), and says on stderr when it had to. */
#define FIRST_TRIES 5
static struct in_addr dns_lookup(double *ret_ms)
{
        static uint16_t id;
        if (!id)
                id = (uint16_t)(getpid() ^ (int)now_ms());
        id++;
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                die("socket: %s", strerror(errno));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(53), .sin_addr = resolver};
        uint8_t q[300], a[1500];
        size_t qn = dns_query(q, id);
        double t0 = now_ms();
        if (sendto(fd, q, qn, 0, (struct sockaddr *)&sa, sizeof(sa)) != (ssize_t)qn)
                die("DNS query for %s: %s", name, strerror(errno));
        ssize_t n;
        int sent = 1;
        for (;;) {
                if (ret_ms)
                        wait_fd(fd, POLLIN, "DNS answer");
                else if (!wait_fd_for(fd, POLLIN, 1000, "DNS answer")) {
                        if (sent == FIRST_TRIES)
                                die("DNS answer: none to %d queries sent a second apart", sent);
                        if (sendto(fd, q, qn, 0, (struct sockaddr *)&sa, sizeof(sa)) != (ssize_t)qn)
                                die("DNS query for %s: %s", name, strerror(errno));
                        sent++;
                        continue;
                }
                n = recv(fd, a, sizeof(a), 0);
                if (n < 0)
                        die("DNS answer for %s: %s", name, strerror(errno));
                if (n >= 12 && a[0] == (uint8_t)(id >> 8) && a[1] == (uint8_t)id)
                        break;
        }
        double t1 = now_ms();
        close(fd);
        if (sent > 1)
                fprintf(stderr, "space-bench-net-client: the first lookup of %s was answered after %d queries\n", name,
                        sent);
        if ((a[3] & 0x0f) != 0)
                die("DNS answer for %s: rcode %d", name, a[3] & 0x0f);
        size_t off = dns_skip_name(a, (size_t)n, 12);
        if (!off)
                die("DNS answer for %s: malformed", name);
        off += 4;
        unsigned an = (unsigned)(a[6] << 8 | a[7]);
        for (unsigned i = 0; i < an && off; i++) {
                off = dns_skip_name(a, (size_t)n, off);
                if (!off || off + 10 > (size_t)n)
                        break;
                unsigned type = (unsigned)(a[off] << 8 | a[off + 1]);
                unsigned len = (unsigned)(a[off + 8] << 8 | a[off + 9]);
                off += 10;
                if (off + len > (size_t)n)
                        break;
                if (type == 1 && len == 4) {
                        struct in_addr r;
                        memcpy(&r, a + off, 4);
                        if (ret_ms)
                                *ret_ms = t1 - t0;
                        return r;
                }
                off += len;
        }
        die("DNS answer for %s: no A record", name);
}

/* ---- HTTP ---- */

typedef struct {
        double connect_ms, first_ms, total_ms;
        uint64_t body;
} fetch_result;

/* Checks body bytes [off, off + n) against the server's pattern. */
static void check(const char *p, size_t n, uint64_t off)
{
        for (size_t i = 0; i < n; i++)
                if (p[i] != (char)('a' + (off + i) % 26))
                        die("byte %llu of the body is wrong", (unsigned long long)(off + i));
}

/* Connects to addr, sends GET path, reads the answer to its end (checking
 * the body's bytes with verify). */
static fetch_result fetch(struct in_addr addr, const char *path, uint64_t want_body, bool verify)
{
        static char buf[256 * 1024];
        fetch_result r = {0};
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                die("socket: %s", strerror(errno));
        struct timeval tv = {.tv_sec = IO_TIMEOUT_MS / 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr = addr};
        char req[512];
        int qn = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", path, name,
                          port);
        double t0 = now_ms();
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                die("connect %s:%d: %s", inet_ntoa(addr), port, strerror(errno));
        r.connect_ms = now_ms() - t0;
        if (write(fd, req, (size_t)qn) != qn)
                die("GET %s: write: %s", path, strerror(errno));
        size_t head = 0; /* bytes of the head read so far (into buf) */
        bool in_body = false;
        for (;;) {
                ssize_t n = read(fd, in_body ? buf : buf + head, in_body ? sizeof(buf) : sizeof(buf) - 1 - head);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        die("GET %s: read: %s", path, errno == EAGAIN ? "timed out" : strerror(errno));
                if (n == 0)
                        break;
                if (r.first_ms == 0)
                        r.first_ms = now_ms() - t0;
                if (in_body) {
                        if (verify)
                                check(buf, (size_t)n, r.body);
                        r.body += (uint64_t)n;
                        continue;
                }
                head += (size_t)n;
                buf[head] = '\0';
                char *end = strstr(buf, "\r\n\r\n");
                if (!end) {
                        if (head >= sizeof(buf) - 1)
                                die("GET %s: the response head is too large", path);
                        continue;
                }
                if (strncmp(buf, "HTTP/1.1 200 ", 13) != 0)
                        die("GET %s: %.*s", path, (int)strcspn(buf, "\r\n"), buf);
                r.body = (uint64_t)(buf + head - (end + 4));
                if (verify)
                        check(end + 4, (size_t)r.body, 0);
                in_body = true;
        }
        r.total_ms = now_ms() - t0;
        close(fd);
        if (!in_body)
                die("GET %s: the connection closed before the response head", path);
        if (want_body && r.body != want_body)
                die("GET %s: %llu body bytes, expected %llu", path, (unsigned long long)r.body,
                    (unsigned long long)want_body);
        return r;
}

static void pause_ms(int ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static long arg_num(const char *flag, const char *v, long lo, long hi)
{
        char *end = NULL;
        errno = 0;
        long n = v ? strtol(v, &end, 10) : 0;
        if (!v || errno || *end || n < lo || n > hi)
                die("%s must be a number from %ld to %ld", flag, lo, hi);
        return n;
}

int main(int argc, char **argv)
{
        long dns = 0, setup = 0, get = 0, interval = 25, verify = 0;
        uint64_t bytes = 64u << 20;
        const char *res = NULL;
        for (int i = 1; i < argc; i++) {
                const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
                i++;
                if (strcmp(a, "--resolver") == 0 && v)
                        res = v;
                else if (strcmp(a, "--name") == 0 && v)
                        name = v;
                else if (strcmp(a, "--port") == 0)
                        port = (int)arg_num(a, v, 1, 65535);
                else if (strcmp(a, "--verify") == 0)
                        verify = arg_num(a, v, 0, 1L << 30);
                else if (strcmp(a, "--dns") == 0)
                        dns = arg_num(a, v, 0, 100000);
                else if (strcmp(a, "--setup") == 0)
                        setup = arg_num(a, v, 0, 100000);
                else if (strcmp(a, "--get") == 0)
                        get = arg_num(a, v, 0, 10000);
                else if (strcmp(a, "--bytes") == 0)
                        bytes = (uint64_t)arg_num(a, v, 1, 1L << 40);
                else if (strcmp(a, "--interval-ms") == 0)
                        interval = arg_num(a, v, 0, 10000);
                else
                        die("usage: space-bench-net-client --resolver A.B.C.D --name NAME --port N [--verify N] "
                            "[--dns N] [--setup N] [--get N] [--bytes N] [--interval-ms N]");
        }
        if (!res || inet_pton(AF_INET, res, &resolver) != 1)
                die("--resolver must be an IPv4 address");
        if (!name || !*name || strlen(name) > 200 || !port)
                die("--name and --port are needed");
        setvbuf(stdout, NULL, _IOLBF, 0);

        struct in_addr addr = dns_lookup(NULL);
        char path[64];
        if (verify) {
                snprintf(path, sizeof(path), "/bytes/%ld", verify);
                printf("verify %llu\n", (unsigned long long)fetch(addr, path, (uint64_t)verify, true).body);
        }
        for (long i = 0; i < dns; i++) {
                double ms = 0;
                addr = dns_lookup(&ms);
                printf("dns %.4f\n", ms);
                pause_ms((int)interval);
        }
        for (long i = 0; i < setup; i++) {
                fetch_result r = fetch(addr, "/", 0, false);
                printf("setup %.4f %.4f\n", r.connect_ms, r.first_ms);
                pause_ms((int)interval);
        }
        snprintf(path, sizeof(path), "/bytes/%llu", (unsigned long long)bytes);
        for (long i = 0; i < get; i++) {
                fetch_result r = fetch(addr, path, bytes, false);
                printf("get %llu %.6f %.4f\n", (unsigned long long)r.body, r.total_ms / 1e3, r.first_ms);
                pause_ms((int)interval);
        }
        return 0;
}
