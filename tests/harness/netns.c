/* SPDX-License-Identifier: Apache-2.0 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "space/cleanup.h"

#include "harness.h"
#include "netns.h"
#include "proc.h"

#define NETNS_OP_TIMEOUT_MS 10000
#define NETNS_NAME_ATTEMPTS 16

void sp_test_netns_require(void)
{
        sp_test_require_root("network namespaces need CAP_SYS_ADMIN");
}

/* A page shared with a forked child, for the child's error message. */
struct report {
        char msg[512];
};

static struct report *report_new(void)
{
        void *p = mmap(NULL, sizeof(struct report), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
                abort();
        memset(p, 0, sizeof(struct report));
        return p;
}

static void report_freep(struct report **r)
{
        if (*r)
                munmap(*r, sizeof(struct report));
        *r = NULL;
}

/* In the child: records "what: strerror(errno)" and returns the exit code. */
static int report_fail(struct report *r, const char *what)
{
        int e = errno;
        snprintf(r->msg, sizeof(r->msg), "%s: %s", what, strerror(e));
        return 1;
}

/* Forks a child that dies with us, enters nsfd (if >= 0), runs fn(arg) and
 * exits with its result. Returns the exit code, or <0. */
static int fork_run(int nsfd, int (*fn)(void *), void *arg, int64_t timeout_ms, sp_error **err)
{
        _cleanup_(report_freep) struct report *setup = report_new();
        pid_t parent = getpid();
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "fork");
        if (pid == 0) {
                /* Setup failures are told apart from fn's own exit codes by the message. */
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
                        _exit(report_fail(setup, "PR_SET_PDEATHSIG"));
                if (getppid() != parent)
                        _exit(127);
                if (nsfd >= 0 && setns(nsfd, CLONE_NEWNET) < 0)
                        _exit(report_fail(setup, "entering the network namespace"));
                int code = fn(arg);
                fflush(NULL);
                _exit(code & 0xff);
        }
        int st = 0;
        sp_error *e = NULL;
        if (sp_test_child_wait(pid, timeout_ms, &st, &e) < 0) {
                (void)sp_test_child_stop(pid, false, SIGKILL, 0, NULL, NULL);
                sp_error_move(err, &e);
                return sp_error_wrap(err, "child in network namespace");
        }
        if (WIFSIGNALED(st))
                return sp_error_set(err, SP_E_INTERNAL, "child in network namespace killed by signal %d", WTERMSIG(st));
        if (setup->msg[0])
                return sp_error_set(err, SP_E_IO, "child in network namespace: %s", setup->msg);
        return WEXITSTATUS(st);
}

struct create_args {
        const char *path;
        struct report *rep;
};

static int create_child(void *arg)
{
        struct create_args *a = arg;
        if (unshare(CLONE_NEWNET) < 0)
                return report_fail(a->rep, "unshare(CLONE_NEWNET)");
        _cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct ifreq ifr;
        memset(&ifr, 0, sizeof(ifr));
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
        if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
                return report_fail(a->rep, "reading lo flags");
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
                return report_fail(a->rep, "bringing lo up");
        if (mount("/proc/self/ns/net", a->path, "none", MS_BIND, NULL) < 0)
                return report_fail(a->rep, "bind-mounting the namespace");
        return 0;
}

int sp_test_netns_create(sp_test_netns *ns, sp_error **err)
{
        static unsigned counter;
        memset(ns, 0, sizeof(*ns));
        ns->fd = -1;
        if (mkdir(SP_TEST_NETNS_DIR, 0755) < 0 && errno != EEXIST)
                return sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", SP_TEST_NETNS_DIR);

        for (int attempt = 0;; attempt++) {
                snprintf(ns->name, sizeof(ns->name), SP_TEST_NETNS_PREFIX "%d-%u", (int)getpid(), counter++);
                snprintf(ns->path, sizeof(ns->path), SP_TEST_NETNS_DIR "/%s", ns->name);
                int fd = open(ns->path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0);
                if (fd >= 0) {
                        close(fd);
                        break;
                }
                if (errno != EEXIST || attempt + 1 == NETNS_NAME_ATTEMPTS) {
                        int r = sp_error_set_errno(err, SP_E_IO, errno, "creating %s", ns->path);
                        memset(ns, 0, sizeof(*ns));
                        ns->fd = -1;
                        return r;
                }
        }

        _cleanup_(report_freep) struct report *rep = report_new();
        struct create_args a = {.path = ns->path, .rep = rep};
        int r = fork_run(-1, create_child, &a, NETNS_OP_TIMEOUT_MS, err);
        if (r > 0)
                r = sp_error_set(err, SP_E_IO, "creating network namespace %s: %s", ns->name, rep->msg);
        if (r == 0) {
                ns->fd = open(ns->path, O_RDONLY | O_CLOEXEC);
                if (ns->fd < 0)
                        r = sp_error_set_errno(err, SP_E_IO, errno, "open %s", ns->path);
        }
        if (r < 0) {
                sp_test_netns_destroy(ns);
                return r;
        }
        return 0;
}

void sp_test_netns_destroy(sp_test_netns *ns)
{
        if (!ns || !ns->name[0])
                return;
        ns->fd = sp_close(ns->fd);
        if (umount2(ns->path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
                fprintf(stderr, "umount %s: %s\n", ns->path, strerror(errno));
        if (unlink(ns->path) < 0 && errno != ENOENT)
                fprintf(stderr, "unlink %s: %s\n", ns->path, strerror(errno));
        memset(ns, 0, sizeof(*ns));
        ns->fd = -1;
}

int sp_test_netns_run(const sp_test_netns *ns, int (*fn)(void *arg), void *arg, int64_t timeout_ms, sp_error **err)
{
        if (!ns || ns->fd < 0)
                return sp_error_set(err, SP_E_INVALID, "no network namespace");
        return fork_run(ns->fd, fn, arg, timeout_ms, err);
}

int sp_test_netns_exec(const sp_test_netns *ns, const char *const *argv, const char *log_path, int64_t timeout_ms,
                       sp_error **err)
{
        if (!ns || !ns->name[0])
                return sp_error_set(err, SP_E_INVALID, "no network namespace");
        sp_test_spawn_opts o = {.log_path = log_path, .netns = ns->path, .netns_sysfs = true, .pdeathsig = SIGKILL};
        pid_t pid;
        if (sp_test_spawn(argv, &o, &pid, err) < 0)
                return sp_error_wrap(err, "in network namespace %s", ns->name);
        int st = 0;
        if (sp_test_child_wait(pid, timeout_ms, &st, err) < 0) {
                (void)sp_test_child_stop(pid, false, SIGKILL, 0, NULL, NULL);
                return sp_error_wrap(err, "%s in network namespace %s", argv[0], ns->name);
        }
        if (WIFSIGNALED(st))
                return sp_error_set(err, SP_E_INTERNAL, "%s killed by signal %d", argv[0], WTERMSIG(st));
        return WEXITSTATUS(st);
}

/* A minimal rtnetlink request builder: one message in a fixed buffer. */
struct nlreq {
        struct nlmsghdr *h;
        union {
                struct nlmsghdr align;
                char buf[2048];
        } u;
};

static void *nl_tail(struct nlreq *r)
{
        return (char *)r->h + NLMSG_ALIGN(r->h->nlmsg_len);
}

static void nl_init(struct nlreq *r, int type, int flags, const void *hdr, size_t hdrlen)
{
        memset(&r->u, 0, sizeof(r->u));
        r->h = &r->u.align;
        r->h->nlmsg_len = NLMSG_LENGTH(hdrlen);
        r->h->nlmsg_type = (__u16)type;
        r->h->nlmsg_flags = (__u16)(NLM_F_REQUEST | NLM_F_ACK | flags);
        r->h->nlmsg_seq = 1;
        memcpy(NLMSG_DATA(r->h), hdr, hdrlen);
}

/* Appends attribute type with len bytes of data; returns it (for nesting). */
static struct rtattr *nl_put(struct nlreq *r, int type, const void *data, size_t len)
{
        size_t need = NLMSG_ALIGN(r->h->nlmsg_len) + RTA_SPACE(len);
        if (need > sizeof(r->u.buf))
                abort(); /* the requests here are small and fixed */
        struct rtattr *a = nl_tail(r);
        a->rta_type = (unsigned short)type;
        a->rta_len = (unsigned short)RTA_LENGTH(len);
        if (len)
                memcpy(RTA_DATA(a), data, len);
        r->h->nlmsg_len = (__u32)need;
        return a;
}

static void nl_end(struct nlreq *r, struct rtattr *nest)
{
        nest->rta_len = (unsigned short)((char *)nl_tail(r) - (char *)nest);
}

/* Sends the request and reads its acknowledgement; returns 0 or -errno. */
static int nl_talk(struct nlreq *r)
{
        _cleanup_close_ int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        if (fd < 0)
                return -errno;
        struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
        if (sendto(fd, r->h, r->h->nlmsg_len, 0, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return -errno;
        union {
                struct nlmsghdr h;
                char buf[4096];
        } ans;
        ssize_t n = recv(fd, &ans, sizeof(ans), 0);
        if (n < 0)
                return -errno;
        for (struct nlmsghdr *h = &ans.h; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n))
                if (h->nlmsg_type == NLMSG_ERROR)
                        return ((struct nlmsgerr *)NLMSG_DATA(h))->error;
        return -EPROTO;
}

static int nl_addr_up(const char *ifname, const char *addr, int prefix_len)
{
        unsigned idx = if_nametoindex(ifname);
        if (idx == 0)
                return -errno;
        struct nlreq r;
        struct ifaddrmsg ifa = {.ifa_family = AF_INET, .ifa_prefixlen = (unsigned char)prefix_len, .ifa_index = idx};
        struct in_addr in;
        if (inet_pton(AF_INET, addr, &in) != 1)
                return -EINVAL;
        nl_init(&r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &ifa, sizeof(ifa));
        nl_put(&r, IFA_LOCAL, &in, sizeof(in));
        nl_put(&r, IFA_ADDRESS, &in, sizeof(in));
        int e = nl_talk(&r);
        if (e < 0)
                return e;
        struct ifinfomsg ifi = {
                .ifi_family = AF_UNSPEC, .ifi_index = (int)idx, .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
        nl_init(&r, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
        return nl_talk(&r);
}

struct veth_args {
        const sp_test_veth *v;
        int fd_b;
        struct report *rep;
};

/* Runs in namespace a: creates the pair with its peer in b, then sets both ends up. */
static int veth_child(void *arg)
{
        struct veth_args *a = arg;
        const sp_test_veth *v = a->v;
        struct nlreq r;
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
        __u32 fd_b = (__u32)a->fd_b;

        nl_init(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
        nl_put(&r, IFLA_IFNAME, v->name_a, strlen(v->name_a) + 1);
        struct rtattr *linkinfo = nl_put(&r, IFLA_LINKINFO, NULL, 0);
        nl_put(&r, IFLA_INFO_KIND, "veth", 4);
        struct rtattr *data = nl_put(&r, IFLA_INFO_DATA, NULL, 0);
        struct rtattr *peer = nl_put(&r, VETH_INFO_PEER, &ifi, sizeof(ifi));
        nl_put(&r, IFLA_IFNAME, v->name_b, strlen(v->name_b) + 1);
        nl_put(&r, IFLA_NET_NS_FD, &fd_b, sizeof(fd_b));
        nl_end(&r, peer);
        nl_end(&r, data);
        nl_end(&r, linkinfo);
        int e = nl_talk(&r);
        if (e < 0) {
                errno = -e;
                return report_fail(a->rep, "creating the veth pair");
        }
        if ((e = nl_addr_up(v->name_a, v->addr_a, v->prefix_len)) < 0) {
                errno = -e;
                return report_fail(a->rep, "configuring the first end");
        }
        if (setns(a->fd_b, CLONE_NEWNET) < 0)
                return report_fail(a->rep, "entering the second namespace");
        if ((e = nl_addr_up(v->name_b, v->addr_b, v->prefix_len)) < 0) {
                errno = -e;
                return report_fail(a->rep, "configuring the second end");
        }
        return 0;
}

int sp_test_netns_veth(const sp_test_netns *a, const sp_test_netns *b, sp_test_veth *ret, sp_error **err)
{
        static unsigned counter;
        if (!a || !b || a->fd < 0 || b->fd < 0)
                return sp_error_set(err, SP_E_INVALID, "veth needs two network namespaces");
        unsigned n = counter++;
        /* Names and the /30 mix in our pid, so that tests sharing namespaces do not collide. */
        unsigned subnet = ((unsigned)getpid() * 131u + n) % 16384u;
        sp_test_veth v = {.prefix_len = 30};
        snprintf(v.name_a, sizeof(v.name_a), "sv%d-%ua", (int)(getpid() % 10000000), n % 1000);
        snprintf(v.name_b, sizeof(v.name_b), "sv%d-%ub", (int)(getpid() % 10000000), n % 1000);
        snprintf(v.addr_a, sizeof(v.addr_a), "10.213.%u.%u", subnet / 64, (subnet % 64) * 4 + 1);
        snprintf(v.addr_b, sizeof(v.addr_b), "10.213.%u.%u", subnet / 64, (subnet % 64) * 4 + 2);

        _cleanup_(report_freep) struct report *rep = report_new();
        struct veth_args args = {.v = &v, .fd_b = b->fd, .rep = rep};
        int r = fork_run(a->fd, veth_child, &args, NETNS_OP_TIMEOUT_MS, err);
        if (r > 0)
                r = sp_error_set(err, SP_E_IO, "veth %s/%s between %s and %s: %s", v.name_a, v.name_b, a->name, b->name,
                                 rep->msg);
        if (r < 0)
                return r;
        *ret = v;
        return 0;
}
