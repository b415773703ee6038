/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The qemu backend (docs/backends.md): each sandbox a QEMU `microvm` with its
 * own kernel, behind the ops table of backend/backend.h.
 *
 * The guest is Debian's cloud kernel (scripts/vm-kernel puts it and the
 * virtio modules in the kernel directory), an initramfs this backend writes
 * at start (the static space-agent as /init and those modules), and the
 * sandbox's disk: an ext4 image made from the root filesystem the node
 * prepared. The agent speaks its protocol over a virtio-serial port whose
 * host side is a unix socket in the box's runtime directory; a connection
 * starts with PR_AGENT_SYNC_MAGIC both ways (the port outlives connections).
 *
 * QEMU runs as the first host uid of the box's range, with no supplementary
 * group but kvm's, under `-sandbox on` with everything it may not need
 * denied, in the box's cgroup (memory: the guest's plus QEMU's own). It
 * opens nothing by path: the worker hands it the kernel, the initramfs, the
 * disk and both listening sockets as descriptors, so the runtime directory
 * and the storage stay root's alone. QMP (on a socket beside the agent's)
 * pauses, resumes and ends it; a restarted worker finds the VM again by pid
 * and start time and talks to it through the same sockets.
 *
 * Suspend saves the VM's memory and device state beside its disk (QMP
 * migrate to a descriptor) and ends it; restore starts QEMU from that state,
 * so processes, open files and /dev/shm go on (docs/backends.md).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <linux/fs.h>
#include <linux/if_tun.h>
#include <arpa/inet.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/agent_link.h"
#include "backend/backend.h"
#include "backend/initramfs.h"
#include "backend/proc.h"
#include "backend/qmp.h"
#include "backend/qemu_root.h"
#include "cgroup/cgroup.h"
#include "net/net.h"
#include "rootfs/rootfs.h"
#include "space/agent_proto.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"
#include "space/buf.h"

#define GONE_TIMEOUT_MS 10000
#define QMP_TIMEOUT_MS 10000
#define BOOT_TIMEOUT_KVM_MS 30000
#define BOOT_TIMEOUT_TCG_MS 120000
#define PROBE_TIMEOUT_MS 20000
#define AGENT_CONNECT_TIMEOUT_MS 3000
#define RESTORE_AGENT_TIMEOUT_MS 15000
#define MKFS_TIMEOUT_MS 300000
#define MIGRATE_TIMEOUT_MS 300000
#define DEFAULT_MEMORY (UINT64_C(256) << 20)
#define DEFAULT_DISK (UINT64_C(1) << 30)
/* QEMU's own memory beside the guest's: its code and devices, and under
 * TCG the translation cache (bounded to 64 MiB by tb-size). */
#define OVERHEAD_KVM (UINT64_C(96) << 20)
#define OVERHEAD_TCG (UINT64_C(192) << 20)
#define QEMU_PIDS 256
#define FILES_MARGIN (UINT64_C(64) << 20) /* a memory state's device state, the disk's metadata */
/* What a template's vm/ keeps at most of each kind (disk images by size, base
 * snapshots by machine): the least recently used go first. */
#define SHAPES_KEPT 4
#define MODULES_MAX 32

/* The descriptors the QEMU child gets, at these numbers. */
enum { FD_KERNEL = 3, FD_INITRD, FD_DISK_RW, FD_DISK_RO, FD_AGENT, FD_QMP, FD_STATE, FD_TAP, FD_COUNT };

/* Every VM has the same network device, with or without a network behind it:
 * QEMU restores a VM's state only into the device set it was saved from, and
 * a base snapshot (made without) must restore for sandboxes with one. The
 * guest's addresses are fixed (net/link.h, "A VM's network"). */
#define GUEST_MAC "52:54:00:5a:00:02"

typedef struct qemu_backend {
        wk_backend base;
        char *qemu;
        char *kernel; /* vmlinuz */
        char *initramfs; /* written at start */
        char *cgroup_parent;
        char accel[8]; /* "kvm" or "tcg" */
        char accel_why[160];
        unsigned long tsc_khz; /* the host's, for a TCG guest that cannot calibrate its own */
        uid_t uid_base;
        uint32_t uid_count;
        gid_t kvm_gid; /* (gid_t)-1: none */
        bool die_with_parent;
        bool no_base; /* every create boots */
        char base_tag[17]; /* names the kernel, initramfs, QEMU and accelerator a base snapshot was made with */
        wk_cgroup_host *host;
        struct wk_net *net; /* the sandboxes' network (borrowed; NULL: none) */
} qemu_backend;

struct wk_box {
        qemu_backend *b;
        char id[WK_CGROUP_NAME_MAX + 1];
        char rootfs[PATH_MAX];
        char disk[PATH_MAX];
        char state[PATH_MAX]; /* the memory and device state a suspend saved, beside the disk */
        char runtime[PATH_MAX];
        char socket[108];
        char qmp[108];
        char hostname[64];
        wk_box_spec limits;
        /* The machine: fixed for the VM's life (a restore from memory must match it). */
        uint64_t guest_bytes;
        unsigned vcpus;
        uint64_t disk_bytes;
        uint32_t slot;
        wk_cgroup *cg;
        pid_t pid;
        unsigned long long starttime;
        bool suspended;
        int log_rfd; /* read end of the console FIFO (the guest's console and QEMU's messages) */
        int agent_fd; /* the first connection, synchronised by create: handed to the node */
        bool from_base; /* created from its template's base snapshot */
        bool offline; /* no network even where the worker has one (a base snapshot's VM) */
        bool linked; /* has its network (wk_net_vm_up) */
};

static uint64_t guest_memory_of(const wk_box_spec *spec)
{
        uint64_t m = spec->memory_bytes > 0 ? (uint64_t)spec->memory_bytes : DEFAULT_MEMORY;
        return (m + (1u << 20) - 1) & ~(uint64_t)((1u << 20) - 1);
}

static unsigned vcpus_of(const wk_box_spec *spec)
{
        int64_t c = spec->cpu_millis;
        unsigned n = c > 0 ? (unsigned)((c + 999) / 1000) : 1;
        return n > 32 ? 32 : n;
}

static uint64_t guest_memory(const wk_box *box)
{
        return box->guest_bytes;
}

static unsigned guest_cpus(const wk_box *box)
{
        return box->vcpus;
}

static wk_cgroup_limits limits_of(const wk_box *box)
{
        bool kvm = strcmp(box->b->accel, "kvm") == 0;
        return (wk_cgroup_limits){
                .cpu_millicores = (uint32_t)box->limits.cpu_millis,
                .memory_bytes = guest_memory(box) + (kvm ? OVERHEAD_KVM : OVERHEAD_TCG),
                .pids_max = QEMU_PIDS,
        };
}

/* --- the console FIFO (the box's log: a restarted worker opens it again) --- */

static void log_path(const wk_box *box, char *out, size_t n)
{
        snprintf(out, n, "%s/console.fifo", box->runtime);
}

static int log_open_reader(wk_box *box)
{
        char p[PATH_MAX + 32];
        log_path(box, p, sizeof(p));
        return wk_box_log_reader(p, &box->log_rfd);
}

static void log_close(wk_box *box)
{
        char p[PATH_MAX + 32];
        log_path(box, p, sizeof(p));
        wk_box_log_close(p, &box->log_rfd);
}

/* What the console holds now (for an error message), its last line kept. */
static void console_tail(wk_box *box, char *out, size_t n)
{
        out[0] = '\0';
        if (box->log_rfd < 0)
                return;
        char buf[8192];
        size_t len = 0;
        ssize_t r;
        while ((r = read(box->log_rfd, buf + len, sizeof(buf) - 1 - len)) > 0) {
                len += (size_t)r;
                if (len == sizeof(buf) - 1) {
                        memmove(buf, buf + len / 2, len - len / 2);
                        len -= len / 2;
                }
        }
        buf[len] = '\0';
        while (len && (buf[len - 1] == '\n' || buf[len - 1] == '\r'))
                buf[--len] = '\0';
        char *last = strrchr(buf, '\n');
        snprintf(out, n, "%s", last ? last + 1 : buf);
}

/* --- sockets --- */

static int connect_to(const char *path, int *ret, sp_error **err)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        /* Non-blocking: QEMU takes one connection at a time, and a connect
         * beyond its backlog would wait until the one before it ends. */
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                int e = errno;
                sp_close(fd);
                if (e == EAGAIN)
                        return sp_error_set(err, SP_E_CONFLICT, "%s is busy: another connection holds it", path);
                return sp_error_set_errno(err, SP_E_UNAVAILABLE, e, "connect to %s", path);
        }
        *ret = fd;
        return 0;
}

/* Reads exactly n bytes of c by the deadline. 1: read; 0: not in time, or
 * QEMU let go of the connection; <0: the VM ended. */
static int read_exact(wk_box *box, int c, void *buf, size_t n, int64_t deadline, sp_error **err)
{
        for (size_t have = 0; have < n;) {
                int64_t left = (deadline - sp_now_mono_us()) / 1000;
                if (left <= 0)
                        return 0;
                struct pollfd p = {.fd = c, .events = POLLIN};
                int r = poll(&p, 1, left > 200 ? 200 : (int)left);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r == 0) {
                        if (!wk_proc_alive(&box->pid, box->starttime)) {
                                char tail[256];
                                console_tail(box, tail, sizeof(tail));
                                return sp_error_set(err, SP_E_UNAVAILABLE, "sandbox %s: the VM ended%s%s", box->id,
                                                    tail[0] ? ": " : "", tail);
                        }
                        continue;
                }
                ssize_t k = r > 0 ? read(c, (char *)buf + have, n - have) : -1;
                if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
                        return 0;
                if (k > 0)
                        have += (size_t)k;
        }
        return 1;
}

/* After the agent's magic: HELLO both ways and a ping on a channel no
 * earlier connection used, answered. A magic alone proves little on a port
 * that outlives its connections (an earlier connection's greeting may still be
 * in it, or the guest may have missed this one's magic: a VM restored from
 * its memory state can do either, and then took no request while the worker
 * believed it connected); an answer to this connection's ping proves both
 * directions. 1: answered; 0: not in time (the caller connects again, with
 * a new magic); <0: the VM ended. Reads exactly what the answer takes. */
static int agent_probe(wk_box *box, int c, int64_t deadline, sp_error **err)
{
        uint32_t ch = 0;
        if (getrandom(&ch, sizeof(ch), 0) != (ssize_t)sizeof(ch))
                ch = (uint32_t)sp_now_mono_us();
        ch = 0x40000000u | (ch & 0x3fffffffu); /* the link numbers its channels from 1 */
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        wk_agent_hello_append(&out);
        static const char ping[] = "{\"op\":\"ping\"}";
        pr_agent_frame_append(&out, PR_AGENT_OPEN, 0, ch, ping, sizeof(ping) - 1, NULL);
        for (size_t off = 0; off < out.len;) {
                ssize_t k = write(c, out.data + off, out.len - off);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return 0;
                off += (size_t)k;
        }
        static const uint8_t magic[] = PR_AGENT_SYNC_MAGIC;
        _Static_assert(PR_AGENT_SYNC_LEN > PR_AGENT_HEADER_SIZE, "a magic is longer than a header");
        bool hello = false;
        for (;;) {
                uint8_t h[PR_AGENT_SYNC_LEN];
                pr_agent_frame f;
                int r = read_exact(box, c, h, PR_AGENT_HEADER_SIZE, deadline, err);
                if (r <= 0)
                        return r;
                if (memcmp(h, magic, PR_AGENT_HEADER_SIZE) == 0) {
                        /* A later greeting where a frame would start (the magic that came first was an
                         * earlier connection's, and the agent restarted on this one's): HELLO again. */
                        r = read_exact(box, c, h + PR_AGENT_HEADER_SIZE, PR_AGENT_SYNC_LEN - PR_AGENT_HEADER_SIZE,
                                       deadline, err);
                        if (r <= 0)
                                return r;
                        if (memcmp(h, magic, PR_AGENT_SYNC_LEN) != 0)
                                return 0;
                        hello = false;
                        continue;
                }
                if (pr_agent_header_decode(h, &f, NULL) < 0 || f.length > 65536)
                        return 0;
                _cleanup_free_ uint8_t *body = f.length ? malloc(f.length) : NULL;
                if (f.length && !body)
                        return 0;
                if (f.length && (r = read_exact(box, c, body, f.length, deadline, err)) <= 0)
                        return r;
                if (!hello) {
                        if (f.type != PR_AGENT_HELLO)
                                return 0;
                        hello = true;
                        continue;
                }
                if (f.channel == ch && f.type == PR_AGENT_EXIT)
                        return 1;
        }
}

/* One attempt: connects, sends the worker's magic and waits up to wait_ms
 * for the agent's, then for its answer to a probe (agent_probe). 1:
 * synchronised (*ret set, HELLO exchanged); 0: no magic or answer in time;
 * <0: an error (the VM ended, or the port refused). */
static int agent_sync_once(wk_box *box, int64_t wait_ms, int *ret, sp_error **err)
{
        int fd = -1;
        if (connect_to(box->socket, &fd, err) < 0)
                return sp_error_wrap(err, "sandbox %s: agent port", box->id);
        _cleanup_close_ int c = fd;
        if (write(c, PR_AGENT_SYNC_MAGIC, PR_AGENT_SYNC_LEN) != PR_AGENT_SYNC_LEN)
                return sp_error_set_errno(err, SP_E_UNAVAILABLE, errno, "sandbox %s: agent port", box->id);
        int64_t deadline = sp_now_mono_us() + wait_ms * 1000;
        pr_agent_sync sync = {0};
        while (!sync.done) {
                /* One byte at a time: nothing after the magic may be taken from the node's link. */
                uint8_t byte;
                int r = read_exact(box, c, &byte, 1, deadline, err);
                if (r <= 0)
                        return r; /* 0: not in time, or QEMU let go of the connection: try again */
                pr_agent_sync_feed(&sync, &byte, 1);
        }
        int r = agent_probe(box, c, deadline, err);
        if (r <= 0)
                return r;
        *ret = c;
        c = -1;
        return 1;
}

/* Connects to the agent's port and waits (bounded) for its magic: the agent
 * is up, and what follows on the connection is its HELLO. The worker's own
 * magic goes first, so the agent drops whatever an earlier connection left.
 * An attempt that gets no answer within a second is closed and made again:
 * QEMU 7.2 holds back for good what the guest writes between a connection's
 * end and the guest learning of it (the port stays throttled with nothing to
 * release it) until the next connection ends, and a reconnect both clears
 * that and makes the agent greet again (each worker magic starts a new
 * connection on its side). */
static int agent_sync(wk_box *box, int timeout_ms, int *ret, sp_error **err)
{
        int64_t deadline = sp_now_mono_us() + (int64_t)timeout_ms * 1000;
        for (int attempt = 0;; attempt++) {
                int64_t left = (deadline - sp_now_mono_us()) / 1000;
                if (left <= 0)
                        break;
                int r = agent_sync_once(box, left < 1000 ? left : 1000, ret, err);
                if (r < 0 && (!err || !*err || (*err)->code != SP_E_CONFLICT))
                        return r;
                if (r == 1) {
                        if (attempt > 0)
                                sp_log_debug_kv(SP_KV("sandbox_id", box->id),
                                                "agent port: synchronised after %d attempts", attempt + 1);
                        return 0;
                }
                if (r < 0) {
                        /* Busy: another connection holds the port; wait for it a little. */
                        sp_error_free(*err);
                        *err = NULL;
                        usleep(50000);
                }
        }
        char tail[256];
        console_tail(box, tail, sizeof(tail));
        return sp_error_set(err, SP_E_TIMEOUT, "sandbox %s: the VM's agent did not answer within %d ms%s%s", box->id,
                            timeout_ms, tail[0] ? "; its console: " : "", tail);
}

/* --- QEMU --- */

static int qmp_run(wk_box *box, const char *command, sp_error **err)
{
        _cleanup_qmp_ wk_qmp *q = NULL;
        if (wk_qmp_connect(box->qmp, QMP_TIMEOUT_MS, &q, err) < 0)
                return sp_error_wrap(err, "sandbox %s: QMP", box->id);
        _cleanup_json_ json_object *r = NULL;
        if (wk_qmp_execute(q, command, NULL, QMP_TIMEOUT_MS, &r, err) < 0)
                return sp_error_wrap(err, "sandbox %s: %s", box->id, command);
        return 0;
}

/* After a restore from memory state: waits until QEMU has loaded it (the VM
 * then stands paused, as it was saved) and lets it run. The state is spent:
 * the disk goes on from here, and an old state must never meet a newer disk. */
static int resume_incoming(wk_box *box, sp_error **err)
{
        _cleanup_qmp_ wk_qmp *q = NULL;
        if (wk_qmp_connect(box->qmp, QMP_TIMEOUT_MS, &q, err) < 0)
                return sp_error_wrap(err, "sandbox %s: QMP", box->id);
        int64_t deadline = sp_now_mono_us() + (int64_t)MIGRATE_TIMEOUT_MS * 1000;
        char status[32] = "";
        for (;;) {
                if (wk_qmp_status(q, QMP_TIMEOUT_MS, status, sizeof(status), err) < 0)
                        return sp_error_wrap(err, "sandbox %s: restore", box->id);
                if (strcmp(status, "inmigrate") != 0)
                        break;
                if (sp_now_mono_us() > deadline)
                        return sp_error_set(err, SP_E_TIMEOUT, "sandbox %s: its memory state took over %d ms to load",
                                            box->id, MIGRATE_TIMEOUT_MS);
                usleep(20000);
        }
        if (strcmp(status, "paused") != 0 && strcmp(status, "running") != 0)
                return sp_error_set(err, SP_E_IO, "sandbox %s: its memory state did not load (QEMU is %s)", box->id,
                                    status);
        _cleanup_json_ json_object *r = NULL;
        if (strcmp(status, "paused") == 0 && wk_qmp_execute(q, "cont", NULL, QMP_TIMEOUT_MS, &r, err) < 0)
                return sp_error_wrap(err, "sandbox %s: restore", box->id);
        unlink(box->state);
        return 0;
}

/* Stops the VM and saves its memory and device state to box->state (through
 * a descriptor: QEMU may not open files), then ends it. */
static int save_memory(wk_box *box, sp_error **err)
{
        char tmp[PATH_MAX + 8];
        snprintf(tmp, sizeof(tmp), "%s.tmp", box->state);
        _cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "sandbox %s: create %s", box->id, tmp);
        _cleanup_qmp_ wk_qmp *q = NULL;
        _cleanup_json_ json_object *r1 = NULL, *r2 = NULL, *r3 = NULL, *r4 = NULL;
        _cleanup_json_ json_object *fdargs = json_object_new_object(), *migargs = json_object_new_object(),
                                   *params = json_object_new_object();
        json_object_object_add(fdargs, "fdname", json_object_new_string("state"));
        json_object_object_add(migargs, "uri", json_object_new_string("fd:state"));
        /* QEMU's default rate limit (32 MiB/s) is for live migration over a network. */
        json_object_object_add(params, "max-bandwidth", json_object_new_int64(INT64_C(1) << 40));
        if (wk_qmp_connect(box->qmp, QMP_TIMEOUT_MS, &q, err) < 0 ||
            wk_qmp_execute(q, "stop", NULL, QMP_TIMEOUT_MS, &r1, err) < 0 ||
            wk_qmp_execute(q, "migrate-set-parameters", params, QMP_TIMEOUT_MS, &r2, err) < 0 ||
            wk_qmp_execute_fd(q, "getfd", fdargs, fd, QMP_TIMEOUT_MS, &r3, err) < 0 ||
            wk_qmp_execute(q, "migrate", migargs, QMP_TIMEOUT_MS, &r4, err) < 0)
                goto fail;
        int64_t deadline = sp_now_mono_us() + (int64_t)MIGRATE_TIMEOUT_MS * 1000;
        for (;;) {
                _cleanup_json_ json_object *m = NULL;
                if (wk_qmp_execute(q, "query-migrate", NULL, QMP_TIMEOUT_MS, &m, err) < 0)
                        goto fail;
                const char *st = sp_json_member_str(m, "status");
                if (st && strcmp(st, "completed") == 0)
                        break;
                if (st && (strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0)) {
                        const char *why = sp_json_member_str(m, "error-desc");
                        sp_error_set(err, SP_E_IO, "saving its memory %s%s%s", st, why ? ": " : "", why ? why : "");
                        goto fail;
                }
                if (sp_now_mono_us() > deadline) {
                        sp_error_set(err, SP_E_TIMEOUT, "saving its memory took over %d ms", MIGRATE_TIMEOUT_MS);
                        goto fail;
                }
                usleep(20000);
        }
        if (fsync(fd) < 0 || rename(tmp, box->state) < 0) {
                sp_error_set_errno(err, SP_E_IO, errno, "store %s", box->state);
                goto fail;
        }
        return 0;
fail:
        unlink(tmp);
        /* The VM stays stopped; the caller ends it. */
        return sp_error_wrap(err, "sandbox %s: suspend with memory", box->id);
}

static void append_arg(char **argv, size_t *n, size_t cap, char *s)
{
        if (*n + 1 < cap)
                argv[(*n)++] = s;
        argv[*n] = NULL;
}

/* The box's network, where the worker has one: a namespace with the
 * sandbox's link and a tap (*tap_fd, for QEMU), else *tap_fd is /dev/null
 * (the descriptor's place must be filled). */
static int box_net_up(wk_box *box, int *tap_fd, sp_error **err)
{
        if (!box->b->net || box->offline) {
                *tap_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                return *tap_fd < 0 ? sp_error_set_errno(err, SP_E_IO, errno, "open /dev/null") : 0;
        }
        _cleanup_close_ int netns = -1;
        if (wk_net_vm_netns(&netns, tap_fd, err) < 0 || wk_net_vm_up(box->b->net, box->slot, netns, err) < 0) {
                sp_close(*tap_fd);
                *tap_fd = -1;
                return sp_error_wrap(err, "sandbox %s: network", box->id);
        }
        box->linked = true;
        return 0;
}

static void box_net_down(wk_box *box)
{
        if (box->linked)
                wk_net_sandbox_down(box->b->net, box->slot);
        box->linked = false;
}

/* Starts QEMU for box (its cgroup made), returning once its agent answers:
 * from its memory state when it has one (restore after a suspend that saved
 * it), else a cold boot. */
static int box_boot(wk_box *box, sp_error **err)
{
        qemu_backend *b = box->b;
        bool kvm = strcmp(b->accel, "kvm") == 0;
        int fds[FD_COUNT];
        for (int i = 0; i < FD_COUNT; i++)
                fds[i] = -1;
        int logfd = -1, sync[2] = {-1, -1};
        int r = -SP_E_IO;
        fds[FD_KERNEL] = open(b->kernel, O_RDONLY | O_CLOEXEC);
        fds[FD_INITRD] = open(b->initramfs, O_RDONLY | O_CLOEXEC);
        fds[FD_DISK_RW] = open(box->disk, O_RDWR | O_CLOEXEC);
        fds[FD_DISK_RO] = open(box->disk, O_RDONLY | O_CLOEXEC);
        fds[FD_STATE] = open(box->state, O_RDONLY | O_CLOEXEC);
        bool incoming = fds[FD_STATE] >= 0;
        if (!incoming)
                fds[FD_STATE] = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fds[FD_KERNEL] < 0 || fds[FD_INITRD] < 0 || fds[FD_DISK_RW] < 0 || fds[FD_DISK_RO] < 0 ||
            fds[FD_STATE] < 0) {
                sp_error_set_errno(err, SP_E_IO, errno, "sandbox %s: open the kernel, initramfs or disk", box->id);
                goto out;
        }
        if (box_net_up(box, &fds[FD_TAP], err) < 0)
                goto out;
        char logp[PATH_MAX + 32];
        log_path(box, logp, sizeof(logp));
        if (wk_box_listen(box->socket, 4, &fds[FD_AGENT], err) < 0 || wk_box_listen(box->qmp, 4, &fds[FD_QMP], err) < 0)
                goto out;
        if (wk_box_log_open(logp, &box->log_rfd, &logfd) < 0 || pipe2(sync, O_CLOEXEC) < 0) {
                sp_error_set_errno(err, SP_E_IO, errno, "sandbox %s: console pipe", box->id);
                goto out;
        }

        char incoming_uri[32];
        snprintf(incoming_uri, sizeof(incoming_uri), "fd:%d", FD_STATE);
        char mem[32], smp[16], append[512], agent_dev[96], qmp_dev[96], add_rw[32], add_ro[32], kernel[32], initrd[32],
                name[160], netdev[48], nic[96];
        snprintf(mem, sizeof(mem), "%llu", (unsigned long long)(guest_memory(box) >> 20));
        snprintf(smp, sizeof(smp), "%u", guest_cpus(box));
        char tsc[64] = "";
        if (!kvm)
                snprintf(tsc, sizeof(tsc), " tsc_early_khz=%lu tsc=reliable", b->tsc_khz);
        snprintf(append, sizeof(append),
                 "console=ttyS0 quiet panic=-1 pci=off%s space.hostname=%s space.log=warn space.net=%s/%d,%s", tsc,
                 box->hostname, WK_NET_VM_GUEST, WK_NET_VM_PREFIX, WK_NET_VM_ROUTER);
        snprintf(agent_dev, sizeof(agent_dev), "socket,id=agent,fd=%d,server=on,wait=off", FD_AGENT);
        snprintf(qmp_dev, sizeof(qmp_dev), "socket,id=qmp,fd=%d,server=on,wait=off", FD_QMP);
        snprintf(add_rw, sizeof(add_rw), "fd=%d,set=1", FD_DISK_RW);
        snprintf(add_ro, sizeof(add_ro), "fd=%d,set=1", FD_DISK_RO);
        snprintf(kernel, sizeof(kernel), "/proc/self/fd/%d", FD_KERNEL);
        snprintf(initrd, sizeof(initrd), "/proc/self/fd/%d", FD_INITRD);
        snprintf(name, sizeof(name), "space-%s", box->id);
        bool networked = box->linked;
        snprintf(netdev, sizeof(netdev), "tap,id=net0,fd=%d", FD_TAP);
        snprintf(nic, sizeof(nic), "virtio-net-device,mac=%s%s", GUEST_MAC, networked ? ",netdev=net0" : "");
        char *argv[64];
        size_t n = 0;
#define A(s) append_arg(argv, &n, sizeof(argv) / sizeof(argv[0]), (char *)(s))
        A(b->qemu);
        A("-name");
        A(name);
        A("-M");
        A("microvm,acpi=on");
        A("-accel");
        A(kvm ? "kvm" : "tcg,tb-size=64");
        if (kvm) {
                A("-cpu");
                A("host");
        }
        A("-m");
        A(mem);
        A("-smp");
        A(smp);
        A("-nodefaults");
        A("-no-user-config");
        A("-display");
        A("none");
        A("-no-reboot");
        A("-kernel");
        A(kernel);
        A("-initrd");
        A(initrd);
        A("-append");
        A(append);
        A("-serial");
        A("stdio");
        A("-device");
        A("virtio-serial-device");
        A("-chardev");
        A(agent_dev);
        A("-device");
        A("virtserialport,chardev=agent,name=space.agent");
        A("-add-fd");
        A(add_rw);
        A("-add-fd");
        A(add_ro);
        /* A write error (the pool full: docs/threat-model.md) is the guest's to see: QEMU would otherwise
         * pause the VM for good while the API says it runs. */
        A("-drive");
        A("id=disk,file=/dev/fdset/1,format=raw,if=none,discard=unmap,file.locking=off,werror=report,rerror=report");
        A("-device");
        A("virtio-blk-device,drive=disk");
        if (networked) {
                A("-netdev");
                A(netdev);
        }
        A("-device");
        A(nic);
        A("-chardev");
        A(qmp_dev);
        A("-mon");
        A("chardev=qmp,mode=control");
        A("-sandbox");
        A("on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
        if (incoming) {
                A("-incoming");
                A(incoming_uri);
        }
#undef A
        char *const envp[] = {(char *)"PATH=/usr/bin:/bin", (char *)"LC_ALL=C", NULL};
        uid_t uid = b->uid_base + box->slot * b->uid_count;
        gid_t groups[1] = {b->kvm_gid};
        size_t ngroups = kvm && b->kvm_gid != (gid_t)-1 ? 1 : 0;
        char rootdir[PATH_MAX + 8];
        snprintf(rootdir, sizeof(rootdir), "%s/root", box->runtime);
        wk_qemu_root *root = NULL;
        if (wk_qemu_root_prepare(rootdir, b->qemu, kvm, &root, err) < 0) {
                sp_error_wrap(err, "sandbox %s", box->id);
                goto out;
        }
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

        pid_t pid = fork();
        if (pid < 0) {
                wk_qemu_root_free(root);
                sp_close(devnull);
                sp_error_set_errno(err, SP_E_LIMIT, errno, "sandbox %s: fork", box->id);
                goto out;
        }
        if (pid == 0) {
                /* Only async-signal-safe calls until execve. Its own session: the VM
                 * outlives the worker (which finds it again after a restart). */
                setsid();
                if (b->die_with_parent)
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                char go;
                close(sync[1]);
                if (read(sync[0], &go, 1) != 1)
                        _exit(126); /* the worker did not put it in its cgroup */
                /* Move every descriptor above the targets first, then into place. */
                int high[FD_COUNT];
                for (int i = FD_KERNEL; i < FD_COUNT; i++)
                        if ((high[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 64)) < 0)
                                _exit(127);
                int io0 = fcntl(devnull, F_DUPFD_CLOEXEC, 64), io1 = fcntl(logfd, F_DUPFD_CLOEXEC, 64);
                if (io0 < 0 || io1 < 0 || dup2(io0, 0) < 0 || dup2(io1, 1) < 0 || dup2(io1, 2) < 0)
                        _exit(127);
                for (int i = FD_KERNEL; i < FD_COUNT; i++)
                        if (dup2(high[i], i) < 0)
                                _exit(127);
                syscall(SYS_close_range, FD_COUNT, ~0U, 0);
                /* An empty network namespace: QEMU needs no network of the host's (its state and devices
                 * are descriptors), and one that a guest took over reaches none. */
                if (unshare(CLONE_NEWNET) < 0)
                        _exit(127);
                /* A filesystem of its own: what it needs to run, nothing of the host's besides. */
                const char *why = wk_qemu_root_enter(root);
                if (why) {
                        static const char pre[] = "space-worker: QEMU's mount namespace: ";
                        (void)!write(2, pre, sizeof(pre) - 1);
                        (void)!write(2, why, strlen(why));
                        (void)!write(2, "\n", 1);
                        _exit(127);
                }
                if (setgroups(ngroups, groups) < 0 || setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0)
                        _exit(127);
                sigset_t all;
                sigemptyset(&all);
                sigprocmask(SIG_SETMASK, &all, NULL);
                execve(b->qemu, argv, envp);
                _exit(127);
        }
        wk_qemu_root_free(root);
        sp_close(devnull);
        close(sync[0]);
        sync[0] = -1;
        box->pid = pid;
        box->starttime = wk_proc_starttime(pid);
        if (wk_cgroup_attach(box->cg, pid, err) < 0) {
                kill(pid, SIGKILL);
                wk_proc_wait_gone(&box->pid, box->starttime, GONE_TIMEOUT_MS);
                sp_error_wrap(err, "sandbox %s: cgroup", box->id);
                goto out;
        }
        if (write(sync[1], "g", 1) != 1) {
                sp_error_set_errno(err, SP_E_IO, errno, "sandbox %s: start QEMU", box->id);
                kill(pid, SIGKILL);
                wk_proc_wait_gone(&box->pid, box->starttime, GONE_TIMEOUT_MS);
                goto out;
        }
        r = 0;
out:
        for (int i = FD_KERNEL; i < FD_COUNT; i++)
                sp_close(fds[i]);
        sp_close(logfd);
        sp_close(sync[0]);
        sp_close(sync[1]);
        if (r < 0) {
                box_net_down(box);
                return r;
        }
        if (incoming && resume_incoming(box, err) < 0) {
                kill(box->pid, SIGKILL);
                wk_proc_wait_gone(&box->pid, box->starttime, GONE_TIMEOUT_MS);
                box_net_down(box);
                return -SP_E_UNAVAILABLE;
        }
        /* A restored agent runs already: a boot's wait is not its. */
        int wait_ms = incoming ? RESTORE_AGENT_TIMEOUT_MS : kvm ? BOOT_TIMEOUT_KVM_MS : BOOT_TIMEOUT_TCG_MS;
        if (agent_sync(box, wait_ms, &box->agent_fd, err) < 0) {
                kill(box->pid, SIGKILL);
                wk_proc_wait_gone(&box->pid, box->starttime, GONE_TIMEOUT_MS);
                box_net_down(box);
                return -SP_E_UNAVAILABLE;
        }
        box->suspended = false;
        return 0;
}

static int box_cgroup(wk_box *box, sp_error **err)
{
        wk_cgroup_limits l = limits_of(box);
        return wk_box_cgroup(box->b->host, box->b->cgroup_parent, box->id, &l, &box->cg, err);
}

static void box_stop(wk_box *box)
{
        sp_close(box->agent_fd);
        box->agent_fd = -1;
        if (box->pid > 0 && wk_proc_alive(&box->pid, box->starttime)) {
                /* quit ends it at once; a QEMU that does not answer is killed. */
                _cleanup_error_ sp_error *e = NULL;
                if (qmp_run(box, "quit", &e) == 0)
                        wk_proc_wait_gone(&box->pid, box->starttime, 2000);
        }
        if (box->cg)
                (void)wk_cgroup_kill_all(box->cg, NULL);
        if (box->pid > 0) {
                kill(box->pid, SIGKILL);
                wk_proc_wait_gone(&box->pid, box->starttime, GONE_TIMEOUT_MS);
        }
        unlink(box->socket);
        unlink(box->qmp);
        box_net_down(box);
}

static wk_box *box_new(qemu_backend *b, const wk_box_spec *spec, sp_error **err)
{
        if (strlen(spec->id) > WK_CGROUP_NAME_MAX || strlen(spec->hostname) > 63) {
                sp_error_set(err, SP_E_INVALID, "sandbox id or hostname too long");
                return NULL;
        }
        for (const char *p = spec->hostname; *p; p++)
                if (!(*p == '-' || *p == '.' || (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                      (*p >= 'A' && *p <= 'Z'))) {
                        sp_error_set(err, SP_E_INVALID, "hostname %s is not a host name", spec->hostname);
                        return NULL;
                }
        wk_box *box = calloc(1, sizeof(*box));
        if (!box) {
                sp_error_set(err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        box->b = b;
        box->log_rfd = -1;
        box->agent_fd = -1;
        snprintf(box->id, sizeof(box->id), "%s", spec->id);
        snprintf(box->rootfs, sizeof(box->rootfs), "%s", spec->rootfs);
        snprintf(box->runtime, sizeof(box->runtime), "%s", spec->runtime_dir);
        snprintf(box->hostname, sizeof(box->hostname), "%s", spec->hostname);
        /* The disk lives beside the root filesystem it is made from, in the sandbox's storage. */
        const char *slash = strrchr(spec->rootfs, '/');
        int dl = slash ? (int)(slash - spec->rootfs) : 0;
        if (!slash ||
            snprintf(box->disk, sizeof(box->disk), "%.*s/disk.ext4", dl, spec->rootfs) >= (int)sizeof(box->disk) ||
            snprintf(box->state, sizeof(box->state), "%.*s/memory.state", dl, spec->rootfs) >=
                    (int)sizeof(box->state) ||
            snprintf(box->socket, sizeof(box->socket), "%s/agent.sock", spec->runtime_dir) >=
                    (int)sizeof(box->socket) ||
            snprintf(box->qmp, sizeof(box->qmp), "%s/qmp.sock", spec->runtime_dir) >= (int)sizeof(box->qmp)) {
                sp_error_set(err, SP_E_INVALID, "paths too long for sandbox %s", spec->id);
                free(box);
                return NULL;
        }
        box->limits = *spec;
        box->guest_bytes = guest_memory_of(spec);
        box->vcpus = vcpus_of(spec);
        box->disk_bytes = spec->disk_bytes ? spec->disk_bytes : DEFAULT_DISK;
        box->slot = spec->id_slot;
        return box;
}

static void box_free(wk_box *box)
{
        if (!box)
                return;
        wk_cgroup_free(box->cg);
        sp_close(box->log_rfd);
        sp_close(box->agent_fd);
        free(box);
}

static void box_release(wk_box *box)
{
        box_stop(box);
        if (box->cg) {
                (void)wk_cgroup_remove(box->cg, NULL);
                box->cg = wk_cgroup_free(box->cg);
        }
        log_close(box);
}

/* --- base snapshots (docs/backends.md "Fast starts") ---
 *
 * templates/<name>/vm/ (beside the template's rootfs, deleted with it):
 *   disk-<MiB>.ext4        the template as a disk of that size, made once
 *   base-<tag>-<shape>/    a base snapshot: disk.ext4 and memory.state of a
 *                          VM of that machine booted from that disk, its
 *                          agent ready, saved; tag names the kernel,
 *                          initramfs, QEMU and accelerator it needs
 *   .lock                  held while either is being made
 * A create of that template and machine copies both with reflinks (btrfs:
 * no data copied) and restores; every other create boots from a reflink of
 * the disk image. Files are made under a temporary name and renamed into
 * place, so a reader sees a whole one or none. */

/* dst: a new file with src's bytes, sharing its extents where the
 * filesystem can (FICLONE), else copied with its holes kept. */
static int clone_file(const char *src, const char *dst, sp_error **err)
{
        _cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
        if (in < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", src);
        _cleanup_close_ int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (out < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "create %s", dst);
        if (ioctl(out, FICLONE, in) == 0)
                return 0;
        struct stat st;
        if (fstat(in, &st) < 0 || ftruncate(out, st.st_size) < 0)
                goto fail;
        for (off_t off = 0; off < st.st_size;) {
                off_t data = lseek(in, off, SEEK_DATA);
                if (data < 0 && errno == ENXIO)
                        break;
                off_t hole = data < 0 ? -1 : lseek(in, data, SEEK_HOLE);
                if (data < 0 || hole < 0)
                        goto fail;
                for (off_t at = data; at < hole;) {
                        off_t to = at;
                        ssize_t n = copy_file_range(in, &at, out, &to, (size_t)(hole - at), 0);
                        if (n <= 0)
                                goto fail;
                }
                off = hole;
        }
        return 0;
fail:
        sp_error_set_errno(err, SP_E_IO, errno ? errno : EIO, "copy %s to %s", src, dst);
        unlink(dst);
        return -SP_E_IO;
}

static unsigned long long mib(uint64_t bytes)
{
        return (unsigned long long)(bytes >> 20);
}

static void vm_dir(const wk_box_spec *spec, char *out, size_t n)
{
        snprintf(out, n, "%s/vm", spec->template_dir);
}

static void base_dir(const qemu_backend *b, const wk_box *box, const wk_box_spec *spec, char *out, size_t n)
{
        snprintf(out, n, "%s/vm/base-%s-%llum%uc%llud", spec->template_dir, b->base_tag, mib(box->guest_bytes),
                 box->vcpus, mib(box->disk_bytes));
}

static bool base_ready(const char *dir)
{
        char p[PATH_MAX + 16];
        snprintf(p, sizeof(p), "%s/memory.state", dir);
        return access(p, R_OK) == 0;
}

/* Holds templates/<name>/vm/.lock (made with the directory) until *ret is closed. */
static int lock_vm_dir(const wk_box_spec *spec, int *ret, sp_error **err)
{
        char dir[PATH_MAX], p[PATH_MAX + 8];
        vm_dir(spec, dir, sizeof(dir));
        if (mkdir(dir, 0700) < 0 && errno != EEXIST)
                return sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", dir);
        snprintf(p, sizeof(p), "%s/.lock", dir);
        int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0 || flock(fd, LOCK_EX) < 0) {
                sp_error_set_errno(err, SP_E_IO, errno, "lock %s", p);
                sp_close(fd);
                return -SP_E_IO;
        }
        *ret = fd;
        return 0;
}

/* Marks a disk image or base as just used (its mtime: eviction's order). */
static void touch_used(const char *path)
{
        (void)utimensat(AT_FDCWD, path, NULL, 0);
}

static void base_remove(const char *dir);

/* Keeps the SHAPES_KEPT most recently used entries of vm/ whose names start
 * with prefix (and, for files, end with suffix), removing the rest; keep is
 * never removed. Each create of a new machine or disk size would otherwise
 * leave a disk image and a base snapshot in the template's directory for
 * good, charged to no one (an outside pass filled a pool so: docs/threat-
 * model.md). Called with the directory's lock held. Copies made from an
 * evicted one are whole files of their own (reflinks): nothing breaks. */
static void evict_shapes(const wk_box_spec *spec, const char *prefix, const char *suffix, const char *keep)
{
        char dir[PATH_MAX];
        vm_dir(spec, dir, sizeof(dir));
        struct {
                char name[256];
                struct timespec used;
        } e[64];
        size_t n = 0;
        _cleanup_(sp_closedirp) DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));) {
                size_t len = strlen(de->d_name), sl = suffix ? strlen(suffix) : 0;
                if (strncmp(de->d_name, prefix, strlen(prefix)) != 0 || len < sl ||
                    (suffix && strcmp(de->d_name + len - sl, suffix) != 0) || strstr(de->d_name, ".tmp"))
                        continue;
                char p[PATH_MAX + 300];
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                struct stat st;
                if (strcmp(p, keep) == 0 || lstat(p, &st) < 0)
                        continue;
                if (n == SP_ARRAY_SIZE(e)) {
                        /* More than the table holds (never by this code): the overflow goes first. */
                        if (S_ISDIR(st.st_mode))
                                base_remove(p);
                        else
                                unlink(p);
                        continue;
                }
                snprintf(e[n].name, sizeof(e[n].name), "%s", de->d_name);
                e[n++].used = st.st_mtim;
        }
        /* keep counts as one of the kept: the SHAPES_KEPT - 1 newest others stay. */
        while (n > SHAPES_KEPT - 1) {
                size_t old = 0;
                for (size_t i = 1; i < n; i++)
                        if (e[i].used.tv_sec < e[old].used.tv_sec ||
                            (e[i].used.tv_sec == e[old].used.tv_sec && e[i].used.tv_nsec < e[old].used.tv_nsec))
                                old = i;
                char p[PATH_MAX + 300];
                snprintf(p, sizeof(p), "%s/%s", dir, e[old].name);
                struct stat st;
                if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                        base_remove(p);
                else
                        unlink(p);
                sp_log_info_kv(SP_KV("template_dir", spec->template_dir),
                               "removed %s (least recently used of more than %d)", e[old].name, SHAPES_KEPT);
                e[old] = e[--n];
        }
}

/* templates/<name>/vm/disk-<MiB>.ext4, made from the template's rootfs when
 * missing; its path into out. */
static int template_image(const wk_box_spec *spec, uint64_t size, char *out, size_t n, sp_error **err)
{
        snprintf(out, n, "%s/vm/disk-%llu.ext4", spec->template_dir, mib(size));
        if (access(out, R_OK) == 0) {
                touch_used(out);
                return 0;
        }
        _cleanup_close_ int lock = -1;
        if (lock_vm_dir(spec, &lock, err) < 0)
                return -SP_E_IO;
        if (access(out, R_OK) == 0) {
                touch_used(out);
                return 0;
        }
        char rootfs[PATH_MAX], tmp[PATH_MAX + 8];
        snprintf(rootfs, sizeof(rootfs), "%s/rootfs", spec->template_dir);
        snprintf(tmp, sizeof(tmp), "%s.tmp", out);
        if (wk_rootfs_make_ext4(rootfs, tmp, size, MKFS_TIMEOUT_MS, err) < 0)
                return sp_error_wrap(err, "the template's disk image");
        /* Room first: the bound holds at every moment, also for whoever looks between. */
        evict_shapes(spec, "disk-", ".ext4", out);
        if (rename(tmp, out) < 0) {
                unlink(tmp);
                return sp_error_set_errno(err, SP_E_IO, errno, "rename %s", tmp);
        }
        return 0;
}

/* Removes dir and the files a base holds (nothing else is ever in it). */
static void base_remove(const char *dir)
{
        static const char *const files[] = {"disk.ext4", "memory.state", "memory.state.tmp"};
        char p[PATH_MAX + 32];
        for (size_t i = 0; i < SP_ARRAY_SIZE(files); i++) {
                snprintf(p, sizeof(p), "%s/%s", dir, files[i]);
                unlink(p);
        }
        rmdir(dir);
}

/* The box's disk: a reflink of the template's image (or, without a
 * template directory, made from its rootfs). */
static int make_disk(wk_box *box, const wk_box_spec *spec, sp_error **err)
{
        if (!spec->template_dir)
                return wk_rootfs_make_ext4(box->rootfs, box->disk, box->disk_bytes, MKFS_TIMEOUT_MS, err);
        char image[PATH_MAX];
        for (int attempt = 0;; attempt++) {
                if (template_image(spec, box->disk_bytes, image, sizeof(image), err) < 0)
                        return -SP_E_IO;
                _cleanup_error_ sp_error *e = NULL;
                if (clone_file(image, box->disk, &e) == 0)
                        return 0;
                /* Evicted between the two (another size's create made room): made again, once. */
                if (attempt > 0 || access(image, F_OK) == 0) {
                        sp_error_move(err, &e);
                        return -SP_E_IO;
                }
        }
}

/* Starts box from its template's base snapshot: copies of its disk and
 * memory, restored. 1 when there is none (the caller boots), 0 when
 * restored, < 0 on failure (a base that does not restore is removed). */
static int create_from_base(wk_box *box, const wk_box_spec *spec, sp_error **err)
{
        qemu_backend *b = box->b;
        char dir[PATH_MAX], p[PATH_MAX + 16];
        if (b->no_base || !spec->template_dir)
                return 1;
        base_dir(b, box, spec, dir, sizeof(dir));
        if (!base_ready(dir))
                return 1;
        touch_used(dir);
        snprintf(p, sizeof(p), "%s/disk.ext4", dir);
        if (clone_file(p, box->disk, err) < 0)
                return -SP_E_IO;
        snprintf(p, sizeof(p), "%s/memory.state", dir);
        if (clone_file(p, box->state, err) < 0) {
                unlink(box->disk);
                return -SP_E_IO;
        }
        if (box_cgroup(box, err) < 0 || box_boot(box, err) < 0) {
                box_release(box);
                unlink(box->disk);
                unlink(box->state);
                sp_log_warn_kv(SP_KV("sandbox_id", box->id),
                               "its template's base snapshot did not restore (%s): "
                               "removed; booting instead",
                               *err ? (*err)->message : "?");
                _cleanup_close_ int lock = -1;
                _cleanup_error_ sp_error *e = NULL;
                if (lock_vm_dir(spec, &lock, &e) == 0)
                        base_remove(dir);
                return -SP_E_UNAVAILABLE;
        }
        box->from_base = true;
        return 0;
}

static int op_create(wk_backend *base, const wk_box_spec *spec, wk_box **ret, sp_error **err)
{
        qemu_backend *b = (qemu_backend *)base;
        wk_box *box = box_new(b, spec, err);
        if (!box)
                return -SP_E_INVALID;
        int64_t t0 = sp_now_mono_us();
        _cleanup_error_ sp_error *berr = NULL;
        int r = create_from_base(box, spec, &berr);
        if (r == 0) {
                sp_log_debug_kv(SP_KV("sandbox_id", box->id), "VM up (%s): restored from its base snapshot in %lld ms",
                                b->accel, (long long)(sp_now_mono_us() - t0) / 1000);
                *ret = box;
                return 0;
        }
        if (make_disk(box, spec, err) < 0) {
                sp_error_wrap(err, "sandbox %s: disk", box->id);
                box_free(box);
                return -SP_E_IO;
        }
        int64_t t1 = sp_now_mono_us();
        if (box_cgroup(box, err) < 0 || box_boot(box, err) < 0) {
                box_release(box);
                unlink(box->disk);
                box_free(box);
                return -SP_E_UNAVAILABLE;
        }
        sp_log_debug_kv(SP_KV("sandbox_id", box->id), "VM up (%s): disk %lld ms, boot %lld ms", b->accel,
                        (long long)(t1 - t0) / 1000, (long long)(sp_now_mono_us() - t1) / 1000);
        *ret = box;
        return 0;
}

/* Bases made by another kernel, initramfs or QEMU are of no use now. */
static void remove_other_bases(const qemu_backend *b, const wk_box_spec *spec)
{
        char vm[PATH_MAX], prefix[64];
        vm_dir(spec, vm, sizeof(vm));
        snprintf(prefix, sizeof(prefix), "base-%s-", b->base_tag);
        _cleanup_(sp_closedirp) DIR *d = opendir(vm);
        for (struct dirent *de; d && (de = readdir(d));)
                if (strncmp(de->d_name, "base-", 5) == 0 && strncmp(de->d_name, prefix, strlen(prefix)) != 0) {
                        char old[PATH_MAX + 300];
                        snprintf(old, sizeof(old), "%s/%s", vm, de->d_name);
                        base_remove(old);
                }
}

/* Ends a base snapshot's VM that a crashed worker left running in its cgroup. */
static void abandoned_base_kill(qemu_backend *b, const char *id)
{
        wk_cgroup *cg = NULL;
        if (wk_cgroup_open(b->host, b->cgroup_parent, id, &cg, NULL) < 0)
                return;
        sp_log_warn("ending a base snapshot's VM left by an earlier run");
        (void)wk_cgroup_kill_all(cg, NULL);
        (void)wk_cgroup_remove(cg, NULL);
        wk_cgroup_free(cg);
}

/* Boots a VM of spec's machine from the template's image, waits for its
 * agent, and saves it as the base snapshot; removes bases of other tags. */
static int op_prepare(wk_backend *base, const wk_box_spec *spec, sp_error **err)
{
        qemu_backend *b = (qemu_backend *)base;
        if (b->no_base || !spec->template_dir)
                return 0;
        wk_box *box = box_new(b, spec, err);
        if (!box)
                return -SP_E_INVALID;
        char dir[PATH_MAX], tmp[PATH_MAX + 16], image[PATH_MAX];
        base_dir(b, box, spec, dir, sizeof(dir));
        if (base_ready(dir)) {
                box_free(box);
                return 0;
        }
        int r = -SP_E_IO;
        int64_t t0 = sp_now_mono_us();
        _cleanup_close_ int lock = -1;
        if (template_image(spec, box->disk_bytes, image, sizeof(image), err) < 0 || lock_vm_dir(spec, &lock, err) < 0)
                goto out;
        if (base_ready(dir)) {
                r = 0;
                goto out;
        }
        /* The box's disk and state paths follow its rootfs's directory: the temporary base. */
        snprintf(tmp, sizeof(tmp), "%s.tmp", dir);
        base_remove(tmp);
        if (mkdir(tmp, 0700) < 0) {
                sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", tmp);
                goto out;
        }
        if (snprintf(box->rootfs, sizeof(box->rootfs), "%s/rootfs", tmp) >= (int)sizeof(box->rootfs) ||
            snprintf(box->disk, sizeof(box->disk), "%s/disk.ext4", tmp) >= (int)sizeof(box->disk) ||
            snprintf(box->state, sizeof(box->state), "%s/memory.state", tmp) >= (int)sizeof(box->state)) {
                sp_error_set(err, SP_E_INVALID, "path too long: %s", tmp);
                base_remove(tmp);
                goto out;
        }
        abandoned_base_kill(b, box->id);
        box->offline = true;
        if (clone_file(image, box->disk, err) < 0 || box_cgroup(box, err) < 0 || box_boot(box, err) < 0 ||
            save_memory(box, err) < 0) {
                box_release(box);
                base_remove(tmp);
                goto out;
        }
        box_release(box);
        /* Room first: the bound holds at every moment, also for whoever looks between. */
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "base-%s-", b->base_tag);
        remove_other_bases(b, spec);
        evict_shapes(spec, prefix, NULL, dir);
        if (rename(tmp, dir) < 0) {
                sp_error_set_errno(err, SP_E_IO, errno, "rename %s", tmp);
                base_remove(tmp);
                goto out;
        }
        sp_log_info_kv(SP_KV("template_dir", spec->template_dir),
                       "base snapshot made (%s, %llu MiB, %u vCPU, disk %llu MiB) in %lld ms", b->accel,
                       mib(box->guest_bytes), box->vcpus, mib(box->disk_bytes),
                       (long long)(sp_now_mono_us() - t0) / 1000);
        r = 1;
out:
        if (r < 0)
                sp_error_wrap(err, "base snapshot");
        box_free(box);
        return r;
}

static bool op_fits(const wk_box *box, const wk_box_spec *spec)
{
        uint64_t disk = spec->disk_bytes ? spec->disk_bytes : DEFAULT_DISK;
        return guest_memory_of(spec) == box->guest_bytes && vcpus_of(spec) == box->vcpus && disk == box->disk_bytes;
}

/* Its disk and memory state, in a subvolume of the sandbox's own
 * (docs/backends.md "Disk"): a guest rewriting its disk in shifted ranges
 * keeps copy-on-write extents of the host's half-referenced, so that a disk
 * of 2 GiB could hold many times that of the pool; the quota bounds it at
 * twice the disk, the memory state and a margin, and past it the guest's
 * writes fail (werror=report) while the pool and every other sandbox are
 * untouched. */
static uint64_t op_files_bytes(const wk_box_spec *spec)
{
        uint64_t disk = spec->disk_bytes ? spec->disk_bytes : DEFAULT_DISK;
        return 2 * disk + guest_memory_of(spec) + FILES_MARGIN;
}

static bool op_from_base(const wk_box *box)
{
        return box->from_base;
}

static int op_update(wk_box *box, const wk_box_spec *spec, sp_error **err)
{
        /* A VM's memory and vCPUs are fixed for its life; its cgroup's CPU share is not. */
        box->limits.cpu_millis = spec->cpu_millis;
        box->limits.pids_max = spec->pids_max;
        wk_cgroup_limits l = limits_of(box);
        return box->cg ? wk_cgroup_set_limits(box->cg, &l, err) : 0;
}

static int op_pause(wk_box *box, sp_error **err)
{
        return qmp_run(box, "stop", err);
}

static int op_resume(wk_box *box, sp_error **err)
{
        return qmp_run(box, "cont", err);
}

/* Saves memory and devices with the disk; where that fails, the disk alone,
 * and says so (the node reports what was kept). */
static int op_suspend(wk_box *box, bool processes, wk_suspend_info *ret, sp_error **err)
{
        (void)err;
        _cleanup_error_ sp_error *e = NULL;
        *ret = (wk_suspend_info){.filesystem = true};
        /* A stop (processes false) keeps its disk only: it boots again. */
        ret->memory = processes && save_memory(box, &e) == 0;
        if (!ret->memory) {
                if (e) {
                        sp_log_warn_kv(SP_KV("sandbox_id", box->id), "suspending with its disk only: %s", e->message);
                        snprintf(ret->why, sizeof(ret->why), "its memory could not be saved: %s", e->message);
                } else {
                        snprintf(ret->why, sizeof(ret->why), "stopped: its processes end");
                }
                unlink(box->state);
        }
        box_stop(box);
        box->suspended = true;
        return 0;
}

static int op_restore(wk_box *box, wk_restore_info *ret, sp_error **err)
{
        ret->why[0] = '\0'; /* a VM's memory state comes back whole, or the restore fails */
        if (box_cgroup(box, err) < 0 || box_boot(box, err) < 0) {
                box_stop(box);
                return -SP_E_UNAVAILABLE;
        }
        return 0;
}

static int op_destroy(wk_box *box, sp_error **err)
{
        (void)err;
        box_release(box);
        unlink(box->disk);
        unlink(box->state);
        box_free(box);
        return 0;
}

static int op_log_fd(const wk_box *box)
{
        return box->log_rfd;
}

static const char *op_agent_socket(const wk_box *box)
{
        return box->socket;
}

static int op_agent_connect(wk_box *box, int *ret, sp_error **err)
{
        if (box->agent_fd >= 0) {
                *ret = box->agent_fd;
                box->agent_fd = -1;
                return 0;
        }
        /* A running VM's agent answers within milliseconds; each attempt holds a job thread. */
        return agent_sync(box, AGENT_CONNECT_TIMEOUT_MS, ret, err);
}

static int op_stats(wk_box *box, wk_box_stats *ret, sp_error **err)
{
        wk_cgroup_stats st = {0};
        if (!box->cg)
                return sp_error_set(err, SP_E_CONFLICT, "sandbox %s is not running", box->id);
        if (wk_cgroup_stats_read(box->cg, &st, err) < 0)
                return -SP_E_IO;
        *ret = (wk_box_stats){
                .cpu_ns = st.cpu_usage_ns,
                .memory_bytes = st.memory_current,
                .memory_peak_bytes = st.memory_peak,
                .pids = st.pids_current,
                .oom_kills = st.oom_kills,
        };
        return 0;
}

static bool op_alive(const wk_box *box)
{
        return !box->suspended && wk_proc_alive((pid_t *)&box->pid, box->starttime);
}

static json_object *op_save(const wk_box *box)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "pid", json_object_new_int(box->pid));
        json_object_object_add(o, "starttime", json_object_new_int64((int64_t)box->starttime));
        json_object_object_add(o, "suspended", json_object_new_boolean(box->suspended));
        json_object_object_add(o, "accel", json_object_new_string(box->b->accel));
        json_object_object_add(o, "memory_bytes", json_object_new_int64((int64_t)box->guest_bytes));
        json_object_object_add(o, "vcpus", json_object_new_int((int)box->vcpus));
        json_object *net = box->linked ? wk_net_link_record(box->b->net, box->slot) : NULL;
        if (net)
                json_object_object_add(o, "net", net);
        return o;
}

/* The network namespace of a running VM: its tap's (QEMU holds the descriptor at FD_TAP). */
static int vm_netns_of(const wk_box *box, int *ret, sp_error **err)
{
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, box->pid, 0);
        if (pidfd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "pidfd_open");
        _cleanup_close_ int tap = (int)syscall(SYS_pidfd_getfd, pidfd, FD_TAP, 0);
        if (tap < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "QEMU's tap descriptor");
        *ret = ioctl(tap, TUNGETDEVNETNS);
        if (*ret < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "the tap's network namespace");
        return 0;
}

static int op_adopt(wk_backend *base, const wk_box_spec *spec, json_object *saved, wk_box **ret, sp_error **err)
{
        qemu_backend *b = (qemu_backend *)base;
        wk_box *box = box_new(b, spec, err);
        if (!box)
                return -SP_E_INVALID;
        int64_t pid = 0, starttime = 0;
        bool suspended = false;
        if (sp_json_get_int(saved, "pid", false, 0, INT32_MAX, &pid, err) < 0 ||
            sp_json_get_int(saved, "starttime", false, 0, INT64_MAX, &starttime, err) < 0 ||
            sp_json_get_bool(saved, "suspended", false, &suspended, err) < 0) {
                box_free(box);
                return sp_error_wrap(err, "sandbox %s: saved state", spec->id);
        }
        int64_t mem = 0, vcpus = 0;
        if (sp_json_get_int(saved, "memory_bytes", false, 0, INT64_MAX, &mem, err) < 0 ||
            sp_json_get_int(saved, "vcpus", false, 0, 32, &vcpus, err) < 0) {
                box_free(box);
                return sp_error_wrap(err, "sandbox %s: saved state", spec->id);
        }
        if (mem > 0)
                box->guest_bytes = (uint64_t)mem;
        if (vcpus > 0)
                box->vcpus = (unsigned)vcpus;
        box->pid = (pid_t)pid;
        box->starttime = (unsigned long long)starttime;
        box->suspended = suspended;
        if (!suspended) {
                (void)log_open_reader(box);
                _cleanup_error_ sp_error *e = NULL;
                if (wk_cgroup_open(b->host, b->cgroup_parent, box->id, &box->cg, &e) < 0)
                        box->cg = NULL;
                json_object *net = NULL;
                const char *saved_if = NULL;
                e = sp_error_free(e);
                if (sp_json_get_object(saved, "net", false, &net, &e) < 0 || !net ||
                    sp_json_get_string(net, "host_if", false, IF_NAMESIZE - 1, &saved_if, &e) < 0)
                        e = sp_error_free(e);
                if (b->net && net && wk_proc_alive(&box->pid, box->starttime)) {
                        _cleanup_close_ int netns = -1;
                        if (vm_netns_of(box, &netns, &e) < 0 ||
                            wk_net_vm_adopt(b->net, box->slot, netns, saved_if, &e) < 0)
                                sp_log_warn_kv(SP_KV("sandbox_id", box->id), "network: %s", e->message);
                        else
                                box->linked = true;
                }
        }
        *ret = box;
        return 0;
}

static void op_forget(wk_box *box)
{
        box_free(box);
}

static const char *op_accel(const wk_backend *base)
{
        return ((const qemu_backend *)base)->accel;
}

static void op_free(wk_backend *base)
{
        qemu_backend *b = (qemu_backend *)base;
        if (!b)
                return;
        wk_cgroup_host_free(b->host);
        free(b->qemu);
        free(b->kernel);
        free(b->initramfs);
        free(b->cgroup_parent);
        free(b);
}

static const wk_backend_ops qemu_ops = {
        .name = "qemu",
        .free = op_free,
        .create = op_create,
        .update = op_update,
        .pause = op_pause,
        .resume = op_resume,
        .suspend = op_suspend,
        .restore = op_restore,
        .destroy = op_destroy,
        .log_fd = op_log_fd,
        .agent_socket = op_agent_socket,
        .agent_connect = op_agent_connect,
        .stats = op_stats,
        .alive = op_alive,
        .save = op_save,
        .adopt = op_adopt,
        .forget = op_forget,
        .accel = op_accel,
        .prepare = op_prepare,
        .fits = op_fits,
        .from_base = op_from_base,
        .files_bytes = op_files_bytes,
        .own_resolver = true,
        .sync_before_suspend = true,
};

/* --- start: the initramfs, the accelerator --- */

/* The initramfs: the agent as /init and the modules the kernel directory
 * lists in modules/order, loaded in that order. */
static int write_initramfs(qemu_backend *b, const char *agent, const char *kernel_dir, sp_error **err)
{
        char order_path[PATH_MAX];
        snprintf(order_path, sizeof(order_path), "%s/modules/order", kernel_dir);
        _cleanup_buf_ sp_buf order = SP_BUF_INIT;
        if (sp_file_read(order_path, 4096, &order, NULL) < 0)
                sp_buf_clear(&order); /* a kernel with the drivers built in */
        static char paths[MODULES_MAX][PATH_MAX], names[MODULES_MAX][96];
        wk_cpio_entry e[16 + MODULES_MAX];
        size_t n = 0;
        static const char *const dirs[] = {"dev", "proc", "sys", "newroot", "lib", "lib/space", "lib/space/modules"};
        for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++)
                e[n++] = (wk_cpio_entry){.name = dirs[i], .mode = 040755};
        e[n++] = (wk_cpio_entry){.name = "init", .src = agent, .mode = 0100755};
        size_t nmod = 0;
        char *save = NULL;
        for (char *line = order.len ? strtok_r(order.data, "\n", &save) : NULL; line;
             line = strtok_r(NULL, "\n", &save)) {
                if (!line[0])
                        continue;
                if (nmod == MODULES_MAX || strchr(line, '/') || strlen(line) > 64)
                        return sp_error_set(err, SP_E_INVALID, "%s: too many modules or a bad name", order_path);
                snprintf(paths[nmod], sizeof(paths[nmod]), "%s/modules/%s", kernel_dir, line);
                snprintf(names[nmod], sizeof(names[nmod]), "lib/space/modules/%s", line);
                e[n++] = (wk_cpio_entry){.name = names[nmod], .src = paths[nmod], .mode = 0100644};
                nmod++;
        }
        /* The order file as the agent reads it (rebuilt: strtok_r cut it). */
        _cleanup_buf_ sp_buf listing = SP_BUF_INIT;
        for (size_t i = 0; i < nmod; i++)
                sp_buf_appendf(&listing, NULL, "%s\n", names[i] + strlen("lib/space/modules/"));
        e[n++] = (wk_cpio_entry){
                .name = "lib/space/modules/order", .mode = 0100644, .data = listing.data, .len = listing.len};
        return wk_initramfs_write(b->initramfs, e, n, err);
}

static unsigned long host_tsc_khz(void)
{
        _cleanup_fclose_ FILE *f = fopen("/proc/cpuinfo", "re");
        char line[256];
        while (f && fgets(line, sizeof(line), f)) {
                double mhz;
                if (sscanf(line, "cpu MHz : %lf", &mhz) == 1 && mhz > 100)
                        return (unsigned long)(mhz * 1000);
        }
        return 2000000;
}

/* KVM only when a guest really runs under it: /dev/kvm may exist where a
 * nested guest hangs early in boot. The probe boots the kernel and the
 * initramfs (space.probe=1: the agent prints a line and powers off) with a
 * deadline. */
static bool probe_kvm(qemu_backend *b, char *why, size_t whysz)
{
        int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
        if (fd < 0) {
                snprintf(why, whysz, "/dev/kvm: %s", strerror(errno));
                return false;
        }
        close(fd);
        int out[2];
        if (pipe2(out, O_CLOEXEC) < 0) {
                snprintf(why, whysz, "pipe: %s", strerror(errno));
                return false;
        }
        char *const argv[] = {b->qemu,
                              (char *)"-M",
                              (char *)"microvm,acpi=on",
                              (char *)"-accel",
                              (char *)"kvm",
                              (char *)"-cpu",
                              (char *)"host",
                              (char *)"-m",
                              (char *)"128",
                              (char *)"-nodefaults",
                              (char *)"-no-user-config",
                              (char *)"-display",
                              (char *)"none",
                              (char *)"-no-reboot",
                              (char *)"-kernel",
                              b->kernel,
                              (char *)"-initrd",
                              b->initramfs,
                              (char *)"-append",
                              (char *)"console=ttyS0 quiet panic=-1 pci=off space.probe=1",
                              (char *)"-serial",
                              (char *)"stdio",
                              NULL};
        char *const envp[] = {(char *)"PATH=/usr/bin:/bin", (char *)"LC_ALL=C", NULL};
        int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
        pid_t pid = fork();
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (dup2(devnull, 0) < 0 || dup2(out[1], 1) < 0 || dup2(out[1], 2) < 0)
                        _exit(127);
                execve(b->qemu, argv, envp);
                _exit(127);
        }
        sp_close(devnull);
        close(out[1]);
        bool ok = false;
        char buf[4096];
        size_t len = 0;
        int64_t deadline = sp_now_mono_us() + PROBE_TIMEOUT_MS * 1000;
        while (pid > 0 && !ok) {
                int64_t left = (deadline - sp_now_mono_us()) / 1000;
                if (left <= 0)
                        break;
                struct pollfd p = {.fd = out[0], .events = POLLIN};
                if (poll(&p, 1, (int)left) <= 0)
                        continue;
                ssize_t r = read(out[0], buf + len, sizeof(buf) - 1 - len);
                if (r <= 0)
                        break;
                len += (size_t)r;
                buf[len] = '\0';
                ok = strstr(buf, "space-probe-ok") != NULL;
                if (len > sizeof(buf) / 2) {
                        memmove(buf, buf + len - 64, 64);
                        len = 64;
                }
        }
        close(out[0]);
        if (pid > 0) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
        }
        if (!ok)
                snprintf(why, whysz, "a probe guest under KVM did not answer within %d ms", PROBE_TIMEOUT_MS);
        return ok;
}

/* b->base_tag: the first 16 hex digits of SHA-256 over what a base snapshot
 * must be restored with: the kernel's and the initramfs's bytes, QEMU (path,
 * size, change time) and the accelerator. A new agent or kernel makes new bases. */
static int compute_base_tag(qemu_backend *b, sp_error **err)
{
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
                EVP_MD_CTX_free(md);
                return sp_error_set(err, SP_E_INTERNAL, "sha256 digest unavailable");
        }
        const char *files[] = {b->kernel, b->initramfs};
        int r = 0;
        for (size_t i = 0; i < SP_ARRAY_SIZE(files) && r == 0; i++) {
                _cleanup_close_ int fd = open(files[i], O_RDONLY | O_CLOEXEC);
                if (fd < 0) {
                        r = sp_error_set_errno(err, SP_E_IO, errno, "open %s", files[i]);
                        break;
                }
                char buf[65536];
                ssize_t n;
                while ((n = read(fd, buf, sizeof(buf))) > 0)
                        EVP_DigestUpdate(md, buf, (size_t)n);
                if (n < 0)
                        r = sp_error_set_errno(err, SP_E_IO, errno, "read %s", files[i]);
        }
        struct stat st;
        char q[PATH_MAX + 96];
        if (r == 0 && stat(b->qemu, &st) == 0) {
                int len = snprintf(q, sizeof(q), "base-v1|%s|%lld|%lld|%s", b->qemu, (long long)st.st_size,
                                   (long long)st.st_ctime, b->accel);
                EVP_DigestUpdate(md, q, (size_t)len);
        }
        unsigned char h[32];
        unsigned hl = 0;
        if (r == 0 && EVP_DigestFinal_ex(md, h, &hl) == 1)
                for (int i = 0; i < 8; i++)
                        snprintf(b->base_tag + 2 * i, 3, "%02x", h[i]);
        EVP_MD_CTX_free(md);
        return r;
}

int wk_backend_qemu_new(const wk_backend_config *cfg, wk_backend **ret, sp_error **err)
{
        if (!cfg->agent_path || access(cfg->agent_path, X_OK) < 0)
                return sp_error_set(err, SP_E_INVALID, "the qemu backend needs the space-agent binary (%s)",
                                    cfg->agent_path ? cfg->agent_path : "unset");
        if (!cfg->vm_kernel_dir || !cfg->vm_state_dir)
                return sp_error_set(err, SP_E_INVALID,
                                    "the qemu backend needs a kernel directory and a state directory");
        qemu_backend *b = calloc(1, sizeof(*b));
        if (!b)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        b->base.ops = &qemu_ops;
        b->uid_base = cfg->uid_base;
        b->uid_count = cfg->uid_count ? cfg->uid_count : 65536;
        b->die_with_parent = cfg->die_with_parent;
        b->no_base = cfg->no_base_snapshots;
        b->net = cfg->net;
        b->tsc_khz = host_tsc_khz();
        struct group *g = getgrnam("kvm");
        b->kvm_gid = g ? g->gr_gid : (gid_t)-1;
        if (asprintf(&b->kernel, "%s/vmlinuz", cfg->vm_kernel_dir) < 0 ||
            asprintf(&b->initramfs, "%s/initramfs.cpio", cfg->vm_state_dir) < 0)
                b->kernel = b->initramfs = NULL;
        b->qemu = strdup(cfg->qemu_path ? cfg->qemu_path : "/usr/bin/qemu-system-x86_64");
        b->cgroup_parent = strdup(cfg->cgroup_parent ? cfg->cgroup_parent : "space");
        if (!b->kernel || !b->initramfs || !b->qemu || !b->cgroup_parent) {
                op_free(&b->base);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (access(b->qemu, X_OK) < 0) {
                sp_error_set_errno(err, SP_E_UNAVAILABLE, errno, "QEMU at %s (Debian: qemu-system-x86)", b->qemu);
                op_free(&b->base);
                return -SP_E_UNAVAILABLE;
        }
        if (access(b->kernel, R_OK) < 0) {
                sp_error_set_errno(err, SP_E_UNAVAILABLE, errno, "the VM kernel at %s (scripts/vm-kernel installs it)",
                                   b->kernel);
                op_free(&b->base);
                return -SP_E_UNAVAILABLE;
        }
        if (sp_mkdir_p(cfg->vm_state_dir, 0755, err) < 0 ||
            write_initramfs(b, cfg->agent_path, cfg->vm_kernel_dir, err) < 0 ||
            wk_cgroup_host_detect(&b->host, err) < 0) {
                op_free(&b->base);
                return sp_error_wrap(err, "qemu backend");
        }
        const char *want = cfg->accel && *cfg->accel ? cfg->accel : "auto";
        if (strcmp(want, "tcg") == 0) {
                snprintf(b->accel, sizeof(b->accel), "tcg");
                snprintf(b->accel_why, sizeof(b->accel_why), "asked for");
        } else if (probe_kvm(b, b->accel_why, sizeof(b->accel_why))) {
                snprintf(b->accel, sizeof(b->accel), "kvm");
                snprintf(b->accel_why, sizeof(b->accel_why), "a probe guest answered");
        } else if (strcmp(want, "kvm") == 0) {
                sp_error_set(err, SP_E_UNAVAILABLE, "KVM was asked for and is not usable: %s", b->accel_why);
                op_free(&b->base);
                return -SP_E_UNAVAILABLE;
        } else {
                snprintf(b->accel, sizeof(b->accel), "tcg");
        }
        abandoned_base_kill(b, WK_VM_BASE_BOX_ID);
        if (compute_base_tag(b, err) < 0) {
                op_free(&b->base);
                return sp_error_wrap(err, "qemu backend");
        }
        sp_log_info("qemu backend: %s (%s), kernel %s, base snapshots %s", b->accel, b->accel_why, b->kernel,
                    b->no_base ? "off" : b->base_tag);
        *ret = &b->base;
        return 0;
}
