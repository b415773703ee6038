/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The data plane's test environment: a throw-away cluster CA with a
 * certificate for each role, a token signing key (and a second one for
 * rotation), a real space-worker serving mTLS (standalone, no control plane)
 * and space-dataplane replicas — plus the helpers the tests share: worker
 * RPC calls as the control plane would make them, minting tokens (for
 * sessions, files and template uploads), plain HTTP requests, and reading a
 * process's memory.
 *
 * dpt_env_up() runs in an unchecked fixture (the runner process): what it
 * starts outlives the forked tests and is stopped by dpt_env_down(), even
 * when a test fails. A test that kills or restarts a data plane starts its
 * own (dpt_dataplane_start() from the test), which then dies with the test.
 */
#ifndef DPT_ENV_H
#define DPT_ENV_H

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "launcher.h"
#include "space/buf.h"
#include "space/error.h"
#include "space/token.h"

typedef struct ssl_ctx_st SSL_CTX;

typedef struct dpt_env {
        char *dir; /* everything lives here: certificates, keys, logs, worker state */
        char cgparent[64]; /* the worker's cgroup parent */
        char worker_addr[64]; /* its RPC address (mTLS) */
        sp_test_proc worker;
        SSL_CTX *cp_ctx; /* a client context with role controlplane, for Exec and friends */
        sp_token_signer *signer; /* the key the data planes trust (key1.pub) */
        sp_token_signer *signer2; /* a second key, trusted only where a test says so (key2.pub) */
} dpt_env;

/* Makes the directory, the CA and the certificates (ca.pem; worker, dataplane
 * and controlplane .crt/.key), the token keys (key1 and key2, .pub and
 * .key) and, with worker, starts a worker (storage sized
 * storage_gb, session logs of 16 MiB) and waits until it is ready. Asserts. */
void dpt_env_up(dpt_env *e, bool worker, int storage_gb);
/* Stops everything, kills what the worker's sandboxes left, unmounts and
 * removes the directory. Safe on a zeroed struct. */
void dpt_env_down(dpt_env *e);

/* Starts a data plane named name (its log: <dir>/<name>.log) on a free port
 * with the certificate of role dataplane and key1.pub, plus the extra
 * arguments (NULL-terminated, may be NULL), and waits for its /healthz.
 * Returns the port. Asserts. */
int dpt_dataplane_start(dpt_env *e, sp_test_proc *p, const char *name, const char *const *extra);

/* Stops a data plane with SIGTERM and frees p. True if it exited by itself
 * with status 0 (under the sanitizers: without leaks or errors); otherwise
 * its log tail is printed. Does not assert, so that a fixture's teardown can
 * clean everything up before it fails. */
bool dpt_dataplane_stop(sp_test_proc *p);

/* A unary worker call as the control plane; NULL with *err on failure. */
json_object *dpt_rpc(dpt_env *e, const char *method, json_object *req, sp_error **err);
/* As dpt_rpc() with the request as JSON text (printf format), asserting success. */
json_object *dpt_rpcf(dpt_env *e, const char *method, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Creates a running sandbox from base with disk_mb of disk (0: unlimited). */
void dpt_sandbox(dpt_env *e, const char *id, int disk_mb);

/* A token signed with signer: claims typ, ten, sbx, ses (may be NULL), wkr
 * (worker), scope, path (may be NULL), valid for ttl_s. Returns a malloc'd
 * string. */
char *dpt_token(const sp_token_signer *signer, const char *typ, const char *sbx, const char *ses, const char *worker,
                const char *scope, const char *path, int64_t ttl_s);

/* A template token (typ template) signed with signer: claims ten, tpl, fmt
 * ("tar" or "oci"), max (bytes), wkr (worker) and scope, valid for ttl_s.
 * Returns a malloc'd string. */
char *dpt_template_token(const sp_token_signer *signer, const char *tpl, const char *fmt, uint64_t max,
                         const char *worker, const char *scope, int64_t ttl_s);

/* One HTTP/1.1 request to 127.0.0.1:port (Connection: close) with optional
 * extra header lines and body; returns the status, the body in *body (may
 * be NULL). Asserts on transport errors. */
int dpt_http(int port, const char *method, const char *target, const char *const *headers, const char *body,
             size_t body_len, sp_buf *ret_body);

/* The resident set size of a process in bytes (VmRSS), or -1. */
int64_t dpt_rss(pid_t pid);

/* The content of a process's log, for assertions (malloc'd; "" if none). */
char *dpt_log(const sp_test_proc *p);

#endif
