/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The start-up and event loop every daemon shares: settings from the table
 * (space/config.h), --help, logging, SIGPIPE, the event base, and SIGINT and
 * SIGTERM ending the loop so that main() frees what it made and exits 0.
 *
 *   int r = sp_daemon_setup(&dc, &cfg, argc, argv);
 *   if (r != SP_DAEMON_GO_ON)
 *           return r;
 *   ... sp_daemon_loop_new(&d, &e) ... make the servers on d.base ...
 *   sp_daemon_stop_on_signals(&d, NULL, &e);
 *   sp_log_info("... ready");
 *   sp_daemon_run(&d);
 *   ... free the servers ...
 *   sp_daemon_loop_free(&d);
 *
 * What a daemon does between is its own. One sp_daemon per process, used on
 * the thread that runs its loop.
 */
#ifndef SPACE_DAEMON_H
#define SPACE_DAEMON_H

#include <stdbool.h>
#include <stddef.h>

#include "space/config.h"
#include "space/error.h"

struct event;
struct event_base;

/* The two logging settings of a daemon's table, in a struct `type` with
 * char *log_level, *log_format. */
/* clang-format off */
#define SP_DAEMON_LOG_SETTINGS(type) \
        {"log-level", SP_CONFIG_STRING, "info", offsetof(type, log_level), 0, 0, "debug, info, warn, error"}, \
        {"log-format", SP_CONFIG_STRING, "auto", offsetof(type, log_format), 0, 0, \
         "auto (text on a terminal, else JSON), text, json"}
/* clang-format on */

typedef struct sp_daemon_config {
        const char *program; /* "space-worker": names the daemon on stderr before logging is set up */
        const char *component; /* "worker": the component of its log lines */
        const char *env_prefix; /* "SPACE_WORKER": of its environment variables (sp_config_load) */
        const sp_config_def *defs; /* its settings, with SP_DAEMON_LOG_SETTINGS */
        /* A write to a closed connection fails with EPIPE instead of killing
         * the daemon. Off where children inherit it (the worker's sandboxes). */
        bool ignore_sigpipe;
} sp_daemon_config;

/* sp_daemon_setup(): the daemon goes on. */
#define SP_DAEMON_GO_ON (-1)

/* Loads the settings into cfg (defaults, --config file, environment, flags),
 * then starts logging at the configured level and format and, if asked,
 * ignores SIGPIPE. Returns SP_DAEMON_GO_ON, or the status main() exits with:
 * 0 once --help or --print-config-doc was printed, 2 for bad settings or a
 * positional argument, said on stderr. cfg's strings are the caller's to
 * free (sp_config_free), whatever the result. */
int sp_daemon_setup(const sp_daemon_config *dc, void *cfg, int argc, char **argv);

/* The daemon's event loop; the caller allocates it zeroed. */
typedef struct sp_daemon {
        struct event_base *base; /* owned; what the daemon builds its servers on */
        struct event *stop[2]; /* SIGINT, SIGTERM */
        const char *stop_note; /* borrowed */
} sp_daemon;

/* Makes d->base. SP_E_LIMIT when libevent cannot. */
int sp_daemon_loop_new(sp_daemon *d, sp_error **err);

/* From now on SIGINT and SIGTERM end the loop: logged as "signal N:
 * stopping", with " (note)" when note is given (borrowed; it must outlive d).
 * Call it just before saying the daemon is ready. SP_E_LIMIT when out of
 * memory. */
int sp_daemon_stop_on_signals(sp_daemon *d, const char *note, sp_error **err);

/* Runs the loop until a stop signal (or event_base_loopexit). */
void sp_daemon_run(sp_daemon *d);

/* Frees the signal events and the base; accepts a zeroed d and zeroes it. */
void sp_daemon_loop_free(sp_daemon *d);

#endif
