/* SPDX-License-Identifier: Apache-2.0 */
/* Parsers of OCI (and docker v2) image index, manifest and config documents. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/json.h"
#include "template/oci.h"

static const struct {
        const char *media_type;
        wk_oci_kind kind;
} media_types[] = {
        {WK_OCI_MT_INDEX, WK_OCI_KIND_INDEX},
        {WK_DOCKER_MT_LIST, WK_OCI_KIND_INDEX},
        {WK_OCI_MT_MANIFEST, WK_OCI_KIND_MANIFEST},
        {WK_DOCKER_MT_MANIFEST, WK_OCI_KIND_MANIFEST},
        {WK_OCI_MT_CONFIG, WK_OCI_KIND_CONFIG},
        {WK_DOCKER_MT_CONFIG, WK_OCI_KIND_CONFIG},
        {WK_OCI_MT_LAYER, WK_OCI_KIND_LAYER},
        {WK_OCI_MT_LAYER_GZIP, WK_OCI_KIND_LAYER},
        {WK_OCI_MT_LAYER_ZSTD, WK_OCI_KIND_LAYER},
        {"application/vnd.oci.image.layer.nondistributable.v1.tar", WK_OCI_KIND_LAYER},
        {"application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", WK_OCI_KIND_LAYER},
        {"application/vnd.oci.image.layer.nondistributable.v1.tar+zstd", WK_OCI_KIND_LAYER},
        {WK_DOCKER_MT_LAYER, WK_OCI_KIND_LAYER},
        {"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", WK_OCI_KIND_LAYER},
};

wk_oci_kind wk_oci_media_type_kind(const char *media_type)
{
        for (size_t i = 0; media_type && i < SP_ARRAY_SIZE(media_types); i++)
                if (strcmp(media_types[i].media_type, media_type) == 0)
                        return media_types[i].kind;
        return WK_OCI_KIND_OTHER;
}

int wk_oci_digest_parse(const char *digest, char hex[65], sp_error **err)
{
        if (strncmp(digest, "sha256:", 7) != 0) {
                const char *colon = strchr(digest, ':');
                if (colon && colon > digest && colon - digest < 32)
                        return sp_error_set(err, SP_E_UNSUPPORTED, "digest algorithm '%.*s' is not supported",
                                            (int)(colon - digest), digest);
                return sp_error_set(err, SP_E_INVALID, "digest must be \"sha256:<64 hex digits>\"");
        }
        const char *h = digest + 7;
        size_t n = strlen(h);
        for (size_t i = 0; i < n; i++)
                if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
                        return sp_error_set(err, SP_E_INVALID, "digest must be \"sha256:<64 hex digits>\"");
        if (n != 64)
                return sp_error_set(err, SP_E_INVALID, "digest must be \"sha256:<64 hex digits>\"");
        memcpy(hex, h, 65);
        return 0;
}

static void descriptor_clear(wk_oci_descriptor *d)
{
        free(d->media_type);
        free(d->os);
        free(d->architecture);
        free(d->variant);
        *d = (wk_oci_descriptor){0};
}

static int dup_opt(const char *s, char **ret, sp_error **err)
{
        if (!s)
                return 0;
        *ret = strdup(s);
        return *ret ? 0 : sp_error_set(err, SP_E_LIMIT, "out of memory");
}

static int descriptor_parse(json_object *o, const char *what, wk_oci_descriptor *d, sp_error **err)
{
        if (!o || !json_object_is_type(o, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "%s must be an object", what);
        const char *mt = NULL, *digest = NULL, *os = NULL, *arch = NULL, *variant = NULL;
        int64_t size = 0;
        json_object *platform = NULL;
        char hex[65];
        if (sp_json_get_string(o, "mediaType", true, WK_OCI_MAX_STRING, &mt, err) < 0 ||
            sp_json_get_string(o, "digest", true, WK_TEMPLATE_DIGEST_MAX - 1, &digest, err) < 0 ||
            sp_json_get_int(o, "size", true, 0, WK_OCI_MAX_BLOB_SIZE, &size, err) < 0 ||
            sp_json_get_object(o, "platform", false, &platform, err) < 0)
                return sp_error_wrap(err, "%s", what);
        if (wk_oci_digest_parse(digest, hex, err) < 0)
                return sp_error_wrap(err, "%s: field 'digest'", what);
        if (platform && (sp_json_get_string(platform, "os", true, WK_OCI_MAX_STRING, &os, err) < 0 ||
                         sp_json_get_string(platform, "architecture", true, WK_OCI_MAX_STRING, &arch, err) < 0 ||
                         sp_json_get_string(platform, "variant", false, WK_OCI_MAX_STRING, &variant, err) < 0))
                return sp_error_wrap(err, "%s: field 'platform'", what);
        *d = (wk_oci_descriptor){.size = size};
        snprintf(d->digest, sizeof(d->digest), "%s", digest);
        if (dup_opt(mt, &d->media_type, err) < 0 || dup_opt(os, &d->os, err) < 0 ||
            dup_opt(arch, &d->architecture, err) < 0 || dup_opt(variant, &d->variant, err) < 0) {
                descriptor_clear(d);
                return -SP_E_LIMIT;
        }
        return 0;
}

/* Parses json as an object with schemaVersion 2 and, if present, a
 * mediaType of the wanted kind. */
static int doc_parse(const char *json, size_t len, const char *what, wk_oci_kind kind, json_object **ret,
                     sp_error **err)
{
        if (len > WK_OCI_DOC_MAX_BYTES)
                return sp_error_set(err, SP_E_TOO_LARGE, "%s is larger than %u bytes", what, WK_OCI_DOC_MAX_BYTES);
        _cleanup_json_ json_object *o = NULL;
        if (sp_json_parse(json, len, &o, err) < 0)
                return sp_error_wrap(err, "%s", what);
        if (!json_object_is_type(o, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "%s must be a JSON object", what);
        if (kind != WK_OCI_KIND_CONFIG) {
                int64_t version = 0;
                const char *mt = NULL;
                if (sp_json_get_int(o, "schemaVersion", true, 2, 2, &version, err) < 0 ||
                    sp_json_get_string(o, "mediaType", false, WK_OCI_MAX_STRING, &mt, err) < 0)
                        return sp_error_wrap(err, "%s", what);
                if (mt && wk_oci_media_type_kind(mt) != kind)
                        return sp_error_set(err, SP_E_INVALID, "%s: field 'mediaType' has an unexpected value", what);
        }
        *ret = TAKE_PTR(o);
        return 0;
}

wk_oci_index *wk_oci_index_free(wk_oci_index *ix)
{
        if (!ix)
                return NULL;
        for (size_t i = 0; i < ix->n_manifests; i++)
                descriptor_clear(&ix->manifests[i]);
        free(ix->manifests);
        free(ix);
        return NULL;
}

int wk_oci_index_parse(const char *json, size_t len, wk_oci_index **ret, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        json_object *arr = NULL;
        int r = doc_parse(json, len, "image index", WK_OCI_KIND_INDEX, &o, err);
        if (r < 0)
                return r;
        if (sp_json_get_array(o, "manifests", true, WK_OCI_MAX_MANIFESTS, &arr, err) < 0)
                return sp_error_wrap(err, "image index");
        _cleanup_(wk_oci_index_freep) wk_oci_index *ix = calloc(1, sizeof(*ix));
        size_t n = json_object_array_length(arr);
        if (!ix || !(ix->manifests = calloc(n ? n : 1, sizeof(wk_oci_descriptor))))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n; i++) {
                char what[64];
                snprintf(what, sizeof(what), "image index: manifests[%zu]", i);
                if (descriptor_parse(json_object_array_get_idx(arr, i), what, &ix->manifests[i], err) < 0)
                        return -SP_E_INVALID;
                ix->n_manifests++;
        }
        *ret = TAKE_PTR(ix);
        return 0;
}

wk_oci_manifest *wk_oci_manifest_free(wk_oci_manifest *m)
{
        if (!m)
                return NULL;
        descriptor_clear(&m->config);
        for (size_t i = 0; i < m->n_layers; i++)
                descriptor_clear(&m->layers[i]);
        free(m->layers);
        free(m);
        return NULL;
}

int wk_oci_manifest_parse(const char *json, size_t len, wk_oci_manifest **ret, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        json_object *config = NULL, *arr = NULL;
        int r = doc_parse(json, len, "image manifest", WK_OCI_KIND_MANIFEST, &o, err);
        if (r < 0)
                return r;
        if (sp_json_get_object(o, "config", true, &config, err) < 0 ||
            sp_json_get_array(o, "layers", true, WK_OCI_MAX_LAYERS, &arr, err) < 0)
                return sp_error_wrap(err, "image manifest");
        _cleanup_(wk_oci_manifest_freep) wk_oci_manifest *m = calloc(1, sizeof(*m));
        size_t n = json_object_array_length(arr);
        if (!m || !(m->layers = calloc(n ? n : 1, sizeof(wk_oci_descriptor))))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (descriptor_parse(config, "image manifest: config", &m->config, err) < 0)
                return -SP_E_INVALID;
        if (wk_oci_media_type_kind(m->config.media_type) != WK_OCI_KIND_CONFIG)
                return sp_error_set(err, SP_E_UNSUPPORTED, "image manifest: config media type is not an image config");
        for (size_t i = 0; i < n; i++) {
                char what[64];
                snprintf(what, sizeof(what), "image manifest: layers[%zu]", i);
                if (descriptor_parse(json_object_array_get_idx(arr, i), what, &m->layers[i], err) < 0)
                        return -SP_E_INVALID;
                m->n_layers++;
                if (wk_oci_media_type_kind(m->layers[i].media_type) != WK_OCI_KIND_LAYER)
                        return sp_error_set(err, SP_E_UNSUPPORTED, "%s: media type is not a layer type", what);
        }
        *ret = TAKE_PTR(m);
        return 0;
}

wk_oci_config *wk_oci_config_free(wk_oci_config *c)
{
        if (!c)
                return NULL;
        free(c->os);
        free(c->architecture);
        sp_strv_freep(&c->env);
        sp_strv_freep(&c->entrypoint);
        sp_strv_freep(&c->cmd);
        free(c->workdir);
        free(c->user);
        free(c);
        return NULL;
}

static int strv_or_empty(char ***v, sp_error **err)
{
        if (!*v && !(*v = calloc(1, sizeof(char *))))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 0;
}

static int str_or_empty(const char *s, char **ret, sp_error **err)
{
        *ret = strdup(s ? s : "");
        return *ret ? 0 : sp_error_set(err, SP_E_LIMIT, "out of memory");
}

int wk_oci_config_parse(const char *json, size_t len, wk_oci_config **ret, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        int r = doc_parse(json, len, "image config", WK_OCI_KIND_CONFIG, &o, err);
        if (r < 0)
                return r;
        const char *os = NULL, *arch = NULL, *workdir = NULL, *user = NULL;
        json_object *cfg = NULL, *rootfs = NULL, *diff_ids = NULL;
        _cleanup_(wk_oci_config_freep) wk_oci_config *c = calloc(1, sizeof(*c));
        if (!c)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (sp_json_get_string(o, "os", false, WK_OCI_MAX_STRING, &os, err) < 0 ||
            sp_json_get_string(o, "architecture", false, WK_OCI_MAX_STRING, &arch, err) < 0 ||
            sp_json_get_object(o, "config", false, &cfg, err) < 0 ||
            sp_json_get_object(o, "rootfs", false, &rootfs, err) < 0)
                return sp_error_wrap(err, "image config");
        if (cfg && (sp_json_get_strv(cfg, "Env", false, WK_TEMPLATE_META_MAX_ITEMS, WK_TEMPLATE_META_MAX_STRING,
                                     &c->env, err) < 0 ||
                    sp_json_get_strv(cfg, "Entrypoint", false, WK_TEMPLATE_META_MAX_ITEMS, WK_TEMPLATE_META_MAX_STRING,
                                     &c->entrypoint, err) < 0 ||
                    sp_json_get_strv(cfg, "Cmd", false, WK_TEMPLATE_META_MAX_ITEMS, WK_TEMPLATE_META_MAX_STRING,
                                     &c->cmd, err) < 0 ||
                    sp_json_get_string(cfg, "WorkingDir", false, WK_TEMPLATE_META_MAX_PATH, &workdir, err) < 0 ||
                    sp_json_get_string(cfg, "User", false, WK_TEMPLATE_META_MAX_USER, &user, err) < 0))
                return sp_error_wrap(err, "image config: field 'config'");
        if (rootfs) {
                if (sp_json_get_array(rootfs, "diff_ids", false, WK_OCI_MAX_LAYERS, &diff_ids, err) < 0)
                        return sp_error_wrap(err, "image config: field 'rootfs'");
                c->has_diff_ids = diff_ids != NULL;
                c->n_diff_ids = diff_ids ? json_object_array_length(diff_ids) : 0;
        }
        for (size_t i = 0; c->env && c->env[i]; i++) {
                const char *eq = strchr(c->env[i], '=');
                if (!eq || eq == c->env[i])
                        return sp_error_set(err, SP_E_INVALID,
                                            "image config: field 'config.Env[%zu]' must be KEY=VALUE", i);
        }
        if (strv_or_empty(&c->env, err) < 0 || strv_or_empty(&c->entrypoint, err) < 0 ||
            strv_or_empty(&c->cmd, err) < 0 || str_or_empty(os, &c->os, err) < 0 ||
            str_or_empty(arch, &c->architecture, err) < 0 || str_or_empty(workdir, &c->workdir, err) < 0 ||
            str_or_empty(user, &c->user, err) < 0)
                return -SP_E_LIMIT;
        *ret = TAKE_PTR(c);
        return 0;
}
