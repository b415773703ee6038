/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the files of cluster/: paths in the state directory and the token-key list. */
#ifndef DP_CLUSTER_INTERNAL_H
#define DP_CLUSTER_INTERNAL_H

#include <json-c/json.h>
#include <limits.h>
#include <stddef.h>

#include "cluster/cluster.h"
#include "space/rpc.h"

struct event;

/* The handle (see cluster.h); keys.c owns the token keys, revoked.c the revoked API keys. */
struct dp_cluster {
        struct event_base *base;
        dp_cluster_config cfg; /* strings owned */
        dp_keys *keys;
        sp_rpc_client *cli;
        struct event *timer;
        int64_t last_start_us; /* when the last fetch started (monotonic), 0 before the first */
        char **last; /* the keys of the last answer (or the saved ones), NULL-terminated */
        bool in_flight, fetched, failing, freeing;
        /* RevokedKeys (cluster/revoked.c) */
        dp_revoked *revoked; /* borrowed; NULL: not polled */
        struct event *revoked_timer;
        int64_t revoked_cursor_us; /* since_us of the next poll */
        bool revoked_in_flight, revoked_failing, revoked_fetched;
        /* The control plane refused a request asking for deleted templates
         * (an older version): ask without until this time, then try again. */
        int64_t revoked_no_templates_until_us;
        bool revoked_asked_templates; /* the request in flight asks for them */
        bool revoked_had_templates; /* the last answer held them */
};

/* Stops polling RevokedKeys (a call in flight is abandoned); a no-op when not started. */
void dp__cluster_revoked_stop(dp_cluster *c);

/* <state>/<file>. */
void dp__cluster_path(const dp_cluster_config *cfg, const char *file, char out[static PATH_MAX]);

/* The "token_keys" array of a Join or TokenKeys answer: at most
 * SP_TOKEN_MAX_KEYS PEM strings, as a new NULL-terminated vector. */
int dp__cluster_parse_keys(json_object *resp, char ***ret, sp_error **err);
/* A decoded "token_keys" array (strings, or NULL) as a new NULL-terminated vector. */
int dp__cluster_keys_strv(json_object *keys, char ***ret, sp_error **err);

/* Saves keys to <state>/token-keys.json (atomically); a no-op without a state directory. */
int dp__cluster_save_keys(const dp_cluster_config *cfg, char *const *keys, sp_error **err);

/* Loads <state>/token-keys.json; *ret NULL (and 0) when there is none. */
int dp__cluster_load_keys(const dp_cluster_config *cfg, char ***ret, sp_error **err);

/* Entries of a NULL-terminated vector (NULL counts 0). */
size_t dp__cluster_count(char *const *v);

#endif
