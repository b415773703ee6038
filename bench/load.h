/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sustained load on the public API, one level at a time: N client processes
 * (forked, each with its own keep-alive connections) doing one kind of
 * operation back to back, bounded in count and in time.
 *
 *   create  cold creates: POST /v1/sandboxes, the operation waited for, the
 *           sandbox deleted (not waited for) once it runs; the latency is
 *           the POST to the operation's success;
 *   exec    `true` round trips, each client in a running sandbox of its own:
 *           POST a session, attach, the exit event (one warm-up session per
 *           client before the clock starts, so that the first sample does
 *           not pay for the data plane's connection).
 *
 * A level starts when every client is ready and ends when every client has
 * finished: a client starts no operation after the level's time bound, nor
 * beyond its share of the level's count. Operations still running long after
 * the time bound (the bound again, at least 30 s) have their clients killed,
 * and the level is reported timed out. Every sandbox a create level made is
 * deleted, and every delete waited for, before bn_load_run() returns, so the
 * next level starts on a quiet cluster.
 *
 * Not thread-safe (it forks); the caller's SIGPIPE should be ignored.
 */
#ifndef SPACE_BENCH_LOAD_H
#define SPACE_BENCH_LOAD_H

#include <stdbool.h>

#include "api.h"

/* Most clients in one level. */
#define BN_LOAD_MAX_CLIENTS 64

typedef enum bn_load_kind { BN_LOAD_CREATE, BN_LOAD_EXEC } bn_load_kind;

typedef struct bn_load_config {
        const char *api, *key; /* the public API and its key: each client connects on its own */
        const char *create_body; /* the body of POST /v1/sandboxes */
        int op_timeout_s; /* an operation's bound (create, delete) */
        int seconds; /* the level's time bound: no operation starts after it */
        int ops; /* the level's count bound, all clients together */
        const char *const *sandboxes; /* BN_LOAD_EXEC: client k runs in sandboxes[k] */
} bn_load_config;

/* What one level did. ms is owned (bn_load_level_done frees it). */
typedef struct bn_load_level {
        int clients;
        int ok, failed; /* operations that succeeded, that failed */
        double seconds; /* the start to the last operation's end */
        bool time_bound; /* the time bound, not the count, ended it */
        bool timed_out; /* its clients were killed at the hard deadline */
        double *ms; /* the latencies of the ok operations, in ms */
        char error[512]; /* the first failure, "" when every operation succeeded */
} bn_load_level;

/* Runs one level of kind with clients processes (1 … BN_LOAD_MAX_CLIENTS;
 * BN_LOAD_EXEC needs that many sandboxes in cfg). a is the caller's client,
 * used to delete what the clients left. Fills *ret; a level that could not
 * run at all (a fork failed) says so in ret->error too. */
void bn_load_run(bn_api *a, bn_load_kind kind, const bn_load_config *cfg, int clients, bn_load_level *ret);

/* Frees what *lv owns; lv may be run again. */
void bn_load_level_done(bn_load_level *lv);

#endif
