/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals shared by the template importers (and their tests): path
 * validation, opening beneath a directory without following symlinks, tree
 * removal, the digesting archive reader and the archive extraction engine.
 * Not part of the worker's API.
 */
#ifndef WK_TEMPLATE_INTERNAL_H
#define WK_TEMPLATE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "space/error.h"
#include "template/template.h"

struct archive;

#define WK__QUOTE_MAX 160

/* Writes name into buf (size >= 8) for an error message: non-printable bytes
 * and quotes escaped as \xNN, cut with "..." past WK__QUOTE_MAX bytes.
 * Returns buf. */
const char *wk__tpl_quote(const char *name, char *buf, size_t size);

/* The limits with every zero field replaced by its default (in may be NULL). */
wk_template_limits wk__tpl_limits_resolve(const wk_template_limits *in);
/* SP_E_TIMEOUT once lim's deadline (set by wk__tpl_limits_resolve) has passed. */
int wk__tpl_deadline_check(const wk_template_limits *lim, sp_error **err);

/* Normalises an archive entry's path: drops empty and "." components,
 * rejects absolute paths, ".." components, empty names, components longer
 * than NAME_MAX and paths past the limits. *ret is a new string without
 * leading, trailing or doubled slashes; "" names the root. The error message
 * does not name the entry (the caller does). */
int wk__tpl_path_normalize(const char *name, const wk_template_limits *lim, char **ret, sp_error **err);

/* Opens dest, which must be an existing empty directory; returns the fd
 * (O_RDONLY | O_DIRECTORY | O_CLOEXEC) or <0 with SP_E_CONFLICT when it is not
 * empty. */
int wk__tpl_dest_open(const char *dest, sp_error **err);

/* Opens the directory at a normalised relative path ("" = rootfd itself)
 * beneath rootfd, following no symlink in any component (ELOOP or ENOTDIR
 * when one is met). flags are added to O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
 * (O_RDONLY or O_PATH). Returns the fd or -errno. */
int wk__tpl_open_dir_beneath(int rootfd, const char *path, int flags);
/* Opens the parent directory of a normalised non-empty path beneath rootfd
 * (as wk__tpl_open_dir_beneath, O_RDONLY), creating missing directories (mode
 * 0755) when create is set, and points *ret_base at the last component.
 * Returns the fd or -errno. */
int wk__tpl_open_parent(int rootfd, const char *path, bool create, const char **ret_base);
/* Agrees (0) or not (< 0, returned as the walk's result) to the creation of a
 * missing directory whose name has name_len bytes. */
typedef int (*wk__tpl_charge_fn)(void *ud, size_t name_len);
/* wk__tpl_open_parent() calling charge (optional) before it creates each
 * missing directory. */
int wk__tpl_open_parent_charged(int rootfd, const char *path, bool create, wk__tpl_charge_fn charge, void *ud,
                                const char **ret_base);
/* Tests: false makes the functions above walk component by component
 * with O_NOFOLLOW, as on kernels without openat2(2). */
void wk__tpl_set_use_openat2(bool on);

/* Removes name in dirfd and, when it is a directory, everything below it,
 * never following symlinks (directories deeper than max_depth: -ELOOP).
 * A missing name is not an error. Returns 0 or -errno. */
int wk__tpl_remove_tree(int dirfd, const char *name, unsigned max_depth);

/* Whether an extended attribute is carried into templates: user.* and
 * security.capability. */
bool wk__tpl_xattr_wanted(const char *name);
/* The disk cost rule of template.h (WK_TEMPLATE_ENTRY_OVERHEAD): n bytes of
 * metadata counted WK_TEMPLATE_METADATA_COPIES times (saturating), and a name
 * of name_len bytes (the entry overhead plus its length, as metadata). */
uint64_t wk__tpl_cost_meta(uint64_t n);
uint64_t wk__tpl_cost_name(size_t name_len);
/* Into *ret: the cost (as metadata) of the extended attributes
 * wk__tpl_xattr_copy() would copy from fd, names and values. 0 or -errno. */
int wk__tpl_xattr_cost(int fd, uint64_t *ret);
/* Copies the wanted extended attributes of from_fd to to_fd (both opened
 * files or directories), ignoring filesystems without xattr support. Returns 0
 * or -errno. */
int wk__tpl_xattr_copy(int from_fd, int to_fd);

/* Copies size bytes from sfd to dfd (both at offset 0): a reflink (FICLONE)
 * when the filesystems allow, else copy_file_range, else read/write. Sets
 * *ret_reflinked. Returns 0 or -errno. */
int wk__tpl_copy_data(int sfd, int dfd, uint64_t size, bool *ret_reflinked);

/* Reads an input fd through a sha256 digest for libarchive. */
typedef struct wk__tpl_reader {
        int fd;
        EVP_MD_CTX *md;
        uint64_t nread;
        uint64_t max; /* bytes allowed from fd (0: unbounded) */
        int read_errno; /* the failed read's errno, or -1 when max was passed */
        unsigned char buf[128 * 1024];
} wk__tpl_reader;

/* Prepares r to read fd (not owned) through sha256, failing past max bytes. */
int wk__tpl_reader_init(wk__tpl_reader *r, int fd, uint64_t max, sp_error **err);
void wk__tpl_reader_done(wk__tpl_reader *r);
/* Opens a libarchive reader of tar formats over r, with the compression
 * filters libarchive has built in (never external programs). */
int wk__tpl_reader_archive(wk__tpl_reader *r, struct archive **ret, sp_error **err);
/* Reads what remains of fd into the digest (trailing padding). */
int wk__tpl_reader_drain(wk__tpl_reader *r, sp_error **err);
/* "sha256:<hex>" of every byte read so far. */
int wk__tpl_reader_digest(wk__tpl_reader *r, char out[WK_TEMPLATE_DIGEST_MAX], sp_error **err);
/* "sha256:<hex>" of n bytes at p. */
int wk__tpl_sha256(const void *p, size_t n, char out[WK_TEMPLATE_DIGEST_MAX], sp_error **err);
/* The error of a failed archive operation: the reader's own failure if it
 * caused it, libarchive's message otherwise. what names the operation. */
int wk__tpl_archive_error(wk__tpl_reader *r, struct archive *a, const char *what, sp_error **err);

/* Extracts archives into a directory, one or more (OCI layers) in order. */
typedef struct wk__tpl_extract wk__tpl_extract;
/* rootfd is borrowed; oci turns on whiteout handling. */
int wk__tpl_extract_new(int rootfd, const wk_template_limits *lim, bool oci, wk__tpl_extract **ret, sp_error **err);
wk__tpl_extract *wk__tpl_extract_free(wk__tpl_extract *x);
/* Extracts every entry of a (opened with wk__tpl_reader_archive), then applies the
 * directories' deferred modes and times. Errors name the entry. */
int wk__tpl_extract_archive(wk__tpl_extract *x, wk__tpl_reader *r, struct archive *a, sp_error **err);
/* Adds the extraction's counters to *stats. */
void wk__tpl_extract_stats(const wk__tpl_extract *x, wk_template_stats *stats);

#endif
