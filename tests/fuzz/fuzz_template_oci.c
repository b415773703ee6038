/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fuzz target: one JSON document through every template parser — the OCI
 * image index, manifest and config, and template.json. Whatever parses must
 * hold the parsers' promises (well-formed digests, NULL-terminated vectors),
 * and parsed metadata must serialise and parse again.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"
#include "template/oci.h"
#include "template/template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_descriptor(const wk_oci_descriptor *d)
{
        char hex[65];
        if (!d->media_type || wk_oci_digest_parse(d->digest, hex, NULL) < 0 || d->size < 0)
                abort();
}

static void check_strv(char **v)
{
        if (!v)
                abort();
        for (size_t i = 0; v[i]; i++)
                if (i > WK_TEMPLATE_META_MAX_ITEMS)
                        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *json = (const char *)data;
        sp_error *err = NULL;

        wk_oci_index *ix = NULL;
        if (wk_oci_index_parse(json, size, &ix, &err) == 0) {
                for (size_t i = 0; i < ix->n_manifests; i++)
                        check_descriptor(&ix->manifests[i]);
                wk_oci_index_free(ix);
        } else if (!err || ix) {
                abort();
        }
        sp_error_free(err), err = NULL;

        wk_oci_manifest *m = NULL;
        if (wk_oci_manifest_parse(json, size, &m, &err) == 0) {
                check_descriptor(&m->config);
                if (wk_oci_media_type_kind(m->config.media_type) != WK_OCI_KIND_CONFIG)
                        abort();
                for (size_t i = 0; i < m->n_layers; i++) {
                        check_descriptor(&m->layers[i]);
                        if (wk_oci_media_type_kind(m->layers[i].media_type) != WK_OCI_KIND_LAYER)
                                abort();
                }
                wk_oci_manifest_free(m);
        } else if (!err || m) {
                abort();
        }
        sp_error_free(err), err = NULL;

        wk_oci_config *c = NULL;
        if (wk_oci_config_parse(json, size, &c, &err) == 0) {
                check_strv(c->env);
                check_strv(c->entrypoint);
                check_strv(c->cmd);
                if (!c->workdir || !c->user || !c->os || !c->architecture)
                        abort();
                wk_oci_config_free(c);
        } else if (!err || c) {
                abort();
        }
        sp_error_free(err), err = NULL;

        wk_template_meta *meta = NULL;
        if (wk_template_meta_parse(json, size, &meta, &err) == 0) {
                sp_buf out = SP_BUF_INIT;
                wk_template_meta *again = NULL;
                if (wk_template_meta_to_json(meta, &out, NULL) < 0 ||
                    wk_template_meta_parse(out.data, out.len, &again, NULL) < 0)
                        abort();
                if (again->source != meta->source || strcmp(again->workdir, meta->workdir) != 0 ||
                    strcmp(again->user, meta->user) != 0 || strcmp(again->digest, meta->digest) != 0)
                        abort();
                wk_template_meta_free(again);
                wk_template_meta_free(meta);
                sp_buf_free(&out);
        } else if (!err || meta) {
                abort();
        }
        sp_error_free(err);
        return 0;
}
