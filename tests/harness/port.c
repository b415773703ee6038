/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "port.h"

#define PORT_LOCK_DIR "/tmp/space-test-ports"
#define PORT_MAX 65535
/* Less room than this on a side of the ephemeral range is not worth using. */
#define PORT_MIN_ROOM 2000
#define BLOCK_MAX 64

int sp_test_port_range(int *ret_lo, int *ret_hi)
{
        int lo = 32768, hi = 60999; /* the kernel's default, if the file cannot be read */
        _cleanup_fclose_ FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "re");
        if (f && fscanf(f, "%d %d", &lo, &hi) != 2) {
                lo = 32768;
                hi = 60999;
        }
        if (lo - SP_TEST_PORT_MIN >= PORT_MIN_ROOM) {
                *ret_lo = SP_TEST_PORT_MIN;
                *ret_hi = lo - 1;
                return 0;
        }
        if (PORT_MAX - hi >= PORT_MIN_ROOM) {
                *ret_lo = hi + 1;
                *ret_hi = PORT_MAX;
                return 0;
        }
        return -1;
}

/* True if 127.0.0.1:port can be bound right now (no SO_REUSEADDR: a port
 * still in TIME_WAIT counts as taken). */
/* Free for TCP and for UDP (a gateway's DNS port is a UDP one), on any address. */
static bool port_bindable(int port)
{
        static const int types[] = {SOCK_STREAM, SOCK_DGRAM};
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
                _cleanup_close_ int fd = socket(AF_INET, types[i] | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return false;
                struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
                a.sin_addr.s_addr = htonl(INADDR_ANY);
                if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
                        return false;
        }
        return true;
}

/* Takes the lock of port: returns its descriptor (kept open for the life of
 * the process), -1 if another process holds it, or -2 if locks cannot be had
 * here at all (then ports go unreserved). */
static int port_lock(int port)
{
        static bool dir_ready;
        if (!dir_ready) {
                if (mkdir(PORT_LOCK_DIR, 01777) == 0)
                        (void)chmod(PORT_LOCK_DIR, 01777); /* past the umask: every user's tests share it */
                else if (errno != EEXIST)
                        return -2;
                dir_ready = true;
        }
        char p[64];
        snprintf(p, sizeof(p), PORT_LOCK_DIR "/%d", port);
        int fd = open(p, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return errno == EACCES ? -1 : -2;
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                int e = errno;
                close(fd);
                return e == EWOULDBLOCK ? -1 : -2;
        }
        return fd;
}

/* The kernel's choice: bind to port 0, read it back, close. */
static int kernel_port(sp_error **err)
{
        _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "socket");
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof(a);
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || getsockname(fd, (struct sockaddr *)&a, &len) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "bind 127.0.0.1:0");
        return ntohs(a.sin_port);
}

int sp_test_free_port_block(int n, sp_error **err)
{
        static int cursor; /* the next port to try; a random start per process */
        int lo, hi;

        if (n < 1 || n > BLOCK_MAX)
                return sp_error_set(err, SP_E_INVALID, "a block of %d ports (1 to %d)", n, BLOCK_MAX);
        if (sp_test_port_range(&lo, &hi) < 0) {
                if (n == 1)
                        return kernel_port(err);
                return sp_error_set(err, SP_E_LIMIT, "the ephemeral port range leaves no room for test ports");
        }
        int span = hi - lo + 1;
        if (cursor < lo || cursor > hi) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                unsigned seed = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
                cursor = lo + (int)(seed % (unsigned)span);
        }
        for (int tried = 0; tried < span; tried++) {
                int base = cursor;
                cursor = cursor + n > hi ? lo : cursor + n;
                if (base + n - 1 > hi)
                        continue;
                int fds[BLOCK_MAX], k = 0;
                bool ok = true;
                for (; k < n && ok; k++) {
                        fds[k] = port_lock(base + k);
                        ok = fds[k] != -1 && port_bindable(base + k);
                }
                if (ok)
                        return base; /* the locks stay held (their descriptors stay open) */
                for (int i = 0; i < k; i++)
                        if (fds[i] >= 0)
                                close(fds[i]);
        }
        return sp_error_set(err, SP_E_LIMIT, "no block of %d free ports in %d-%d", n, lo, hi);
}

int sp_test_free_port(sp_error **err)
{
        return sp_test_free_port_block(1, err);
}

int sp_test_worker_net_args(int port, const char *upstream_netns, sp_test_worker_net *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        unsigned block = (unsigned)port % 32768;
        ret->tcp_port = sp_test_free_port(err);
        ret->dns_port = ret->tcp_port > 0 ? sp_test_free_port(err) : -1;
        if (ret->dns_port < 0)
                return -1;
        snprintf(ret->enable, sizeof(ret->enable), "--sandbox-network=true");
        snprintf(ret->cidr, sizeof(ret->cidr), "--sandbox-cidr=10.%u.%u.0/24", 128 + block / 256, block % 256);
        snprintf(ret->ifprefix, sizeof(ret->ifprefix), "t%d", port);
        snprintf(ret->prefix, sizeof(ret->prefix), "--net-prefix=%s", ret->ifprefix);
        snprintf(ret->tcp, sizeof(ret->tcp), "--gateway-tcp-port=%d", ret->tcp_port);
        snprintf(ret->dns, sizeof(ret->dns), "--gateway-dns-port=%d", ret->dns_port);
        snprintf(ret->group, sizeof(ret->group), "--gateway-log-group=%d", port);
        size_t n = 0;
        ret->argv[n++] = ret->enable;
        ret->argv[n++] = ret->cidr;
        ret->argv[n++] = ret->prefix;
        ret->argv[n++] = ret->tcp;
        ret->argv[n++] = ret->dns;
        ret->argv[n++] = ret->group;
        if (upstream_netns) {
                snprintf(ret->upstream, sizeof(ret->upstream), "--gateway-upstream-netns=%s", upstream_netns);
                ret->argv[n++] = ret->upstream;
        } else {
                snprintf(ret->gateway, sizeof(ret->gateway), "--gateway=none");
                ret->argv[n++] = ret->gateway;
        }
        ret->argv[n] = NULL;
        return 0;
}
