/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl's configuration: named profiles in a JSON file, and how the
 * settings a command runs with are resolved.
 *
 * The file ($SPACE_CONFIG, else $XDG_CONFIG_HOME/space/config.json, else
 * ~/.config/space/config.json) holds
 *
 *   {"current": "prod",
 *    "profiles": {"prod": {"endpoint": "https://space.example:7070",
 *                          "api_key": "...", "ca_file": "/etc/space/ca.pem",
 *                          "dataplane_url": "https://space.example:7071"}}}
 *
 * and is written with mode 0600 (its directory 0700), atomically. Reading
 * is strict: unknown keys, wrong types, bad profile names and oversized
 * values are errors that name the file and the key; at most
 * CTL_MAX_PROFILES profiles.
 *
 * Each setting is taken from the first of: a flag (--endpoint, --api-key,
 * --ca), the environment (SPACE_ENDPOINT, SPACE_API_KEY, SPACE_CA_FILE,
 * SPACE_DATAPLANE_URL), the profile, a default (the endpoint only:
 * CTL_DEFAULT_ENDPOINT). The profile is --profile, else SPACE_PROFILE, else
 * the file's current one; none at all is fine (flags and environment alone);
 * naming one that does not exist is an error.
 *
 * Pure apart from the file I/O in load and save; not thread-safe.
 */
#ifndef SPACECTL_CONFIG_H
#define SPACECTL_CONFIG_H

#include <json-c/json.h>
#include <stdbool.h>

#include "space/error.h"

#define CTL_DEFAULT_ENDPOINT "http://127.0.0.1:7070"
#define CTL_MAX_PROFILES 64
#define CTL_MAX_PROFILE_NAME 64
#define CTL_MAX_VALUE 4096
#define CTL_MAX_CONFIG_FILE (1024 * 1024)

/* The settings of a profile. */
typedef enum ctl_field {
        CTL_F_ENDPOINT,
        CTL_F_API_KEY,
        CTL_F_CA_FILE,
        CTL_F_DATAPLANE_URL,
        CTL_F__MAX,
} ctl_field;

/* "endpoint", "api_key", "ca_file", "dataplane_url": the keys in the file. */
const char *ctl_field_name(ctl_field f);
/* Parses a field name; -1 when it is none. */
int ctl_field_parse(const char *s);

/* Where a resolved setting came from. */
typedef enum ctl_source {
        CTL_SRC_NONE,
        CTL_SRC_DEFAULT,
        CTL_SRC_PROFILE,
        CTL_SRC_ENV,
        CTL_SRC_FLAG,
} ctl_source;

/* "unset", "default", "profile", "env", "flag". */
const char *ctl_source_name(ctl_source s);

/* Settings given as flags or in the environment (borrowed strings; NULL
 * when not given). */
typedef struct ctl_settings {
        const char *profile;
        const char *v[CTL_F__MAX];
} ctl_settings;

/* Reads SPACE_PROFILE, SPACE_ENDPOINT, SPACE_API_KEY, SPACE_CA_FILE and
 * SPACE_DATAPLANE_URL (empty counts as unset). */
void ctl_settings_from_env(ctl_settings *ret);

/* The loaded file. */
typedef struct ctl_config {
        char *path;
        json_object *root; /* validated: {"current"?: name, "profiles": {name: {field: string}}} */
        bool exists; /* the file was there */
        bool loose_mode; /* readable or writable by group or others */
} ctl_config;

/* The default path: $SPACE_CONFIG, $XDG_CONFIG_HOME/space/config.json or
 * $HOME/.config/space/config.json (malloc'd). SP_E_INVALID without HOME. */
char *ctl_config_default_path(sp_error **err);

/* Loads path (a missing file is an empty configuration). Errors:
 * SP_E_INVALID naming the file and the key, SP_E_IO, SP_E_TOO_LARGE. */
int ctl_config_load(const char *path, ctl_config **ret, sp_error **err);
/* Writes the configuration back (mode 0600, atomically; creates its
 * directory with mode 0700). */
int ctl_config_save(ctl_config *c, sp_error **err);
/* Frees c; accepts NULL; returns NULL. */
ctl_config *ctl_config_free(ctl_config *c);

/* The current profile's name, or NULL. */
const char *ctl_config_current(const ctl_config *c);
/* Makes name (which must exist: SP_E_NOT_FOUND) the current profile. */
int ctl_config_use(ctl_config *c, const char *name, sp_error **err);
/* The profile's object (borrowed), or NULL. */
json_object *ctl_config_profile(const ctl_config *c, const char *name);
/* The profiles object {name: {...}} (borrowed; never NULL). */
json_object *ctl_config_profiles(const ctl_config *c);
/* Sets (value non-NULL) or removes (NULL) a field of a profile, creating the
 * profile if needed. Errors: SP_E_INVALID (name, value), SP_E_LIMIT (too
 * many profiles). */
int ctl_config_set(ctl_config *c, const char *name, ctl_field f, const char *value, sp_error **err);
/* Removes a profile (SP_E_NOT_FOUND if absent); the current one becomes
 * none when it was that. */
int ctl_config_remove(ctl_config *c, const char *name, sp_error **err);
/* Whether s is a valid profile name: 1-64 of [A-Za-z0-9._-]. */
bool ctl_profile_name_valid(const char *s);

/* The settings a command runs with, each with its source. */
typedef struct ctl_resolved {
        char *profile; /* NULL when none */
        ctl_source profile_source;
        char *v[CTL_F__MAX]; /* NULL when unset */
        ctl_source source[CTL_F__MAX];
} ctl_resolved;

/* Resolves flags > env > the profile > defaults (see above). cfg may be
 * NULL (no file). Errors: SP_E_NOT_FOUND for a profile that does not exist
 * (the message says where it was named). On failure *ret is untouched. */
int ctl_resolve(const ctl_config *cfg, const ctl_settings *flags, const ctl_settings *env, ctl_resolved *ret,
                sp_error **err);
void ctl_resolved_free(ctl_resolved *r);

#endif
