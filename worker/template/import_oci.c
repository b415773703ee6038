/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Importing an OCI image layout: index.json -> (nested index) -> manifest ->
 * config and layers, every blob checked against its descriptor's digest and
 * size, the layers extracted in order with whiteouts.
 */
#include <archive.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "template/internal.h"
#include "template/oci.h"

#define LAYOUT_FILE_MAX 4096

static const char *host_architecture(void)
{
#if defined(__x86_64__)
        return "amd64";
#elif defined(__aarch64__)
        return "arm64";
#elif defined(__i386__)
        return "386";
#elif defined(__arm__)
        return "arm";
#elif defined(__riscv) && __riscv_xlen == 64
        return "riscv64";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        return "ppc64le";
#elif defined(__s390x__)
        return "s390x";
#else
        return "unknown";
#endif
}

/* Reads a small file of the layout (not through symlinks) into out. */
static int read_layout_file(int lfd, const char *name, size_t max, sp_buf *out, sp_error **err)
{
        _cleanup_close_ int fd = openat(lfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, errno == ENOENT ? SP_E_INVALID : SP_E_IO, errno,
                                          "not an OCI image layout: %s", name);
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return sp_error_set(err, SP_E_INVALID, "not an OCI image layout: %s is not a file", name);
        if ((uint64_t)st.st_size > max)
                return sp_error_set(err, SP_E_TOO_LARGE, "%s is larger than %zu bytes", name, max);
        for (;;) {
                if (sp_buf_reserve(out, 4096, err) < 0)
                        return -SP_E_LIMIT;
                ssize_t n = read(fd, out->data + out->len, out->cap - out->len - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "read %s", name);
                if (n == 0)
                        break;
                out->len += (size_t)n;
                if (out->len > max)
                        return sp_error_set(err, SP_E_TOO_LARGE, "%s is larger than %zu bytes", name, max);
        }
        out->data[out->len] = '\0';
        return 0;
}

static int check_layout_version(int lfd, sp_error **err)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        _cleanup_json_ json_object *o = NULL;
        const char *version = NULL;
        if (read_layout_file(lfd, "oci-layout", LAYOUT_FILE_MAX, &b, err) < 0)
                return -SP_E_INVALID;
        if (sp_json_parse(b.data, b.len, &o, err) < 0 || !json_object_is_type(o, json_type_object)) {
                sp_error_set(err, SP_E_INVALID, "not a JSON object");
                return sp_error_wrap(err, "oci-layout");
        }
        if (sp_json_get_string(o, "imageLayoutVersion", true, 32, &version, err) < 0)
                return sp_error_wrap(err, "oci-layout");
        if (strcmp(version, "1.0.0") != 0)
                return sp_error_set(err, SP_E_UNSUPPORTED, "oci-layout: image layout version is not 1.0.0");
        return 0;
}

/* Opens the blob of d as a regular file of exactly d->size bytes. */
static int open_blob(int lfd, const wk_oci_descriptor *d, sp_error **err)
{
        char hex[65];
        if (wk_oci_digest_parse(d->digest, hex, err) < 0)
                return -SP_E_INVALID;
        int dfd = wk__tpl_open_dir_beneath(lfd, "blobs/sha256", O_RDONLY);
        if (dfd < 0)
                return sp_error_set_errno(err, SP_E_INVALID, -dfd, "not an OCI image layout: blobs/sha256");
        _cleanup_close_ int bdir = dfd;
        _cleanup_close_ int fd = openat(bdir, hex, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
                return sp_error_set_errno(err, errno == ENOENT ? SP_E_NOT_FOUND : SP_E_IO, errno, "blob %s", d->digest);
        struct stat st;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return sp_error_set(err, SP_E_INVALID, "blob %s is not a file", d->digest);
        if (st.st_size != d->size)
                return sp_error_set(err, SP_E_INVALID, "blob %s has %lld bytes, its descriptor says %lld", d->digest,
                                    (long long)st.st_size, (long long)d->size);
        return TAKE_FD(fd);
}

/* Compares the digest of what r read with d (and the size). */
static int verify(wk__tpl_reader *r, const wk_oci_descriptor *d, sp_error **err)
{
        char got[WK_TEMPLATE_DIGEST_MAX];
        if (wk__tpl_reader_digest(r, got, err) < 0)
                return -SP_E_INTERNAL;
        if (r->nread != (uint64_t)d->size)
                return sp_error_set(err, SP_E_INVALID, "blob %s has %llu bytes, its descriptor says %lld", d->digest,
                                    (unsigned long long)r->nread, (long long)d->size);
        if (strcmp(got, d->digest) != 0)
                return sp_error_set(err, SP_E_INVALID, "blob %s does not match its digest (it is %s)", d->digest, got);
        return 0;
}

/* Reads a JSON document blob into out and checks it against d. */
static int read_doc(int lfd, const wk_oci_descriptor *d, sp_buf *out, sp_error **err)
{
        if (d->size > WK_OCI_DOC_MAX_BYTES)
                return sp_error_set(err, SP_E_TOO_LARGE, "blob %s is larger than %u bytes", d->digest,
                                    WK_OCI_DOC_MAX_BYTES);
        _cleanup_close_ int fd = open_blob(lfd, d, err);
        if (fd < 0)
                return fd;
        if (sp_buf_reserve(out, (size_t)d->size + 1, err) < 0)
                return -SP_E_LIMIT;
        for (;;) {
                ssize_t n = read(fd, out->data + out->len, out->cap - out->len - 1);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return sp_error_set_errno(err, SP_E_IO, errno, "read blob %s", d->digest);
                if (n == 0)
                        break;
                out->len += (size_t)n;
                if (out->len > (size_t)d->size)
                        return sp_error_set(err, SP_E_INVALID, "blob %s is longer than its descriptor says", d->digest);
        }
        out->data[out->len] = '\0';
        char got[WK_TEMPLATE_DIGEST_MAX];
        if (wk__tpl_sha256(out->data, out->len, got, err) < 0)
                return -SP_E_INTERNAL;
        if (out->len != (size_t)d->size)
                return sp_error_set(err, SP_E_INVALID, "blob %s has %zu bytes, its descriptor says %lld", d->digest,
                                    out->len, (long long)d->size);
        if (strcmp(got, d->digest) != 0)
                return sp_error_set(err, SP_E_INVALID, "blob %s does not match its digest (it is %s)", d->digest, got);
        return 0;
}

static int select_manifest(const wk_oci_index *ix, const wk_template_platform *p, bool nested,
                           const wk_oci_descriptor **ret, sp_error **err)
{
        const char *os = p && p->os ? p->os : "linux";
        const char *arch = p && p->architecture ? p->architecture : host_architecture();
        const char *variant = p ? p->variant : NULL;
        size_t candidates = 0;
        const wk_oci_descriptor *only = NULL;
        for (size_t i = 0; i < ix->n_manifests; i++) {
                const wk_oci_descriptor *d = &ix->manifests[i];
                wk_oci_kind k = wk_oci_media_type_kind(d->media_type);
                if (k != WK_OCI_KIND_MANIFEST && (nested || k != WK_OCI_KIND_INDEX))
                        continue;
                candidates++;
                only = d;
                if (d->os && d->architecture && strcmp(d->os, os) == 0 && strcmp(d->architecture, arch) == 0 &&
                    (!variant || (d->variant && strcmp(d->variant, variant) == 0))) {
                        *ret = d;
                        return 0;
                }
        }
        if (candidates == 1) {
                *ret = only;
                return 0;
        }
        if (candidates == 0)
                return sp_error_set(err, SP_E_INVALID, "the image index lists no image manifest%s",
                                    nested ? " (nested indexes are followed one level only)" : "");
        return sp_error_set(err, SP_E_NOT_FOUND, "none of the %zu manifests is for %s/%s%s%s", candidates, os, arch,
                            variant ? "/" : "", variant ? variant : "");
}

/* index.json, following one nested index, to the chosen manifest. */
static int load_manifest(int lfd, const wk_template_platform *platform, wk_oci_manifest **ret, char *ret_digest,
                         sp_error **err)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        _cleanup_(wk_oci_index_freep) wk_oci_index *ix = NULL;
        int r = read_layout_file(lfd, "index.json", WK_OCI_DOC_MAX_BYTES, &b, err);
        if (r < 0 || (r = wk_oci_index_parse(b.data, b.len, &ix, err)) < 0)
                return r;
        const wk_oci_descriptor *d;
        if ((r = select_manifest(ix, platform, false, &d, err)) < 0)
                return r;
        _cleanup_(wk_oci_index_freep) wk_oci_index *nested = NULL;
        if (wk_oci_media_type_kind(d->media_type) == WK_OCI_KIND_INDEX) {
                sp_buf_clear(&b);
                if ((r = read_doc(lfd, d, &b, err)) < 0 || (r = wk_oci_index_parse(b.data, b.len, &nested, err)) < 0 ||
                    (r = select_manifest(nested, platform, true, &d, err)) < 0)
                        return r;
        }
        sp_buf_clear(&b);
        if ((r = read_doc(lfd, d, &b, err)) < 0 || (r = wk_oci_manifest_parse(b.data, b.len, ret, err)) < 0)
                return r;
        memcpy(ret_digest, d->digest, WK_TEMPLATE_DIGEST_MAX);
        return 0;
}

/* Extracts one layer blob through the digest, then checks digest and size. */
static int apply_layer(int lfd, wk__tpl_extract *x, const wk_oci_descriptor *d, sp_error **err)
{
        _cleanup_close_ int fd = open_blob(lfd, d, err);
        if (fd < 0)
                return fd;
        wk__tpl_reader *r = malloc(sizeof(*r));
        if (!r)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        int rc = wk__tpl_reader_init(r, fd, (uint64_t)d->size, err);
        if (rc < 0) {
                free(r);
                return rc;
        }
        struct archive *a = NULL;
        rc = wk__tpl_reader_archive(r, &a, err);
        if (rc == 0)
                rc = wk__tpl_extract_archive(x, r, a, err);
        if (a)
                archive_read_free(a);
        /* A blob that does not match its digest is reported as such, whatever
         * its bytes made the extraction do. */
        if (rc < 0 && r->read_errno == 0) {
                sp_error *verr = NULL;
                if (wk__tpl_reader_drain(r, &verr) == 0 && verify(r, d, &verr) < 0 && err) {
                        sp_error_free(*err);
                        *err = TAKE_PTR(verr);
                        rc = -(*err)->code;
                }
                sp_error_free(verr);
        } else if (rc == 0) {
                rc = wk__tpl_reader_drain(r, err);
                if (rc == 0)
                        rc = verify(r, d, err);
        }
        wk__tpl_reader_done(r);
        free(r);
        return rc;
}

static int make_meta(const wk_oci_config *c, const char *digest, wk_template_meta **ret, sp_error **err)
{
        _cleanup_template_meta_ wk_template_meta *m = NULL;
        if (wk_template_meta_new(WK_TEMPLATE_SOURCE_OCI, &m, err) < 0)
                return -SP_E_LIMIT;
        memcpy(m->digest, digest, WK_TEMPLATE_DIGEST_MAX);
        size_t n_env = 0, n_ep = 0, n_cmd = 0;
        bool has_path = false;
        for (; c->env[n_env]; n_env++)
                has_path |= strncmp(c->env[n_env], "PATH=", 5) == 0;
        while (c->entrypoint[n_ep])
                n_ep++;
        while (c->cmd[n_cmd])
                n_cmd++;
        if (n_ep + n_cmd > WK_TEMPLATE_META_MAX_ITEMS)
                return sp_error_set(err, SP_E_INVALID, "image config: Entrypoint and Cmd have more than %u words",
                                    WK_TEMPLATE_META_MAX_ITEMS);
        /* Like other runtimes, give an image without PATH the default one. */
        char **env = calloc(n_env + 2, sizeof(char *));
        char **cmd = calloc(n_ep + n_cmd + 1, sizeof(char *));
        if (!env || !cmd) {
                free(env);
                free(cmd);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        sp_strv_freep(&m->env);
        sp_strv_freep(&m->cmd);
        m->env = env;
        m->cmd = cmd;
        size_t o = 0;
        if (!has_path && !(env[o++] = strdup(WK_TEMPLATE_DEFAULT_PATH)))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n_env; i++)
                if (!(env[o++] = strdup(c->env[i])))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n_ep + n_cmd; i++)
                if (!(cmd[i] = strdup(i < n_ep ? c->entrypoint[i] : c->cmd[i - n_ep])))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (c->workdir[0]) {
                free(m->workdir);
                if (asprintf(&m->workdir, "%s%s", c->workdir[0] == '/' ? "" : "/", c->workdir) < 0) {
                        m->workdir = NULL;
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                }
        }
        if (c->user[0]) {
                free(m->user);
                if (!(m->user = strdup(c->user)))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        if (wk_template_meta_validate(m, err) < 0)
                return sp_error_wrap(err, "image config");
        *ret = TAKE_PTR(m);
        return 0;
}

static int import(int lfd, int rootfd, const wk_template_platform *platform, const wk_template_limits *limits,
                  wk_template_stats *stats, wk_template_meta **ret_meta, sp_error **err)
{
        int r = check_layout_version(lfd, err);
        if (r < 0)
                return r;
        _cleanup_(wk_oci_manifest_freep) wk_oci_manifest *mf = NULL;
        char digest[WK_TEMPLATE_DIGEST_MAX];
        if ((r = load_manifest(lfd, platform, &mf, digest, err)) < 0)
                return r;
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        _cleanup_(wk_oci_config_freep) wk_oci_config *cfg = NULL;
        if ((r = read_doc(lfd, &mf->config, &b, err)) < 0 || (r = wk_oci_config_parse(b.data, b.len, &cfg, err)) < 0)
                return r;
        if (cfg->has_diff_ids && cfg->n_diff_ids != mf->n_layers)
                return sp_error_set(err, SP_E_INVALID, "the image config lists %zu layers, the manifest %zu",
                                    cfg->n_diff_ids, mf->n_layers);
        _cleanup_template_meta_ wk_template_meta *meta = NULL;
        if ((r = make_meta(cfg, digest, &meta, err)) < 0)
                return r;

        wk__tpl_extract *x = NULL;
        if ((r = wk__tpl_extract_new(rootfd, limits, true, &x, err)) < 0)
                return r;
        for (size_t i = 0; i < mf->n_layers && r == 0; i++)
                if ((r = apply_layer(lfd, x, &mf->layers[i], err)) < 0)
                        sp_error_wrap(err, "layer %zu (%s)", i, mf->layers[i].digest);
        wk__tpl_extract_stats(x, stats);
        wk__tpl_extract_free(x);
        if (r < 0)
                return r;
        if (ret_meta)
                *ret_meta = TAKE_PTR(meta);
        return 0;
}

int wk_template_import_oci_fd(int layoutfd, const char *dest, const wk_template_platform *platform,
                              const wk_template_limits *limits, wk_template_stats *ret_stats,
                              wk_template_meta **ret_meta, sp_error **err)
{
        /* Resolved once here, so that the deadline covers every layer. */
        wk_template_limits lim = wk__tpl_limits_resolve(limits);
        _cleanup_close_ int rootfd = wk__tpl_dest_open(dest, err);
        if (rootfd < 0)
                return rootfd;
        wk_template_stats stats = {0};
        int r = import(layoutfd, rootfd, platform, &lim, &stats, ret_meta, err);
        if (r < 0)
                return sp_error_wrap(err, "import OCI image");
        if (ret_stats)
                *ret_stats = stats;
        return 0;
}

int wk_template_import_oci(const char *layout, const char *dest, const wk_template_platform *platform,
                           const wk_template_limits *limits, wk_template_stats *ret_stats, wk_template_meta **ret_meta,
                           sp_error **err)
{
        _cleanup_close_ int lfd = open(layout, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (lfd < 0)
                return sp_error_set_errno(err, sp_errc_from_errno(errno), errno, "open OCI image layout %s", layout);
        if (wk_template_import_oci_fd(lfd, dest, platform, limits, ret_stats, ret_meta, err) < 0)
                return sp_error_wrap(err, "%s", layout);
        return 0;
}
