/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test harness: one worker with its sandbox network, firewall and egress
 * gateway — the gateway confined to a test's own internet (inet.h), so that
 * nothing a sandbox does can send a packet elsewhere — and sandboxes made
 * over the worker's RPC, which tests drive through their agents. For the
 * suites that attack the network from inside sandboxes (egress, secrets).
 * Root only; asserts.
 */
#ifndef SPACE_TEST_NETENV_H
#define SPACE_TEST_NETENV_H

#include <json-c/json.h>
#include <stdbool.h>

#include "inet.h"
#include "launcher.h"
#include "port.h"
#include "proc.h"

typedef struct sp_test_netbox {
        const char *id;
        char sock[700]; /* its agent's socket */
        char ip[16], host[16]; /* its address, its host end's */
} sp_test_netbox;

typedef struct sp_test_netenv {
        char *top; /* the test's directory: state/, worker.log, the internet's files */
        sp_test_inet in;
        sp_test_worker_net net;
        sp_test_proc worker;
        char rpc_addr[64], cgparent[64];
        int rpc_port, http_port, ns_guard, purge_guard;
        char bufs[8][700];
        const char *argv[48];
} sp_test_netenv;

/* Starts the internet (records[0..n)) and the worker (its gateway trusting
 * the internet's CA; more flags in extra, NULL-ended, may be NULL). */
void sp_test_netenv_up(sp_test_netenv *env, const char *tag, const sp_test_inet_record *records, size_t n,
                       const char *const *extra);
/* Deletes boxes[0..n), stops and purges the worker, stops the internet. */
void sp_test_netenv_down(sp_test_netenv *env, sp_test_netbox *const *boxes, size_t n);

/* A worker RPC whose request is fmt's JSON; asserts it succeeds. */
json_object *sp_test_netenv_call(sp_test_netenv *env, const char *method, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
/* Like sp_test_netenv_call, but returns the error (NULL: it succeeded; *resp then set if resp). */
sp_error *sp_test_netenv_try(sp_test_netenv *env, const char *method, const char *json, json_object **resp);

/* Creates sandbox b->id from template base with more CreateSandbox fields
 * (JSON members without braces, e.g. "\"egress\":{...}"; may be ""), and
 * reads its addresses. */
void sp_test_netbox_new(sp_test_netenv *env, sp_test_netbox *b, const char *fields);
/* Runs script (sh -c) in the sandbox: its stdout (the caller frees). */
char *sp_test_netbox_sh(const sp_test_netbox *b, const char *script);
/* Writes the host's file src into the sandbox as dst with mode. */
void sp_test_netbox_put(const sp_test_netbox *b, const char *src, const char *dst, int mode);
/* Whether the sandbox's egress log has a record with all of pairs (key,
 * value, ..., NULL); polled for 3 s. */
bool sp_test_netbox_logged(sp_test_netenv *env, const sp_test_netbox *b, const char *const *pairs);
/* The pid of the sandbox's first process (its root and namespaces are the sandbox's). */
int sp_test_netbox_pid(sp_test_netenv *env, const sp_test_netbox *b);
/* Dumps the tails of the sandbox's egress log, the internet's log and the worker's. */
void sp_test_netbox_dump(sp_test_netenv *env, const sp_test_netbox *b);

#endif
