/* SPDX-License-Identifier: Apache-2.0 */
/* A jail's checkpoint and restore with CRIU: see jail_criu.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/jail.h"
#include "backend/jail_criu.h"
#include "backend/proc.h"
#include "rootfs/mountinfo.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/time.h"

#define CRIU_TIMEOUT_MS 120000
#define NET_KEY "net"
#define USERNS_KEY "space-userns"
#define MAX_ARGS 128

/* --- running criu --- */

/* The first line of CRIU's log that says "Error" (but for the ones it
 * carries on after), for the caller's message. */
static void first_error(const char *log, char *out, size_t n)
{
        snprintf(out, n, "see %s", log);
        _cleanup_fclose_ FILE *f = fopen(log, "re");
        if (!f)
                return;
        char line[1024];
        while (fgets(line, sizeof(line), f)) {
                char *src = strstr(line, "Error (");
                if (!src || strstr(line, "rlimit:"))
                        continue;
                line[strcspn(line, "\n")] = '\0';
                /* "(00.012345) 1: Error (criu/x.c:12): what" -> "what (criu/x.c:12)" */
                char *what = strstr(src, "): ");
                if (what)
                        snprintf(out, n, "%s (%.*s)", what + 3, (int)(what - src - 7), src + 7);
                else
                        snprintf(out, n, "%s", src);
                return;
        }
}

/* Runs criu with argv (argv[0] its path), the descriptors keep[] inherited
 * at their numbers; its own output goes to /dev/null (it logs with -o). */
static int run_criu(char *const argv[], const int *keep, size_t nkeep, const char *log, sp_error **err)
{
        int64_t t0 = sp_now_mono_us();
        pid_t pid = fork();
        if (pid < 0)
                return sp_error_set_errno(err, SP_E_LIMIT, errno, "fork criu");
        if (pid == 0) {
                /* Only async-signal-safe calls until execve. */
                int null = open("/dev/null", O_RDWR);
                if (null >= 0) {
                        dup2(null, 0), dup2(null, 1), dup2(null, 2);
                }
                syscall(SYS_close_range, 3, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */);
                for (size_t i = 0; i < nkeep; i++)
                        fcntl(keep[i], F_SETFD, 0);
                setsid();
                char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
                execve(argv[0], argv, envp);
                _exit(127);
        }
        int status = 0;
        for (;;) {
                pid_t w = waitpid(pid, &status, WNOHANG);
                if (w == pid)
                        break;
                if (w < 0 && errno != EINTR)
                        return sp_error_set_errno(err, SP_E_INTERNAL, errno, "wait for criu");
                if (sp_now_mono_us() - t0 > (int64_t)CRIU_TIMEOUT_MS * 1000) {
                        kill(-pid, SIGKILL); /* criu and its helpers (tar): its own session */
                        kill(pid, SIGKILL);
                        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                                ;
                        return sp_error_set(err, SP_E_TIMEOUT, "criu %s took more than %d s", argv[1],
                                            CRIU_TIMEOUT_MS / 1000);
                }
                usleep(5000);
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return 0;
        char why[600];
        first_error(log, why, sizeof(why));
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                snprintf(why, sizeof(why), "cannot execute %s", argv[0]);
        return sp_error_set(err, SP_E_UNSUPPORTED, "criu %s: %s", argv[1], why);
}

typedef struct args {
        char *v[MAX_ARGS];
        size_t n;
        bool full;
} args;

static void arg(args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(args *a, const char *fmt, ...)
{
        if (a->n + 1 >= MAX_ARGS) {
                a->full = true;
                return;
        }
        va_list ap;
        va_start(ap, fmt);
        char *s = NULL;
        if (vasprintf(&s, fmt, ap) < 0)
                a->full = true;
        else
                a->v[a->n++] = s;
        va_end(ap);
}

static void args_free(args *a)
{
        for (size_t i = 0; i < a->n; i++)
                free(a->v[i]);
        a->n = 0;
}

/* --- what the tree holds of the host's --- */

/* The mounts the jail makes from the host's, by mount point inside, and the
 * key CRIU knows each by (what it is on the host is known again at restore
 * from the key). */
static bool external_mount_key(const char *mp, char *key, size_t n)
{
        if (strcmp(mp, "/dev") == 0 || strcmp(mp, "/sys") == 0) {
                snprintf(key, n, "%s", mp + 1);
                return true;
        }
        if (strcmp(mp, WK_JAIL_AGENT_PATH) == 0) {
                snprintf(key, n, "agent");
                return true;
        }
        for (size_t i = 0; i < WK_JAIL_DEV_NODES; i++)
                if (strncmp(mp, "/dev/", 5) == 0 && strcmp(mp + 5, wk_jail_dev_nodes[i]) == 0) {
                        snprintf(key, n, "dev-%s", wk_jail_dev_nodes[i]);
                        return true;
                }
        for (size_t i = 0; i < WK_JAIL_PROC_MASKED; i++)
                if (strncmp(mp, "/proc/", 6) == 0 && strcmp(mp + 6, wk_jail_proc_masked[i]) == 0) {
                        snprintf(key, n, "proc-%s", wk_jail_proc_masked[i]);
                        return true;
                }
        return false;
}

/* The host path a restore binds for an external mount's key (NULL: not
 * one of ours): /dev, /sys and the agent from the staging directory. */
static const char *external_mount_source(const char *key, const char *staging, char *buf, size_t n)
{
        if (strcmp(key, "dev") == 0 || strcmp(key, "sys") == 0 || strcmp(key, "agent") == 0) {
                snprintf(buf, n, "%s/%s", staging, key);
                return buf;
        }
        if (strncmp(key, "dev-", 4) == 0) {
                for (size_t i = 0; i < WK_JAIL_DEV_NODES; i++)
                        if (strcmp(key + 4, wk_jail_dev_nodes[i]) == 0) {
                                snprintf(buf, n, "/dev/%s", wk_jail_dev_nodes[i]);
                                return buf;
                        }
                return NULL;
        }
        if (strncmp(key, "proc-", 5) == 0) {
                for (size_t i = 0; i < WK_JAIL_PROC_MASKED; i++)
                        if (strcmp(key + 5, wk_jail_proc_masked[i]) == 0)
                                return "/dev/null";
        }
        return NULL;
}

typedef struct tree_mounts {
        int *ids;
        size_t n;
        args *a;
        json_object *keys;
        json_object *points; /* the mount points seen, for duplicates */
} tree_mounts;

static bool listed(const char *name, const char *const *list, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(name, list[i]) == 0)
                        return true;
        return false;
}

/* Whether a mount is one the jail makes (wk_jail_start), by its mount point and, where the jail mounts a
 * filesystem there, its type. A restore makes the tree's mounts as host root (before the tree enters its user
 * namespace, so that the kernel locks them: scripts/criu.d/0005-enter-userns.patch): one the sandbox made
 * itself is not made so. */
static bool jail_mount(const char *mp, const char *fstype)
{
        static const struct {
                const char *point, *fstype;
        } fixed[] = {{"/", NULL},       {"/dev", "tmpfs"}, {"/dev/shm", "tmpfs"}, {"/dev/pts", "devpts"},
                     {"/proc", "proc"}, {"/sys", "sysfs"}, {"/run", "tmpfs"},     {WK_JAIL_AGENT_PATH, NULL}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(fixed); i++)
                if (strcmp(mp, fixed[i].point) == 0)
                        return !fixed[i].fstype || strcmp(fstype, fixed[i].fstype) == 0;
        if (strncmp(mp, "/dev/", 5) == 0)
                return listed(mp + 5, wk_jail_dev_nodes, WK_JAIL_DEV_NODES);
        if (strncmp(mp, "/proc/", 6) == 0)
                return listed(mp + 6, wk_jail_proc_masked, WK_JAIL_PROC_MASKED) ||
                       (listed(mp + 6, wk_jail_proc_readonly, WK_JAIL_PROC_READONLY) && strcmp(fstype, "proc") == 0);
        return false;
}

/* One mount of the tree's: its id kept, and an --external mnt[] option when
 * the jail made it from the host's. */
static int mount_seen(const wk_mountinfo_entry *e, void *ud, sp_error **err)
{
        tree_mounts *m = ud;
        if (!jail_mount(e->mount_point, e->fstype) || json_object_object_get_ex(m->points, e->mount_point, NULL))
                return sp_error_set(err, SP_E_UNSUPPORTED,
                                    "the sandbox made a mount of its own (%s on %s), which a restore would make as "
                                    "the host's root",
                                    e->fstype, e->mount_point);
        json_object_object_add(m->points, e->mount_point, NULL);
        int *ids = realloc(m->ids, (m->n + 1) * sizeof(*ids));
        if (!ids)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        m->ids = ids;
        m->ids[m->n++] = e->mount_id;
        char key[64];
        if (external_mount_key(e->mount_point, key, sizeof(key))) {
                arg(m->a, "--external");
                arg(m->a, "mnt[%s]:%s", e->mount_point, key);
                json_object_array_add(m->keys, json_object_new_string(key));
        }
        return 0;
}

/* The mount ids of pid's mount namespace, and the --external mnt[] options. */
static int read_mounts(pid_t pid, tree_mounts *m, sp_error **err)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/mountinfo", (int)pid);
        return wk_mountinfo_foreach(path, mount_seen, m, err);
}

static bool in_tree_mounts(const tree_mounts *m, int id)
{
        for (size_t i = 0; i < m->n; i++)
                if (m->ids[i] == id)
                        return true;
        return false;
}

static bool same_file(const char *path, const struct statx *st)
{
        struct stat s;
        return stat(path, &s) == 0 && s.st_ino == st->stx_ino &&
               s.st_dev == (dev_t)makedev(st->stx_dev_major, st->stx_dev_minor);
}

/* What an external file is, for the restore to open it again. */
static const char *file_kind(const struct statx *st, const wk_criu_dump *d)
{
        if (same_file(d->agent_path, st))
                return "agent";
        if (same_file("/dev/null", st))
                return "null";
        if (same_file(d->log_fifo, st))
                return "log";
        return NULL;
}

/* A deleted file CRIU would make again at its old path when it restores
 * (a "ghost file"): at a moment when that path is resolved against the
 * host's root, so that a symlink the sandbox put in its place leads out of
 * it (an outside pass wrote and removed host files so). Refused: such a
 * sandbox suspends with its files only. Memory files, shared anonymous
 * memory and System V segments are no ghosts. */
static bool deleted_file(const char *target)
{
        size_t n = strlen(target);
        static const char suffix[] = " (deleted)";
        if (n < sizeof(suffix) - 1 || strcmp(target + n - (sizeof(suffix) - 1), suffix) != 0)
                return false;
        return strncmp(target, "/memfd:", 7) != 0 && strncmp(target, "/dev/zero ", 10) != 0 &&
               strncmp(target, "/SYSV", 5) != 0;
}

/* One of the tree's files (a /proc magic link): an --external file[] when
 * it lies on a mount outside the tree's mount namespace. */
static int check_file(const char *link, const tree_mounts *m, const wk_criu_dump *d, args *a, json_object *files,
                      sp_error **err)
{
        char target[PATH_MAX + 16];
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n < 0)
                return errno == ENOENT ? 0 : sp_error_set_errno(err, SP_E_IO, errno, "readlink %s", link);
        /* Cut short, its " (deleted)" could be lost: not checked, so refused. */
        if ((size_t)n >= sizeof(target) - 1)
                return sp_error_set(err, SP_E_UNSUPPORTED, "%s names a path too long to check", link);
        target[n] = '\0';
        if (strncmp(target, "socket:", 7) == 0 || strncmp(target, "pipe:", 5) == 0 ||
            strncmp(target, "anon_inode:", 11) == 0)
                return 0;
        if (deleted_file(target))
                return sp_error_set(err, SP_E_UNSUPPORTED,
                                    "a process holds a deleted file (%s), which CRIU would make again at its "
                                    "path on the host",
                                    target);
        struct statx st;
        if (statx(AT_FDCWD, link, 0, STATX_INO | STATX_MNT_ID, &st) < 0)
                return errno == ENOENT ? 0 : sp_error_set_errno(err, SP_E_IO, errno, "statx %s", link);
        if (!(st.stx_mask & STATX_MNT_ID))
                return sp_error_set(err, SP_E_UNSUPPORTED, "the kernel gives no mount id (statx)");
        if (in_tree_mounts(m, (int)st.stx_mnt_id))
                return 0;
        char key[64];
        snprintf(key, sizeof(key), "file[%x:%llx]", (unsigned)st.stx_mnt_id, (unsigned long long)st.stx_ino);
        if (json_object_object_get_ex(files, key, NULL))
                return 0;
        const char *kind = file_kind(&st, d);
        if (!kind)
                return sp_error_set(err, SP_E_UNSUPPORTED, "%s (%s) is a file of the host's", link, target);
        json_object_object_add(files, key, json_object_new_string(kind));
        arg(a, "--external");
        arg(a, "%s", key);
        return 0;
}

static int ns_ino(pid_t pid, const char *ns, ino_t *ret)
{
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/ns/%s", (int)pid, ns);
        struct stat st;
        if (stat(p, &st) < 0)
                return -1;
        *ret = st.st_ino;
        return 0;
}

/* Every process in the tree's pid namespace: its executable and open files. */
static int tree_files(const wk_criu_dump *d, const tree_mounts *m, args *a, json_object *files, sp_error **err)
{
        ino_t pidns, mntns;
        if (ns_ino(d->pid, "pid", &pidns) < 0 || ns_ino(d->pid, "mnt", &mntns) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "the namespaces of %d", (int)d->pid);
        _cleanup_closedir_ DIR *proc = opendir("/proc");
        if (!proc)
                return sp_error_set_errno(err, SP_E_IO, errno, "open /proc");
        struct dirent *de;
        while ((de = readdir(proc))) {
                char *end;
                long p = strtol(de->d_name, &end, 10);
                ino_t ns;
                if (*end || p <= 0 || ns_ino((pid_t)p, "pid", &ns) < 0 || ns != pidns)
                        continue;
                /* One mount namespace, the one the restore copies into the sandbox's user namespace. */
                if (ns_ino((pid_t)p, "mnt", &ns) == 0 && ns != mntns)
                        return sp_error_set(err, SP_E_UNSUPPORTED,
                                            "a process (%ld on the host) has a mount namespace of its own", p);
                char path[64];
                static const char *const links[] = {"exe", "cwd", "root"};
                for (size_t i = 0; i < SP_ARRAY_SIZE(links); i++) {
                        snprintf(path, sizeof(path), "/proc/%ld/%s", p, links[i]);
                        if (check_file(path, m, d, a, files, err) < 0)
                                return -SP_E_UNSUPPORTED;
                }
                snprintf(path, sizeof(path), "/proc/%ld/map_files", p);
                _cleanup_closedir_ DIR *maps = opendir(path);
                for (struct dirent *me; maps && (me = readdir(maps));) {
                        if (me->d_name[0] == '.')
                                continue;
                        char link[300], target[PATH_MAX + 16];
                        snprintf(link, sizeof(link), "/proc/%ld/map_files/%.64s", p, me->d_name);
                        ssize_t tn = readlink(link, target, sizeof(target) - 1);
                        if (tn <= 0)
                                continue;
                        if ((size_t)tn >= sizeof(target) - 1)
                                return sp_error_set(err, SP_E_UNSUPPORTED, "%s names a path too long to check", link);
                        target[tn] = '\0';
                        if (deleted_file(target))
                                return sp_error_set(err, SP_E_UNSUPPORTED,
                                                    "a process maps a deleted file (%s), which CRIU would make "
                                                    "again at its path on the host",
                                                    target);
                }
                snprintf(path, sizeof(path), "/proc/%ld/fd", p);
                _cleanup_closedir_ DIR *fds = opendir(path);
                if (!fds)
                        continue; /* it ended */
                struct dirent *fe;
                while ((fe = readdir(fds))) {
                        if (fe->d_name[0] == '.')
                                continue;
                        snprintf(path, sizeof(path), "/proc/%ld/fd/%.16s", p, fe->d_name);
                        if (check_file(path, m, d, a, files, err) < 0)
                                return -SP_E_UNSUPPORTED;
                }
        }
        return 0;
}

/* --- a userns image's map --- */

#define IMG_COMMON_MAGIC 0x54564319u
#define USERNS_MAGIC 0x55474906u
#define USERNS_ENTRY_MAX (1u << 20)

static int get_varint(const uint8_t *p, size_t n, size_t *off, uint64_t *ret)
{
        uint64_t v = 0;
        for (unsigned shift = 0; shift < 64; shift += 7) {
                if (*off >= n)
                        return -1;
                uint8_t b = p[(*off)++];
                v |= (uint64_t)(b & 0x7f) << shift;
                if (!(b & 0x80)) {
                        *ret = v;
                        return 0;
                }
        }
        return -1;
}

static void put_varint(sp_buf *b, uint64_t v)
{
        uint8_t tmp[10];
        size_t n = 0;
        do {
                tmp[n] = (uint8_t)(v & 0x7f);
                v >>= 7;
                if (v)
                        tmp[n] |= 0x80;
                n++;
        } while (v);
        sp_buf_append(b, tmp, n, NULL);
}

/* One uid_gid_extent {first = 1, lower_first = 2, count = 3} (all three,
 * varints, nothing else), written again with lower_first moved. */
static int remap_extent(const uint8_t *p, size_t n, uint32_t from, uint32_t to, uint32_t count, sp_buf *out)
{
        uint64_t v[3];
        bool seen[3] = {false, false, false};
        size_t off = 0;
        while (off < n) {
                uint64_t key;
                if (get_varint(p, n, &off, &key) < 0 || (key & 7) != 0 || (key >> 3) < 1 || (key >> 3) > 3)
                        return -1;
                unsigned f = (unsigned)(key >> 3) - 1;
                if (seen[f] || get_varint(p, n, &off, &v[f]) < 0 || v[f] > UINT32_MAX)
                        return -1;
                seen[f] = true;
        }
        if (!seen[0] || !seen[1] || !seen[2])
                return -1;
        if (v[1] >= from && v[1] - from < count) {
                uint64_t moved = v[1] - from + to;
                if (moved > UINT32_MAX || moved + v[2] > (uint64_t)UINT32_MAX + 1)
                        return -1;
                v[1] = moved;
        }
        for (unsigned f = 0; f < 3; f++) {
                put_varint(out, (uint64_t)(f + 1) << 3);
                put_varint(out, v[f]);
        }
        return 0;
}

/* One userns_entry {repeated uid_map = 1, repeated gid_map = 2}. */
static int remap_entry(const uint8_t *p, size_t n, uint32_t from, uint32_t to, uint32_t count, sp_buf *out)
{
        size_t off = 0;
        while (off < n) {
                uint64_t key, len;
                if (get_varint(p, n, &off, &key) < 0 || (key & 7) != 2 || (key >> 3) < 1 || (key >> 3) > 2 ||
                    get_varint(p, n, &off, &len) < 0 || len > n - off)
                        return -1;
                _cleanup_buf_ sp_buf ext = SP_BUF_INIT;
                if (remap_extent(p + off, (size_t)len, from, to, count, &ext) < 0)
                        return -1;
                put_varint(out, key);
                put_varint(out, ext.len);
                sp_buf_append(out, ext.data, ext.len, NULL);
                off += (size_t)len;
        }
        return 0;
}

static uint32_t get_u32(const uint8_t *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u32(sp_buf *b, uint32_t v)
{
        uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
        sp_buf_append(b, t, 4, NULL);
}

int wk_criu_userns_remap(const uint8_t *in, size_t n, uint32_t from, uint32_t to, uint32_t count, sp_buf *out,
                         sp_error **err)
{
        size_t start = out->len;
        if (n < 8 || get_u32(in) != IMG_COMMON_MAGIC || get_u32(in + 4) != USERNS_MAGIC)
                return sp_error_set(err, SP_E_INVALID, "not a CRIU userns image");
        put_u32(out, IMG_COMMON_MAGIC);
        put_u32(out, USERNS_MAGIC);
        size_t off = 8;
        while (off < n) {
                if (n - off < 4)
                        goto bad;
                uint32_t len = get_u32(in + off);
                off += 4;
                if (len > USERNS_ENTRY_MAX || len > n - off)
                        goto bad;
                _cleanup_buf_ sp_buf e = SP_BUF_INIT;
                if (remap_entry(in + off, len, from, to, count, &e) < 0)
                        goto bad;
                put_u32(out, (uint32_t)e.len);
                sp_buf_append(out, e.data, e.len, NULL);
                off += len;
        }
        return 0;
bad:
        out->len = start;
        return sp_error_set(err, SP_E_INVALID, "a malformed CRIU userns image");
}

/* --- a mountpoints image's mounts --- */

#define MNTS_MAGIC 0x55563928u
#define MNTS_MAX 64

/* CRIU's fstype enum (images/mnt.proto) for the filesystems the jail mounts; "other" for the rest. */
static const char *fstype_name(uint64_t t)
{
        switch (t) {
        case 1:
                return "proc";
        case 2:
                return "sysfs";
        case 5:
                return "tmpfs";
        case 6:
                return "devpts";
        default:
                return "other";
        }
}

/* One mnt_entry: its fstype (field 1, a varint) and mount point (field 7, absolute), the rest skipped. */
static int mount_entry(const uint8_t *p, size_t n, uint64_t *fstype, char *mp, size_t mpn)
{
        size_t off = 0;
        bool have_mp = false;
        *fstype = 0;
        while (off < n) {
                uint64_t key, v;
                if (get_varint(p, n, &off, &key) < 0 || (key >> 3) == 0)
                        return -1;
                if ((key & 7) == 0) {
                        if (get_varint(p, n, &off, &v) < 0)
                                return -1;
                        if ((key >> 3) == 1)
                                *fstype = v;
                } else if ((key & 7) == 2) {
                        if (get_varint(p, n, &off, &v) < 0 || v > n - off)
                                return -1;
                        if ((key >> 3) == 7) {
                                const char *s = (const char *)p + off;
                                if (v < 1 || v >= mpn || s[0] != '/' || memchr(s, '\0', (size_t)v))
                                        return -1;
                                snprintf(mp, mpn, "%.*s", (int)v, s);
                                have_mp = true;
                        }
                        off += (size_t)v;
                } else {
                        return -1;
                }
        }
        return have_mp ? 0 : -1;
}

int wk_criu_mounts_check(const uint8_t *in, size_t n, sp_error **err)
{
        if (n < 8 || get_u32(in) != IMG_COMMON_MAGIC || get_u32(in + 4) != MNTS_MAGIC)
                return sp_error_set(err, SP_E_INVALID, "not a CRIU mountpoints image");
        _cleanup_json_ json_object *seen = json_object_new_object();
        size_t off = 8, count = 0;
        while (off < n) {
                if (n - off < 4)
                        goto bad;
                uint32_t len = get_u32(in + off);
                off += 4;
                if (len > n - off)
                        goto bad;
                uint64_t fstype;
                char mp[PATH_MAX];
                if (mount_entry(in + off, len, &fstype, mp, sizeof(mp)) < 0)
                        goto bad;
                off += len;
                if (++count > MNTS_MAX)
                        return sp_error_set(err, SP_E_INVALID, "more than %d mounts", MNTS_MAX);
                if (!jail_mount(mp, fstype_name(fstype)) || json_object_object_get_ex(seen, mp, NULL))
                        return sp_error_set(err, SP_E_INVALID, "a mount the jail does not make (%s on %s)",
                                            fstype_name(fstype), mp);
                json_object_object_add(seen, mp, NULL);
        }
        return 0;
bad:
        return sp_error_set(err, SP_E_INVALID, "a malformed CRIU mountpoints image");
}

/* The checkpoint's mounts are the jail's own, in one mount namespace (what a restore makes as host root). */
static int check_mount_images(const char *dir, sp_error **err)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", dir);
        int images = 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (strncmp(de->d_name, "mountpoints-", 12) != 0)
                        continue;
                if (++images > 1)
                        return sp_error_set(err, SP_E_INVALID, "more than one mount namespace");
                char p[PATH_MAX];
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                _cleanup_buf_ sp_buf in = SP_BUF_INIT;
                if (sp_file_read(p, 4u << 20, &in, err) < 0 ||
                    wk_criu_mounts_check((const uint8_t *)in.data, in.len, err) < 0)
                        return -SP_E_INVALID;
        }
        return images == 1 ? 0 : sp_error_set(err, SP_E_INVALID, "no mountpoints image");
}

/* Every userns image of the checkpoint in dir mapped from one host base to another. */
static int remap_images(const char *dir, uid_t from, uid_t to, uint32_t count, sp_error **err)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", dir);
        struct dirent *de;
        while ((de = readdir(d))) {
                if (strncmp(de->d_name, "userns-", 7) != 0)
                        continue;
                char p[PATH_MAX];
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                _cleanup_buf_ sp_buf in = SP_BUF_INIT, out = SP_BUF_INIT;
                if (sp_file_read(p, 16u << 20, &in, err) < 0 ||
                    wk_criu_userns_remap((const uint8_t *)in.data, in.len, (uint32_t)from, (uint32_t)to, count, &out,
                                         err) < 0 ||
                    sp_file_write_atomic(p, out.data, out.len, 0600, err) < 0)
                        return sp_error_wrap(err, "%s", p);
        }
        return 0;
}

/* The hierarchies in which pid is in cgroup (by CRIU's names for them: a v1
 * hierarchy's controllers, "unified" for v2). */
static int tree_hierarchies(pid_t pid, const char *cgroup, json_object *out, sp_error **err)
{
        char p[64];
        snprintf(p, sizeof(p), "/proc/%d/cgroup", (int)pid);
        _cleanup_fclose_ FILE *f = fopen(p, "re");
        if (!f)
                return sp_error_set_errno(err, SP_E_IO, errno, "read %s", p);
        char line[4096];
        while (fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = '\0';
                char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
                if (!c2 || strcmp(c2 + 1, cgroup) != 0)
                        continue;
                *c2 = '\0';
                json_object_array_add(out, json_object_new_string(c1[1] ? c1 + 1 : "unified"));
        }
        return 0;
}

/* Whether CRIU's images hold a ghost file (ghost-file-N.img). */
static bool has_ghosts(const char *dir)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d));)
                if (strncmp(de->d_name, "ghost-file-", 11) == 0)
                        return true;
        return false;
}

/* A checkpoint is CRIU's images, regular files in one directory, and ours:
 * anything else (a symlink, a directory: a tampered copy) is refused before
 * the worker chowns, rewrites or hands it to CRIU as root. */
static int images_plain(const char *dir, sp_error **err)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", dir);
        for (struct dirent *de; (de = readdir(d));) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        return sp_error_set(err, SP_E_INVALID, "%s/%s is not an image file", dir, de->d_name);
                if (strncmp(de->d_name, "ghost-file-", 11) == 0)
                        return sp_error_set(err, SP_E_INVALID, "%s holds a ghost file (refused)", dir);
        }
        return 0;
}

/* CRIU's images directory is flat: its files, then itself. */
void wk_criu_images_remove(const char *dir)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return;
        struct dirent *de;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
                    unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT)
                        sp_log_warn("checkpoint %s: remove %s: %s", dir, de->d_name, strerror(errno));
        if (rmdir(dir) < 0 && errno != ENOENT)
                sp_log_warn("checkpoint %s: %s", dir, strerror(errno));
}

int wk_criu_dump_tree(const wk_criu_dump *d, sp_error **err)
{
        wk_criu_images_remove(d->dir);
        if (mkdir(d->dir, 0700) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", d->dir);
        _cleanup_json_ json_object *meta = json_object_new_object();
        json_object *files = json_object_new_object(), *mounts = json_object_new_array();
        json_object_object_add(meta, "files", files);
        json_object_object_add(meta, "mounts", mounts);
        args a = {0};
        const char *log = d->log;
        arg(&a, "%s", d->criu);
        arg(&a, "dump");
        arg(&a, "--tree");
        arg(&a, "%d", (int)d->pid);
        arg(&a, "--images-dir");
        arg(&a, "%s", d->dir);
        arg(&a, "--log-file");
        arg(&a, "%s", log);
        arg(&a, "-v4");
        arg(&a, "--manage-cgroups");
        arg(&a, "--tcp-established");
        arg(&a, "--ghost-limit"); /* no ghost file's contents: such a dump fails (deleted_file) */
        arg(&a, "0");
        ino_t netns;
        tree_mounts m = {.a = &a, .keys = mounts, .points = json_object_new_object()};
        int r = 0;
        if (ns_ino(d->pid, "net", &netns) < 0) {
                r = sp_error_set_errno(err, SP_E_IO, errno, "the network namespace of %d", (int)d->pid);
                goto out;
        }
        arg(&a, "--external");
        arg(&a, "net[%llu]:%s", (unsigned long long)netns, NET_KEY);
        if (read_mounts(d->pid, &m, err) < 0 || tree_files(d, &m, &a, files, err) < 0) {
                r = -SP_E_UNSUPPORTED;
                goto out;
        }
        /* The agent's listening socket (its fd 3), made again at restore. */
        char p[64], target[64];
        snprintf(p, sizeof(p), "/proc/%d/fd/3", (int)d->pid);
        ssize_t n = readlink(p, target, sizeof(target) - 1);
        if (n <= 0 || strncmp(target, "socket:[", 8) != 0) {
                r = sp_error_set(err, SP_E_UNSUPPORTED, "the agent's fd 3 is not its listening socket");
                goto out;
        }
        target[n] = '\0';
        json_object_object_add(meta, "listener", json_object_new_string(target));
        json_object_object_add(meta, "uid_base", json_object_new_int64((int64_t)d->uid_base));
        json_object_object_add(meta, "cgroup", json_object_new_string(d->cgroup));
        json_object *hier = json_object_new_array();
        json_object_object_add(meta, "cgroup_hierarchies", hier);
        if (tree_hierarchies(d->pid, d->cgroup, hier, err) < 0) {
                r = -SP_E_IO;
                goto out;
        }
        if (a.full) {
                r = sp_error_set(err, SP_E_LIMIT, "too many externals for criu's command line");
                goto out;
        }
        char mp[PATH_MAX];
        snprintf(mp, sizeof(mp), "%s/" WK_CRIU_META, d->dir);
        if (sp_file_write_atomic(mp, sp_json_str(meta), strlen(sp_json_str(meta)), 0600, err) < 0) {
                r = -SP_E_IO;
                goto out;
        }
        int64_t t0 = sp_now_mono_us();
        r = run_criu(a.v, NULL, 0, log, err);
        /* A file deleted between the scan above and CRIU's freeze: its images name a ghost. */
        if (r == 0 && has_ghosts(d->dir))
                r = sp_error_set(err, SP_E_UNSUPPORTED,
                                 "a process held a deleted file, which CRIU would make again at its path on the "
                                 "host (its processes ended with the checkpoint)");
        /* Mounts made between the look above and CRIU's seizure of the tree. */
        if (r == 0 && check_mount_images(d->dir, err) < 0)
                r = sp_error_wrap(err, "the sandbox changed its mounts during the checkpoint (its processes ended with "
                                       "it)");
        if (r == 0)
                sp_log_debug("checkpoint of %d in %lld ms", (int)d->pid, (long long)(sp_now_mono_us() - t0) / 1000);
out:
        free(m.ids);
        json_object_put(m.points);
        args_free(&a);
        if (r < 0)
                wk_criu_images_remove(d->dir);
        return r;
}

/* --- restore --- */

/* Made by a thread of its own (a network namespace is per thread): a new
 * network namespace with its loopback up, the agent's listening socket in
 * it, and a sysfs of it mounted for the restored /sys. */
typedef struct net_thread {
        const char *socket, *sys;
        int netns_fd, listen_fd;
        int error; /* errno */
        const char *step;
} net_thread;

static void *net_thread_main(void *arg)
{
        net_thread *x = arg;
        x->step = "unshare the network namespace";
        if (unshare(CLONE_NEWNET) < 0)
                goto fail;
        x->step = "bring lo up";
        if (wk_jail_loopback_up() < 0)
                goto fail;
        x->step = "listen on the agent's socket";
        if (wk_box_listen(x->socket, 64, &x->listen_fd, NULL) < 0)
                goto fail;
        /* The agent's loop expects a non-blocking listener (an inherited
         * descriptor keeps this file's flags). */
        int fl = fcntl(x->listen_fd, F_GETFL);
        if (fl < 0 || fcntl(x->listen_fd, F_SETFL, fl | O_NONBLOCK) < 0)
                goto fail;
        x->step = "mount sysfs";
        if ((mkdir(x->sys, 0755) < 0 && errno != EEXIST) ||
            mount("sysfs", x->sys, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
                goto fail;
        x->step = "open the network namespace";
        x->netns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (x->netns_fd < 0)
                goto fail;
        return NULL;
fail:
        x->error = errno ? errno : EIO;
        return NULL;
}

/* The restored tasks read some images themselves: early as host root
 * (before their user namespace has its map), later as the sandbox's root
 * (host uid base, no capability over the host's files). Owned by root with
 * the sandbox's root group, group-readable: both can. Out of the sandbox's
 * reach all the same (not in its mount namespace). */
static int share_images(const char *dir, gid_t gid, sp_error **err)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", dir);
        if (fchown(dirfd(d), 0, gid) < 0 || fchmod(dirfd(d), 0750) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "chown %s", dir);
        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                if (fchownat(dirfd(d), de->d_name, 0, gid, AT_SYMLINK_NOFOLLOW) < 0 ||
                    fchmodat(dirfd(d), de->d_name, 0640, 0) < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "chown %s/%s", dir, de->d_name);
        }
        return 0;
}

static int read_pid(const char *path, pid_t *ret, sp_error **err)
{
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        if (sp_file_read(path, 64, &text, err) < 0)
                return -SP_E_IO;
        long v = strtol(text.data ? text.data : "", NULL, 10);
        if (v <= 1)
                return sp_error_set(err, SP_E_INTERNAL, "criu restore wrote no pid");
        *ret = (pid_t)v;
        return 0;
}

/* The restored tasks open what CRIU binds from the host themselves, as the
 * sandbox's root (host uid base, no capability over the host's files): a
 * directory of its own, under one any user may pass through, not the
 * worker's state (0700). Removed after the restore. */
static int make_staging(uid_t uid, char *out, size_t n, sp_error **err)
{
        if ((mkdir(WK_CRIU_STAGING, 0711) < 0 && errno != EEXIST) || chmod(WK_CRIU_STAGING, 0711) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", WK_CRIU_STAGING);
        snprintf(out, n, "%s/XXXXXX", WK_CRIU_STAGING);
        if (!mkdtemp(out))
                return sp_error_set_errno(err, SP_E_IO, errno, "mkdtemp in %s", WK_CRIU_STAGING);
        if (chown(out, uid, uid) < 0) {
                int e = errno;
                rmdir(out);
                return sp_error_set_errno(err, SP_E_IO, e, "chown %s", out);
        }
        return 0;
}

/* The agent binary, bound read-only into the staging directory. */
static int stage_agent(const char *agent, const char *dst, sp_error **err)
{
        int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "create %s", dst);
        close(fd);
        if (mount(agent, dst, NULL, MS_BIND, NULL) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "bind %s", agent);
        if (mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0) {
                int e = errno;
                umount2(dst, MNT_DETACH);
                return sp_error_set_errno(err, SP_E_IO, e, "read-only %s", dst);
        }
        return 0;
}

int wk_criu_restore_tree(const wk_criu_restore *r, pid_t *ret_pid, sp_error **err)
{
        char path[PATH_MAX], root[PATH_MAX], dev[PATH_MAX], sys[PATH_MAX], agent[PATH_MAX], pidfile[PATH_MAX];
        char staging[sizeof(WK_CRIU_STAGING) + 16] = "";
        const char *log = r->log;
        if (images_plain(r->dir, err) < 0 || check_mount_images(r->dir, err) < 0)
                return sp_error_wrap(err, "checkpoint");
        snprintf(path, sizeof(path), "%s/" WK_CRIU_META, r->dir);
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        _cleanup_json_ json_object *meta = NULL;
        json_object *files = NULL, *mounts = NULL;
        const char *listener = NULL, *dumped_cgroup = NULL;
        json_object *hier = NULL;
        int64_t dumped_base = 0;
        if (sp_file_read(path, 1 << 20, &text, err) < 0 || sp_json_parse(text.data, text.len, &meta, err) < 0 ||
            sp_json_get_object(meta, "files", true, &files, err) < 0 ||
            sp_json_get_array(meta, "mounts", true, 64, &mounts, err) < 0 ||
            sp_json_get_string(meta, "listener", true, 64, &listener, err) < 0 ||
            sp_json_get_int(meta, "uid_base", true, 1, UINT32_MAX, &dumped_base, err) < 0 ||
            sp_json_get_string(meta, "cgroup", true, PATH_MAX, &dumped_cgroup, err) < 0 ||
            sp_json_get_array(meta, "cgroup_hierarchies", true, 32, &hier, err) < 0)
                return sp_error_wrap(err, "checkpoint %s", r->dir);
        /* Made on another slot (another worker's, or this one's before): its user namespace here maps to
         * this one's, recorded at once (a failed restore after this must not map it twice). */
        if ((uid_t)dumped_base != r->uid_base) {
                json_object_object_add(meta, "uid_base", json_object_new_int64((int64_t)r->uid_base));
                if (remap_images(r->dir, (uid_t)dumped_base, r->uid_base, r->uid_count, err) < 0 ||
                    sp_file_write_atomic(path, sp_json_str(meta), strlen(sp_json_str(meta)), 0600, err) < 0)
                        return sp_error_wrap(err, "checkpoint %s", r->dir);
        }
        if (make_staging(r->uid_base, staging, sizeof(staging), err) < 0)
                return sp_error_wrap(err, "restore");
        snprintf(root, sizeof(root), "%s/root", r->runtime_dir);
        snprintf(dev, sizeof(dev), "%s/dev", staging);
        snprintf(sys, sizeof(sys), "%s/sys", staging);
        snprintf(agent, sizeof(agent), "%s/agent", staging);
        snprintf(pidfile, sizeof(pidfile), "%s/restore.pid", r->runtime_dir);
        unlink(pidfile);

        int fds[32], nfds = 0, rc = 0, userns_fd;
        bool root_mounted = false, dev_mounted = false, agent_mounted = false;
        args a = {0};
        net_thread nt = {.socket = r->agent_socket, .sys = sys, .netns_fd = -1, .listen_fd = -1};
        pthread_t t;
        int e = pthread_create(&t, NULL, net_thread_main, &nt);
        if (e != 0) {
                rmdir(staging);
                return sp_error_set_errno(err, SP_E_LIMIT, e, "start a thread for the network namespace");
        }
        pthread_join(t, NULL);
        if (nt.error) {
                rc = sp_error_set_errno(err, SP_E_IO, nt.error, "restore: %s", nt.step);
                goto out;
        }
        if (r->attach_net && r->attach_net(nt.netns_fd, r->ud, err) < 0) {
                rc = -SP_E_IO;
                goto out;
        }
        /* The root as the sandbox sees it, and its /dev (device nodes come as external mounts). */
        if ((mkdir(root, 0700) < 0 && errno != EEXIST) ||
            wk_jail_mount_root(r->rootfs, r->uid_base, r->uid_count, root, err) < 0) {
                rc = sp_error_wrap(err, "restore");
                goto out;
        }
        root_mounted = true;
        const char *step = NULL;
        if (mkdir(dev, 0755) < 0 && errno != EEXIST) {
                rc = sp_error_set_errno(err, SP_E_IO, errno, "mkdir %s", dev);
                goto out;
        }
        if (wk_jail_dev_skeleton(dev, r->uid_base, &step) < 0) {
                rc = sp_error_set_errno(err, SP_E_IO, errno, "restore: %s", step);
                goto out;
        }
        dev_mounted = true;
        if (stage_agent(r->agent_path, agent, err) < 0) {
                rc = sp_error_wrap(err, "restore");
                goto out;
        }
        agent_mounted = true;

        arg(&a, "%s", r->criu);
        arg(&a, "restore");
        arg(&a, "--images-dir");
        arg(&a, "%s", r->dir);
        arg(&a, "--log-file");
        arg(&a, "%s", log);
        arg(&a, "-v4");
        arg(&a, "--restore-detached");
        arg(&a, "--root");
        arg(&a, "%s", root);
        arg(&a, "--manage-cgroups");
        /* Into the cgroup made for it here where the dump's was another (another worker's parent). */
        if (strcmp(dumped_cgroup, r->cgroup) != 0)
                for (size_t i = 0; i < json_object_array_length(hier); i++) {
                        arg(&a, "--cgroup-root");
                        arg(&a, "%s:%s", json_object_get_string(json_object_array_get_idx(hier, i)), r->cgroup);
                }
        arg(&a, "--tcp-established");
        /* Nothing to unlock: the dump locked the namespace that ended with the tree. */
        arg(&a, "--network-lock");
        arg(&a, "skip");
        arg(&a, "--pidfile");
        arg(&a, "%s", pidfile);
        fds[nfds++] = nt.netns_fd;
        arg(&a, "--inherit-fd");
        arg(&a, "fd[%d]:%s", nt.netns_fd, NET_KEY);
        fds[nfds++] = nt.listen_fd;
        arg(&a, "--inherit-fd");
        arg(&a, "fd[%d]:%s", nt.listen_fd, listener);
        /* The sandbox's user namespace, made here as a start makes it: CRIU builds the mount tree
         * as host root, then copies it into this namespace, which locks its mounts as a start's
         * copy does (scripts/criu.d/0005-enter-userns.patch). */
        if (wk_jail_make_userns(r->uid_base, r->uid_count, &userns_fd, err) < 0) {
                rc = sp_error_wrap(err, "restore");
                goto out;
        }
        fds[nfds++] = userns_fd;
        arg(&a, "--inherit-fd");
        arg(&a, "fd[%d]:%s", userns_fd, USERNS_KEY);
        arg(&a, "--enter-userns");
        arg(&a, "%s", USERNS_KEY);
        for (size_t i = 0; i < json_object_array_length(mounts); i++) {
                const char *key = json_object_get_string(json_object_array_get_idx(mounts, i));
                char buf[PATH_MAX];
                const char *src = key ? external_mount_source(key, staging, buf, sizeof(buf)) : NULL;
                if (!src) {
                        rc = sp_error_set(err, SP_E_INVALID, "checkpoint %s: unknown external mount %s", r->dir,
                                          key ? key : "?");
                        goto out;
                }
                arg(&a, "--external");
                arg(&a, "mnt[%s]:%s", key, src);
        }
        json_object_object_foreach (files, key, val) {
                const char *kind = json_object_get_string(val);
                int fd = -1;
                if (nfds >= (int)SP_ARRAY_SIZE(fds)) {
                        rc = sp_error_set(err, SP_E_LIMIT, "checkpoint %s: too many external files", r->dir);
                        goto out;
                }
                if (kind && strcmp(kind, "agent") == 0)
                        fd = open(r->agent_path, O_RDONLY | O_CLOEXEC);
                else if (kind && strcmp(kind, "null") == 0)
                        fd = open("/dev/null", O_RDWR | O_CLOEXEC);
                else if (kind && strcmp(kind, "log") == 0)
                        fd = fcntl(r->log_wfd, F_DUPFD_CLOEXEC, 3);
                else {
                        rc = sp_error_set(err, SP_E_INVALID, "checkpoint %s: unknown external file %s", r->dir, key);
                        goto out;
                }
                if (fd < 0) {
                        rc = sp_error_set_errno(err, SP_E_IO, errno, "open the %s for the restore", kind);
                        goto out;
                }
                fds[nfds++] = fd;
                arg(&a, "--inherit-fd");
                arg(&a, "fd[%d]:%s", fd, key);
        }
        if (a.full) {
                rc = sp_error_set(err, SP_E_LIMIT, "too many externals for criu's command line");
                goto out;
        }
        if (share_images(r->dir, r->uid_base, err) < 0 ||
            /* CRIU opens the FIFO of the agent's log again through /proc (its
             * "fake fifo") as the sandbox's root: the worker's end stays open. */
            (fchown(r->log_wfd, r->uid_base, r->uid_base) < 0 &&
             sp_error_set_errno(err, SP_E_IO, errno, "chown %s", r->log_fifo) < 0)) {
                rc = -SP_E_IO;
                goto out;
        }
        int64_t t0 = sp_now_mono_us();
        rc = run_criu(a.v, fds, (size_t)nfds, log, err);
        if (rc == 0)
                rc = read_pid(pidfile, ret_pid, err);
        if (rc == 0)
                sp_log_debug("restore of %s in %lld ms", r->dir, (long long)(sp_now_mono_us() - t0) / 1000);
out:
        /* The restored tree has its own copies of these mounts. */
        if (root_mounted && umount2(root, MNT_DETACH) < 0)
                sp_log_warn("restore: unmount %s: %s", root, strerror(errno));
        if (dev_mounted && umount2(dev, MNT_DETACH) < 0)
                sp_log_warn("restore: unmount %s: %s", dev, strerror(errno));
        if (nt.netns_fd >= 0 && umount2(sys, MNT_DETACH) < 0)
                sp_log_warn("restore: unmount %s: %s", sys, strerror(errno));
        if (agent_mounted && umount2(agent, MNT_DETACH) < 0)
                sp_log_warn("restore: unmount %s: %s", agent, strerror(errno));
        (void)unlink(agent);
        (void)rmdir(dev);
        (void)rmdir(sys);
        (void)rmdir(staging);
        for (int i = 0; i < nfds; i++)
                if (fds[i] != nt.netns_fd && fds[i] != nt.listen_fd)
                        close(fds[i]);
        sp_close(nt.netns_fd);
        sp_close(nt.listen_fd);
        unlink(pidfile);
        args_free(&a);
        return rc;
}

bool wk_criu_has_patches(const char *path)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0)
                return false;
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED)
                return false;
        static const char option[] = "--enter-userns";
        bool found = memmem(p, (size_t)st.st_size, option, sizeof(option) - 1) != NULL;
        munmap(p, (size_t)st.st_size);
        return found;
}

uint64_t wk_criu_images_bytes(const char *dir)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        uint64_t total = 0;
        for (struct dirent *de; d && (de = readdir(d));) {
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
                        total += (uint64_t)st.st_size;
        }
        return total;
}
