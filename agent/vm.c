/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The agent as a VM's init (the qemu backend, docs/backends.md): the kernel
 * runs it as /init from the initramfs the worker made. It mounts what the
 * kernel does not, loads the virtio modules the initramfs carries, mounts the
 * sandbox's disk (/dev/vda, ext4) and makes it the root, then serves the agent
 * protocol on its virtio-serial port — everything above the transport is what
 * a jail's agent does.
 *
 * Settings come from the kernel's command line: space.hostname=NAME,
 * space.log=LEVEL, space.net=ADDRESS/PREFIX,ROUTER (its network device's
 * address, fixed for every VM, and its router, also its resolver: the
 * worker's side translates them, docs/backends.md "Network"). Runs once, before the event loop, single-threaded; a step
 * that fails ends the agent, which as PID 1 ends the VM (panic=-1): the
 * worker sees the VM gone and reports the message it logged on the console.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"

#define MODULES_DIR "/lib/space/modules"
#define PORT_NAME "space.agent"
#define WAIT_MS 20000

__attribute__((noreturn, format(printf, 2, 3))) static void fail(int e, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fprintf(stderr, "space-agent: vm init: %s%s%s\n", msg, e ? ": " : "", e ? strerror(e) : "");
        _exit(1);
}

static void sleep_ms(int ms)
{
        struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
}

static void mkdir_quiet(const char *path, mode_t mode)
{
        if (mkdir(path, mode) < 0 && errno != EEXIST)
                fail(errno, "mkdir %s", path);
}

/* The value of key=... on the kernel's command line, or def. */
static void cmdline_get(const char *cmdline, const char *key, char *out, size_t n, const char *def)
{
        size_t klen = strlen(key);
        for (const char *p = cmdline; *p;) {
                while (*p == ' ' || *p == '\n')
                        p++;
                const char *end = p;
                while (*end && *end != ' ' && *end != '\n')
                        end++;
                if ((size_t)(end - p) > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
                        size_t len = (size_t)(end - p) - klen - 1;
                        if (len >= n)
                                len = n - 1;
                        memcpy(out, p + klen + 1, len);
                        out[len] = '\0';
                        return;
                }
                p = end;
        }
        snprintf(out, n, "%s", def);
}

/* Loads the modules named, one per line, in MODULES_DIR/order. */
static void load_modules(void)
{
        FILE *f = fopen(MODULES_DIR "/order", "re");
        if (!f)
                return; /* a kernel with the drivers built in */
        char line[256];
        while (fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\r\n")] = '\0';
                if (!line[0])
                        continue;
                char path[512];
                snprintf(path, sizeof(path), "%s/%s", MODULES_DIR, line);
                int fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        fail(errno, "open %s", path);
                if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)
                        fail(errno, "load module %s", line);
                close(fd);
        }
        fclose(f);
}

static void wait_for(const char *path)
{
        for (int ms = 0; access(path, F_OK) < 0; ms += 5) {
                if (ms >= WAIT_MS)
                        fail(0, "%s did not appear", path);
                sleep_ms(5);
        }
}

/* Opens the virtio-serial port named PORT_NAME (its /dev node: the name is in sysfs). */
static int open_port(void)
{
        for (int ms = 0; ms < WAIT_MS; ms += 5) {
                DIR *d = opendir("/sys/class/virtio-ports");
                struct dirent *de;
                while (d && (de = readdir(d))) {
                        if (de->d_name[0] == '.')
                                continue;
                        char path[512], name[64] = "";
                        snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
                        FILE *f = fopen(path, "re");
                        if (!f)
                                continue;
                        if (!fgets(name, sizeof(name), f))
                                name[0] = '\0';
                        fclose(f);
                        name[strcspn(name, "\n")] = '\0';
                        if (strcmp(name, PORT_NAME) != 0)
                                continue;
                        snprintf(path, sizeof(path), "/dev/%s", de->d_name);
                        closedir(d);
                        wait_for(path);
                        int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
                        if (fd < 0)
                                fail(errno, "open %s", path);
                        return fd;
                }
                if (d)
                        closedir(d);
                sleep_ms(5);
        }
        fail(0, "no virtio-serial port named %s", PORT_NAME);
}

static void loopback_up(void)
{
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        struct ifreq ifr = {0};
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
        if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
                fail(errno, "read the loopback's flags");
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
                fail(errno, "bring the loopback up");
        close(s);
}

static void sockaddr_of(struct sockaddr *sa, struct in_addr a)
{
        struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr = a};
        memcpy(sa, &sin, sizeof(sin));
}

/* Replaces /etc/resolv.conf (never following a link the disk holds there);
 * a root without /etc has no resolver to name. */
static void resolver_set(const char *router)
{
        int etc = open("/etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (etc < 0)
                return;
        char text[64];
        int len = snprintf(text, sizeof(text), "nameserver %s\n", router);
        (void)unlinkat(etc, "resolv.conf", 0);
        int fd = openat(etc, "resolv.conf", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, text, (size_t)len) != len)
                fprintf(stderr, "space-agent: vm init: write /etc/resolv.conf: %s\n", strerror(errno));
        if (fd >= 0)
                close(fd);
        close(etc);
}

static void ipv6_off(void)
{
        static const char *const paths[] = {"/proc/sys/net/ipv6/conf/all/disable_ipv6",
                                            "/proc/sys/net/ipv6/conf/default/disable_ipv6"};
        for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
                int fd = open(paths[i], O_WRONLY | O_CLOEXEC);
                if (fd >= 0) {
                        (void)!write(fd, "1", 1);
                        close(fd);
                }
        }
}

/* eth0 gets spec's address ("A.B.C.D/N,ROUTER"), a default route through the router, which is also
 * the resolver. Every VM has the device (with or without a network behind it). */
static void network_up(const char *spec)
{
        char addr[32] = "", router[32] = "";
        int prefix = 0;
        const char *slash = strchr(spec, '/'), *comma = strchr(spec, ',');
        struct in_addr a, r;
        if (slash && comma && slash < comma && (size_t)(slash - spec) < sizeof(addr) &&
            strlen(comma + 1) < sizeof(router)) {
                memcpy(addr, spec, (size_t)(slash - spec));
                snprintf(router, sizeof(router), "%s", comma + 1);
                prefix = atoi(slash + 1);
        }
        if (!addr[0] || prefix < 1 || prefix > 31 || inet_pton(AF_INET, addr, &a) != 1 ||
            inet_pton(AF_INET, router, &r) != 1)
                fail(0, "space.net=%s is not ADDRESS/PREFIX,ROUTER", spec);
        wait_for("/sys/class/net/eth0");
        ipv6_off();
        int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0)
                fail(errno, "socket");
        struct ifreq ifr = {0};
        snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "eth0");
        sockaddr_of(&ifr.ifr_addr, a);
        if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
                fail(errno, "address eth0");
        struct in_addr mask = {htonl(~UINT32_C(0) << (32 - prefix))};
        sockaddr_of(&ifr.ifr_netmask, mask);
        if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0)
                fail(errno, "set eth0's netmask");
        if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
                fail(errno, "read eth0's flags");
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
                fail(errno, "bring eth0 up");
        struct rtentry rt = {0};
        sockaddr_of(&rt.rt_dst, (struct in_addr){0});
        sockaddr_of(&rt.rt_genmask, (struct in_addr){0});
        sockaddr_of(&rt.rt_gateway, r);
        rt.rt_flags = RTF_UP | RTF_GATEWAY;
        if (ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST)
                fail(errno, "route through %s", router);
        close(s);
        resolver_set(router);
}

int ag_vm_init(sp_log_level *level)
{
        /* The kernel gave init no console when the initramfs has no /dev/console. */
        if (mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755") < 0 && errno != EBUSY)
                _exit(1);
        int con = open("/dev/console", O_RDWR | O_CLOEXEC);
        if (con >= 0) {
                for (int i = 0; i < 3; i++)
                        dup2(con, i);
                if (con > 2)
                        close(con);
        }
        mkdir_quiet("/proc", 0555);
        mkdir_quiet("/sys", 0555);
        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                fail(errno, "mount /proc");
        if (mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                fail(errno, "mount /sys");

        char cmdline[4096] = "", hostname[65], log[16], probe[4], net[96];
        FILE *f = fopen("/proc/cmdline", "re");
        if (f) {
                if (!fgets(cmdline, sizeof(cmdline), f))
                        cmdline[0] = '\0';
                fclose(f);
        }
        /* The worker's probe of an accelerator: a guest that gets here runs. */
        cmdline_get(cmdline, "space.probe", probe, sizeof(probe), "0");
        if (strcmp(probe, "1") == 0) {
                fprintf(stderr, "space-probe-ok\n");
                fflush(stderr);
                sync();
                reboot(RB_POWER_OFF);
                _exit(0);
        }
        cmdline_get(cmdline, "space.hostname", hostname, sizeof(hostname), "sandbox");
        cmdline_get(cmdline, "space.log", log, sizeof(log), "warn");
        cmdline_get(cmdline, "space.net", net, sizeof(net), "");
        if (sp_log_level_parse(log, level) < 0)
                *level = SP_LOG_WARN;

        load_modules();
        wait_for("/dev/vda");
        mkdir_quiet("/newroot", 0755);
        if (mount("/dev/vda", "/newroot", "ext4", 0, NULL) < 0)
                fail(errno, "mount the sandbox's disk");
        int port = open_port();

        /* The disk becomes the root; /dev, /proc and /sys move with it. */
        static const char *const moved[] = {"dev", "proc", "sys"};
        for (size_t i = 0; i < sizeof(moved) / sizeof(moved[0]); i++) {
                char from[32], to[64];
                snprintf(from, sizeof(from), "/%s", moved[i]);
                snprintf(to, sizeof(to), "/newroot/%s", moved[i]);
                mkdir_quiet(to, 0755);
                if (mount(from, to, NULL, MS_MOVE, NULL) < 0)
                        fail(errno, "move %s", from);
        }
        if (chdir("/newroot") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 || chdir("/") < 0)
                fail(errno, "make the disk the root");

        mkdir_quiet("/dev/pts", 0755);
        if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "ptmxmode=0666,mode=0620,gid=5") < 0)
                fail(errno, "mount /dev/pts");
        mkdir_quiet("/dev/shm", 01777);
        if (mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0)
                fail(errno, "mount /dev/shm");
        mkdir_quiet("/run", 0755);
        if (mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0)
                fail(errno, "mount /run");
        mkdir_quiet("/run/space", 0755);
        mkdir_quiet("/tmp", 01777);
        for (const char *p = hostname; *p; p++)
                if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.')
                        fail(0, "invalid hostname %s", hostname);
        if (sethostname(hostname, strlen(hostname)) < 0)
                fail(errno, "sethostname");
        loopback_up();
        if (net[0])
                network_up(net);
        return port;
}
