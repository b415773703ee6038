/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Parsers of the OCI image layout's JSON documents: the index (index.json or
 * a nested image index), the image manifest and the image config. Docker v2
 * media types (manifest list, manifest v2, container config, rootfs diff) are
 * accepted alongside the OCI ones.
 *
 * The input is untrusted: sizes, counts and string lengths are bounded, the
 * digests must be well-formed sha256 digests, and errors are SP_E_INVALID
 * naming the field. Parsed values own their strings; free them with the
 * matching _free(). No shared state: thread-safe.
 */
#ifndef WK_TEMPLATE_OCI_H
#define WK_TEMPLATE_OCI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "space/cleanup.h"
#include "space/error.h"
#include "template/template.h"

#define WK_OCI_DOC_MAX_BYTES (4u << 20) /* index, manifest, config */
#define WK_OCI_MAX_MANIFESTS 1024
#define WK_OCI_MAX_LAYERS 512
#define WK_OCI_MAX_STRING 4096
#define WK_OCI_MAX_BLOB_SIZE (INT64_C(1) << 46)

#define WK_OCI_MT_INDEX "application/vnd.oci.image.index.v1+json"
#define WK_OCI_MT_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define WK_OCI_MT_CONFIG "application/vnd.oci.image.config.v1+json"
#define WK_OCI_MT_LAYER "application/vnd.oci.image.layer.v1.tar"
#define WK_OCI_MT_LAYER_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"
#define WK_OCI_MT_LAYER_ZSTD "application/vnd.oci.image.layer.v1.tar+zstd"
#define WK_DOCKER_MT_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define WK_DOCKER_MT_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define WK_DOCKER_MT_CONFIG "application/vnd.docker.container.image.v1+json"
#define WK_DOCKER_MT_LAYER "application/vnd.docker.image.rootfs.diff.tar.gzip"

typedef enum wk_oci_kind {
        WK_OCI_KIND_OTHER = 0,
        WK_OCI_KIND_INDEX,
        WK_OCI_KIND_MANIFEST,
        WK_OCI_KIND_CONFIG,
        WK_OCI_KIND_LAYER,
} wk_oci_kind;

/* What a media type names (OCI or docker v2); OTHER for anything else. */
wk_oci_kind wk_oci_media_type_kind(const char *media_type);

/* A content descriptor. */
typedef struct wk_oci_descriptor {
        char *media_type; /* never NULL */
        char digest[WK_TEMPLATE_DIGEST_MAX]; /* "sha256:<64 lower-case hex>" */
        int64_t size; /* 0 ..= WK_OCI_MAX_BLOB_SIZE */
        char *os, *architecture, *variant; /* platform; NULL when absent */
} wk_oci_descriptor;

typedef struct wk_oci_index {
        wk_oci_descriptor *manifests;
        size_t n_manifests;
} wk_oci_index;

typedef struct wk_oci_manifest {
        wk_oci_descriptor config;
        wk_oci_descriptor *layers;
        size_t n_layers;
} wk_oci_manifest;

/* The parts of an image config a template keeps. Vectors are NULL-terminated
 * and never NULL; strings are "" when absent. */
typedef struct wk_oci_config {
        char *os, *architecture;
        char **env, **entrypoint, **cmd;
        char *workdir, *user;
        size_t n_diff_ids; /* rootfs.diff_ids, when present */
        bool has_diff_ids;
} wk_oci_config;

/* Checks "sha256:<64 lower-case hex>" and copies the hex part into hex. */
int wk_oci_digest_parse(const char *digest, char hex[65], sp_error **err);

/* An image index (or docker manifest list): schemaVersion 2, manifests[]. */
int wk_oci_index_parse(const char *json, size_t len, wk_oci_index **ret, sp_error **err);
wk_oci_index *wk_oci_index_free(wk_oci_index *ix);
SP_DEFINE_CLEANUP(wk_oci_index *, wk_oci_index_free)

/* An image manifest: schemaVersion 2, a config descriptor of a config media
 * type, layers[] of layer media types. */
int wk_oci_manifest_parse(const char *json, size_t len, wk_oci_manifest **ret, sp_error **err);
wk_oci_manifest *wk_oci_manifest_free(wk_oci_manifest *m);
SP_DEFINE_CLEANUP(wk_oci_manifest *, wk_oci_manifest_free)

/* An image config: config.{Env, WorkingDir, User, Entrypoint, Cmd}, rootfs. */
int wk_oci_config_parse(const char *json, size_t len, wk_oci_config **ret, sp_error **err);
wk_oci_config *wk_oci_config_free(wk_oci_config *c);
SP_DEFINE_CLEANUP(wk_oci_config *, wk_oci_config_free)

#endif
