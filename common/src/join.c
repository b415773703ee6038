/* SPDX-License-Identifier: Apache-2.0 */
/* Joining the cluster: the token file, the saved certificate, the Join call, saving what it brings. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/join.h"
#include "space/json.h"
#include "space/log.h"
#include "space/rpc.h"
#include "space/tls.h"

#define TOKEN_FILE_MAX 4096
#define JOIN_TIMEOUT_MS 30000
#define RETRY_MAX_MS 30000

SP_DEFINE_CLEANUP(SSL_CTX *, SSL_CTX_free)

void sp_join_creds_free(sp_join_creds *c)
{
        if (c->key_pem)
                sp_explicit_bzero(c->key_pem, strlen(c->key_pem));
        free(c->ca_pem);
        free(c->cert_pem);
        free(c->key_pem);
        memset(c, 0, sizeof(*c));
}

bool sp_join_name_ok(const char *s)
{
        size_t n = s ? strlen(s) : 0;
        if (n == 0 || n > SP_JOIN_NAME_MAX || !(islower((unsigned char)s[0]) || isdigit((unsigned char)s[0])))
                return false;
        return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789.-") == n;
}

int sp_join_read_token(const char *path, char **ret, sp_error **err)
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
        if (n == 0 || n > SP_JOIN_TOKEN_MAX)
                r = sp_error_set(err, SP_E_INVALID, "join token file %s: no token of 1 to %d characters", path,
                                 SP_JOIN_TOKEN_MAX);
        else if (!(*ret = strndup(s, n)))
                r = sp_error_set(err, SP_E_LIMIT, "out of memory");
        sp_explicit_bzero(b.data, b.len);
        return r;
}

/* <state>/tls/<role><ext>; ext "" with no role gives the directory. */
static void tls_path(const sp_join_config *cfg, const char *role, const char *ext, char out[static PATH_MAX])
{
        snprintf(out, PATH_MAX, "%s/tls/%s%s", cfg->state_dir, role, ext);
}

/* Loads <state>/tls/<file><ext>; *ret NULL (and 0) if it does not exist. */
static int load_optional(const sp_join_config *cfg, const char *file, const char *ext, char **ret, sp_error **err)
{
        char path[PATH_MAX];
        tls_path(cfg, file, ext, path);
        *ret = NULL;
        if (access(path, F_OK) < 0 && errno == ENOENT)
                return 0;
        *ret = sp_pki_pem_load(path, err);
        return *ret ? 0 : -SP_E_IO;
}

/* Why the saved certificate cannot be used (NULL if it can). */
static const char *saved_unusable(const sp_join_config *cfg, const sp_join_creds *c, char *why, size_t len)
{
        _cleanup_error_ sp_error *e = NULL;
        sp_pki_cert_info info;
        if (sp_pki_cert_verify(c->ca_pem, c->cert_pem, cfg->role, &info, &e) < 0) {
                snprintf(why, len, "%s", e->message);
                return why;
        }
        if (strcmp(info.name, cfg->name) != 0) {
                snprintf(why, len, "it names %s '%s', not '%s'", cfg->noun, info.name, cfg->name);
                return why;
        }
        /* Making a context checks that the key is the certificate's. */
        sp_tls_config tc = {.ca_pem = c->ca_pem,
                            .cert_pem = c->cert_pem,
                            .key_pem = c->key_pem,
                            .peer_roles = SP_ROLE_CONTROLPLANE};
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx = sp_tls_client_ctx_new(&tc, &e);
        if (!ctx) {
                snprintf(why, len, "%s", e->message);
                return why;
        }
        return NULL;
}

static json_object *join_request(const sp_join_config *cfg, const char *token, const char *csr)
{
        json_object *req = json_object_new_object();
        if (!req)
                return NULL;
        json_object_object_add(req, "token", json_object_new_string(token));
        json_object_object_add(req, "name", json_object_new_string(cfg->name));
        json_object_object_add(req, "csr", json_object_new_string(csr));
        if (cfg->request) {
                json_object_object_foreach (cfg->request, k, v) {
                        json_object_object_add(req, k, json_object_get(v));
                }
        }
        return req;
}

/* Calls Join until it answers (retrying while the control plane is unreachable). */
static int call_join(const sp_join_config *cfg, SSL_CTX *ctx, json_object *req, json_object **ret, sp_error **err)
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

static int join(const sp_join_config *cfg, const char *ca_pem, const char *token, sp_join_creds *ret,
                json_object **ret_answer, sp_error **err)
{
        _cleanup_free_ char *csr = NULL, *key = NULL;
        if (sp_pki_csr_create(cfg->role, cfg->name, NULL, &csr, &key, err) < 0)
                return sp_error_wrap(err, "join");
        static const char *const alpn[] = {"h2", NULL};
        sp_tls_config tc = {.ca_pem = ca_pem, .peer_roles = SP_ROLE_CONTROLPLANE, .alpn = alpn};
        _cleanup_(SSL_CTX_freep) SSL_CTX *ctx = sp_tls_client_ctx_new(&tc, err);
        _cleanup_json_ json_object *req = ctx ? join_request(cfg, token, csr) : NULL;
        _cleanup_json_ json_object *resp = NULL;
        int r = req   ? call_join(cfg, ctx, req, &resp, err)
                : ctx ? sp_error_set(err, SP_E_LIMIT, "out of memory")
                      : -SP_E_INVALID;
        if (r < 0) {
                sp_explicit_bzero(key, strlen(key));
                return sp_error_wrap(err, "join %s", cfg->control_plane);
        }
        const char *cert = NULL, *ca = NULL;
        if (sp_json_get_string(resp, "certificate", true, SP_PKI_MAX_PEM, &cert, err) < 0 ||
            sp_json_get_string(resp, "ca", true, SP_PKI_MAX_PEM, &ca, err) < 0 ||
            sp_pki_cert_verify(ca_pem, cert, cfg->role, NULL, err) < 0) {
                sp_explicit_bzero(key, strlen(key));
                return sp_error_wrap(err, "join: the control plane's answer");
        }
        ret->ca_pem = strdup(ca_pem);
        ret->cert_pem = strdup(cert);
        ret->key_pem = TAKE_PTR(key);
        if (!ret->ca_pem || !ret->cert_pem) {
                sp_join_creds_free(ret);
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        }
        *ret_answer = TAKE_PTR(resp);
        return 0;
}

int sp_join_credentials(const sp_join_config *cfg, const char *ca_pem, const char *token, sp_join_creds *ret,
                        json_object **ret_answer, sp_error **err)
{
        memset(ret, 0, sizeof(*ret));
        *ret_answer = NULL;
        if (!sp_join_name_ok(cfg->name))
                return sp_error_set(err, SP_E_INVALID,
                                    "name '%.64s' cannot name a %s: use 1 to 63 characters of [a-z0-9.-], "
                                    "starting with a letter or digit (%s)",
                                    cfg->name ? cfg->name : "", cfg->noun, cfg->name_flag);
        if (!cfg->state_dir)
                return sp_error_set(err, SP_E_INVALID, "joining the cluster needs --state-dir");
        const char *role = sp_role_name(cfg->role);
        sp_join_creds saved = {0};
        int r = 0;
        if (ca_pem && !(saved.ca_pem = strdup(ca_pem)))
                r = sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (r == 0 && !ca_pem)
                r = load_optional(cfg, "ca", ".crt", &saved.ca_pem, err);
        if (r == 0)
                r = load_optional(cfg, role, ".crt", &saved.cert_pem, err);
        if (r == 0 && saved.cert_pem)
                r = load_optional(cfg, role, ".key", &saved.key_pem, err);
        if (r < 0) {
                sp_join_creds_free(&saved);
                return sp_error_wrap(err, "saved credentials");
        }
        if (!saved.ca_pem) {
                sp_join_creds_free(&saved);
                return sp_error_set(err, SP_E_INVALID, "the cluster CA is needed to join: give its certificate with %s",
                                    cfg->ca_flag);
        }
        char why[512] = "";
        const char *problem = NULL;
        if (saved.cert_pem && !saved.key_pem) {
                snprintf(why, sizeof(why), "%s.key is missing", role);
                problem = why;
        } else if (saved.cert_pem) {
                problem = saved_unusable(cfg, &saved, why, sizeof(why));
        }
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
                                                  "--join-token-file), or %s and %s",
                                                  cfg->cert_flag, cfg->key_flag);
                sp_join_creds_free(&saved);
                return r;
        }
        if (saved.cert_pem)
                sp_log_warn("the saved certificate cannot be used (%s): joining again", problem);
        r = join(cfg, saved.ca_pem, token, ret, ret_answer, err);
        sp_join_creds_free(&saved);
        return r;
}

int sp_join_save(const sp_join_config *cfg, const sp_join_creds *creds, json_object *answer, sp_error **err)
{
        const char *role = sp_role_name(cfg->role), *ca = NULL;
        if (sp_json_get_string(answer, "ca", true, SP_PKI_MAX_PEM, &ca, err) < 0)
                return -SP_E_INVALID;
        char dir[PATH_MAX], p_key[PATH_MAX], p_cert[PATH_MAX], p_ca[PATH_MAX];
        tls_path(cfg, "", "", dir);
        tls_path(cfg, role, ".key", p_key);
        tls_path(cfg, role, ".crt", p_cert);
        tls_path(cfg, "ca", ".crt", p_ca);
        /* The certificate last: its presence says the set is complete. */
        int r = sp_mkdir_p(dir, 0700, err);
        if (r == 0)
                r = sp_pki_pem_save(p_key, creds->key_pem, true, err);
        if (r == 0)
                r = sp_pki_pem_save(p_ca, ca, false, err);
        if (r == 0)
                r = sp_pki_pem_save(p_cert, creds->cert_pem, true, err);
        return r;
}
