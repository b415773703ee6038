/* SPDX-License-Identifier: Apache-2.0 */
/* spacectl profiles: the configuration file and the resolution of settings (see config.h). */
#include "config.h"

#include <errno.h>
#include <libgen.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"

static const char *const field_names[CTL_F__MAX] = {"endpoint", "api_key", "ca_file", "dataplane_url"};
static const char *const env_names[CTL_F__MAX] = {"SPACE_ENDPOINT", "SPACE_API_KEY", "SPACE_CA_FILE",
                                                  "SPACE_DATAPLANE_URL"};

const char *ctl_field_name(ctl_field f)
{
        return f < CTL_F__MAX ? field_names[f] : "?";
}

int ctl_field_parse(const char *s)
{
        for (int i = 0; i < CTL_F__MAX; i++)
                if (strcmp(s, field_names[i]) == 0)
                        return i;
        return -1;
}

const char *ctl_source_name(ctl_source s)
{
        static const char *const names[] = {"unset", "default", "profile", "env", "flag"};
        return s <= CTL_SRC_FLAG ? names[s] : "?";
}

static const char *env_or_null(const char *name)
{
        const char *v = getenv(name);
        return v && *v ? v : NULL;
}

void ctl_settings_from_env(ctl_settings *ret)
{
        ret->profile = env_or_null("SPACE_PROFILE");
        for (int i = 0; i < CTL_F__MAX; i++)
                ret->v[i] = env_or_null(env_names[i]);
}

bool ctl_profile_name_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > CTL_MAX_PROFILE_NAME)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                      c == '_' || c == '-'))
                        return false;
        }
        return true;
}

static bool value_ok(const char *v)
{
        size_t n = strlen(v);
        if (n == 0 || n > CTL_MAX_VALUE)
                return false;
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
                        return false;
        return true;
}

char *ctl_config_default_path(sp_error **err)
{
        const char *v = env_or_null("SPACE_CONFIG");
        char *p = NULL;
        if (v) {
                p = strdup(v);
        } else if ((v = env_or_null("XDG_CONFIG_HOME"))) {
                if (asprintf(&p, "%s/space/config.json", v) < 0)
                        p = NULL;
        } else {
                const char *home = env_or_null("HOME");
                struct passwd *pw = home ? NULL : getpwuid(getuid());
                if (!home && pw && pw->pw_dir && *pw->pw_dir)
                        home = pw->pw_dir;
                if (!home) {
                        sp_error_set(err, SP_E_INVALID, "no home directory: set SPACE_CONFIG");
                        return NULL;
                }
                if (asprintf(&p, "%s/.config/space/config.json", home) < 0)
                        p = NULL;
        }
        if (!p)
                sp_error_set(err, SP_E_LIMIT, "out of memory");
        return p;
}

/* ---- validation ---- */

static int check_profile(const char *path, const char *name, json_object *prof, sp_error **err)
{
        if (!ctl_profile_name_valid(name))
                return sp_error_set(err, SP_E_INVALID, "%s: profile name '%.64s' must be 1-%d of [A-Za-z0-9._-]", path,
                                    name, CTL_MAX_PROFILE_NAME);
        if (!json_object_is_type(prof, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "%s: profiles.%s must be an object", path, name);
        json_object_object_foreach (prof, key, val) {
                if (ctl_field_parse(key) < 0)
                        return sp_error_set(err, SP_E_INVALID, "%s: profiles.%s: unknown key '%.64s'", path, name, key);
                if (!json_object_is_type(val, json_type_string) || !value_ok(json_object_get_string(val)))
                        return sp_error_set(err, SP_E_INVALID,
                                            "%s: profiles.%s.%s must be a string of 1-%d printable characters", path,
                                            name, key, CTL_MAX_VALUE);
        }
        return 0;
}

static int check_root(const char *path, json_object *root, sp_error **err)
{
        if (!json_object_is_type(root, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "%s: must hold a JSON object", path);
        json_object_object_foreach (root, key, val) {
                if (strcmp(key, "current") == 0) {
                        if (!json_object_is_type(val, json_type_string) ||
                            !ctl_profile_name_valid(json_object_get_string(val)))
                                return sp_error_set(err, SP_E_INVALID, "%s: current must be a profile name", path);
                } else if (strcmp(key, "profiles") == 0) {
                        if (!json_object_is_type(val, json_type_object))
                                return sp_error_set(err, SP_E_INVALID, "%s: profiles must be an object", path);
                        if (json_object_object_length(val) > CTL_MAX_PROFILES)
                                return sp_error_set(err, SP_E_INVALID, "%s: more than %d profiles", path,
                                                    CTL_MAX_PROFILES);
                        json_object_object_foreach (val, name, prof) {
                                if (check_profile(path, name, prof, err) < 0)
                                        return -SP_E_INVALID;
                        }
                } else {
                        return sp_error_set(err, SP_E_INVALID, "%s: unknown key '%.64s'", path, key);
                }
        }
        return 0;
}

/* ---- load and save ---- */

int ctl_config_load(const char *path, ctl_config **ret, sp_error **err)
{
        ctl_config *c = calloc(1, sizeof(*c));
        if (!c || !(c->path = strdup(path))) {
                free(c);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        struct stat st;
        if (stat(path, &st) < 0) {
                if (errno != ENOENT) {
                        int r = sp_error_set_errno(err, SP_E_IO, errno, "%s", path);
                        ctl_config_free(c);
                        return r;
                }
                c->root = json_object_new_object();
                json_object_object_add(c->root, "profiles", json_object_new_object());
                *ret = c;
                return 0;
        }
        c->exists = true;
        c->loose_mode = (st.st_mode & 077) != 0;
        _cleanup_buf_ sp_buf data = SP_BUF_INIT;
        int r = sp_file_read(path, CTL_MAX_CONFIG_FILE, &data, err);
        if (r >= 0 && (r = sp_json_parse(data.data ? data.data : "", data.len, &c->root, err)) < 0)
                sp_error_wrap(err, "%s", path);
        if (r >= 0)
                r = check_root(path, c->root, err);
        if (r < 0) {
                ctl_config_free(c);
                return r;
        }
        if (!json_object_object_get_ex(c->root, "profiles", NULL))
                json_object_object_add(c->root, "profiles", json_object_new_object());
        *ret = c;
        return 0;
}

int ctl_config_save(ctl_config *c, sp_error **err)
{
        _cleanup_free_ char *dir_copy = strdup(c->path);
        if (!dir_copy)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        const char *dir = dirname(dir_copy);
        int r = sp_mkdir_p(dir, 0700, err);
        if (r < 0)
                return r;
        const char *text = json_object_to_json_string_ext(c->root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                                           JSON_C_TO_STRING_NOSLASHESCAPE);
        _cleanup_buf_ sp_buf out = SP_BUF_INIT;
        sp_buf_appendf(&out, NULL, "%s\n", text);
        /* A new file replaces the old one: whatever mode that had, this one is 0600. */
        r = sp_file_write_atomic(c->path, out.data, out.len, 0600, err);
        if (r < 0)
                return r;
        c->exists = true;
        c->loose_mode = false;
        return 0;
}

ctl_config *ctl_config_free(ctl_config *c)
{
        if (!c)
                return NULL;
        if (c->root)
                json_object_put(c->root);
        free(c->path);
        free(c);
        return NULL;
}

/* ---- profiles ---- */

json_object *ctl_config_profiles(const ctl_config *c)
{
        json_object *p = NULL;
        json_object_object_get_ex(c->root, "profiles", &p);
        return p;
}

json_object *ctl_config_profile(const ctl_config *c, const char *name)
{
        json_object *p = NULL;
        if (!name || !json_object_object_get_ex(ctl_config_profiles(c), name, &p))
                return NULL;
        return p;
}

const char *ctl_config_current(const ctl_config *c)
{
        json_object *v = NULL;
        return json_object_object_get_ex(c->root, "current", &v) ? json_object_get_string(v) : NULL;
}

int ctl_config_use(ctl_config *c, const char *name, sp_error **err)
{
        if (!ctl_config_profile(c, name))
                return sp_error_set(err, SP_E_NOT_FOUND, "no profile '%.64s' in %s", name, c->path);
        json_object_object_add(c->root, "current", json_object_new_string(name));
        return 0;
}

int ctl_config_set(ctl_config *c, const char *name, ctl_field f, const char *value, sp_error **err)
{
        if (!ctl_profile_name_valid(name))
                return sp_error_set(err, SP_E_INVALID, "profile name '%.64s' must be 1-%d of [A-Za-z0-9._-]", name,
                                    CTL_MAX_PROFILE_NAME);
        if (f >= CTL_F__MAX)
                return sp_error_set(err, SP_E_INVALID, "no such setting");
        if (value && !value_ok(value))
                return sp_error_set(err, SP_E_INVALID, "%s must be 1-%d printable characters", ctl_field_name(f),
                                    CTL_MAX_VALUE);
        json_object *profiles = ctl_config_profiles(c);
        json_object *p = ctl_config_profile(c, name);
        if (!p) {
                if (json_object_object_length(profiles) >= CTL_MAX_PROFILES)
                        return sp_error_set(err, SP_E_LIMIT, "at most %d profiles", CTL_MAX_PROFILES);
                p = json_object_new_object();
                json_object_object_add(profiles, name, p);
        }
        if (value)
                json_object_object_add(p, ctl_field_name(f), json_object_new_string(value));
        else
                json_object_object_del(p, ctl_field_name(f));
        return 0;
}

int ctl_config_remove(ctl_config *c, const char *name, sp_error **err)
{
        if (!ctl_config_profile(c, name))
                return sp_error_set(err, SP_E_NOT_FOUND, "no profile '%.64s' in %s", name, c->path);
        const char *cur = ctl_config_current(c);
        if (cur && strcmp(cur, name) == 0)
                json_object_object_del(c->root, "current");
        json_object_object_del(ctl_config_profiles(c), name);
        return 0;
}

/* ---- resolution ---- */

void ctl_resolved_free(ctl_resolved *r)
{
        free(r->profile);
        for (int i = 0; i < CTL_F__MAX; i++)
                free(r->v[i]);
        memset(r, 0, sizeof(*r));
}

/* A profile's data-plane address is where its own cluster's data plane is
 * reached: it goes with its endpoint. With --endpoint or SPACE_ENDPOINT naming
 * another, the addresses the API hands out are used as they are (a profile
 * written by `spacectl up` for one cluster must not send another's sessions
 * there). */
static bool profile_endpoint_in_use(json_object *prof, const ctl_settings *flags, const ctl_settings *env)
{
        const char *other = flags && flags->v[CTL_F_ENDPOINT] ? flags->v[CTL_F_ENDPOINT]
                            : env && env->v[CTL_F_ENDPOINT]   ? env->v[CTL_F_ENDPOINT]
                                                              : NULL;
        if (!other)
                return true;
        json_object *pe = NULL;
        return json_object_object_get_ex(prof, field_names[CTL_F_ENDPOINT], &pe) &&
               strcmp(json_object_get_string(pe), other) == 0;
}

int ctl_resolve(const ctl_config *cfg, const ctl_settings *flags, const ctl_settings *env, ctl_resolved *ret,
                sp_error **err)
{
        ctl_resolved r = {0};
        const char *profile = NULL;
        const char *where = NULL;
        if (flags && flags->profile) {
                profile = flags->profile;
                r.profile_source = CTL_SRC_FLAG;
                where = "--profile";
        } else if (env && env->profile) {
                profile = env->profile;
                r.profile_source = CTL_SRC_ENV;
                where = "SPACE_PROFILE";
        } else if (cfg && ctl_config_current(cfg)) {
                profile = ctl_config_current(cfg);
                r.profile_source = CTL_SRC_PROFILE;
                where = "the current profile";
        }
        json_object *prof = NULL;
        if (profile) {
                prof = cfg ? ctl_config_profile(cfg, profile) : NULL;
                if (!prof)
                        return sp_error_set(err, SP_E_NOT_FOUND, "profile '%.64s' (%s) does not exist in %s", profile,
                                            where, cfg ? cfg->path : "the configuration");
        }
        for (int i = 0; i < CTL_F__MAX; i++) {
                const char *v = NULL;
                json_object *pv = NULL;
                if (flags && flags->v[i]) {
                        v = flags->v[i];
                        r.source[i] = CTL_SRC_FLAG;
                } else if (env && env->v[i]) {
                        v = env->v[i];
                        r.source[i] = CTL_SRC_ENV;
                } else if (prof && json_object_object_get_ex(prof, field_names[i], &pv) &&
                           (i != CTL_F_DATAPLANE_URL || profile_endpoint_in_use(prof, flags, env))) {
                        v = json_object_get_string(pv);
                        r.source[i] = CTL_SRC_PROFILE;
                } else if (i == CTL_F_ENDPOINT) {
                        v = CTL_DEFAULT_ENDPOINT;
                        r.source[i] = CTL_SRC_DEFAULT;
                }
                if (v && !(r.v[i] = strdup(v))) {
                        ctl_resolved_free(&r);
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                }
        }
        if (profile && !(r.profile = strdup(profile))) {
                ctl_resolved_free(&r);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        *ret = r;
        return 0;
}
