/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the files of cluster/: paths in the state directory and the token-key list. */
#ifndef DP_CLUSTER_INTERNAL_H
#define DP_CLUSTER_INTERNAL_H

#include <json-c/json.h>
#include <limits.h>
#include <stddef.h>

#include "cluster/cluster.h"

/* <state>/<file>. */
void dp__cluster_path(const dp_cluster_config *cfg, const char *file, char out[static PATH_MAX]);

/* The "token_keys" array of a Join or TokenKeys answer: at most
 * SP_TOKEN_MAX_KEYS PEM strings, as a new NULL-terminated vector. */
int dp__cluster_parse_keys(json_object *resp, char ***ret, sp_error **err);

/* Saves keys to <state>/token-keys.json (atomically); a no-op without a state directory. */
int dp__cluster_save_keys(const dp_cluster_config *cfg, char *const *keys, sp_error **err);

/* Loads <state>/token-keys.json; *ret NULL (and 0) when there is none. */
int dp__cluster_load_keys(const dp_cluster_config *cfg, char ***ret, sp_error **err);

/* Entries of a NULL-terminated vector (NULL counts 0). */
size_t dp__cluster_count(char *const *v);

#endif
