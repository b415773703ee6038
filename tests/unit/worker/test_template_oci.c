/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests: importing OCI image layouts built by the test — layers in
 * order with whiteouts and opaque directories, the config into metadata,
 * nested indexes and docker media types, platform choice; blobs that do not
 * match their digest or size, malicious layers and malformed documents
 * refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "space/cleanup.h"
#include "template/internal.h"
#include "template/oci.h"
#include "template/template.h"
#include "test_template_util.h"

static char *dir;
static char layout[512], dest[512], outside[512], scratch[512];

static char *at(const char *base, const char *rel)
{
        static char buf[8][1024];
        static int i;
        char *b = buf[i++ % 8];
        snprintf(b, sizeof(buf[0]), "%s/%s", base, rel);
        return b;
}

static void setup(void)
{
        dir = sp_test_tmpdir("tpl-oci");
        snprintf(layout, sizeof(layout), "%s/layout", dir);
        snprintf(dest, sizeof(dest), "%s/dest", dir);
        snprintf(outside, sizeof(outside), "%s/outside", dir);
        snprintf(scratch, sizeof(scratch), "%s/scratch.tar", dir);
        ck_assert_int_eq(mkdir(layout, 0755), 0);
        ck_assert_int_eq(mkdir(at(layout, "blobs"), 0755), 0);
        ck_assert_int_eq(mkdir(at(layout, "blobs/sha256"), 0755), 0);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        ck_assert_int_eq(mkdir(outside, 0755), 0);
        tt_write(at(outside, "secret"), "outside\n", 0644);
        tt_write(at(layout, "oci-layout"), "{\"imageLayoutVersion\":\"1.0.0\"}", 0644);
}

static void teardown(void)
{
        tt_rmrf(dir);
        free(dir);
}

/* A descriptor's JSON for a stored blob. */
typedef struct desc {
        char digest[WK_TEMPLATE_DIGEST_MAX];
        long long size;
} desc;

static desc blob(const char *data, size_t len)
{
        desc d = {.size = (long long)len};
        ck_assert_int_eq(wk__tpl_sha256(data, len, d.digest, NULL), 0);
        char path[1024];
        snprintf(path, sizeof(path), "%s/blobs/sha256/%s", layout, d.digest + 7);
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(data, 1, len, f), len);
        fclose(f);
        return d;
}

static desc blob_str(const char *s)
{
        return blob(s, strlen(s));
}

/* The scratch archive, closed, as a blob. */
static desc layer_done(struct archive *a)
{
        tt_archive_close(a);
        struct stat st;
        ck_assert_int_eq(stat(scratch, &st), 0);
        char *data = malloc((size_t)st.st_size + 1);
        FILE *f = fopen(scratch, "rb");
        ck_assert_uint_eq(fread(data, 1, (size_t)st.st_size, f), (size_t)st.st_size);
        fclose(f);
        desc d = blob(data, (size_t)st.st_size);
        free(data);
        return d;
}

static char *blob_path(const desc *d)
{
        return at(at(layout, "blobs/sha256"), d->digest + 7);
}

static desc manifest(const char *mt, const char *config_mt, desc config, const char *layer_mt, const desc *layers,
                     size_t n)
{
        sp_buf b = SP_BUF_INIT;
        sp_buf_appendf(&b, NULL,
                       "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"config\":{\"mediaType\":\"%s\",\"digest\":\"%s\","
                       "\"size\":%lld},\"layers\":[",
                       mt, config_mt, config.digest, config.size);
        for (size_t i = 0; i < n; i++)
                sp_buf_appendf(&b, NULL, "%s{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%lld}", i ? "," : "",
                               layer_mt, layers[i].digest, layers[i].size);
        sp_buf_append_str(&b, "]}", NULL);
        desc d = blob(b.data, b.len);
        sp_buf_free(&b);
        return d;
}

static void index_json(const char *body)
{
        tt_write(at(layout, "index.json"), body, 0644);
}

static int import(const wk_template_platform *p, wk_template_stats *stats, wk_template_meta **meta, sp_error **err)
{
        return wk_template_import_oci(layout, dest, p, NULL, stats, meta, err);
}

static const wk_template_platform amd64 = {.os = "linux", .architecture = "amd64"};

/* Three layers: files, then whiteouts and an opaque directory, then a
 * whiteout of a file the second layer made. */
static desc three_layers(desc *layers)
{
        struct archive *a = tt_archive_open(scratch, TT_GZIP);
        tt_dir(a, "etc", 0755);
        tt_file(a, "etc/os", "bookworm", 0644);
        tt_file(a, "etc/keep", "k", 0644);
        tt_dir(a, "dir", 0755);
        tt_file(a, "dir/a", "a", 0644);
        tt_file(a, "dir/b", "b", 0644);
        tt_dir(a, "opq", 0755);
        tt_file(a, "opq/x", "x", 0644);
        tt_dir(a, "opq/sub", 0755);
        tt_file(a, "opq/sub/y", "y", 0644);
        tt_dir(a, "gone", 0755);
        tt_file(a, "gone/file", "g", 0644);
        tt_file(a, "top", "t", 0644);
        layers[0] = layer_done(a);

        a = tt_archive_open(scratch, TT_ZSTD);
        tt_file(a, "opq/new", "new", 0644); /* before the opaque marker: it stays */
        tt_dir(a, "opq/sub2", 0755);
        tt_file(a, "opq/sub2/z", "z", 0644);
        tt_file(a, "opq/.wh..wh..opq", "", 0644);
        tt_file(a, "etc/.wh.keep", "", 0644);
        tt_file(a, ".wh.gone", "", 0644);
        tt_file(a, "dir/c", "c", 0644);
        tt_file(a, "etc/os", "trixie", 0644);
        tt_file(a, "same", "s", 0644);
        tt_file(a, ".wh.same", "", 0644); /* hides lower layers only */
        tt_file(a, "missing/.wh..wh..opq", "", 0644);
        tt_file(a, ".wh.never-existed", "", 0644);
        tt_file(a, ".wh..wh.plnk", "", 0644); /* aufs bookkeeping, skipped */
        layers[1] = layer_done(a);

        a = tt_archive_open(scratch, TT_PLAIN);
        tt_file(a, "dir/.wh.a", "", 0644);
        tt_file(a, "opq/.wh.new", "", 0644);
        layers[2] = layer_done(a);

        desc config = blob_str("{\"architecture\":\"amd64\",\"os\":\"linux\",\"created\":\"2024-01-01T00:00:00Z\","
                               "\"config\":{\"Env\":[\"PATH=/usr/bin:/bin\",\"LANG=C.UTF-8\"],"
                               "\"WorkingDir\":\"/srv\",\"User\":\"app\",\"Entrypoint\":[\"/bin/entry\"],"
                               "\"Cmd\":[\"--flag\",\"x\"],\"Labels\":{\"a\":\"b\"}},"
                               "\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:1\",\"sha256:2\",\"sha256:3\"]},"
                               "\"history\":[]}");
        return manifest(WK_OCI_MT_MANIFEST, WK_OCI_MT_CONFIG, config, WK_OCI_MT_LAYER_GZIP, layers, 3);
}

START_TEST(layers_whiteouts_and_config)
{
        desc layers[3];
        desc m = three_layers(layers);
        char idx[2048];
        snprintf(idx, sizeof(idx),
                 "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"manifests\":["
                 "{\"mediaType\":\"%s\",\"digest\":\"sha256:%064d\",\"size\":10,"
                 "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
                 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%lld,"
                 "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}",
                 WK_OCI_MT_INDEX, WK_OCI_MT_MANIFEST, 0, WK_OCI_MT_MANIFEST, m.digest, m.size);
        index_json(idx);

        wk_template_meta *meta = NULL;
        wk_template_stats stats = {0};
        sp_error *err = NULL;
        sp_test_ok(import(&amd64, &stats, &meta, &err), &err);

        tt_assert_content(at(dest, "etc/os"), "trixie");
        ck_assert_int_ne(access(at(dest, "etc/keep"), F_OK), 0);
        ck_assert_int_ne(access(at(dest, "gone"), F_OK), 0);
        ck_assert_int_ne(access(at(dest, "dir/a"), F_OK), 0);
        tt_assert_content(at(dest, "dir/b"), "b");
        tt_assert_content(at(dest, "dir/c"), "c");
        ck_assert_int_ne(access(at(dest, "opq/x"), F_OK), 0);
        ck_assert_int_ne(access(at(dest, "opq/sub"), F_OK), 0);
        ck_assert_int_ne(access(at(dest, "opq/new"), F_OK), 0); /* removed by the third layer */
        tt_assert_content(at(dest, "opq/sub2/z"), "z");
        tt_assert_content(at(dest, "same"), "s");
        tt_assert_content(at(dest, "top"), "t");
        ck_assert_int_ne(access(at(dest, "missing"), F_OK), 0);
        ck_assert_int_ne(access(at(dest, ".wh..wh.plnk"), F_OK), 0);
        ck_assert_int_eq(tt_count_entries(dest), 5); /* etc dir opq same top, and nothing else */
        ck_assert_int_ne(access(at(dest, ".wh.same"), F_OK), 0);

        ck_assert_int_eq(meta->source, WK_TEMPLATE_SOURCE_OCI);
        ck_assert_str_eq(meta->digest, m.digest);
        ck_assert_str_eq(meta->env[0], "PATH=/usr/bin:/bin");
        ck_assert_str_eq(meta->env[1], "LANG=C.UTF-8");
        ck_assert_ptr_null(meta->env[2]);
        ck_assert_str_eq(meta->workdir, "/srv");
        ck_assert_str_eq(meta->user, "app");
        ck_assert_str_eq(meta->cmd[0], "/bin/entry");
        ck_assert_str_eq(meta->cmd[1], "--flag");
        ck_assert_str_eq(meta->cmd[2], "x");
        ck_assert_ptr_null(meta->cmd[3]);
        ck_assert_uint_eq(stats.whiteouts, 7);
        ck_assert_uint_eq(stats.skipped, 1);
        wk_template_meta_free(meta);
}
END_TEST

START_TEST(nested_index_docker_types_and_defaults)
{
        struct archive *a = tt_archive_open(scratch, TT_GZIP);
        tt_file(a, "hello", "docker", 0644);
        desc layer = layer_done(a);
        desc config = blob_str("{\"config\":{\"Env\":[\"A=1\"],\"Cmd\":null,\"WorkingDir\":\"\"}}");
        desc m = manifest(WK_DOCKER_MT_MANIFEST, WK_DOCKER_MT_CONFIG, config, WK_DOCKER_MT_LAYER, &layer, 1);
        char body[2048];
        snprintf(body, sizeof(body),
                 "{\"schemaVersion\":2,\"mediaType\":\"%s\",\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\","
                 "\"size\":%lld}]}",
                 WK_DOCKER_MT_LIST, WK_DOCKER_MT_MANIFEST, m.digest, m.size);
        desc list = blob_str(body);
        snprintf(body, sizeof(body),
                 "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%lld,"
                 "\"annotations\":{\"org.opencontainers.image.ref.name\":\"latest\"}}]}",
                 WK_OCI_MT_INDEX, list.digest, list.size);
        index_json(body);

        wk_template_meta *meta = NULL;
        sp_error *err = NULL;
        sp_test_ok(import(NULL, NULL, &meta, &err), &err);
        tt_assert_content(at(dest, "hello"), "docker");
        ck_assert_str_eq(meta->digest, m.digest);
        ck_assert_str_eq(meta->env[0], WK_TEMPLATE_DEFAULT_PATH); /* added: the image has no PATH */
        ck_assert_str_eq(meta->env[1], "A=1");
        ck_assert_str_eq(meta->workdir, "/");
        ck_assert_str_eq(meta->user, "root");
        ck_assert_ptr_null(meta->cmd[0]);
        wk_template_meta_free(meta);
}
END_TEST

START_TEST(chooses_the_platform)
{
        struct archive *a = tt_archive_open(scratch, TT_PLAIN);
        tt_file(a, "arch", "amd64", 0644);
        desc l1 = layer_done(a);
        a = tt_archive_open(scratch, TT_PLAIN);
        tt_file(a, "arch", "arm64", 0644);
        desc l2 = layer_done(a);
        desc config = blob_str("{}");
        desc m1 = manifest(WK_OCI_MT_MANIFEST, WK_OCI_MT_CONFIG, config, WK_OCI_MT_LAYER, &l1, 1);
        desc m2 = manifest(WK_OCI_MT_MANIFEST, WK_OCI_MT_CONFIG, config, WK_OCI_MT_LAYER, &l2, 1);
        char body[2048];
        snprintf(body, sizeof(body),
                 "{\"schemaVersion\":2,\"manifests\":["
                 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%lld,\"platform\":{\"os\":\"linux\","
                 "\"architecture\":\"amd64\"}},"
                 "{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%lld,\"platform\":{\"os\":\"linux\","
                 "\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
                 "{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"%s\",\"size\":%lld}]}",
                 WK_OCI_MT_MANIFEST, m1.digest, m1.size, WK_OCI_MT_MANIFEST, m2.digest, m2.size, l1.digest, l1.size);
        index_json(body);

        sp_error *err = NULL;
        wk_template_platform arm = {.os = "linux", .architecture = "arm64", .variant = "v8"};
        sp_test_ok(import(&arm, NULL, NULL, &err), &err);
        tt_assert_content(at(dest, "arch"), "arm64");
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        sp_test_ok(import(&amd64, NULL, NULL, &err), &err);
        tt_assert_content(at(dest, "arch"), "amd64");

        wk_template_platform s390 = {.os = "linux", .architecture = "s390x"};
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        tt_assert_error(import(&s390, NULL, NULL, &err), err, SP_E_NOT_FOUND,
                        "none of the 2 manifests is for linux/s390x");
        wk_template_platform armv7 = {.os = "linux", .architecture = "arm64", .variant = "v7"};
        tt_assert_error(import(&armv7, NULL, NULL, &err), err, SP_E_NOT_FOUND, "linux/arm64/v7");
}
END_TEST

/* A one-layer image (plain tar) whose layer and config blobs the test may spoil. */
static void simple_image(desc *layer, desc *config)
{
        struct archive *a = tt_archive_open(scratch, TT_PLAIN);
        tt_file(a, "file", "genuine content", 0644);
        *layer = layer_done(a);
        *config = blob_str("{\"config\":{\"Env\":[\"A=1\"]}}");
        desc m = manifest(WK_OCI_MT_MANIFEST, WK_OCI_MT_CONFIG, *config, WK_OCI_MT_LAYER, layer, 1);
        char body[1024];
        snprintf(body, sizeof(body),
                 "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%lld}]}",
                 WK_OCI_MT_MANIFEST, m.digest, m.size);
        index_json(body);
}

/* Replaces the first occurrence of from with to (same length) in a file. */
static void spoil(const char *path, const char *from, const char *to)
{
        char *data = NULL;
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        data = malloc((size_t)st.st_size);
        FILE *f = fopen(path, "r+b");
        ck_assert_uint_eq(fread(data, 1, (size_t)st.st_size, f), (size_t)st.st_size);
        char *p = memmem(data, (size_t)st.st_size, from, strlen(from));
        ck_assert_ptr_nonnull(p);
        fseek(f, p - data, SEEK_SET);
        fwrite(to, 1, strlen(to), f);
        fclose(f);
        free(data);
}

START_TEST(refuses_digest_and_size_mismatches)
{
        desc layer, config;
        simple_image(&layer, &config);
        spoil(blob_path(&layer), "genuine", "forged!");
        sp_error *err = NULL;
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "does not match its digest");

        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        simple_image(&layer, &config);
        spoil(blob_path(&config), "A=1", "B=2");
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "does not match its digest");
        ck_assert_int_eq(tt_count_entries(dest), 0); /* refused before any layer */

        /* a blob longer than its descriptor says */
        simple_image(&layer, &config);
        FILE *f = fopen(blob_path(&layer), "ab");
        fputs("trailing", f);
        fclose(f);
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "its descriptor says");

        /* a missing blob */
        simple_image(&layer, &config);
        ck_assert_int_eq(unlink(blob_path(&layer)), 0);
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_NOT_FOUND, layer.digest);
}
END_TEST

static void one_layer_image(desc l1, const desc *l2)
{
        desc layers[2] = {l1, l2 ? *l2 : l1};
        desc config = blob_str("{}");
        desc m = manifest(WK_OCI_MT_MANIFEST, WK_OCI_MT_CONFIG, config, WK_OCI_MT_LAYER, layers, l2 ? 2 : 1);
        char body[1024];
        snprintf(body, sizeof(body),
                 "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"%s\",\"digest\":\"%s\",\"size\":%lld}]}",
                 WK_OCI_MT_MANIFEST, m.digest, m.size);
        index_json(body);
}

START_TEST(refuses_malicious_layers)
{
        struct archive *a = tt_archive_open(scratch, TT_PLAIN);
        tt_file(a, "../evil", "x", 0644);
        one_layer_image(layer_done(a), NULL);
        sp_error *err = NULL;
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "layer 0 (sha256:");
        ck_assert_int_ne(access(at(dir, "evil"), F_OK), 0);

        /* whiteouts and opaque markers through a symlink must not delete outside */
        a = tt_archive_open(scratch, TT_PLAIN);
        tt_symlink(a, "link", outside);
        desc l1 = layer_done(a);
        a = tt_archive_open(scratch, TT_PLAIN);
        tt_file(a, "link/.wh.secret", "", 0644);
        desc l2 = layer_done(a);
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_layer_image(l1, &l2);
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "entry 'link/.wh.secret'");
        tt_assert_content(at(outside, "secret"), "outside\n");

        a = tt_archive_open(scratch, TT_PLAIN);
        tt_file(a, "link/.wh..wh..opq", "", 0644);
        l2 = layer_done(a);
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_layer_image(l1, &l2);
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "entry 'link/.wh..wh..opq'");
        tt_assert_content(at(outside, "secret"), "outside\n");

        a = tt_archive_open(scratch, TT_PLAIN);
        tt_file(a, "dir/.wh.", "", 0644);
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_layer_image(layer_done(a), NULL);
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "whiteout without a name");

        a = tt_archive_open(scratch, TT_PLAIN);
        tt_add(a, "dev/kmsg", AE_IFCHR, 0600, NULL, NULL);
        tt_rmrf(dest);
        ck_assert_int_eq(mkdir(dest, 0755), 0);
        one_layer_image(layer_done(a), NULL);
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_UNSUPPORTED, "entry 'dev/kmsg'");
}
END_TEST

START_TEST(refuses_bad_layouts)
{
        sp_error *err = NULL;
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "index.json");
        index_json("{\"schemaVersion\":2,\"manifests\":[]}");
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "no image manifest");
        tt_write(at(layout, "oci-layout"), "{\"imageLayoutVersion\":\"2.0.0\"}", 0644);
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_UNSUPPORTED, "1.0.0");
        ck_assert_int_eq(unlink(at(layout, "oci-layout")), 0);
        tt_assert_error(import(NULL, NULL, NULL, &err), err, SP_E_INVALID, "not an OCI image layout: oci-layout");
        tt_assert_error(wk_template_import_oci(at(dir, "nope"), dest, NULL, NULL, NULL, NULL, &err), err,
                        SP_E_NOT_FOUND, "nope");
}
END_TEST

START_TEST(parsers_refuse_malformed_documents)
{
#define D64 "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        static const struct {
                int which; /* 0 index, 1 manifest, 2 config */
                const char *json;
                const char *needle;
        } cases[] = {
                {0, "{\"schemaVersion\":1,\"manifests\":[]}", "'schemaVersion'"},
                {0, "{\"schemaVersion\":2}", "'manifests'"},
                {0, "{\"schemaVersion\":2,\"mediaType\":\"" WK_OCI_MT_MANIFEST "\",\"manifests\":[]}", "'mediaType'"},
                {0, "{\"schemaVersion\":2,\"manifests\":[1]}", "manifests[0] must be an object"},
                {0, "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"x\",\"digest\":\"sha256:XYZ\",\"size\":1}]}",
                 "field 'digest'"},
                {0, "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"x\",\"digest\":\"sha512:abc\",\"size\":1}]}",
                 "'sha512' is not supported"},
                {0, "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"x\",\"digest\":\"" D64 "\",\"size\":-1}]}",
                 "'size'"},
                {0,
                 "{\"schemaVersion\":2,\"manifests\":[{\"mediaType\":\"x\",\"digest\":\"" D64 "\",\"size\":1,"
                 "\"platform\":{\"os\":\"linux\"}}]}",
                 "'architecture'"},
                {1, "{\"schemaVersion\":2,\"layers\":[]}", "'config'"},
                {1,
                 "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"application/"
                 "vnd.oci.empty.v1+json\",\"digest\":\"" D64 "\",\"size\":2},\"layers\":[]}",
                 "not an image config"},
                {1,
                 "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"" WK_OCI_MT_CONFIG "\",\"digest\":\"" D64
                 "\",\"size\":2},\"layers\":[{\"mediaType\":\"text/plain\",\"digest\":\"" D64 "\",\"size\":2}]}",
                 "layers[0]: media type is not a layer type"},
                {2, "[]", "must be a JSON object"},
                {2, "{\"config\":{\"Env\":[\"NOEQUALS\"]}}", "'config.Env[0]' must be KEY=VALUE"},
                {2, "{\"config\":{\"Cmd\":\"sh\"}}", "'Cmd'"},
                {2, "{\"config\":{\"User\":7}}", "'User'"},
                {2, "{\"rootfs\":{\"diff_ids\":{}}}", "'diff_ids'"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                sp_error *err = NULL;
                int r;
                size_t len = strlen(cases[i].json);
                if (cases[i].which == 0) {
                        wk_oci_index *ix = NULL;
                        r = wk_oci_index_parse(cases[i].json, len, &ix, &err);
                        ck_assert_ptr_null(ix);
                } else if (cases[i].which == 1) {
                        wk_oci_manifest *m = NULL;
                        r = wk_oci_manifest_parse(cases[i].json, len, &m, &err);
                        ck_assert_ptr_null(m);
                } else {
                        wk_oci_config *c = NULL;
                        r = wk_oci_config_parse(cases[i].json, len, &c, &err);
                        ck_assert_ptr_null(c);
                }
                ck_assert_msg(r < 0, "case %zu parsed", i);
                ck_assert_msg(err && strstr(err->message, cases[i].needle), "case %zu: '%s' lacks '%s'", i,
                              err ? err->message : "(none)", cases[i].needle);
                sp_error_free(err);
        }
        ck_assert_int_eq(wk_oci_media_type_kind(WK_DOCKER_MT_LAYER), WK_OCI_KIND_LAYER);
        ck_assert_int_eq(wk_oci_media_type_kind(WK_DOCKER_MT_LIST), WK_OCI_KIND_INDEX);
        ck_assert_int_eq(wk_oci_media_type_kind("application/json"), WK_OCI_KIND_OTHER);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("template_oci");
        TCase *tc = tcase_create("oci");
        tcase_add_checked_fixture(tc, setup, teardown);
        tcase_add_test(tc, layers_whiteouts_and_config);
        tcase_add_test(tc, nested_index_docker_types_and_defaults);
        tcase_add_test(tc, chooses_the_platform);
        tcase_add_test(tc, refuses_digest_and_size_mismatches);
        tcase_add_test(tc, refuses_malicious_layers);
        tcase_add_test(tc, refuses_bad_layouts);
        tcase_add_test(tc, parsers_refuse_malformed_documents);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
