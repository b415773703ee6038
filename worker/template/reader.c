/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The digesting archive reader: libarchive pulls the input through a sha256
 * digest, so a tarball's or an OCI layer's digest is checked on the very bytes
 * that were extracted, in one pass.
 */
#include <archive.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "template/internal.h"

int wk__tpl_reader_init(wk__tpl_reader *r, int fd, uint64_t max, sp_error **err)
{
        r->fd = fd;
        r->nread = 0;
        r->max = max;
        r->read_errno = 0;
        r->md = EVP_MD_CTX_new();
        if (!r->md || EVP_DigestInit_ex(r->md, EVP_sha256(), NULL) != 1) {
                EVP_MD_CTX_free(r->md);
                r->md = NULL;
                return sp_error_set(err, SP_E_INTERNAL, "sha256 digest unavailable");
        }
        return 0;
}

void wk__tpl_reader_done(wk__tpl_reader *r)
{
        EVP_MD_CTX_free(r->md);
        r->md = NULL;
}

/* Reads the next chunk into r->buf through the digest; 0 at the end, <0 with
 * r->read_errno set on failure. */
static ssize_t reader_fill(wk__tpl_reader *r)
{
        for (;;) {
                ssize_t n = read(r->fd, r->buf, sizeof(r->buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r->read_errno = errno;
                        return -1;
                }
                if (r->max && r->nread + (uint64_t)n > r->max) {
                        r->read_errno = -1;
                        return -1;
                }
                r->nread += (uint64_t)n;
                if (n > 0 && EVP_DigestUpdate(r->md, r->buf, (size_t)n) != 1) {
                        r->read_errno = EIO;
                        return -1;
                }
                return n;
        }
}

static la_ssize_t archive_read_cb(struct archive *a, void *userdata, const void **buf)
{
        wk__tpl_reader *r = userdata;
        ssize_t n = reader_fill(r);
        if (n < 0) {
                archive_set_error(a, EIO, "input read failed");
                return -1;
        }
        *buf = r->buf;
        return n;
}

int wk__tpl_reader_archive(wk__tpl_reader *r, struct archive **ret, sp_error **err)
{
        struct archive *a = archive_read_new();
        if (!a)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        /* Only the decompressors built into libarchive: for a filter it lacks,
         * libarchive would otherwise run an external program on the input. */
        archive_read_support_format_tar(a);
        archive_read_support_filter_none(a);
        if (archive_zlib_version())
                archive_read_support_filter_gzip(a);
        if (archive_libzstd_version())
                archive_read_support_filter_zstd(a);
        if (archive_liblzma_version()) {
                archive_read_support_filter_xz(a);
                archive_read_support_filter_lzma(a);
        }
        if (archive_bzlib_version())
                archive_read_support_filter_bzip2(a);
        if (archive_liblz4_version())
                archive_read_support_filter_lz4(a);
        if (archive_read_open2(a, r, NULL, archive_read_cb, NULL, NULL) != ARCHIVE_OK) {
                int rc = wk__tpl_archive_error(r, a, "open archive", err);
                archive_read_free(a);
                return rc;
        }
        *ret = a;
        return 0;
}

int wk__tpl_reader_drain(wk__tpl_reader *r, sp_error **err)
{
        for (;;) {
                ssize_t n = reader_fill(r);
                if (n == 0)
                        return 0;
                if (n < 0)
                        return r->read_errno == -1
                                       ? sp_error_set(err, SP_E_TOO_LARGE, "input is larger than %llu bytes",
                                                      (unsigned long long)r->max)
                                       : sp_error_set_errno(err, SP_E_IO, r->read_errno, "read input");
        }
}

static int digest_hex(const unsigned char *md, unsigned int len, char out[WK_TEMPLATE_DIGEST_MAX], sp_error **err);

int wk__tpl_reader_digest(wk__tpl_reader *r, char out[WK_TEMPLATE_DIGEST_MAX], sp_error **err)
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (EVP_DigestFinal_ex(r->md, md, &len) != 1)
                return sp_error_set(err, SP_E_INTERNAL, "sha256 digest failed");
        return digest_hex(md, len, out, err);
}

static int digest_hex(const unsigned char *md, unsigned int len, char out[WK_TEMPLATE_DIGEST_MAX], sp_error **err)
{
        if (len != 32)
                return sp_error_set(err, SP_E_INTERNAL, "sha256 digest failed");
        _cleanup_buf_ sp_buf hex = SP_BUF_INIT;
        if (sp_hex_encode(&hex, md, len, err) < 0)
                return -SP_E_INTERNAL;
        snprintf(out, WK_TEMPLATE_DIGEST_MAX, "sha256:%s", hex.data);
        return 0;
}

int wk__tpl_sha256(const void *p, size_t n, char out[WK_TEMPLATE_DIGEST_MAX], sp_error **err)
{
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        if (EVP_Digest(p, n, md, &len, EVP_sha256(), NULL) != 1)
                return sp_error_set(err, SP_E_INTERNAL, "sha256 digest failed");
        return digest_hex(md, len, out, err);
}

int wk__tpl_archive_error(wk__tpl_reader *r, struct archive *a, const char *what, sp_error **err)
{
        if (r->read_errno == -1)
                return sp_error_set(err, SP_E_TOO_LARGE, "%s: input is larger than %llu bytes", what,
                                    (unsigned long long)r->max);
        if (r->read_errno > 0)
                return sp_error_set_errno(err, SP_E_IO, r->read_errno, "%s: read input", what);
        const char *msg = archive_error_string(a);
        char q[WK__QUOTE_MAX + 8];
        return sp_error_set(err, SP_E_INVALID, "%s: %s", what,
                            wk__tpl_quote(msg ? msg : "malformed archive", q, sizeof(q)));
}
