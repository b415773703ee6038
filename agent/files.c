/* SPDX-License-Identifier: Apache-2.0 */
/*
 * File operations, performed inside the sandbox as the requested user.
 *
 * The agent is the sandbox's root; around each operation it takes the
 * user's filesystem identity (setfsuid, setfsgid and the user's groups,
 * become()) and gives it back after. Every path is then resolved and
 * checked by the kernel with the user's rights alone: setting a nonzero
 * fsuid drops the filesystem capabilities (CAP_DAC_OVERRIDE, CAP_FOWNER,
 * CAP_CHOWN ...), so a symlink or a `..` planted anywhere, or a rename
 * racing the operation, reaches only what the user could reach from a
 * shell, and what is created (files, parent directories) belongs to the
 * user. Nothing is resolved in user space: no window between a check and
 * its use. The agent's root is the sandbox's root filesystem, so root too
 * stays inside the sandbox.
 *
 * A request may name an owner instead of a user (E2B's envd semantics): it
 * then has root's rights, resolves paths from the owner's home, and gives
 * the owner what it creates itself — the file written, the directories it
 * made — with fchown on descriptors opened without following a symlink
 * (make_at(), open_write()), so that nothing planted by the sandbox's
 * processes can turn the chown onto something else.
 *
 * Single-threaded (the agent's loop): the identity is process-wide while an
 * operation runs.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

#define WRITE_WINDOW (1u << 20)

/* Runs the rest of an operation with the user's filesystem identity. */
typedef struct {
        uid_t uid;
        gid_t gid;
} fsid;

/* Whether id is mapped in this process's user namespace (map: the path of
 * /proc/self/uid_map or gid_map); true when the map cannot be read (the
 * switch's own check below still holds). */
static bool id_mapped(const char *map, unsigned id)
{
        _cleanup_fclose_ FILE *f = fopen(map, "re");
        if (!f)
                return true;
        unsigned inside, outside, count;
        while (fscanf(f, "%u %u %u", &inside, &outside, &count) == 3)
                if (id >= inside && id - inside < count)
                        return true;
        return false;
}

/* Gives the agent its own identity back: root's fsuid and fsgid, and no
 * supplementary groups (as ag_enter_jail() left it). */
static void restore(fsid old)
{
        setfsuid(old.uid);
        setfsgid(old.gid);
        (void)setgroups(0, NULL);
}

/* Takes the user's filesystem identity — fsuid, fsgid and its groups from
 * /etc/group, as a command of the user gets them — saving the agent's in
 * *old. An id the sandbox's user namespace does not map cannot be taken:
 * setfsuid and setfsgid then change nothing and say nothing, and the
 * operation would run as root. So the ids are checked against the maps and
 * the switch is read back (setfsuid(-1) changes nothing and returns the
 * current one): SP_E_PERMISSION naming the user when either fails. Groups
 * that cannot be set fail the same way (fewer groups would be safe, but
 * the answer would not be the user's). */
static int become(const ag_user *u, fsid *old, sp_error **err)
{
        if (!id_mapped("/proc/self/uid_map", u->uid) || !id_mapped("/proc/self/gid_map", u->gid))
                return sp_error_set(err, SP_E_PERMISSION,
                                    "cannot act as the user '%s': its uid %u or gid %u is not mapped in this sandbox",
                                    u->name, (unsigned)u->uid, (unsigned)u->gid);
        *old = (fsid){.uid = (uid_t)setfsuid((uid_t)-1), .gid = (gid_t)setfsgid((gid_t)-1)};
        if (setgroups((size_t)u->ngroups, u->groups) < 0)
                return sp_error_set_errno(err, SP_E_PERMISSION, errno, "cannot take the groups of the user '%s'",
                                          u->name);
        setfsgid(u->gid);
        setfsuid(u->uid);
        if ((uid_t)setfsuid((uid_t)-1) != u->uid || (gid_t)setfsgid((gid_t)-1) != u->gid) {
                restore(*old);
                return sp_error_set(err, SP_E_PERMISSION, "cannot act as the user '%s' (uid %u, gid %u)", u->name,
                                    (unsigned)u->uid, (unsigned)u->gid);
        }
        return 0;
}

static int fail_errno(sp_error **err, int e, const char *what, const char *path)
{
        return sp_error_set_errno(err, sp_errc_from_errno(e), e, "%s %s", what, path);
}

static const char *type_name(mode_t m)
{
        if (S_ISREG(m))
                return "file";
        if (S_ISDIR(m))
                return "dir";
        if (S_ISLNK(m))
                return "symlink";
        return "other";
}

/* The names of the last uid and gid looked up (an operation's entries
 * mostly share their owner): "" when the sandbox has no name for it. */
typedef struct id_names {
        bool have_uid, have_gid;
        uid_t uid;
        gid_t gid;
        char user[64], group[64];
} id_names;

static void add_id_names(json_object *o, const struct stat *st, id_names *c)
{
        if (!c->have_uid || c->uid != st->st_uid) {
                c->have_uid = true;
                c->uid = st->st_uid;
                if (ag_id_name("/etc/passwd", st->st_uid, c->user, sizeof(c->user)) < 0)
                        c->user[0] = '\0';
        }
        if (!c->have_gid || c->gid != st->st_gid) {
                c->have_gid = true;
                c->gid = st->st_gid;
                if (ag_id_name("/etc/group", st->st_gid, c->group, sizeof(c->group)) < 0)
                        c->group[0] = '\0';
        }
        if (c->user[0])
                json_object_object_add(o, "owner", json_object_new_string(c->user));
        if (c->group[0])
                json_object_object_add(o, "group", json_object_new_string(c->group));
}

static json_object *stat_json(const char *path, const char *name, const struct stat *st, id_names *names)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string(name));
        json_object_object_add(o, "path", json_object_new_string(path));
        json_object_object_add(o, "type", json_object_new_string(type_name(st->st_mode)));
        json_object_object_add(o, "size", json_object_new_int64((int64_t)st->st_size));
        json_object_object_add(o, "mode", json_object_new_int((int)(st->st_mode & 07777)));
        json_object_object_add(o, "uid", json_object_new_int((int)st->st_uid));
        json_object_object_add(o, "gid", json_object_new_int((int)st->st_gid));
        add_id_names(o, st, names);
        char ts[32];
        sp_time_format_rfc3339((int64_t)st->st_mtim.tv_sec * SP_USEC_PER_SEC + st->st_mtim.tv_nsec / 1000, ts);
        json_object_object_add(o, "mtime", json_object_new_string(ts));
        if (S_ISLNK(st->st_mode)) {
                char target[PATH_MAX];
                ssize_t n = readlink(path, target, sizeof(target) - 1);
                if (n >= 0) {
                        target[n] = '\0';
                        json_object_object_add(o, "target", json_object_new_string(target));
                }
        }
        return o;
}

static const char *base_name(const char *path)
{
        const char *slash = strrchr(path, '/');
        if (!slash)
                return path;
        if (slash[1] == '\0')
                return path; /* "/" or "dir/" */
        return slash + 1;
}

static int op_stat(const char *path, bool follow, json_object **ret, sp_error **err)
{
        struct stat st;
        if ((follow ? stat(path, &st) : lstat(path, &st)) < 0)
                return fail_errno(err, errno, "stat", path);
        id_names names = {0};
        *ret = stat_json(path, base_name(path), &st, &names);
        return 0;
}

static int cmp_names(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

static int op_list(const char *path, int64_t limit, json_object **ret, sp_error **err)
{
        _cleanup_closedir_ DIR *d = opendir(path);
        if (!d)
                return fail_errno(err, errno, "list", path);
        size_t n = 0, cap = 64;
        char **names = malloc(cap * sizeof(char *));
        bool truncated = false;
        struct dirent *de;
        while (names && (de = readdir(d))) {
                if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
                        continue;
                if ((int64_t)n >= limit) {
                        truncated = true;
                        break;
                }
                if (n == cap) {
                        char **bigger = realloc(names, (cap *= 2) * sizeof(char *));
                        if (!bigger)
                                break;
                        names = bigger;
                }
                names[n++] = strdup(de->d_name);
        }
        if (!names)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        qsort(names, n, sizeof(char *), cmp_names);
        id_names ids = {0};
        json_object *arr = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
                char full[PATH_MAX];
                struct stat st;
                int k = snprintf(full, sizeof(full), "%s/%s", strcmp(path, "/") == 0 ? "" : path,
                                 names[i] ? names[i] : "");
                if (names[i] && k > 0 && (size_t)k < sizeof(full) && lstat(full, &st) == 0)
                        json_object_array_add(arr, stat_json(full, names[i], &st, &ids));
                free(names[i]);
        }
        free(names);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "entries", arr);
        json_object_object_add(o, "truncated", json_object_new_boolean(truncated));
        *ret = o;
        return 0;
}

/* Makes the directory name in dirfd (mode, as the identity in force) and
 * opens it for *at() calls, never following a symlink a process of the
 * sandbox could have put at its name meanwhile; given to owner (uid and
 * primary gid) when there is one, by fchown on that descriptor. -errno when
 * it cannot (EEXIST: something is there). */
static int make_at(int dirfd, const char *name, mode_t mode, const ag_user *owner)
{
        if (mkdirat(dirfd, name, mode) < 0)
                return -errno;
        /* The owner's calls have root's rights: O_RDONLY opens any mode. */
        _cleanup_close_ int fd =
                openat(dirfd, name, (owner ? O_RDONLY : O_PATH) | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (owner && fchown(fd, owner->uid, owner->gid) < 0)
                return -errno;
        return TAKE_FD(fd);
}

/* Opens the directory path for *at() calls (O_PATH), first making it and
 * every missing directory above it (mode, as the identity in force), like
 * mkdir -p: one component at a time from the directory above (make_at()),
 * so that what is made is given to owner without following anything planted
 * since. An existing component is followed as it is. The error names the
 * directory that could not be made. */
static int make_dirs(const char *path, mode_t mode, const ag_user *owner, sp_error **err)
{
        char prefix[PATH_MAX];
        snprintf(prefix, sizeof(prefix), "%s", path);
        _cleanup_close_ int fd = open(prefix[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return fail_errno(err, errno, "mkdir", "/");
        for (size_t i = 0; prefix[i];) {
                if (prefix[i] == '/') {
                        i++;
                        continue;
                }
                size_t end = i + strcspn(prefix + i, "/");
                char name[NAME_MAX + 1], saved = prefix[end];
                if (end - i > NAME_MAX)
                        return fail_errno(err, ENAMETOOLONG, "mkdir", path);
                memcpy(name, prefix + i, end - i);
                name[end - i] = '\0';
                prefix[end] = '\0'; /* the directory this step makes or enters */
                int next = make_at(fd, name, mode, owner);
                if (next == -EEXIST && (next = openat(fd, name, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
                        next = -errno;
                if (next < 0)
                        return fail_errno(err, -next, "mkdir", prefix);
                prefix[end] = saved;
                sp_close(fd);
                fd = next;
                i = end;
        }
        return TAKE_FD(fd);
}

/* Splits path into its directory and last component in buf: *ret_name
 * ("" for /); the directory is returned. Trailing slashes are dropped. */
static const char *split_path(const char *path, char buf[PATH_MAX], const char **ret_name)
{
        snprintf(buf, PATH_MAX, "%s", path);
        size_t n = strlen(buf);
        while (n > 1 && buf[n - 1] == '/')
                buf[--n] = '\0';
        char *slash = strrchr(buf, '/');
        *ret_name = slash ? slash + 1 : buf;
        if (!slash)
                return ".";
        if (slash == buf)
                return "/";
        *slash = '\0';
        return buf;
}

/* mkdir path (the last component only), as make_at() does. */
static int make_dir(const char *path, mode_t mode, const ag_user *owner, sp_error **err)
{
        char buf[PATH_MAX];
        const char *name, *dir = split_path(path, buf, &name);
        if (!*name)
                return fail_errno(err, EEXIST, "mkdir", path);
        _cleanup_close_ int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
                return fail_errno(err, errno, "mkdir", path);
        int fd = make_at(dirfd, name, mode, owner);
        if (fd < 0)
                return fail_errno(err, -fd, "mkdir", path);
        sp_close(fd);
        return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)ftw;
        int r = flag == FTW_DP ? rmdir(p) : unlink(p);
        return r < 0 && errno != ENOENT ? -1 : 0;
}

static int op_remove(const char *path, bool recursive, sp_error **err)
{
        if (strcmp(path, "/") == 0)
                return sp_error_set(err, SP_E_INVALID, "refusing to remove /");
        struct stat st;
        if (lstat(path, &st) < 0)
                return fail_errno(err, errno, "remove", path);
        if (!S_ISDIR(st.st_mode)) {
                if (unlink(path) < 0)
                        return fail_errno(err, errno, "remove", path);
                return 0;
        }
        if (!recursive) {
                if (rmdir(path) < 0)
                        return fail_errno(err, errno, "remove", path);
                return 0;
        }
        if (nftw(path, rm_entry, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0)
                return fail_errno(err, errno, "remove", path);
        return 0;
}

/* Who a file request acts as: *id, whose rights it has (the request's user,
 * or root for an owner), and *owner, who gets what it creates (NULL: no
 * chown, it is the identity's own). Paths resolve from the home of the
 * owner when there is one, else of the user. */
static int lookup_ids(const pr_agent_request *req, ag_user *id, ag_user *owner, const ag_user **ret_owner,
                      sp_error **err)
{
        *ret_owner = NULL;
        if (req->owner && req->user)
                return sp_error_set(err, SP_E_INVALID, "fields 'user' and 'owner' are mutually exclusive");
        if (ag_user_lookup(req->owner ? NULL : req->user, id, err) < 0)
                return -SP_E_NOT_FOUND;
        if (!req->owner)
                return 0;
        if (ag_user_lookup(req->owner, owner, err) < 0)
                return -SP_E_NOT_FOUND;
        *ret_owner = owner;
        return 0;
}

void ag_files_simple(ag_conn *c, uint32_t channel, const pr_agent_request *req)
{
        _cleanup_error_ sp_error *e = NULL;
        _cleanup_json_ json_object *result = NULL;
        ag_user u, o;
        const ag_user *owner;
        char path[PATH_MAX], to[PATH_MAX];
        if (lookup_ids(req, &u, &o, &owner, &e) < 0 ||
            ag_path_resolve(owner ? owner : &u, req->path, path, sizeof(path), &e) < 0 ||
            (req->to && ag_path_resolve(owner ? owner : &u, req->to, to, sizeof(to), &e) < 0)) {
                ag_conn_send_error(c, channel, e);
                return;
        }
        fsid old;
        if (become(&u, &old, &e) < 0) {
                ag_conn_send_error(c, channel, e);
                return;
        }
        int r = 0;
        switch (req->op) {
        case PR_OP_STAT:
                r = op_stat(path, req->follow, &result, &e);
                break;
        case PR_OP_LIST:
                r = op_list(path, req->limit, &result, &e);
                break;
        case PR_OP_MKDIR: {
                mode_t mode = req->has_mode ? req->mode : 0755;
                if (req->parents) {
                        int fd = make_dirs(path, mode, owner, &e);
                        r = fd < 0 ? fd : 0;
                        sp_close(fd);
                } else {
                        r = make_dir(path, mode, owner, &e);
                }
                break;
        }
        case PR_OP_MOVE:
                r = rename(path, to) < 0 ? fail_errno(&e, errno, "move", path) : 0;
                break;
        case PR_OP_REMOVE:
                r = op_remove(path, req->recursive, &e);
                break;
        case PR_OP_CHMOD:
                r = chmod(path, req->mode) < 0 ? fail_errno(&e, errno, "chmod", path) : 0;
                break;
        default:
                r = sp_error_set(&e, SP_E_INVALID, "unsupported op");
        }
        restore(old);
        if (r < 0) {
                ag_conn_send_error(c, channel, e);
                return;
        }
        if (!result)
                result = json_object_new_object();
        ag_conn_send_json(c, PR_AGENT_EXIT, channel, result);
}

/* --- streamed transfers --- */

struct ag_transfer {
        ag_conn *conn;
        uint32_t channel;
        bool reading; /* read: agent → worker; write: worker → agent */
        int fd;
        ag_outstream out; /* read */
        int64_t remaining; /* read: bytes left of length, -1 unlimited */
        char path[PATH_MAX];
        int dirfd; /* write: the directory of path (O_PATH), where tmp and name are */
        char name[NAME_MAX + 1]; /* write: path's last component */
        char tmp[64]; /* write: temporary file in dirfd renamed over name at EOF */
        bool append;
        int64_t size;
        ag_user user; /* whose identity the file operations use */
        ag_transfer *next;
};

static ag_transfer *transfers;

static void transfer_free(ag_transfer *t)
{
        for (ag_transfer **p = &transfers; *p; p = &(*p)->next)
                if (*p == t) {
                        *p = t->next;
                        break;
                }
        if (t->reading) {
                ag_outstream_free(&t->out);
        } else {
                sp_close(t->fd);
                fsid old;
                if (t->tmp[0] && become(&t->user, &old, NULL) == 0) {
                        unlinkat(t->dirfd, t->tmp, 0);
                        restore(old);
                }
                sp_close(t->dirfd);
        }
        ag_loop_free_later(t);
}

static ag_transfer *find(ag_conn *c, uint32_t channel)
{
        for (ag_transfer *t = transfers; t; t = t->next)
                if (t->conn == c && t->channel == channel)
                        return t;
        return NULL;
}

/* Refuses anything but a regular file (FIFOs, devices and sockets would
 * block the agent or never end), then makes fd blocking again. */
static int check_regular(int fd, const char *what, const char *path, sp_error **err)
{
        struct stat st;
        if (fstat(fd, &st) < 0)
                return fail_errno(err, errno, what, path);
        if (S_ISDIR(st.st_mode))
                return sp_error_set(err, SP_E_INVALID, "%s %s: is a directory", what, path);
        if (!S_ISREG(st.st_mode))
                return sp_error_set(err, SP_E_INVALID, "%s %s: not a regular file", what, path);
        if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
                return fail_errno(err, errno, what, path);
        return 0;
}

static void read_pump(ag_transfer *t)
{
        /* Regular files never block: fill while retention allows. */
        while (!t->out.eof && ag_outstream_wants_input(&t->out)) {
                ssize_t n = ag_outstream_fill(&t->out);
                if (n <= 0)
                        break;
                t->size += n;
                if (t->remaining >= 0) {
                        if (n >= t->remaining) {
                                t->out.buf.len -= (size_t)(n - t->remaining);
                                t->size -= n - t->remaining;
                                t->out.eof = true;
                                ag_outstream_close_fd(&t->out);
                        } else {
                                t->remaining -= n;
                        }
                }
        }
        ag_outstream_flush(&t->out, t->conn, t->channel, PR_STREAM_FILE);
        if (ag_outstream_done(&t->out)) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "size", json_object_new_int64(t->size));
                ag_conn_send_json(t->conn, PR_AGENT_EXIT, t->channel, o);
                transfer_free(t);
        }
}

/* Opens path (resolved) for a read, as the identity in force. */
static int open_read(ag_transfer *t, const pr_agent_request *req, const char *path, sp_error **err)
{
        t->reading = true;
        t->remaining = req->length;
        /* O_NONBLOCK: opening a FIFO must not wait for a writer; the flag is
         * cleared once the file is known to be regular. */
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return fail_errno(err, errno, "read", path);
        if (check_regular(fd, "read", path, err) < 0)
                return -SP_E_INVALID;
        if (req->offset && lseek(fd, req->offset, SEEK_SET) < 0)
                return fail_errno(err, errno, "seek", path);
        ag_outstream_init(&t->out, TAKE_FD(fd), req->window);
        return 0;
}

/* Opens path (resolved) for a write, as the identity in force: after its
 * missing parents are made when the request asks (mode 0755, make_dirs():
 * they belong to that identity, or to owner), the file itself for an
 * append, else a temporary file beside it that the EOF renames over it —
 * both in the directory opened once (dirfd), so that a directory of the
 * path swapped for a symlink afterwards changes nothing. With an owner the
 * file written is given to it (fchown on its descriptor): the temporary file
 * (so the file that replaces an existing one too, as envd's write chowns
 * what it overwrites), or for an append a file the call created. */
static int open_write(ag_transfer *t, const pr_agent_request *req, const char *path, const ag_user *owner,
                      sp_error **err)
{
        char buf[PATH_MAX];
        const char *name, *dir = split_path(path, buf, &name);
        if (!*name || strlen(name) > NAME_MAX || path[strlen(path) - 1] == '/')
                return sp_error_set(err, SP_E_INVALID, "write %s: not a file name", path);
        snprintf(t->name, sizeof(t->name), "%s", name);
        if (req->parents) {
                if ((t->dirfd = make_dirs(dir, 0755, owner, err)) < 0)
                        return sp_error_wrap(err, "write %s", path);
        } else if ((t->dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
                return fail_errno(err, errno, "write", path);
        }
        t->append = req->append;
        mode_t mode = req->has_mode ? req->mode : 0644;
        if (req->append) {
                /* A FIFO without a reader answers ENXIO instead of blocking. */
                int flags = O_WRONLY | O_APPEND | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
                bool made = false;
                if (owner) {
                        t->fd = openat(t->dirfd, t->name, flags | O_CREAT | O_EXCL | O_NOFOLLOW, mode);
                        made = t->fd >= 0;
                        if (!made && errno == EEXIST)
                                t->fd = openat(t->dirfd, t->name, flags);
                } else {
                        t->fd = openat(t->dirfd, t->name, flags | O_CREAT, mode);
                }
                if (t->fd < 0)
                        return errno == ENXIO ? sp_error_set(err, SP_E_INVALID, "write %s: not a regular file", path)
                                              : fail_errno(err, errno, "write", path);
                if (check_regular(t->fd, "write", path, err) < 0) {
                        t->fd = sp_close(t->fd);
                        return -SP_E_INVALID;
                }
                if (made && (fchown(t->fd, owner->uid, owner->gid) < 0 || fchmod(t->fd, mode) < 0)) {
                        int r = fail_errno(err, errno, "write", path);
                        t->fd = sp_close(t->fd);
                        return r;
                }
                return 0;
        }
        snprintf(t->tmp, sizeof(t->tmp), ".space-upload-%u-%u", (unsigned)getpid(), t->channel);
        /* Whatever stands at the temporary name (a FIFO or a symlink planted by
         * the sandbox) is replaced, never opened. */
        unlinkat(t->dirfd, t->tmp, 0);
        t->fd = openat(t->dirfd, t->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, mode);
        if (t->fd < 0) {
                t->tmp[0] = '\0';
                return fail_errno(err, errno, "write", path);
        }
        /* chown first: a chown clears the set-user-ID and set-group-ID bits. */
        if (owner && fchown(t->fd, owner->uid, owner->gid) < 0)
                return fail_errno(err, errno, "write", path);
        fchmod(t->fd, mode);
        return 0;
}

int ag_transfer_start(ag_conn *c, uint32_t channel, pr_agent_request *req, sp_error **err)
{
        if (find(c, channel))
                return sp_error_set(err, SP_E_CONFLICT, "channel %u is in use", channel);
        ag_user u, o;
        const ag_user *owner;
        char path[PATH_MAX];
        if (lookup_ids(req, &u, &o, &owner, err) < 0 ||
            ag_path_resolve(owner ? owner : &u, req->path, path, sizeof(path), err) < 0)
                return -SP_E_INVALID;
        ag_transfer *t = calloc(1, sizeof(*t));
        if (!t)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        t->conn = c;
        t->channel = channel;
        t->fd = -1;
        t->dirfd = -1;
        t->out.fd = -1;
        t->user = u;
        snprintf(t->path, sizeof(t->path), "%s", path);
        fsid old;
        if (become(&u, &old, err) < 0) {
                free(t);
                return -SP_E_PERMISSION;
        }
        int r = req->op == PR_OP_READ ? open_read(t, req, path, err) : open_write(t, req, path, owner, err);
        if (r < 0 && t->tmp[0])
                unlinkat(t->dirfd, t->tmp, 0);
        restore(old);
        if (r < 0) {
                sp_close(t->fd);
                sp_close(t->dirfd);
                free(t);
                return r;
        }
        t->next = transfers;
        transfers = t;
        if (t->reading) {
                read_pump(t);
        } else {
                ag_conn_send_window(c, PR_STREAM_FILE, channel, WRITE_WINDOW);
        }
        return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -1;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

bool ag_transfer_frame(ag_conn *c, const pr_agent_frame *f, sp_error **err)
{
        ag_transfer *t = find(c, f->channel);
        if (!t)
                return false;
        _cleanup_error_ sp_error *e = NULL;
        switch (f->type) {
        case PR_AGENT_WINDOW: {
                uint32_t n;
                if (!t->reading || pr_agent_window_decode(f, &n, err) < 0 || ag_outstream_ack(&t->out, n, err) < 0) {
                        if (err && !*err)
                                sp_error_set(err, SP_E_INVALID, "unexpected WINDOW on a write");
                        return true;
                }
                read_pump(t);
                return true;
        }
        case PR_AGENT_DATA:
                if (t->reading || f->stream != PR_STREAM_FILE) {
                        sp_error_set(err, SP_E_INVALID, "unexpected DATA on channel %u", f->channel);
                        return true;
                }
                if (write_all(t->fd, f->payload, f->length) < 0) {
                        fail_errno(&e, errno, "write", t->path);
                        ag_conn_send_error(c, t->channel, e);
                        transfer_free(t);
                        return true;
                }
                t->size += f->length;
                ag_conn_send_window(c, PR_STREAM_FILE, t->channel, f->length);
                return true;
        case PR_AGENT_EOF: {
                if (t->reading)
                        return true;
                fsid old;
                int r = become(&t->user, &old, &e);
                if (r == 0) {
                        r = fsync(t->fd) < 0 || (t->tmp[0] && renameat(t->dirfd, t->tmp, t->dirfd, t->name) < 0)
                                    ? -errno
                                    : 0;
                        restore(old);
                        if (r < 0)
                                fail_errno(&e, -r, "write", t->path);
                }
                if (r < 0) {
                        ag_conn_send_error(c, t->channel, e);
                } else {
                        t->tmp[0] = '\0';
                        _cleanup_json_ json_object *o = json_object_new_object();
                        json_object_object_add(o, "size", json_object_new_int64(t->size));
                        json_object_object_add(o, "path", json_object_new_string(t->path));
                        ag_conn_send_json(c, PR_AGENT_EXIT, t->channel, o);
                }
                transfer_free(t);
                return true;
        }
        case PR_AGENT_CANCEL:
                transfer_free(t);
                return true;
        default:
                sp_error_set(err, SP_E_INVALID, "unexpected frame type %u on a transfer", f->type);
                return true;
        }
}

void ag_transfer_conn_closed(ag_conn *c)
{
        for (ag_transfer *t = transfers, *next; t; t = next) {
                next = t->next;
                if (t->conn == c)
                        transfer_free(t);
        }
}

void ag_transfer_pump_all(ag_conn *c)
{
        for (ag_transfer *t = transfers, *next; t; t = next) {
                next = t->next;
                if (t->conn == c && t->reading)
                        read_pump(t);
        }
}
