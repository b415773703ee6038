/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A suspended sandbox's artifacts as files (artifact_files.h): the blocks
 * with data and their digest, and a jail's root filesystem packed with
 * libarchive's disk reader and pax writer, unpacked with the template
 * importers' extractor. Pure file functions: the RPC handlers that move the
 * files between workers call them.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "node/artifact_files.h"
#include "space/cleanup.h"
#include "space/time.h"
#include "template/template.h"

/* ---- blocks ------------------------------------------------------------- */

static bool all_zero(const void *p, size_t n)
{
        const unsigned char *c = p;
        return n == 0 || (c[0] == 0 && memcmp(c, c + 1, n - 1) == 0);
}

/* Reads exactly n bytes at off; a file that ends first is an error. */
static int read_at(int fd, void *buf, size_t n, uint64_t off, sp_error **err)
{
        char *c = buf;
        size_t got = 0;
        while (got < n) {
                ssize_t r = pread(fd, c + got, n - got, (off_t)(off + got));
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "read at %llu", (unsigned long long)(off + got));
                if (r == 0)
                        return sp_error_set(err, SP_E_IO, "the file ends at %llu, before its size",
                                            (unsigned long long)(off + got));
                got += (size_t)r;
        }
        return 0;
}

int wk_artifact_next_block(int fd, uint64_t from, uint64_t size, uint64_t *ret_off, void *buf, size_t *ret_len,
                           sp_error **err)
{
        if (from % WK_ARTIFACT_BLOCK != 0)
                return sp_error_set(err, SP_E_INVALID, "offset %llu is not a multiple of %u", (unsigned long long)from,
                                    WK_ARTIFACT_BLOCK);
        if (size > (uint64_t)INT64_MAX)
                return sp_error_set(err, SP_E_INVALID, "size %llu out of range", (unsigned long long)size);
        bool seek = true;
        for (uint64_t off = from; off < size; off += WK_ARTIFACT_BLOCK) {
                if (seek) {
                        off_t d = lseek(fd, (off_t)off, SEEK_DATA);
                        if (d < 0 && errno == ENXIO)
                                return 0; /* only a hole from off to the end */
                        if (d < 0 && errno != EINVAL)
                                return sp_error_set_errno(err, SP_E_IO, errno, "seek data from %llu",
                                                          (unsigned long long)off);
                        if (d < 0) {
                                seek = false; /* no SEEK_DATA here: read every block */
                        } else {
                                if ((uint64_t)d >= size)
                                        return 0;
                                off = (uint64_t)d - (uint64_t)d % WK_ARTIFACT_BLOCK;
                        }
                }
                size_t len = size - off < WK_ARTIFACT_BLOCK ? (size_t)(size - off) : WK_ARTIFACT_BLOCK;
                int r = read_at(fd, buf, len, off, err);
                if (r < 0)
                        return r;
                if (!all_zero(buf, len)) {
                        *ret_off = off;
                        *ret_len = len;
                        return 1;
                }
        }
        return 0;
}

/* ---- the digest --------------------------------------------------------- */

struct wk_artifact_hash {
        EVP_MD_CTX *md;
        uint64_t next; /* the lowest offset the next block may have */
        uint64_t end; /* where the last block with data ended */
        bool finished;
};

static void put_be64(unsigned char out[8], uint64_t v)
{
        for (int i = 7; i >= 0; i--, v >>= 8)
                out[i] = (unsigned char)(v & 0xff);
}

int wk_artifact_hash_new(wk_artifact_hash **ret, sp_error **err)
{
        wk_artifact_hash *h = calloc(1, sizeof(*h));
        if (!h)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        h->md = EVP_MD_CTX_new();
        if (!h->md || EVP_DigestInit_ex(h->md, EVP_sha256(), NULL) != 1) {
                wk_artifact_hash_free(h);
                return sp_error_set(err, SP_E_INTERNAL, "sha256 digest unavailable");
        }
        *ret = h;
        return 0;
}

wk_artifact_hash *wk_artifact_hash_free(wk_artifact_hash *h)
{
        if (h) {
                EVP_MD_CTX_free(h->md);
                free(h);
        }
        return NULL;
}

int wk_artifact_hash_add(wk_artifact_hash *h, uint64_t off, const void *p, size_t n, sp_error **err)
{
        if (h->finished)
                return sp_error_set(err, SP_E_INVALID, "the digest is already finished");
        if (off % WK_ARTIFACT_BLOCK != 0 || off > UINT64_MAX - WK_ARTIFACT_BLOCK)
                return sp_error_set(err, SP_E_INVALID, "block at %llu: not a multiple of %u", (unsigned long long)off,
                                    WK_ARTIFACT_BLOCK);
        if (n > WK_ARTIFACT_BLOCK)
                return sp_error_set(err, SP_E_INVALID, "block at %llu: %zu bytes, more than %u",
                                    (unsigned long long)off, n, WK_ARTIFACT_BLOCK);
        if (off < h->next)
                return sp_error_set(err, SP_E_INVALID, "block at %llu out of order (the previous one was at %llu)",
                                    (unsigned long long)off, (unsigned long long)(h->next - WK_ARTIFACT_BLOCK));
        h->next = off + WK_ARTIFACT_BLOCK;
        if (all_zero(p, n))
                return 0;
        unsigned char be[8];
        put_be64(be, off);
        if (EVP_DigestUpdate(h->md, be, sizeof(be)) != 1 || EVP_DigestUpdate(h->md, p, n) != 1)
                return sp_error_set(err, SP_E_INTERNAL, "sha256 digest failed");
        h->end = off + n;
        return 0;
}

int wk_artifact_hash_finish(wk_artifact_hash *h, uint64_t size, char out[PR_WK_DIGEST_MAX], sp_error **err)
{
        if (h->finished)
                return sp_error_set(err, SP_E_INVALID, "the digest is already finished");
        if (h->end > size)
                return sp_error_set(err, SP_E_INVALID, "data up to %llu, past the size %llu",
                                    (unsigned long long)h->end, (unsigned long long)size);
        h->finished = true;
        unsigned char be[8], md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        put_be64(be, size);
        if (EVP_DigestUpdate(h->md, be, sizeof(be)) != 1 || EVP_DigestFinal_ex(h->md, md, &len) != 1 || len != 32)
                return sp_error_set(err, SP_E_INTERNAL, "sha256 digest failed");
        static const char hex[] = "0123456789abcdef";
        char *o = out + strlen("sha256:");
        memcpy(out, "sha256:", strlen("sha256:"));
        for (unsigned i = 0; i < len; i++) {
                *o++ = hex[md[i] >> 4];
                *o++ = hex[md[i] & 15];
        }
        *o = '\0';
        return 0;
}

int wk_artifact_digest_fd(int fd, uint64_t size, char out[PR_WK_DIGEST_MAX], sp_error **err)
{
        _cleanup_free_ void *buf = malloc(WK_ARTIFACT_BLOCK);
        if (!buf)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        _cleanup_artifact_hash_ wk_artifact_hash *h = NULL;
        int r = wk_artifact_hash_new(&h, err);
        if (r < 0)
                return r;
        uint64_t off = 0;
        for (;;) {
                size_t len;
                r = wk_artifact_next_block(fd, off, size, &off, buf, &len, err);
                if (r < 0)
                        return r;
                if (r == 0)
                        break;
                r = wk_artifact_hash_add(h, off, buf, len, err);
                if (r < 0)
                        return r;
                off += WK_ARTIFACT_BLOCK;
        }
        return wk_artifact_hash_finish(h, size, out, err);
}

/* ---- packing ------------------------------------------------------------ */

/* What the archive writer writes to. */
typedef struct pack_out {
        int fd;
        uint64_t bytes;
        uint64_t max_bytes; /* 0: no bound */
        bool too_large; /* the archive would pass max_bytes */
        int write_errno; /* the failed write's errno */
} pack_out;

static la_ssize_t pack_write(struct archive *a, void *ud, const void *p, size_t n)
{
        (void)a;
        pack_out *o = ud;
        const char *c = p;
        size_t done = 0;
        if (o->max_bytes && o->bytes + n > o->max_bytes) {
                o->too_large = true;
                archive_set_error(a, EFBIG, "the archive would pass its bound");
                return -1;
        }
        while (done < n) {
                ssize_t w = write(o->fd, c + done, n - done);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0) {
                        o->write_errno = errno;
                        archive_set_error(a, errno, "write");
                        return -1;
                }
                done += (size_t)w;
        }
        o->bytes += n;
        return (la_ssize_t)n;
}

/* name with non-printable bytes, quotes and backslashes as \xNN, cut with
 * "..." past what buf holds (size >= 8). For error messages. */
static const char *printable(const char *name, char *buf, size_t size)
{
        static const char hex[] = "0123456789abcdef";
        size_t o = 0;
        for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
                if (o + 8 >= size) {
                        memcpy(buf + o, "...", 3);
                        o += 3;
                        break;
                }
                if (*c < 0x20 || *c >= 0x7f || *c == '\'' || *c == '\\' || *c == '"') {
                        buf[o++] = '\\';
                        buf[o++] = 'x';
                        buf[o++] = hex[*c >> 4];
                        buf[o++] = hex[*c & 15];
                } else {
                        buf[o++] = (char)*c;
                }
        }
        buf[o] = '\0';
        return buf;
}

/* The packing of one tree: its name (dir_len: without trailing slashes), the
 * reader, the writer. */
typedef struct pack {
        const char *dir;
        size_t dir_len;
        wk_artifact_pack_limits lim;
        uint64_t fed; /* file bytes given to the writer, the zeros of holes included */
        struct archive *disk, *out;
        struct archive_entry_linkresolver *links;
        pack_out sink;
} pack;

/* The entry's path relative to the tree, "" for its root; NULL for a path
 * the disk reader made outside it (never expected). */
static const char *rel_path(const pack *p, const char *path)
{
        if (!path || strncmp(path, p->dir, p->dir_len) != 0)
                return NULL;
        path += p->dir_len;
        if (*path && *path != '/' && p->dir[p->dir_len - 1] != '/')
                return NULL;
        while (*path == '/')
                path++;
        return path;
}

/* The disk reader's error, its paths made relative to the tree. */
static int disk_error(const pack *p, const char *what, sp_error **err)
{
        const char *msg = archive_error_string(p->disk);
        const char *dot = "";
        char q[400];
        if (!msg) {
                msg = "unknown error";
        } else if (strncmp(msg, p->dir, p->dir_len) == 0) {
                msg += p->dir_len;
                dot = ".";
        }
        int e = archive_errno(p->disk);
        if (e > 0)
                return sp_error_set_errno(err, SP_E_IO, e, "%s: %s%s", what, dot, printable(msg, q, sizeof(q)));
        return sp_error_set(err, SP_E_IO, "%s: %s%s", what, dot, printable(msg, q, sizeof(q)));
}

static int out_error(const pack *p, const char *name, sp_error **err)
{
        char q[400];
        printable(name, q, sizeof(q));
        if (p->sink.too_large)
                return sp_error_set(err, SP_E_TOO_LARGE, "the archive would be larger than its %llu bytes (at '%s')",
                                    (unsigned long long)p->sink.max_bytes, q);
        if (p->sink.write_errno)
                return sp_error_set_errno(err, SP_E_IO, p->sink.write_errno, "write the archive at '%s'", q);
        const char *msg = archive_error_string(p->out);
        return sp_error_set(err, SP_E_IO, "archive '%s': %s", q, msg ? msg : "unknown error");
}

static const char zeros[WK_ARTIFACT_BLOCK];

/* Writes the entry's data: the blocks the disk reader returns, and zeros
 * for the holes between them, which the pax writer, given the entry's
 * sparse map, leaves out of the archive (what bsdtar does). */
static int pack_data(pack *p, const char *name, sp_error **err)
{
        uint64_t pos = 0;
        for (;;) {
                const void *b;
                size_t n;
                la_int64_t off;
                int r = archive_read_data_block(p->disk, &b, &n, &off);
                if (r == ARCHIVE_EOF)
                        return 0;
                if (r < ARCHIVE_WARN)
                        return disk_error(p, "read file", err);
                if (off < 0 || (uint64_t)off < pos) {
                        char q[400];
                        return sp_error_set(err, SP_E_IO, "read file '%s': data out of order",
                                            printable(name, q, sizeof(q)));
                }
                /* What the writer is fed, holes included (it must be given their zeros even where the
                 * archive leaves them out): a file of one byte at 2^62 must not hold a thread for ever. */
                uint64_t more = (uint64_t)off - pos + n;
                if (p->lim.max_fed && (more > p->lim.max_fed || p->fed > p->lim.max_fed - more)) {
                        char q[400];
                        return sp_error_set(err, SP_E_TOO_LARGE, "its files, holes counted, pass %llu bytes (at '%s')",
                                            (unsigned long long)p->lim.max_fed, printable(name, q, sizeof(q)));
                }
                p->fed += more;
                if (p->lim.deadline_us && sp_now_mono_us() > p->lim.deadline_us)
                        return sp_error_set(err, SP_E_TIMEOUT, "packing took longer than it may");
                while (pos < (uint64_t)off) {
                        size_t z = (uint64_t)off - pos < sizeof(zeros) ? (size_t)((uint64_t)off - pos) : sizeof(zeros);
                        la_ssize_t w = archive_write_data(p->out, zeros, z);
                        if (w < 0)
                                return out_error(p, name, err);
                        if (w == 0)
                                return 0; /* the entry is full: the file grew */
                        pos += (uint64_t)w;
                }
                const char *c = b;
                while (n > 0) {
                        la_ssize_t w = archive_write_data(p->out, c, n);
                        if (w < 0)
                                return out_error(p, name, err);
                        if (w == 0)
                                return 0;
                        c += w;
                        n -= (size_t)w;
                        pos += (uint64_t)w;
                }
        }
}

/* Renames e (read at the tree's path) to "." or "./<rel>" and writes it
 * with its data. */
static int pack_entry(pack *p, struct archive_entry *e, sp_error **err)
{
        const char *rel = rel_path(p, archive_entry_pathname(e));
        if (!rel)
                return sp_error_set(err, SP_E_INTERNAL, "an entry outside the tree");
        mode_t type = archive_entry_filetype(e);
        /* Sockets mean nothing without their process; device nodes do nothing
         * on the node's storage (nodev; a jail's /dev is mounted at its start)
         * and the extractor would refuse them. */
        if (type == AE_IFSOCK || type == AE_IFCHR || type == AE_IFBLK)
                return 0;
        _cleanup_free_ char *name = NULL;
        if (asprintf(&name, "%s%s", *rel ? "./" : ".", rel) < 0)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        archive_entry_copy_pathname(e, name);
        archive_entry_copy_uname(e, NULL);
        archive_entry_copy_gname(e, NULL);
        if (type != AE_IFREG)
                archive_entry_set_size(e, 0);
        struct archive_entry *spare = NULL;
        archive_entry_linkify(p->links, &e, &spare); /* tar's strategy: e stays, spare stays NULL */
        int r = archive_write_header(p->out, e);
        if (r < ARCHIVE_WARN)
                return out_error(p, name, err);
        if (type == AE_IFREG && !archive_entry_hardlink(e) && archive_entry_size(e) > 0 && pack_data(p, name, err) < 0)
                return -SP_E_IO;
        return 0;
}

static int pack_tree(pack *p, sp_error **err)
{
        p->disk = archive_read_disk_new();
        p->out = archive_write_new();
        p->links = archive_entry_linkresolver_new();
        if (!p->disk || !p->out || !p->links)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        /* Physical mode: symlinks archived as symlinks, never followed. No
         * archive_read_disk_set_standard_lookup(): owners stay numbers. */
        if (archive_read_disk_set_symlink_physical(p->disk) != ARCHIVE_OK ||
            archive_read_disk_set_behavior(p->disk, ARCHIVE_READDISK_NO_TRAVERSE_MOUNTS) != ARCHIVE_OK)
                return disk_error(p, "set up the disk reader", err);
        if (archive_write_set_format_pax(p->out) != ARCHIVE_OK ||
            archive_write_set_format_option(p->out, "pax", "hdrcharset", "BINARY") != ARCHIVE_OK)
                return out_error(p, ".", err);
        archive_entry_linkresolver_set_strategy(p->links, archive_format(p->out));
        if (archive_write_open2(p->out, &p->sink, NULL, pack_write, NULL, NULL) != ARCHIVE_OK)
                return out_error(p, ".", err);
        if (archive_read_disk_open(p->disk, p->dir) != ARCHIVE_OK)
                return disk_error(p, "open the tree", err);
        for (;;) {
                struct archive_entry *e = archive_entry_new();
                if (!e)
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                int r = archive_read_next_header2(p->disk, e);
                if (r == ARCHIVE_EOF) {
                        archive_entry_free(e);
                        break;
                }
                if (r < ARCHIVE_WARN) {
                        archive_entry_free(e);
                        return disk_error(p, "read the tree", err);
                }
                if (archive_read_disk_can_descend(p->disk))
                        archive_read_disk_descend(p->disk);
                r = pack_entry(p, e, err);
                archive_entry_free(e);
                if (r < 0)
                        return r;
        }
        if (archive_write_close(p->out) != ARCHIVE_OK)
                return out_error(p, ".", err);
        return 0;
}

int wk_artifact_pack_tree(const char *dir, int out_fd, uint64_t *ret_bytes, sp_error **err)
{
        return wk_artifact_pack_tree_bounded(dir, out_fd, NULL, ret_bytes, err);
}

int wk_artifact_pack_tree_bounded(const char *dir, int out_fd, const wk_artifact_pack_limits *lim, uint64_t *ret_bytes,
                                  sp_error **err)
{
        struct stat st;
        if (lstat(dir, &st) < 0) {
                sp_errc code = sp_errc_from_errno(errno);
                return sp_error_set_errno(err, code == SP_E_INTERNAL ? SP_E_IO : code, errno, "the tree to pack");
        }
        if (!S_ISDIR(st.st_mode))
                return sp_error_set(err, SP_E_INVALID, "the tree to pack is not a directory");
        /* The disk reader fchdir()s through the tree: keep that to this thread. */
        if (unshare(CLONE_FS) < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "a working directory of the thread's own");
        size_t len = strlen(dir);
        while (len > 1 && dir[len - 1] == '/')
                len--;
        pack p = {.dir = dir, .dir_len = len, .sink = {.fd = out_fd}};
        if (lim) {
                p.lim = *lim;
                p.sink.max_bytes = lim->max_archive_bytes;
        }
        int r = pack_tree(&p, err);
        if (p.disk)
                archive_read_free(p.disk);
        if (p.out)
                archive_write_free(p.out);
        if (p.links)
                archive_entry_linkresolver_free(p.links);
        if (r < 0)
                return sp_error_wrap(err, "pack the tree");
        *ret_bytes = p.sink.bytes;
        return 0;
}

/* ---- unpacking ---------------------------------------------------------- */

int wk_artifact_unpack_tree(int tar_fd, const char *dest_dir, uint64_t max_bytes, sp_error **err)
{
        wk_template_limits lim = {
                .max_bytes = max_bytes,
                .max_entries = WK_ARTIFACT_UNPACK_MAX_ENTRIES,
                .max_memory = WK_ARTIFACT_UNPACK_MAX_MEMORY,
        };
        if (wk_template_import_tar_fd(tar_fd, dest_dir, &lim, NULL, NULL, err) < 0)
                return sp_error_wrap(err, "unpack the tree");
        return 0;
}
