/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: a whole SPACE cluster on this host.
 *
 * A real PostgreSQL, one or two space-controlplane replicas on the same
 * database and real space-worker daemons (each its own state directory,
 * btrfs storage image, ports, cgroup parent and uid range) that join with a
 * bootstrap token and talk mTLS — and the public API to drive them.
 *
 * Everything here runs in the process that owns the cluster (Check's
 * unchecked fixtures run in the parent, the test cases in forked children:
 * both may call the API helpers). The helpers that assert (the API ones and
 * sp_test_space_up) fail the current test with a message; the rest report
 * through sp_error. Needs root, btrfs and PostgreSQL (callers check with
 * sp_test_require_root() and sp_test_pg_require()).
 */
#ifndef SPACE_TEST_SPACE_CLUSTER_H
#define SPACE_TEST_SPACE_CLUSTER_H

#include <json-c/json.h>
#include <stdbool.h>

#include "launcher.h"
#include "pg.h"
#include "port.h"
#include "space/error.h"

#define SP_TEST_SPACE_MAX_WORKERS 4
#define SP_TEST_SPACE_MAX_CP 2

typedef struct sp_test_space_opts {
        int workers; /* how many workers to start and wait for (0: none) */
        const char *const *cp_args; /* extra control-plane options, NULL-terminated (may be NULL) */
        /* extra worker options, NULL-terminated (may be NULL); they come last, so
         * they override the harness's (every worker gets
         * --template-import-root=<dir>/import, a directory shared by all) */
        const char *const *worker_args;
        /* Sandboxes get a network (sp_test_worker_net_args, port.h), as in
         * production, unless no_network: with net_upstream (a test internet's
         * namespace, inet.h) each worker's gateway connects out into it only;
         * without, sandboxes have links whose traffic nobody serves
         * (--gateway=none). The harness purges every worker's table, gateway
         * and links when it goes down, and a guard does it should the test
         * process die first. */
        bool no_network;
        const char *net_upstream;
        /* Every replica gets --secrets-key-file=<dir>/secrets.keys, a key ring
         * (docs/secrets.md) of one random key "k1" made at up (0600), unless
         * no_secrets_key. */
        bool no_secrets_key;
} sp_test_space_opts;

typedef struct sp_test_space {
        sp_test_pg pg;
        char *dir; /* the cluster's temporary directory: logs, CA, admin key, worker state */
        char cgparent[64]; /* worker i uses cgroup parent <cgparent>-w<i> */
        char *conninfo; /* the cluster's database */
        sp_test_proc cp[SP_TEST_SPACE_MAX_CP];
        int api_port[SP_TEST_SPACE_MAX_CP]; /* public API of replica i (allocated by up for every replica) */
        int rpc_port[SP_TEST_SPACE_MAX_CP]; /* worker RPC of replica i */
        int api; /* the port the API helpers talk to (replica 0's unless a test changes it) */
        sp_test_proc workers[SP_TEST_SPACE_MAX_WORKERS];
        sp_test_worker_net net[SP_TEST_SPACE_MAX_WORKERS];
        int purge_guard[SP_TEST_SPACE_MAX_WORKERS]; /* > 0: registered */
        int nworkers;
        sp_test_space_opts opts;
        char admin_key[256];
        char join_token[256];
        char secrets_key_file[700]; /* "" with no_secrets_key */
} sp_test_space;

/* Starts PostgreSQL, control-plane replica 0 and opts->workers workers, and
 * waits until every worker is ready and has the base template. Asserts. */
void sp_test_space_up(sp_test_space *s, const sp_test_space_opts *opts);

/* Writes a new key ring file at path (0600): one line "<key_id> <base64 of
 * 32 random bytes>", then the lines of keep (may be NULL or ""), as a new
 * file renamed over the old. */
int sp_test_secrets_key_write(const char *path, const char *key_id, const char *keep, sp_error **err);

/* Starts control-plane replica i (0 or 1) on its own ports, the same
 * database and the same CA, and waits for its /healthz. Starting a replica
 * whose process has exited starts it again on the same ports. */
int sp_test_space_start_cp(sp_test_space *s, int i, sp_error **err);

/* Starts worker i (joining through replica 0's RPC port) and waits for its
 * "worker ready" log line. Starting a worker whose process has exited starts
 * it again with the same state directory and storage (a restart). */
int sp_test_space_start_worker(sp_test_space *s, int i, sp_error **err);

/* Waits up to timeout_ms until n workers are "ready" with the base template
 * (through the admin API). Asserts. */
void sp_test_space_wait_workers(sp_test_space *s, int n, int64_t timeout_ms);

/* Stops everything (also processes a test left behind, e.g. a replica it
 * started itself on one of the cluster's ports), kills what sandboxes left in
 * the workers' cgroups, unmounts, removes the directory, frees s. */
void sp_test_space_down(sp_test_space *s);

/* The first row's first column of sql run on the cluster's database, as a new
 * string ("" when there is no row). Asserts that it runs. */
char *sp_test_space_sql(sp_test_space *s, const char *sql, int nparams, const char *const *params);

/* Starts a data plane named `name` on 127.0.0.1:port, joined to the cluster
 * with a join token from the admin API, with extra options (NULL-terminated,
 * may be NULL; they come last), logging to <dir>/dataplane.log, and waits for
 * its /readyz. Asserts. Stop it with sp_test_proc_stop() and free it. */
void sp_test_space_start_dataplane(sp_test_space *s, sp_test_proc *dp, int port, const char *name,
                                   const char *const *extra);

/* ---- the public API (asserting helpers) ---- */

/* Calls method path on port s->api with "Authorization: Bearer key" (no
 * header when key is NULL) and one extra header line (may be NULL), and
 * asserts the status. Returns the parsed JSON body (NULL when empty): put it. */
json_object *sp_test_api(sp_test_space *s, const char *key, const char *method, const char *path, int want_status,
                         const char *body, const char *extra_header);

/* The string at a dotted path ("operation.id") in o, or NULL. Borrowed. */
const char *sp_test_jstr(json_object *o, const char *path);

/* The array at key in o (asserting that it is one). Borrowed. */
json_object *sp_test_jarr(json_object *o, const char *key);

/* Long-polls operation op_id until it finishes and asserts that it
 * succeeded (or failed, when want_success is false). Returns it: put it. */
json_object *sp_test_wait_op(sp_test_space *s, const char *key, const char *op_id, bool want_success);

/* Creates a sandbox with body, waits until it runs, and writes its id. */
void sp_test_create_sandbox(sp_test_space *s, const char *key, const char *body, char id[static 64]);

/* Runs lifecycle verb (pause, resume, ...) on sandbox id, waits, and writes
 * the resulting state. */
void sp_test_sandbox_action(sp_test_space *s, const char *key, const char *id, const char *verb, char state[static 32]);

/* Creates a tenant named <name>-<pid> and an API key for it (the secret). */
void sp_test_new_tenant(sp_test_space *s, const char *name, char key[static 256]);

/* Runs cmd under sh -c in sandbox id (a session through the API) and returns
 * its exit code, polling GET /v1/sessions/{id}: no data plane needed. Asserts
 * that it ends within timeout_s and does not fail to start. */
int sp_test_sandbox_run(sp_test_space *s, const char *key, const char *id, const char *cmd, int timeout_s);

/* The worker a sandbox is placed on (its id), through the tenant's API. */
void sp_test_sandbox_worker(sp_test_space *s, const char *key, const char *id, char worker_id[static 64]);

#endif
