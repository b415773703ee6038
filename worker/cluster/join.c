/* SPDX-License-Identifier: Apache-2.0 */
/* Joining the cluster as a worker: labels, and what a worker's Join adds (space/join.h does the rest). */
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "space/cleanup.h"
#include "space/controlplane_rpc.h"
#include "space/join.h"
#include "space/json.h"
#include "space/log.h"

#define LABEL_KEY_MAX 128
#define LABEL_VALUE_MAX 256

int wk_cluster_parse_labels(const char *s, json_object **ret, sp_error **err)
{
        _cleanup_json_ json_object *map = json_object_new_object();
        _cleanup_free_ char *copy = strdup(s ? s : "");
        if (!map || !copy)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        char *save = NULL;
        for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
                char *eq = strchr(item, '=');
                if (!eq)
                        return sp_error_set(err, SP_E_INVALID, "label '%.128s' must be KEY=VALUE", item);
                *eq = '\0';
                const char *key = item, *value = eq + 1;
                size_t kl = strlen(key), vl = strlen(value);
                if (kl == 0 || kl > LABEL_KEY_MAX ||
                    strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._/-") != kl)
                        return sp_error_set(err, SP_E_INVALID,
                                            "label key '%.128s' must be 1 to %d characters of [A-Za-z0-9._/-]", key,
                                            LABEL_KEY_MAX);
                if (vl > LABEL_VALUE_MAX)
                        return sp_error_set(err, SP_E_INVALID, "label %s: value longer than %d bytes", key,
                                            LABEL_VALUE_MAX);
                for (const char *p = value; *p; p++)
                        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                                return sp_error_set(err, SP_E_INVALID, "label %s: value must be printable ASCII", key);
                if (json_object_object_get_ex(map, key, NULL))
                        return sp_error_set(err, SP_E_INVALID, "label %s given twice", key);
                if (json_object_object_length(map) >= WK_CLUSTER_LABELS_MAX)
                        return sp_error_set(err, SP_E_INVALID, "more than %d labels", WK_CLUSTER_LABELS_MAX);
                json_object_object_add(map, key, json_object_new_string(value));
        }
        *ret = TAKE_PTR(map);
        return 0;
}

int wk_cluster_credentials(const wk_cluster_config *cfg, const char *ca_pem, const char *token, sp_join_creds *ret,
                           sp_error **err)
{
        /* What a worker's Join adds to token, name and csr (which the join
         * library sets): encoded with the codec, whose absent fields are left out. */
        _cleanup_json_ json_object *labels = cfg->labels ? json_object_get(cfg->labels) : json_object_new_object();
        pr_cp_join m = {.address = cfg->advertise, .backend = cfg->backend, .labels = labels};
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_cp_join_worker_schema, &m);
        if (!req)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        sp_join_config jc = {.role = SP_ROLE_WORKER,
                             .noun = "worker",
                             .control_plane = cfg->control_plane,
                             .name = cfg->name,
                             .state_dir = cfg->state_dir,
                             .request = req,
                             .name_flag = "--node-id",
                             .ca_flag = "--tls-ca",
                             .cert_flag = "--tls-cert",
                             .key_flag = "--tls-key"};
        _cleanup_json_ json_object *answer = NULL;
        int r = sp_join_credentials(&jc, ca_pem, token, ret, &answer, err);
        if (r < 0 || !answer)
                return r;
        pr_cp_join_worker_resp a;
        if (pr_msg_decode(&pr_cp_join_worker_resp_schema, answer, &a, err) < 0) {
                sp_join_creds_free(ret);
                return sp_error_wrap(err, "join: the control plane's answer");
        }
        const char *id = a.worker_id;
        if (sp_join_save(&jc, ret, answer, err) < 0) {
                sp_join_creds_free(ret);
                return sp_error_wrap(err, "join: save the certificate");
        }
        sp_log_info_kv(SP_KV("worker_id", id, "control_plane", cfg->control_plane), "joined the cluster as %s",
                       cfg->name);
        return 0;
}
