/* SPDX-License-Identifier: Apache-2.0 */
/* Joining the cluster as a data-plane replica: the saved certificate, the Join call. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "cluster/cluster_internal.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "space/pki.h"
#include "space/rpc.h"
#include "space/tls.h"

#define TOKEN_FILE_MAX 4096
#define JOIN_TIMEOUT_MS 30000
#define RETRY_MAX_MS 30000

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)

void dp_creds_free(dp_creds *c)
{
        if (c->key_pem)
                sp_explicit_bzero(c->key_pem, strlen(c->key_pem));
        free(c->ca_pem);
        free(c->cert_pem);
        free(c->key_pem);
        memset(c, 0, sizeof(*c));
}

bool dp_cluster_name_ok(const char *s)
{
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > DP_CLUSTER_NAME_MAX || !(islower((unsigned char)s[0]) || isdigit((unsigned char)s[0])))
                return false;
        return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n;
}

int dp_cluster_read_token(const char *path, char **ret, sp_error **err)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(path, TOKEN_FILE_MAX, &b, err) < 0)
                return sp_error_wrap(err, "join token file");
        const char *s = b.data ? b.data : "";
        s += strspn(s, " \t\r\n");
        size_t n = strcspn(s, "\r\n");
        while (n > 0 && isspace((unsigned char)s[n - 1]))
                n--;
        int r = 0;
        if (n == 0 || n > DP_CLUSTER_TOKEN_MAX)
                r = sp_error_set(err, SP_E_INVALID, "join token file %s: no token of 1 to %d characters", path,
                                 DP_CLUSTER_TOKEN_MAX);
        else if (!(*ret = strndup(s, n)))
                r = sp_error_set(err, SP_E_LIMIT, "out of memory");
        sp_explicit_bzero(b.data, b.len);
        return r;
}

void dp__cluster_path(const dp_cluster_config *cfg, const char *file, char out[static PATH_MAX])
{
        snprintf(out, PATH_MAX, "%s/%s", cfg->state_dir, file);
}

/* Loads <state>/<file>; *ret NULL (and 0) if it does not exist. */
static int load_optional(const dp_cluster_config *cfg, const char *file, char **ret, sp_error **err)
{
        char path[PATH_MAX];
        dp__cluster_path(cfg, file, path);
        *ret = NULL;
        if (access(path, F_OK) < 0 && errno == ENOENT)
                return 0;
        *ret = sp_pki_pem_load(path, err);
        return *ret ? 0 : -SP_E_IO;
}

/* Why the saved certificate cannot be used (NULL if it can). */
static const char *saved_unusable(const dp_cluster_config *cfg, const dp_creds *c, char *why, size_t len)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_pki_cert_info info;
        if (sp_pki_cert_verify(c->ca_pem, c->cert_pem, SP_ROLE_DATAPLANE, &info, &e) < 0) {
                snprintf(why, len, "%s", e->message);
                return why;
        }
        if (strcmp(info.name, cfg->name) != 0) {
                snprintf(why, len, "it names data plane '%s', not '%s'", info.name, cfg->name);
                return why;
        }
        sp_tls_config tc = {
                .ca_pem = c->ca_pem, .cert_pem = c->cert_pem, .key_pem = c->key_pem, .peer_roles = SP_ROLE_WORKER};
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx = sp_tls_client_ctx_new(&tc, &e);
        if (!ctx) {
                snprintf(why, len, "%s", e->message);
                return why;
        }
        return NULL;
}

/* Calls Join until it answers (retrying while the control plane is unreachable). */
static int call_join(const dp_cluster_config *cfg, SSL_CTX *ctx, json_object *req, json_object **ret, sp_error **err)
{
        int64_t delay_ms = 1000;
        for (unsigned attempt = 0;; attempt++) {
                _cleanup_error_ sp_error *e = NULL;
                int r = sp_rpc_call_sync(cfg->control_plane, ctx, "Join", req, JOIN_TIMEOUT_MS, ret, &e);
                if (r == 0)
                        return 0;
                if (e->code != SP_E_UNAVAILABLE && e->code != SP_E_TIMEOUT) {
                        sp_error_move(err, &e);
                        return r;
                }
                if (attempt == 0)
                        sp_log_warn_kv(SP_KV("control_plane", cfg->control_plane),
                                       "cannot join yet (%s); retrying until the control plane answers", e->message);
                else
                        sp_log_debug("join: %s", e->message);
                struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000};
                nanosleep(&ts, NULL);
                delay_ms = delay_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : delay_ms * 2;
        }
}

static int join(const dp_cluster_config *cfg, const char *ca_pem, const char *token, dp_keys *keys, dp_creds *ret,
                sp_error **err)
{
        _cleanup_free_ char *csr = NULL, *key = NULL;
        if (sp_pki_csr_create(SP_ROLE_DATAPLANE, cfg->name, NULL, &csr, &key, err) < 0)
                return sp_error_wrap(err, "join");
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {.ca_pem = ca_pem, .peer_roles = SP_ROLE_CONTROLPLANE, .alpn = alpn};
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx = sp_tls_client_ctx_new(&tc, err);
        _cleanup_json_ json_object *req = ctx ? json_object_new_object() : NULL;
        _cleanup_json_ json_object *resp = NULL;
        int r = -SP_E_INVALID;
        if (req) {
                json_object_object_add(req, "role", json_object_new_string("dataplane"));
                json_object_object_add(req, "token", json_object_new_string(token));
                json_object_object_add(req, "name", json_object_new_string(cfg->name));
                json_object_object_add(req, "csr", json_object_new_string(csr));
                r = call_join(cfg, ctx, req, &resp, err);
        }
        if (r < 0) {
                sp_explicit_bzero(key, strlen(key));
                return sp_error_wrap(err, "join %s", cfg->control_plane);
        }
        const char *cert = NULL, *ca = NULL;
        _cleanup_strv_free_ char **token_keys = NULL;
        if (sp_json_get_string(resp, "certificate", true, SP_PKI_MAX_PEM, &cert, err) < 0 ||
            sp_json_get_string(resp, "ca", true, SP_PKI_MAX_PEM, &ca, err) < 0 ||
            sp_pki_cert_verify(ca_pem, cert, SP_ROLE_DATAPLANE, NULL, err) < 0 ||
            dp__cluster_parse_keys(resp, &token_keys, err) < 0) {
                sp_explicit_bzero(key, strlen(key));
                return sp_error_wrap(err, "join: the control plane's answer");
        }
        char dir[PATH_MAX], p_key[PATH_MAX], p_cert[PATH_MAX], p_ca[PATH_MAX];
        dp__cluster_path(cfg, "tls", dir);
        dp__cluster_path(cfg, "tls/dataplane.key", p_key);
        dp__cluster_path(cfg, "tls/dataplane.crt", p_cert);
        dp__cluster_path(cfg, "tls/ca.crt", p_ca);
        /* The certificate last: its presence says the set is complete. */
        r = sp_mkdir_p(dir, 0700, err);
        if (r == 0)
                r = sp_pki_pem_save(p_key, key, true, err);
        if (r == 0)
                r = sp_pki_pem_save(p_ca, ca, false, err);
        if (r == 0)
                r = sp_pki_pem_save(p_cert, cert, true, err);
        if (r == 0)
                r = dp__cluster_save_keys(cfg, token_keys, err);
        if (r < 0) {
                sp_explicit_bzero(key, strlen(key));
                return sp_error_wrap(err, "join: save the certificate");
        }
        if ((r = dp_keys_set(keys, DP_KEYS_CONTROL_PLANE, (const char *const *)token_keys,
                             dp__cluster_count(token_keys), err)) < 0) {
                sp_explicit_bzero(key, strlen(key));
                return sp_error_wrap(err, "join: the token keys");
        }
        sp_log_info_kv(SP_KV("control_plane", cfg->control_plane), "joined the cluster as %s", cfg->name);
        ret->ca_pem = strdup(ca_pem);
        ret->cert_pem = strdup(cert);
        ret->key_pem = TAKE_PTR(key);
        if (!ret->ca_pem || !ret->cert_pem) {
                dp_creds_free(ret);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        return 0;
}

int dp_cluster_credentials(const dp_cluster_config *cfg, const char *ca_pem, const char *token, dp_keys *keys,
                           dp_creds *ret, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        if (!dp_cluster_name_ok(cfg->name))
                return sp_error_set(err, SP_E_INVALID,
                                    "name '%.64s' cannot name a data plane: use 1 to 63 characters of [a-z0-9.-], "
                                    "starting with a letter or digit (--name)",
                                    cfg->name ? cfg->name : "");
        if (!cfg->state_dir)
                return sp_error_set(err, SP_E_INVALID, "joining the cluster needs --state-dir");
        dp_creds saved = {0};
        int r = 0;
        if (ca_pem && !(saved.ca_pem = strdup(ca_pem)))
                r = sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (r == 0 && !ca_pem)
                r = load_optional(cfg, "tls/ca.crt", &saved.ca_pem, err);
        if (r == 0)
                r = load_optional(cfg, "tls/dataplane.crt", &saved.cert_pem, err);
        if (r == 0 && saved.cert_pem)
                r = load_optional(cfg, "tls/dataplane.key", &saved.key_pem, err);
        if (r < 0) {
                dp_creds_free(&saved);
                return sp_error_wrap(err, "saved credentials");
        }
        if (!saved.ca_pem) {
                dp_creds_free(&saved);
                return sp_error_set(err, SP_E_INVALID,
                                    "the cluster CA is needed to join: give its certificate with --rpc-ca");
        }
        char why[512] = "";
        const char *problem = NULL;
        if (saved.cert_pem)
                problem = saved.key_pem ? saved_unusable(cfg, &saved, why, sizeof(why)) : "dataplane.key is missing";
        if (saved.cert_pem && !problem) {
                if (token)
                        sp_log_info("already joined (certificate in %s/tls): the join token is not used",
                                    cfg->state_dir);
                *ret = saved;
                return 0;
        }
        if (!token) {
                r = saved.cert_pem ? sp_error_set(err, SP_E_INVALID,
                                                  "the saved certificate cannot be used (%s); join again with a token "
                                                  "(--join-token or --join-token-file)",
                                                  problem)
                                   : sp_error_set(err, SP_E_INVALID,
                                                  "not joined yet: give a join token (--join-token or "
                                                  "--join-token-file), or --rpc-cert and --rpc-key");
                dp_creds_free(&saved);
                return r;
        }
        if (saved.cert_pem)
                sp_log_warn("the saved certificate cannot be used (%s): joining again", problem);
        r = join(cfg, saved.ca_pem, token, keys, ret, err);
        dp_creds_free(&saved);
        return r;
}
