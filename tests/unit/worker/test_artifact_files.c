/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: a suspended sandbox's artifacts as files — the blocks with
 * data (holes and zero blocks skipped, nothing read past the size), their
 * digest (sparse equals dense; a byte or the size alone changes it), the
 * incremental digest's order rules; and a root filesystem packed and
 * unpacked with owners, modes, times, links, fifos, sparse files and
 * extended attributes intact (as root), device nodes left out of the
 * archive (the extractor refuses them) and the rest unpacked.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "harness.h"
#include "node/artifact_files.h"
#include "space/cleanup.h"
#include "space/time.h"

#define B WK_ARTIFACT_BLOCK

static char *dir;

static void setup(void)
{
        dir = sp_test_tmpdir("artifact");
}

static void teardown(void)
{
        sp_test_tmpdir_remove(dir);
        free(dir);
}

static char *at(const char *rel)
{
        static char buf[8][1024];
        static int i;
        char *b = buf[i++ % 8];
        snprintf(b, sizeof(buf[0]), "%s/%s", dir, rel);
        return b;
}

static int create(const char *rel)
{
        int fd = open(at(rel), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        ck_assert_msg(fd >= 0, "create %s: %s", rel, strerror(errno));
        return fd;
}

static void put(int fd, uint64_t off, const void *p, size_t n)
{
        ck_assert_int_eq(pwrite(fd, p, n, (off_t)off), (ssize_t)n);
}

/* Bytes that are never all zero. */
static void fill(unsigned char *p, size_t n, unsigned seed)
{
        for (size_t i = 0; i < n; i++)
                p[i] = (unsigned char)(seed * 31 + i * 7 + 1) | 1;
}

static void digest(int fd, char out[PR_WK_DIGEST_MAX])
{
        struct stat st;
        ck_assert_int_eq(fstat(fd, &st), 0);
        sp_error *err = NULL;
        sp_test_ok(wk_artifact_digest_fd(fd, (uint64_t)st.st_size, out, &err), &err);
}

static void be64(unsigned char out[8], uint64_t v)
{
        for (int i = 7; i >= 0; i--, v >>= 8)
                out[i] = (unsigned char)v;
}

/* The expected digest, by the definition in the spec, with EVP directly. */
typedef struct expect_block {
        uint64_t off;
        const unsigned char *p;
        size_t n;
} expect_block;

static void expected(const expect_block *blocks, size_t nblocks, uint64_t size, char out[PR_WK_DIGEST_MAX])
{
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        ck_assert_ptr_nonnull(md);
        ck_assert_int_eq(EVP_DigestInit_ex(md, EVP_sha256(), NULL), 1);
        unsigned char be[8];
        for (size_t i = 0; i < nblocks; i++) {
                be64(be, blocks[i].off);
                EVP_DigestUpdate(md, be, 8);
                EVP_DigestUpdate(md, blocks[i].p, blocks[i].n);
        }
        be64(be, size);
        EVP_DigestUpdate(md, be, 8);
        unsigned char h[32];
        unsigned len = 0;
        ck_assert_int_eq(EVP_DigestFinal_ex(md, h, &len), 1);
        EVP_MD_CTX_free(md);
        strcpy(out, "sha256:");
        for (unsigned i = 0; i < len; i++)
                sprintf(out + 7 + 2 * i, "%02x", h[i]);
}

/* ---- blocks and the digest ---------------------------------------------- */

START_TEST(sparse_and_dense_digests_agree)
{
        const uint64_t size = 9 * (uint64_t)B + 100;
        static unsigned char b2[B], b5[B], b9[100];
        fill(b2, sizeof(b2), 2);
        b5[B - 1] = 0x55; /* a block holding one non-zero byte, at its end */
        fill(b9, sizeof(b9), 9);

        /* sparse: only the three blocks written */
        _cleanup_close_ int sfd = create("sparse");
        ck_assert_int_eq(ftruncate(sfd, (off_t)size), 0);
        put(sfd, 2 * B, b2, sizeof(b2));
        put(sfd, 5 * B + B - 1, b5 + B - 1, 1);
        put(sfd, 9 * B, b9, sizeof(b9));
        struct stat st;
        ck_assert_int_eq(fstat(sfd, &st), 0);
        ck_assert_msg((uint64_t)st.st_blocks * 512 < size, "the file under test has no holes");

        /* dense: every byte written, zeros included */
        _cleanup_close_ int dfd = create("dense");
        _cleanup_free_ unsigned char *all = calloc(1, size);
        ck_assert_ptr_nonnull(all);
        memcpy(all + 2 * B, b2, sizeof(b2));
        memcpy(all + 5 * B, b5, sizeof(b5));
        memcpy(all + 9 * B, b9, sizeof(b9));
        put(dfd, 0, all, size);

        char ds[PR_WK_DIGEST_MAX], dd[PR_WK_DIGEST_MAX], want[PR_WK_DIGEST_MAX];
        digest(sfd, ds);
        digest(dfd, dd);
        ck_assert_str_eq(ds, dd);
        const expect_block blocks[] = {{2 * B, b2, B}, {5 * B, b5, B}, {9 * B, b9, sizeof(b9)}};
        expected(blocks, SP_ARRAY_SIZE(blocks), size, want);
        ck_assert_str_eq(ds, want);
        ck_assert_uint_eq(strlen(ds), strlen("sha256:") + 64);

        /* one byte changed, in a data block or in a zero block */
        char other[PR_WK_DIGEST_MAX];
        put(dfd, 2 * B + 10, "\x00", 1);
        digest(dfd, other);
        ck_assert_str_ne(other, ds);
        put(dfd, 2 * B + 10, b2 + 10, 1);
        digest(dfd, other);
        ck_assert_str_eq(other, ds);
        put(dfd, 7 * B + 3, "x", 1);
        digest(dfd, other);
        ck_assert_str_ne(other, ds);
        put(dfd, 7 * B + 3, "\x00", 1);

        /* the size alone: one more zero byte, one more zero block */
        ck_assert_int_eq(ftruncate(dfd, (off_t)size + 1), 0);
        digest(dfd, other);
        ck_assert_str_ne(other, ds);
        ck_assert_int_eq(ftruncate(dfd, (off_t)size + B), 0);
        char other2[PR_WK_DIGEST_MAX];
        digest(dfd, other2);
        ck_assert_str_ne(other2, ds);
        ck_assert_str_ne(other2, other);
        ck_assert_int_eq(ftruncate(dfd, (off_t)size), 0);
        digest(dfd, other);
        ck_assert_str_eq(other, ds);

        /* an empty file: the size only */
        _cleanup_close_ int efd = create("empty");
        digest(efd, other);
        expected(NULL, 0, 0, want);
        ck_assert_str_eq(other, want);
}
END_TEST

START_TEST(next_block_skips_holes_and_zero_blocks)
{
        static unsigned char b1[B], b4[B], zero[B], buf[B];
        fill(b1, sizeof(b1), 1);
        fill(b4, sizeof(b4), 4);
        _cleanup_close_ int fd = create("f");
        ck_assert_int_eq(ftruncate(fd, 12 * B), 0);
        put(fd, 1 * B, b1, B); /* a hole before it */
        put(fd, 3 * B, zero, B); /* zeros written: data to the filesystem, no data to us */
        put(fd, 4 * B, b4, B);
        put(fd, 10 * B + 5, "z", 1); /* a block with one byte, after a hole */

        struct {
                uint64_t off;
                size_t len;
        } got[8];
        size_t n = 0;
        sp_error *err = NULL;
        uint64_t off = 0;
        for (;;) {
                size_t len = 0;
                uint64_t o = 0;
                int r = wk_artifact_next_block(fd, off, 12 * B, &o, buf, &len, &err);
                sp_test_ok(r, &err);
                if (r == 0)
                        break;
                ck_assert_uint_lt(n, SP_ARRAY_SIZE(got));
                got[n].off = o;
                got[n].len = len;
                n++;
                if (o == 1 * B)
                        ck_assert_int_eq(memcmp(buf, b1, B), 0);
                if (o == 4 * B)
                        ck_assert_int_eq(memcmp(buf, b4, B), 0);
                if (o == 10 * B)
                        ck_assert_int_eq(buf[5], 'z');
                off = o + B;
        }
        ck_assert_uint_eq(n, 3);
        ck_assert_uint_eq(got[0].off, 1 * B);
        ck_assert_uint_eq(got[1].off, 4 * B);
        ck_assert_uint_eq(got[2].off, 10 * B);
        for (size_t i = 0; i < n; i++)
                ck_assert_uint_eq(got[i].len, B);

        /* from a later block; past the end */
        uint64_t o = 0;
        size_t len = 0;
        ck_assert_int_eq(wk_artifact_next_block(fd, 2 * B, 12 * B, &o, buf, &len, &err), 1);
        ck_assert_uint_eq(o, 4 * B);
        ck_assert_int_eq(wk_artifact_next_block(fd, 5 * B, 12 * B, &o, buf, &len, &err), 1);
        ck_assert_uint_eq(o, 10 * B);
        ck_assert_int_eq(wk_artifact_next_block(fd, 11 * B, 12 * B, &o, buf, &len, &err), 0);
        ck_assert_int_eq(wk_artifact_next_block(fd, 12 * B, 12 * B, &o, buf, &len, &err), 0);
        ck_assert_int_eq(wk_artifact_next_block(fd, 100 * B, 12 * B, &o, buf, &len, &err), 0);
        ck_assert_int_eq(wk_artifact_next_block(fd, 0, 0, &o, buf, &len, &err), 0);
        ck_assert_ptr_null(err);

        /* never past size: the last block cut at it (a byte short of the 'z', then with it) */
        o = 0;
        ck_assert_int_eq(wk_artifact_next_block(fd, 5 * B, 10 * B + 5, &o, buf, &len, &err), 0);
        ck_assert_int_eq(wk_artifact_next_block(fd, 5 * B, 10 * B + 6, &o, buf, &len, &err), 1);
        ck_assert_uint_eq(o, 10 * B);
        ck_assert_uint_eq(len, 6);
        ck_assert_int_eq(wk_artifact_next_block(fd, 0, 3 * B, &o, buf, &len, &err), 1);
        ck_assert_uint_eq(o, 1 * B);
        ck_assert_int_eq(wk_artifact_next_block(fd, 2 * B, 3 * B, &o, buf, &len, &err), 0);

        /* a file shorter than the size it is read with */
        ck_assert_int_eq(ftruncate(fd, 10 * B + 6), 0);
        ck_assert_int_lt(wk_artifact_next_block(fd, 5 * B, 11 * B, &o, buf, &len, &err), 0);
        ck_assert_int_eq(err->code, SP_E_IO);
        sp_error_freep(&err);

        /* an offset that is not a block's */
        o = 7;
        len = 7;
        ck_assert_int_eq(wk_artifact_next_block(fd, B + 1, 12 * B, &o, buf, &len, &err), -SP_E_INVALID);
        ck_assert_int_eq(err->code, SP_E_INVALID);
        ck_assert_uint_eq(o, 7);
        ck_assert_uint_eq(len, 7);
        sp_error_freep(&err);
        ck_assert_int_eq(wk_artifact_next_block(fd, 100, 12 * B, &o, buf, &len, &err), -SP_E_INVALID);
        sp_error_freep(&err);
}
END_TEST

START_TEST(incremental_digest_takes_blocks_in_order)
{
        static unsigned char b2[B], b5[10], zero[B];
        fill(b2, sizeof(b2), 2);
        fill(b5, sizeof(b5), 5);
        const uint64_t size = 5 * B + 10;
        sp_error *err = NULL;
        _cleanup_artifact_hash_ wk_artifact_hash *h = NULL;
        sp_test_ok(wk_artifact_hash_new(&h, &err), &err);

        sp_test_ok(wk_artifact_hash_add(h, 2 * B, b2, B, &err), &err);
        /* before it, the same block again, not at a block's offset, too long */
        ck_assert_int_eq(wk_artifact_hash_add(h, 1 * B, b2, B, &err), -SP_E_INVALID);
        sp_error_freep(&err);
        ck_assert_int_eq(wk_artifact_hash_add(h, 2 * B, b2, B, &err), -SP_E_INVALID);
        sp_error_freep(&err);
        ck_assert_int_eq(wk_artifact_hash_add(h, 3 * B + 1, b2, B, &err), -SP_E_INVALID);
        sp_error_freep(&err);
        ck_assert_int_eq(wk_artifact_hash_add(h, 3 * B, b2, B + 1, &err), -SP_E_INVALID);
        sp_error_freep(&err);
        /* a zero block is taken and ignored, but keeps its place in the order */
        sp_test_ok(wk_artifact_hash_add(h, 3 * B, zero, B, &err), &err);
        ck_assert_int_eq(wk_artifact_hash_add(h, 3 * B, b2, B, &err), -SP_E_INVALID);
        sp_error_freep(&err);
        sp_test_ok(wk_artifact_hash_add(h, 5 * B, b5, sizeof(b5), &err), &err);

        char got[PR_WK_DIGEST_MAX], want[PR_WK_DIGEST_MAX];
        /* data past the size is refused, and the digest can still finish */
        ck_assert_int_eq(wk_artifact_hash_finish(h, 5 * B + 9, got, &err), -SP_E_INVALID);
        sp_error_freep(&err);
        sp_test_ok(wk_artifact_hash_finish(h, size, got, &err), &err);
        ck_assert_int_eq(wk_artifact_hash_add(h, 6 * B, b2, B, &err), -SP_E_INVALID);
        sp_error_freep(&err);
        ck_assert_int_eq(wk_artifact_hash_finish(h, size, got, &err), -SP_E_INVALID);
        sp_error_freep(&err);

        /* what the sender computes from the file (with the zero block written) */
        _cleanup_close_ int fd = create("f");
        ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
        put(fd, 2 * B, b2, B);
        put(fd, 3 * B, zero, B);
        put(fd, 5 * B, b5, sizeof(b5));
        digest(fd, want);
        ck_assert_str_eq(got, want);
}
END_TEST

/* ---- packing and unpacking ---------------------------------------------- */

static int open_tar(const char *rel)
{
        int fd = open(at(rel), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ck_assert_int_ge(fd, 0);
        return fd;
}

START_TEST(pack_and_unpack_refuse_bad_arguments)
{
        sp_error *err = NULL;
        uint64_t bytes = 0;
        _cleanup_close_ int out = open_tar("t.tar");
        close(create("file"));
        ck_assert_int_eq(wk_artifact_pack_tree(at("file"), out, &bytes, &err), -SP_E_INVALID);
        sp_error_freep(&err);
        ck_assert_int_lt(wk_artifact_pack_tree(at("missing"), out, &bytes, &err), 0);
        ck_assert_int_eq(err->code, SP_E_NOT_FOUND);
        sp_error_freep(&err);

        ck_assert_int_eq(mkdir(at("src"), 0755), 0);
        ck_assert_int_eq(mkdir(at("busy"), 0755), 0);
        close(create("busy/x"));
        close(create("src/x"));
        sp_test_ok(wk_artifact_pack_tree(at("src//"), out, &bytes, &err), &err); /* trailing slashes */
        ck_assert_int_eq(lseek(out, 0, SEEK_SET), 0);
        ck_assert_int_eq(wk_artifact_unpack_tree(out, at("busy"), 0, &err), -SP_E_CONFLICT);
        sp_error_freep(&err);
        ck_assert_int_eq(mkdir(at("dst"), 0755), 0);
        ck_assert_int_eq(lseek(out, 0, SEEK_SET), 0);
        sp_test_ok(wk_artifact_unpack_tree(out, at("dst"), 0, &err), &err);
        struct stat st;
        ck_assert_int_eq(lstat(at("dst/x"), &st), 0);
}
END_TEST

/* Watches the process's working directory while another thread packs. */
static atomic_bool watch_done;
static void *watch_cwd(void *arg)
{
        const char *want = arg;
        uintptr_t moved = 0;
        while (!atomic_load(&watch_done)) {
                char cwd[1024];
                if (!getcwd(cwd, sizeof(cwd)) || strcmp(cwd, want) != 0)
                        moved++;
        }
        return (void *)moved;
}

START_TEST(pack_keeps_the_working_directory_to_its_thread)
{
        /* libarchive's disk reader fchdir()s into directories to read the
         * attributes of symlinks and fifos: a tree full of them */
        ck_assert_int_eq(mkdir(at("src"), 0755), 0);
        for (int d = 0; d < 20; d++) {
                char rel[64];
                snprintf(rel, sizeof(rel), "src/d%d", d);
                ck_assert_int_eq(mkdir(at(rel), 0755), 0);
                for (int i = 0; i < 50; i++) {
                        snprintf(rel, sizeof(rel), "src/d%d/l%d", d, i);
                        ck_assert_int_eq(symlink("target", at(rel)), 0);
                }
        }
        char cwd[1024];
        ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
        atomic_store(&watch_done, false);
        pthread_t t;
        ck_assert_int_eq(pthread_create(&t, NULL, watch_cwd, cwd), 0);
        sp_error *err = NULL;
        uint64_t bytes = 0;
        _cleanup_close_ int out = open_tar("t.tar");
        int r = wk_artifact_pack_tree(at("src"), out, &bytes, &err);
        atomic_store(&watch_done, true);
        void *moved;
        ck_assert_int_eq(pthread_join(t, &moved), 0);
        sp_test_ok(r, &err);
        ck_assert_msg((uintptr_t)moved == 0, "another thread saw the working directory move %zu times",
                      (size_t)(uintptr_t)moved);
}
END_TEST

/* The tree's entries with mtimes of their own: children before parents. */
static int times_n;
static int set_time(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        times_n++;
        struct timespec ts[2] = {{.tv_sec = 1500000000 + times_n, .tv_nsec = 1000},
                                 {.tv_sec = 1600000000 + times_n * 1000, .tv_nsec = 123456789}};
        ck_assert_msg(utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW) == 0, "times of %s", p);
        return 0;
}

/* Compares every entry of the source with its copy. */
static const char *cmp_src, *cmp_dst;
static size_t cmp_entries, dst_entries;
static struct {
        ino_t src, dst;
} cmp_links[16];
static size_t n_links;

static void assert_same_xattrs(const char *a, const char *b)
{
        char names[4096];
        ssize_t n = llistxattr(a, names, sizeof(names));
        ck_assert_int_ge(n, 0);
        for (ssize_t i = 0; i < n; i += (ssize_t)strlen(names + i) + 1) {
                const char *name = names + i;
                if (strncmp(name, "user.", 5) != 0 && strcmp(name, "security.capability") != 0)
                        continue;
                char va[256], vb[256];
                ssize_t la = lgetxattr(a, name, va, sizeof(va));
                ssize_t lb = lgetxattr(b, name, vb, sizeof(vb));
                ck_assert_msg(la >= 0 && la == lb && memcmp(va, vb, (size_t)la) == 0, "xattr %s of %s", name, b);
        }
        ssize_t m = llistxattr(b, names, sizeof(names));
        ck_assert_int_ge(m, 0);
        for (ssize_t i = 0; i < m; i += (ssize_t)strlen(names + i) + 1)
                if (strncmp(names + i, "user.", 5) == 0 || strcmp(names + i, "security.capability") == 0)
                        ck_assert_msg(lgetxattr(a, names + i, NULL, 0) >= 0, "extra xattr %s on %s", names + i, b);
}

static void assert_same_content(const char *a, const char *b, off_t size)
{
        _cleanup_close_ int fa = open(a, O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int fb = open(b, O_RDONLY | O_CLOEXEC);
        ck_assert(fa >= 0 && fb >= 0);
        static char ba[1 << 16], bb[1 << 16];
        for (off_t off = 0; off < size; off += (off_t)sizeof(ba)) {
                ssize_t na = pread(fa, ba, sizeof(ba), off), nb = pread(fb, bb, sizeof(bb), off);
                ck_assert_msg(na == nb && na > 0 && memcmp(ba, bb, (size_t)na) == 0, "content of %s at %lld", b,
                              (long long)off);
        }
}

static int cmp_one(const char *p, const struct stat *sa, int flag, struct FTW *ftw)
{
        (void)flag;
        (void)ftw;
        char q[1024];
        snprintf(q, sizeof(q), "%s%s", cmp_dst, p + strlen(cmp_src));
        struct stat sb;
        if (S_ISSOCK(sa->st_mode)) {
                ck_assert_msg(lstat(q, &sb) < 0 && errno == ENOENT, "the socket %s was packed", q);
                return 0;
        }
        cmp_entries++;
        ck_assert_msg(lstat(q, &sb) == 0, "missing %s", q);
        ck_assert_msg(sa->st_mode == sb.st_mode, "mode of %s: 0%o, not 0%o", q, sb.st_mode, sa->st_mode);
        ck_assert_msg(sa->st_uid == sb.st_uid && sa->st_gid == sb.st_gid, "owner of %s: %u:%u, not %u:%u", q, sb.st_uid,
                      sb.st_gid, sa->st_uid, sa->st_gid);
        ck_assert_msg(sa->st_mtim.tv_sec == sb.st_mtim.tv_sec, "mtime of %s: %lld, not %lld", q,
                      (long long)sb.st_mtim.tv_sec, (long long)sa->st_mtim.tv_sec);
        ck_assert_msg(sa->st_mtim.tv_nsec == sb.st_mtim.tv_nsec, "mtime ns of %s", q);
        ck_assert_uint_eq(sa->st_nlink > 1 && !S_ISDIR(sa->st_mode), sb.st_nlink > 1 && !S_ISDIR(sb.st_mode));
        if (S_ISREG(sa->st_mode) || S_ISLNK(sa->st_mode))
                ck_assert_msg(sa->st_size == sb.st_size, "size of %s", q);
        if (S_ISLNK(sa->st_mode)) {
                char ta[1024], tb[1024];
                ssize_t na = readlink(p, ta, sizeof(ta)), nb = readlink(q, tb, sizeof(tb));
                ck_assert_msg(na > 0 && na == nb && memcmp(ta, tb, (size_t)na) == 0, "target of %s", q);
        }
        if (S_ISCHR(sa->st_mode) || S_ISBLK(sa->st_mode))
                ck_assert_msg(sa->st_rdev == sb.st_rdev, "device of %s", q);
        if (S_ISREG(sa->st_mode)) {
                assert_same_content(p, q, sa->st_size);
                if (sa->st_nlink > 1) {
                        ck_assert_uint_eq(sa->st_nlink, sb.st_nlink);
                        size_t i = 0;
                        for (; i < n_links && cmp_links[i].src != sa->st_ino; i++)
                                ;
                        if (i == n_links) {
                                ck_assert_uint_lt(n_links, SP_ARRAY_SIZE(cmp_links));
                                cmp_links[n_links].src = sa->st_ino;
                                cmp_links[n_links++].dst = sb.st_ino;
                        } else {
                                ck_assert_msg(cmp_links[i].dst == sb.st_ino, "%s is not the hard link it was", q);
                        }
                }
        }
        if (S_ISREG(sa->st_mode) || S_ISDIR(sa->st_mode))
                assert_same_xattrs(p, q);
        return 0;
}

static int count_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)p;
        (void)st;
        (void)flag;
        (void)ftw;
        dst_entries++;
        return 0;
}

static void mkdir_owned(const char *rel, mode_t mode, uid_t uid, gid_t gid)
{
        ck_assert_int_eq(mkdir(at(rel), 0700), 0);
        ck_assert_int_eq(chown(at(rel), uid, gid), 0);
        ck_assert_int_eq(chmod(at(rel), mode), 0);
}

static void file_owned(const char *rel, const char *data, mode_t mode, uid_t uid, gid_t gid)
{
        _cleanup_close_ int fd = create(rel);
        put(fd, 0, data, strlen(data));
        ck_assert_int_eq(fchown(fd, uid, gid), 0);
        ck_assert_int_eq(fchmod(fd, mode), 0); /* after chown, which clears set-id bits */
}

START_TEST(root_filesystem_round_trip)
{
        /* the tree */
        mkdir_owned("src", 0755, 0, 0);
        file_owned("src/file", "hello\n", 0644, 1000, 1000);
        ck_assert_int_eq(setxattr(at("src/file"), "user.space", "1", 1, 0), 0);
        file_owned("src/tool", "#!/bin/sh\n", 0751, 65534, 65534);
        file_owned("src/suid", "suid", 04755, 0, 0);
        struct vfs_cap_data cap = {.magic_etc = VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE};
        cap.data[0].permitted = 1u << CAP_NET_BIND_SERVICE;
        bool have_cap = setxattr(at("src/suid"), "security.capability", &cap, XATTR_CAPS_SZ_2, 0) == 0;
        if (!have_cap)
                fprintf(stderr, "note: security.capability not checked (setxattr: %s)\n", strerror(errno));
        ck_assert_int_eq(symlink("does/not/exist", at("src/dangling")), 0);
        ck_assert_int_eq(symlink("/etc/passwd", at("src/abs")), 0);
        mkdir_owned("src/sub", 0750, 65534, 65534);
        ck_assert_int_eq(setxattr(at("src/sub"), "user.dir", "d", 1, 0), 0);
        file_owned("src/hard1", "linked\n", 0600, 1000, 0);
        ck_assert_int_eq(link(at("src/hard1"), at("src/sub/hard2")), 0);
        ck_assert_int_eq(mkfifo(at("src/fifo"), 0640), 0);
        ck_assert_int_eq(lchown(at("src/fifo"), 1000, 1000), 0);
        ck_assert_int_eq(lchown(at("src/abs"), 1000, 65534), 0);
        mkdir_owned("src/empty", 0700, 0, 0);
        file_owned("src/caf\xe9", "latin-1 name", 0644, 0, 0);
        {
                _cleanup_close_ int fd = create("src/sparse");
                static unsigned char b[B];
                fill(b, sizeof(b), 3);
                ck_assert_int_eq(ftruncate(fd, 10 << 20), 0);
                put(fd, 1 << 20, b, B);
                put(fd, 8 << 20, b, B / 2);
        }
        {
                _cleanup_close_ int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", at("src/sock"));
                ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
        }
        ck_assert_int_eq(mkdir(at("src/mnt"), 0755), 0);
        times_n = 0;
        ck_assert_int_eq(nftw(at("src"), set_time, 16, FTW_DEPTH | FTW_PHYS), 0);
        struct stat st;
        ck_assert_int_eq(stat(at("src/sparse"), &st), 0);
        ck_assert_msg(st.st_blocks * 512 < (1 << 20), "the file under test is not sparse");

        /* another filesystem below the tree: its directory is packed, not what it holds */
        bool mounted = unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
                       mount("tmpfs", at("src/mnt"), "tmpfs", 0, "mode=0711") == 0;
        if (mounted)
                close(create("src/mnt/inside"));
        else
                fprintf(stderr, "note: not crossing mounts is not checked (mount: %s)\n", strerror(errno));

        /* pack, unpack */
        sp_error *err = NULL;
        uint64_t bytes = 0;
        _cleanup_close_ int out = open_tar("root.tar");
        sp_test_ok(wk_artifact_pack_tree(at("src"), out, &bytes, &err), &err);
        ck_assert_int_eq(fstat(out, &st), 0);
        ck_assert_uint_eq(bytes, (uint64_t)st.st_size);
        ck_assert_msg(bytes < (1 << 20), "the sparse file was packed dense: %llu bytes", (unsigned long long)bytes);

        /* the archive's names and owners: relative, numeric */
        ck_assert_int_eq(lseek(out, 0, SEEK_SET), 0);
        {
                struct archive *a = archive_read_new();
                archive_read_support_format_tar(a);
                ck_assert_int_eq(archive_read_open_fd(a, out, 65536), ARCHIVE_OK);
                struct archive_entry *e;
                int n = 0;
                while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
                        const char *name = archive_entry_pathname(e);
                        if (n++ == 0)
                                ck_assert_str_eq(name, "./"); /* the pax writer marks directories with a slash */
                        else
                                ck_assert_msg(strncmp(name, "./", 2) == 0, "entry %s", name);
                        /* the ustar header's name fields, left empty */
                        const char *un = archive_entry_uname(e), *gn = archive_entry_gname(e);
                        ck_assert_msg((!un || !*un) && (!gn || !*gn), "%s: owner names %s:%s", name, un, gn);
                        ck_assert_msg(strcmp(name, "./sock") != 0 && strcmp(name, "./mnt/inside") != 0, "entry %s",
                                      name);
                }
                ck_assert_int_ge(n, 14);
                archive_read_free(a);
        }

        ck_assert_int_eq(mkdir(at("dst"), 0700), 0);
        ck_assert_int_eq(lseek(out, 0, SEEK_SET), 0);
        sp_test_ok(wk_artifact_unpack_tree(out, at("dst"), 0, &err), &err);

        /* every entry as it was */
        char src[1024], dst[1024];
        snprintf(src, sizeof(src), "%s", at("src"));
        snprintf(dst, sizeof(dst), "%s", at("dst"));
        cmp_src = src;
        cmp_dst = dst;
        cmp_entries = dst_entries = n_links = 0;
        ck_assert_int_eq(nftw(src, cmp_one, 16, FTW_PHYS | FTW_MOUNT), 0);
        ck_assert_int_eq(nftw(dst, count_one, 16, FTW_PHYS), 0);
        ck_assert_uint_eq(n_links, 1);
        if (mounted) {
                /* the mount point, as the mounted filesystem's root showed it; empty */
                ck_assert_int_eq(lstat(at("dst/mnt"), &st), 0);
                ck_assert(S_ISDIR(st.st_mode));
                ck_assert_uint_eq(st.st_mode & 07777, 0711);
                ck_assert_int_eq(lstat(at("dst/mnt/inside"), &st), -1);
                ck_assert_uint_eq(dst_entries, cmp_entries + 1);
                ck_assert_int_eq(umount2(at("src/mnt"), MNT_DETACH), 0);
        } else {
                ck_assert_uint_eq(dst_entries, cmp_entries);
        }
        ck_assert_int_eq(lgetxattr(at("dst/file"), "user.space", NULL, 0), 1);
        if (have_cap)
                ck_assert_int_eq(lgetxattr(at("dst/suid"), "security.capability", NULL, 0), XATTR_CAPS_SZ_2);
        ck_assert_int_eq(stat(at("dst/sparse"), &st), 0);
        ck_assert_int_eq(st.st_size, 10 << 20);
        ck_assert_msg(st.st_blocks * 512 < (1 << 20), "the copy is not sparse: %lld blocks", (long long)st.st_blocks);

        /* the digests of the sparse file agree */
        char da[PR_WK_DIGEST_MAX], db[PR_WK_DIGEST_MAX];
        _cleanup_close_ int fa = open(at("src/sparse"), O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int fb = open(at("dst/sparse"), O_RDONLY | O_CLOEXEC);
        digest(fa, da);
        digest(fb, db);
        ck_assert_str_eq(da, db);
}
END_TEST

START_TEST(device_nodes_are_left_out)
{
        ck_assert_int_eq(mkdir(at("src"), 0755), 0);
        if (mknod(at("src/null"), S_IFCHR | 0666, makedev(1, 3)) < 0) {
                fprintf(stderr, "SKIP: device_nodes_are_left_out: mknod: %s\n", strerror(errno));
                return;
        }
        int fd = open(at("src/kept"), O_WRONLY | O_CREAT | O_EXCL, 0644);
        ck_assert_int_ge(fd, 0);
        close(fd);
        sp_error *err = NULL;
        uint64_t bytes = 0;
        _cleanup_close_ int out = open_tar("dev.tar");
        sp_test_ok(wk_artifact_pack_tree(at("src"), out, &bytes, &err), &err);

        ck_assert_int_eq(lseek(out, 0, SEEK_SET), 0);
        struct archive *a = archive_read_new();
        archive_read_support_format_tar(a);
        ck_assert_int_eq(archive_read_open_fd(a, out, 65536), ARCHIVE_OK);
        struct archive_entry *e;
        bool device = false, kept = false;
        while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
                device |= strcmp(archive_entry_pathname(e), "./null") == 0;
                kept |= strcmp(archive_entry_pathname(e), "./kept") == 0;
        }
        archive_read_free(a);
        ck_assert(!device);
        ck_assert(kept);

        /* and the rest unpacks */
        ck_assert_int_eq(mkdir(at("dst"), 0700), 0);
        ck_assert_int_eq(lseek(out, 0, SEEK_SET), 0);
        sp_test_ok(wk_artifact_unpack_tree(out, at("dst"), 0, &err), &err);
        struct stat st;
        ck_assert_int_eq(lstat(at("dst/kept"), &st), 0);
        ck_assert_int_lt(lstat(at("dst/null"), &st), 0);
}
END_TEST

/* What root in a sandbox puts in its root filesystem cannot hold the packing
 * thread or fill the pool: a byte at 2^40 (a hole the writer must be fed in
 * zeros) and an archive past its bound are refused at once. */
START_TEST(pack_is_bounded)
{
        ck_assert_int_eq(mkdir(at("src"), 0755), 0);
        int fd = open(at("src/hole"), O_WRONLY | O_CREAT | O_EXCL, 0644);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(pwrite(fd, "x", 1, (off_t)1 << 40), 1);
        close(fd);
        sp_error *err = NULL;
        uint64_t bytes = 0;
        wk_artifact_pack_limits lim = {.max_fed = UINT64_C(1) << 30};
        _cleanup_close_ int out = open_tar("hole.tar");
        int64_t t0 = sp_now_mono_us();
        ck_assert_int_eq(wk_artifact_pack_tree_bounded(at("src"), out, &lim, &bytes, &err), -SP_E_TOO_LARGE);
        ck_assert_ptr_nonnull(strstr(err->message, "holes counted"));
        sp_error_freep(&err);
        ck_assert_msg(sp_now_mono_us() - t0 < 60 * 1000000LL, "the refusal was not at once");
        ck_assert_int_eq(unlink(at("src/hole")), 0);

        fd = open(at("src/data"), O_WRONLY | O_CREAT | O_EXCL, 0644);
        ck_assert_int_ge(fd, 0);
        static char buf[1 << 16];
        memset(buf, 'a', sizeof(buf));
        for (int i = 0; i < 16; i++)
                ck_assert_int_eq(write(fd, buf, sizeof(buf)), (ssize_t)sizeof(buf));
        close(fd);
        wk_artifact_pack_limits small = {.max_archive_bytes = 256 * 1024};
        _cleanup_close_ int out2 = open_tar("small.tar");
        ck_assert_int_eq(wk_artifact_pack_tree_bounded(at("src"), out2, &small, &bytes, &err), -SP_E_TOO_LARGE);
        sp_error_freep(&err);
        struct stat st;
        ck_assert_int_eq(fstat(out2, &st), 0);
        ck_assert_int_le(st.st_size, 256 * 1024);
        /* Within its bounds, the same tree packs. */
        wk_artifact_pack_limits roomy = {.max_fed = UINT64_C(1) << 30, .max_archive_bytes = UINT64_C(1) << 30};
        _cleanup_close_ int out3 = open_tar("roomy.tar");
        sp_test_ok(wk_artifact_pack_tree_bounded(at("src"), out3, &roomy, &bytes, &err), &err);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("artifact_files");
        TCase *tc = tcase_create("blocks");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, sparse_and_dense_digests_agree);
        tcase_add_test(tc, next_block_skips_holes_and_zero_blocks);
        tcase_add_test(tc, incremental_digest_takes_blocks_in_order);
        tcase_add_test(tc, pack_and_unpack_refuse_bad_arguments);
        tcase_add_test(tc, pack_keeps_the_working_directory_to_its_thread);
        tcase_add_test(tc, pack_is_bounded);
        suite_add_tcase(s, tc);
        if (sp_test_is_root()) {
                TCase *tree = tcase_create("tree");
                tcase_add_checked_fixture(tree, setup, teardown);
                tcase_add_test(tree, root_filesystem_round_trip);
                tcase_add_test(tree, device_nodes_are_left_out);
                suite_add_tcase(s, tree);
        } else {
                fprintf(stderr, "SKIP: root_filesystem_round_trip and device_nodes_are_left_out need root "
                                "(owners, device nodes)\n");
        }
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
