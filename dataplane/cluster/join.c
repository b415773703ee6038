/* SPDX-License-Identifier: Apache-2.0 */
/* Joining the cluster as a data-plane replica: what its Join adds (space/join.h does the rest). */
#include <limits.h>
#include <stdio.h>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "space/cleanup.h"
#include "space/controlplane_rpc.h"
#include "space/join.h"
#include "space/json.h"
#include "space/log.h"

void dp__cluster_path(const dp_cluster_config *cfg, const char *file, char out[static PATH_MAX])
{
        snprintf(out, PATH_MAX, "%s/%s", cfg->state_dir, file);
}

int dp_cluster_credentials(const dp_cluster_config *cfg, const char *ca_pem, const char *token, dp_keys *keys,
                           sp_join_creds *ret, sp_error **err)
{
        /* What a data plane's Join adds to token, name and csr (which the join library sets). */
        pr_cp_join m = {.role = "dataplane"};
        _cleanup_json_ json_object *req = pr_msg_encode(&pr_cp_join_dataplane_schema, &m);
        if (!req)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        sp_join_config jc = {.role = SP_ROLE_DATAPLANE,
                             .noun = "data plane",
                             .control_plane = cfg->control_plane,
                             .name = cfg->name,
                             .state_dir = cfg->state_dir,
                             .request = req,
                             .name_flag = "--name",
                             .ca_flag = "--rpc-ca",
                             .cert_flag = "--rpc-cert",
                             .key_flag = "--rpc-key"};
        _cleanup_json_ json_object *answer = NULL;
        int r = sp_join_credentials(&jc, ca_pem, token, ret, &answer, err);
        if (r < 0 || !answer)
                return r;
        _cleanup_strv_free_ char **token_keys = NULL;
        pr_cp_join_dataplane_resp a;
        if (pr_msg_decode(&pr_cp_join_dataplane_resp_schema, answer, &a, err) < 0 ||
            dp__cluster_keys_strv(a.token_keys, &token_keys, err) < 0) {
                sp_join_creds_free(ret);
                return sp_error_wrap(err, "join: the control plane's answer");
        }
        if (sp_join_save(&jc, ret, answer, err) < 0 || dp__cluster_save_keys(cfg, token_keys, err) < 0) {
                sp_join_creds_free(ret);
                return sp_error_wrap(err, "join: save the certificate");
        }
        if ((r = dp_keys_set(keys, DP_KEYS_CONTROL_PLANE, (const char *const *)token_keys,
                             dp__cluster_count(token_keys), err)) < 0) {
                sp_join_creds_free(ret);
                return sp_error_wrap(err, "join: the token keys");
        }
        sp_log_info_kv(SP_KV("control_plane", cfg->control_plane), "joined the cluster as %s", cfg->name);
        return 0;
}
