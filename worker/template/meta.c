/* SPDX-License-Identifier: Apache-2.0 */
/* Template metadata: the value, its validation and its JSON form (template.json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "template/template.h"

#define META_VERSION 1

static const char *const source_names[] = {
        [WK_TEMPLATE_SOURCE_DIR] = "dir",   [WK_TEMPLATE_SOURCE_TAR] = "tar",
        [WK_TEMPLATE_SOURCE_OCI] = "oci",   [WK_TEMPLATE_SOURCE_DEBOOTSTRAP] = "debootstrap",
        [WK_TEMPLATE_SOURCE_BASE] = "base",
};

const char *wk_template_source_name(wk_template_source s)
{
        if ((size_t)s >= SP_ARRAY_SIZE(source_names))
                return NULL;
        return source_names[s];
}

int wk_template_source_parse(const char *name, wk_template_source *ret)
{
        for (size_t i = 0; i < SP_ARRAY_SIZE(source_names); i++)
                if (source_names[i] && strcmp(source_names[i], name) == 0) {
                        *ret = (wk_template_source)i;
                        return 0;
                }
        return -1;
}

static char **strv_new1(const char *s)
{
        char **v = calloc(2, sizeof(char *));
        if (!v)
                return NULL;
        if (s && !(v[0] = strdup(s))) {
                free(v);
                return NULL;
        }
        return v;
}

int wk_template_meta_new(wk_template_source source, wk_template_meta **ret, sp_error **err)
{
        if (!wk_template_source_name(source))
                return sp_error_set(err, SP_E_INVALID, "unknown template source %d", (int)source);
        wk_template_meta *m = calloc(1, sizeof(*m));
        if (!m)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        m->source = source;
        m->env = strv_new1(WK_TEMPLATE_DEFAULT_PATH);
        m->cmd = strv_new1(NULL);
        m->workdir = strdup("/");
        m->user = strdup("root");
        if (!m->env || !m->cmd || !m->workdir || !m->user) {
                wk_template_meta_free(m);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        *ret = m;
        return 0;
}

wk_template_meta *wk_template_meta_free(wk_template_meta *m)
{
        if (!m)
                return NULL;
        sp_strv_freep(&m->env);
        sp_strv_freep(&m->cmd);
        free(m->workdir);
        free(m->user);
        free(m);
        return NULL;
}

static bool has_ctl(const char *s)
{
        for (; *s; s++)
                if ((unsigned char)*s < 0x20 || *s == 0x7f)
                        return true;
        return false;
}

static int check_strv(char **v, const char *field, bool env, sp_error **err)
{
        if (!v)
                return sp_error_set(err, SP_E_INVALID, "field '%s' is missing", field);
        size_t n = 0;
        for (; v[n]; n++) {
                if (n >= WK_TEMPLATE_META_MAX_ITEMS)
                        return sp_error_set(err, SP_E_INVALID, "field '%s' has more than %u items", field,
                                            WK_TEMPLATE_META_MAX_ITEMS);
                if (strlen(v[n]) > WK_TEMPLATE_META_MAX_STRING)
                        return sp_error_set(err, SP_E_INVALID, "field '%s[%zu]' is longer than %u bytes", field, n,
                                            WK_TEMPLATE_META_MAX_STRING);
                if (env) {
                        const char *eq = strchr(v[n], '=');
                        if (!eq || eq == v[n])
                                return sp_error_set(err, SP_E_INVALID, "field '%s[%zu]' must be KEY=VALUE", field, n);
                }
        }
        return 0;
}

/* "sha256:" and 64 lower-case hex digits, or "". */
static bool digest_ok(const char *d)
{
        if (!*d)
                return true;
        if (strncmp(d, "sha256:", 7) != 0 || strlen(d) != 7 + 64)
                return false;
        for (const char *p = d + 7; *p; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                        return false;
        return true;
}

int wk_template_meta_validate(const wk_template_meta *m, sp_error **err)
{
        if (!wk_template_source_name(m->source))
                return sp_error_set(err, SP_E_INVALID, "field 'source' is not a known source");
        if (check_strv(m->env, "env", true, err) < 0 || check_strv(m->cmd, "cmd", false, err) < 0)
                return -SP_E_INVALID;
        if (!m->workdir || m->workdir[0] != '/' || strlen(m->workdir) > WK_TEMPLATE_META_MAX_PATH ||
            has_ctl(m->workdir))
                return sp_error_set(err, SP_E_INVALID, "field 'workdir' must be an absolute path of at most %u bytes",
                                    WK_TEMPLATE_META_MAX_PATH);
        if (!m->user || !m->user[0] || strlen(m->user) > WK_TEMPLATE_META_MAX_USER || has_ctl(m->user))
                return sp_error_set(err, SP_E_INVALID, "field 'user' must be a non-empty name of at most %u bytes",
                                    WK_TEMPLATE_META_MAX_USER);
        if (memchr(m->digest, '\0', sizeof(m->digest)) == NULL || !digest_ok(m->digest))
                return sp_error_set(err, SP_E_INVALID, "field 'digest' must be \"sha256:<64 hex digits>\"");
        return 0;
}

static json_object *strv_json(char **v)
{
        json_object *a = json_object_new_array();
        for (size_t i = 0; a && v[i]; i++)
                json_object_array_add(a, json_object_new_string(v[i]));
        return a;
}

int wk_template_meta_to_json(const wk_template_meta *m, sp_buf *out, sp_error **err)
{
        if (wk_template_meta_validate(m, err) < 0)
                return sp_error_wrap(err, "template metadata");
        _cleanup_json_ json_object *o = json_object_new_object();
        if (!o)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        json_object_object_add(o, "version", json_object_new_int(META_VERSION));
        json_object_object_add(o, "source", json_object_new_string(wk_template_source_name(m->source)));
        if (m->digest[0])
                json_object_object_add(o, "digest", json_object_new_string(m->digest));
        json_object_object_add(o, "env", strv_json(m->env));
        json_object_object_add(o, "workdir", json_object_new_string(m->workdir));
        json_object_object_add(o, "user", json_object_new_string(m->user));
        json_object_object_add(o, "cmd", strv_json(m->cmd));
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        if (!s)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return sp_buf_append_str(out, s, err);
}

int wk_template_meta_parse(const char *json, size_t len, wk_template_meta **ret, sp_error **err)
{
        static const char *const fields[] = {"version", "source", "digest", "env", "workdir", "user", "cmd", NULL};
        if (len > WK_TEMPLATE_META_MAX_BYTES)
                return sp_error_set(err, SP_E_TOO_LARGE, "template metadata is larger than %u bytes",
                                    WK_TEMPLATE_META_MAX_BYTES);
        _cleanup_json_ json_object *o = NULL;
        if (sp_json_parse(json, len, &o, err) < 0)
                return sp_error_wrap(err, "template metadata");
        if (!json_object_is_type(o, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "template metadata must be a JSON object");
        if (sp_json_check_fields(o, fields, err) < 0)
                return sp_error_wrap(err, "template metadata");

        int64_t version = 0;
        const char *source = NULL, *digest = NULL, *workdir = NULL, *user = NULL;
        _cleanup_strv_free_ char **env = NULL, **cmd = NULL;
        if (sp_json_get_int(o, "version", true, META_VERSION, META_VERSION, &version, err) < 0 ||
            sp_json_get_string(o, "source", true, 32, &source, err) < 0 ||
            sp_json_get_string(o, "digest", false, WK_TEMPLATE_DIGEST_MAX - 1, &digest, err) < 0 ||
            sp_json_get_strv(o, "env", true, WK_TEMPLATE_META_MAX_ITEMS, WK_TEMPLATE_META_MAX_STRING, &env, err) < 0 ||
            sp_json_get_string(o, "workdir", true, WK_TEMPLATE_META_MAX_PATH, &workdir, err) < 0 ||
            sp_json_get_string(o, "user", true, WK_TEMPLATE_META_MAX_USER, &user, err) < 0 ||
            sp_json_get_strv(o, "cmd", true, WK_TEMPLATE_META_MAX_ITEMS, WK_TEMPLATE_META_MAX_STRING, &cmd, err) < 0)
                return sp_error_wrap(err, "template metadata");

        wk_template_source src;
        if (wk_template_source_parse(source, &src) < 0)
                return sp_error_set(err, SP_E_INVALID, "template metadata: field 'source' is not a known source");
        _cleanup_template_meta_ wk_template_meta *m = calloc(1, sizeof(*m));
        if (!m)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        m->source = src;
        m->env = TAKE_PTR(env);
        m->cmd = TAKE_PTR(cmd);
        m->workdir = strdup(workdir);
        m->user = strdup(user);
        if (!m->workdir || !m->user)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (digest)
                snprintf(m->digest, sizeof(m->digest), "%s", digest);
        if (wk_template_meta_validate(m, err) < 0)
                return sp_error_wrap(err, "template metadata");
        *ret = TAKE_PTR(m);
        return 0;
}

int wk_template_meta_write(const char *path, const wk_template_meta *m, sp_error **err)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        int r = wk_template_meta_to_json(m, &b, err);
        if (r < 0 || (r = sp_buf_append_str(&b, "\n", err)) < 0)
                return r;
        if (sp_file_write_atomic(path, b.data, b.len, 0644, err) < 0)
                return sp_error_wrap(err, "write template metadata");
        return 0;
}

int wk_template_meta_read(const char *path, wk_template_meta **ret, sp_error **err)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(path, WK_TEMPLATE_META_MAX_BYTES, &b, err) < 0)
                return sp_error_wrap(err, "read template metadata");
        return wk_template_meta_parse(b.data ? b.data : "", b.len, ret, err);
}
