/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's secrets on the worker (docs/secrets.md): the credential
 * bindings the control plane sent, their values in memory only (sandbox.json
 * keeps the bindings without them: a restarted worker's gateway still has
 * the values, or the control plane sends them again when the heartbeat says
 * secrets_missing); and the sandbox's CA — made here, its key kept in
 * <state>/sandboxes/<key>/ca.key (root only, never inside the sandbox), its
 * certificate installed in the sandbox's trust store — which the gateway
 * issues the certificates of bound hosts from.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/net.h"
#include "node/node_internal.h"
#include "policy/secret.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"
#include "tls/tls.h"

/* Where the CA's certificate goes in the sandbox: a file of its own (what
 * update-ca-certificates reads, and NODE_EXTRA_CA_CERTS names) and the
 * system bundle (what OpenSSL, curl, wget and Python's ssl read). */
#define CA_DIR "usr/local/share/ca-certificates"
#define CA_FILE "space-sandbox-ca.crt"
#define BUNDLE_DIR "etc/ssl/certs"
#define BUNDLE_FILE "ca-certificates.crt"

bool wk__secrets_any(const wk_sandbox *sb)
{
        return sb->secrets && json_object_array_length(sb->secrets) > 0;
}

/* Opens dir path (relative, "a/b/c") under the directory fd root, one
 * component at a time, never following a link (the tree is the sandbox's;
 * root inside it may have swapped any of them), creating what is missing. */
static int open_dir_under(int root, const char *path)
{
        char copy[128];
        snprintf(copy, sizeof(copy), "%s", path);
        int fd = dup(root);
        char *save = NULL;
        for (char *c = strtok_r(copy, "/", &save); fd >= 0 && c; c = strtok_r(NULL, "/", &save)) {
                if (mkdirat(fd, c, 0755) < 0 && errno != EEXIST) {
                        close(fd);
                        return -1;
                }
                int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                close(fd);
                fd = next;
        }
        return fd;
}

/* Writes the CA's certificate into the sandbox's trust store (root fs at rootfs). */
static int install_ca(const char *rootfs, const char *pem, sp_error **err)
{
        size_t len = strlen(pem);
        _cleanup_close_ int root = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "the sandbox's root filesystem");
        _cleanup_close_ int cadir = open_dir_under(root, CA_DIR);
        _cleanup_close_ int bdir = open_dir_under(root, BUNDLE_DIR);
        if (cadir < 0 || bdir < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "the sandbox's certificate directories");
        if (unlinkat(cadir, CA_FILE, 0) < 0 && errno != ENOENT)
                return sp_error_set_errno(err, SP_E_IO, errno, "the sandbox's /" CA_DIR "/" CA_FILE);
        _cleanup_close_ int f = openat(cadir, CA_FILE, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (f < 0 || write(f, pem, len) != (ssize_t)len)
                return sp_error_set_errno(err, SP_E_IO, errno, "the sandbox's /" CA_DIR "/" CA_FILE);
        /* The bundle: appended to (once), a regular file only. */
        _cleanup_close_ int b = openat(bdir, BUNDLE_FILE, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
        struct stat st;
        if (b < 0 || fstat(b, &st) < 0 || !S_ISREG(st.st_mode))
                return sp_error_set(err, SP_E_IO, "the sandbox's /" BUNDLE_DIR "/" BUNDLE_FILE " is not a file");
        _cleanup_buf_ sp_buf have = SP_BUF_INIT;
        char chunk[65536];
        ssize_t n;
        while (have.len < (64u << 20) && (n = read(b, chunk, sizeof(chunk))) > 0)
                sp_buf_append(&have, chunk, (size_t)n, NULL);
        sp_buf_append(&have, "", 1, NULL);
        if (have.data && strstr(have.data, pem))
                return 0;
        if (lseek(b, 0, SEEK_END) < 0 ||
            (st.st_size > 0 && have.len > 1 && have.data[have.len - 2] != '\n' && write(b, "\n", 1) != 1) ||
            write(b, pem, len) != (ssize_t)len)
                return sp_error_set_errno(err, SP_E_IO, errno, "the sandbox's /" BUNDLE_DIR "/" BUNDLE_FILE);
        return 0;
}

/* Variables that point common runtimes at the CA (unless the sandbox's own env says otherwise). */
static void add_env(wk_sandbox *sb)
{
        static const char *const vars[][2] = {
                {"NODE_EXTRA_CA_CERTS", "/" CA_DIR "/" CA_FILE},
                {"REQUESTS_CA_BUNDLE", "/" BUNDLE_DIR "/" BUNDLE_FILE},
        };
        json_object *env = NULL;
        if (sb->env && json_object_deep_copy(sb->env, &env, NULL) != 0)
                return;
        if (!env)
                env = json_object_new_object();
        for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
                if (!json_object_object_get_ex(env, vars[i][0], NULL))
                        json_object_object_add(env, vars[i][0], json_object_new_string(vars[i][1]));
        json_object_put(sb->env);
        sb->env = env;
}

void wk__secrets_env(wk_sandbox *sb)
{
        add_env(sb);
}

int wk__secrets_make_ca(const char *state_dir, const char *key, const char *id, const char *rootfs, sp_error **err)
{
        char cert_path[PATH_MAX], key_path[PATH_MAX];
        wk__path(cert_path, sizeof(cert_path), "%s/sandboxes/%s/ca.pem", state_dir, key);
        wk__path(key_path, sizeof(key_path), "%s/sandboxes/%s/ca.key", state_dir, key);
        if (access(cert_path, F_OK) == 0 && access(key_path, F_OK) == 0)
                return 0;
        char *cert = NULL, *ckey = NULL;
        if (gw_ca_generate(id, &cert, &ckey, err) < 0)
                return -SP_E_INTERNAL;
        int r = sp_file_write_atomic(key_path, ckey, strlen(ckey), 0600, err);
        explicit_bzero(ckey, strlen(ckey));
        free(ckey);
        if (r == 0)
                r = install_ca(rootfs, cert, err);
        /* Last: its presence says the CA is made and installed. */
        if (r == 0)
                r = sp_file_write_atomic(cert_path, cert, strlen(cert), 0600, err);
        free(cert);
        if (r < 0)
                return sp_error_wrap(err, "the sandbox's CA");
        sp_log_info_kv(SP_KV("sandbox_id", id), "made the sandbox's CA and put it in its trust store");
        return 1;
}

int wk__secrets_ready(wk_sandbox *sb, sp_error **err)
{
        if (!wk__secrets_any(sb))
                return 0;
        _cleanup_free_ char *rootfs = wk_storage_sandbox_rootfs(sb->node->storage, sb->key, err);
        if (!rootfs)
                return -SP_E_IO;
        int r = wk__secrets_make_ca(sb->node->state_dir, sb->key, sb->id, rootfs, err);
        if (r < 0)
                return r;
        if (r > 0)
                add_env(sb);
        return 0;
}

int wk__secrets_set(wk_sandbox *sb, json_object *secrets, sp_error **err)
{
        _cleanup_(gw_secrets_unrefp) gw_secrets *check = NULL;
        if (gw_secrets_parse(secrets, &check, err) < 0)
                return sp_error_wrap(err, "field 'secrets'");
        json_object_put(sb->secrets);
        sb->secrets = check ? json_object_get(secrets) : NULL;
        return 0;
}

json_object *wk__secrets_spec(wk_sandbox *sb)
{
        if (!wk__secrets_any(sb))
                return NULL;
        char path[PATH_MAX];
        _cleanup_buf_ sp_buf cert = SP_BUF_INIT, key = SP_BUF_INIT;
        _cleanup_error_ sp_error *e = NULL;
        wk__path(path, sizeof(path), "%s/sandboxes/%s/ca.pem", sb->node->state_dir, sb->key);
        if (sp_file_read(path, 65536, &cert, &e) < 0)
                goto fail;
        wk__path(path, sizeof(path), "%s/sandboxes/%s/ca.key", sb->node->state_dir, sb->key);
        if (sp_file_read(path, 65536, &key, &e) < 0)
                goto fail;
        json_object *o = json_object_new_object();
        json_object_object_add(o, "secrets", json_object_get(sb->secrets));
        json_object_object_add(o, "ca_cert", json_object_new_string_len(cert.data, (int)cert.len));
        json_object_object_add(o, "ca_key", json_object_new_string_len(key.data, (int)key.len));
        explicit_bzero(key.data, key.len);
        return o;
fail:
        sp_log_warn_kv(SP_KV("sandbox_id", sb->id), "its secrets cannot be used: %s", e->message);
        return NULL;
}

bool wk__secrets_missing(wk_sandbox *sb)
{
        if (!wk__secrets_any(sb))
                return false;
        wk_net *net = sb->node->cfg.net;
        int gw = net ? wk_net_secrets_missing(net, sb->slot) : -1;
        if (gw >= 0)
                return gw > 0;
        /* The gateway has not said: what this worker holds. */
        for (size_t i = 0; i < json_object_array_length(sb->secrets); i++)
                if (!json_object_object_get_ex(json_object_array_get_idx(sb->secrets, i), "value", NULL))
                        return true;
        return false;
}
