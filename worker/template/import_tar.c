/* SPDX-License-Identifier: Apache-2.0 */
/* Importing a rootfs tarball (plain or compressed) into a template directory. */
#include <archive.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "template/internal.h"

/* The most input bytes a tarball within the limits can have: its data, a
 * generous header allowance per entry, and padding. */
static uint64_t input_bound(const wk_template_limits *lim)
{
        uint64_t headers = lim->max_entries > UINT64_MAX / 8192 ? UINT64_MAX : lim->max_entries * 8192;
        uint64_t n = lim->max_bytes + headers;
        if (n < lim->max_bytes)
                return UINT64_MAX;
        return n + (1u << 20) < n ? UINT64_MAX : n + (1u << 20);
}

static int extract(int rootfd, wk__tpl_reader *r, const wk_template_limits *lim, wk_template_stats *stats,
                   sp_error **err)
{
        struct archive *a = NULL;
        int rc = wk__tpl_reader_archive(r, &a, err);
        if (rc < 0)
                return rc;
        wk__tpl_extract *x = NULL;
        rc = wk__tpl_extract_new(rootfd, lim, false, &x, err);
        if (rc == 0)
                rc = wk__tpl_extract_archive(x, r, a, err);
        if (rc == 0)
                wk__tpl_extract_stats(x, stats);
        wk__tpl_extract_free(x);
        archive_read_free(a);
        if (rc < 0)
                return rc;
        return wk__tpl_reader_drain(r, err);
}

int wk_template_import_tar_fd(int fd, const char *dest, const wk_template_limits *limits, wk_template_stats *ret_stats,
                              wk_template_meta **ret_meta, sp_error **err)
{
        wk_template_limits lim = wk__tpl_limits_resolve(limits);
        _cleanup_close_ int rootfd = wk__tpl_dest_open(dest, err);
        if (rootfd < 0)
                return rootfd;
        wk__tpl_reader *r = malloc(sizeof(*r));
        if (!r)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (wk__tpl_reader_init(r, fd, input_bound(&lim), err) < 0) {
                free(r);
                return -SP_E_INTERNAL;
        }
        wk_template_stats stats = {0};
        char digest[WK_TEMPLATE_DIGEST_MAX];
        int rc = extract(rootfd, r, &lim, &stats, err);
        if (rc == 0)
                rc = wk__tpl_reader_digest(r, digest, err);
        wk__tpl_reader_done(r);
        free(r);
        if (rc < 0)
                return sp_error_wrap(err, "import tarball");
        if (ret_meta) {
                wk_template_meta *m;
                if (wk_template_meta_new(WK_TEMPLATE_SOURCE_TAR, &m, err) < 0)
                        return -SP_E_LIMIT;
                memcpy(m->digest, digest, sizeof(digest));
                *ret_meta = m;
        }
        if (ret_stats)
                *ret_stats = stats;
        return 0;
}

int wk_template_import_tar(const char *path, const char *dest, const wk_template_limits *limits,
                           wk_template_stats *ret_stats, wk_template_meta **ret_meta, sp_error **err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open tarball %s", path);
        return wk_template_import_tar_fd(fd, dest, limits, ret_stats, ret_meta, err);
}
