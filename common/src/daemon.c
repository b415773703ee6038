/* SPDX-License-Identifier: Apache-2.0 */
/* The start-up every daemon shares: settings, logging, SIGPIPE, the event loop and its stop signals. */
#include <event2/event.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "space/cleanup.h"
#include "space/daemon.h"
#include "space/log.h"

/* The string setting key of defs in cfg; NULL when the table has none. */
static const char *setting(const sp_config_def *defs, const void *cfg, const char *key)
{
        for (const sp_config_def *d = defs; d->key; d++)
                if (d->type == SP_CONFIG_STRING && strcmp(d->key, key) == 0)
                        return *(char *const *)((const char *)cfg + d->offset);
        return NULL;
}

int sp_daemon_setup(const sp_daemon_config *dc, void *cfg, int argc, char **argv)
{
        _cleanup_error_ sp_error *e = NULL;
        int argind = 0;
        int r = sp_config_load(dc->defs, cfg, dc->env_prefix, argc, argv, &argind, stdout, &e);
        if (r == 1) {
                /* --help or --version: the settings read so far go (the caller returns at once). */
                sp_config_free(dc->defs, cfg);
                return 0;
        }
        if (r < 0 || argind < argc) {
                fprintf(stderr, "%s: %s\n", dc->program, e ? e->message : "unexpected argument (see --help)");
                sp_config_free(dc->defs, cfg);
                return 2;
        }
        const char *level_s = setting(dc->defs, cfg, "log-level"), *format_s = setting(dc->defs, cfg, "log-format");
        sp_log_level level = SP_LOG_INFO;
        sp_log_format format = SP_LOG_FORMAT_AUTO;
        if ((level_s && sp_log_level_parse(level_s, &level) < 0) ||
            (format_s && sp_log_format_parse(format_s, &format) < 0)) {
                fprintf(stderr, "%s: invalid --log-level or --log-format\n", dc->program);
                sp_config_free(dc->defs, cfg);
                return 2;
        }
        sp_log_init(dc->component, level, format);
        if (dc->ignore_sigpipe)
                signal(SIGPIPE, SIG_IGN);
        /* The bytes a daemon relays (a session's output, a file, an ingress
         * download) live in buffers that come and go with every read. glibc's
         * defaults give freed memory at the heap's top back to the kernel (trim)
         * and fault it in again for the next buffer: on a stream through the
         * data plane that was a quarter of its CPU (brk, page faults and the TLB
         * shootdowns of each trim; docs/performance.md). Keep up to 32 MiB of
         * it, and buffers under 1 MiB on the heap. */
        mallopt(M_MMAP_THRESHOLD, 1 << 20);
        mallopt(M_TRIM_THRESHOLD, 32 << 20);
        return SP_DAEMON_GO_ON;
}

int sp_daemon_loop_new(sp_daemon *d, sp_error **err)
{
        if (!(d->base = event_base_new()))
                return sp_error_set(err, SP_E_LIMIT, "cannot make the event loop");
        return 0;
}

static void on_stop(evutil_socket_t sig, short what, void *userdata)
{
        (void)what;
        sp_daemon *d = userdata;
        if (d->stop_note)
                sp_log_info("signal %d: stopping (%s)", (int)sig, d->stop_note);
        else
                sp_log_info("signal %d: stopping", (int)sig);
        event_base_loopexit(d->base, NULL);
}

int sp_daemon_stop_on_signals(sp_daemon *d, const char *note, sp_error **err)
{
        static const int sigs[] = {SIGINT, SIGTERM};
        d->stop_note = note;
        for (size_t i = 0; i < SP_ARRAY_SIZE(sigs); i++) {
                if (!d->stop[i] && !(d->stop[i] = evsignal_new(d->base, sigs[i], on_stop, d)))
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                if (event_add(d->stop[i], NULL) < 0)
                        return sp_error_set(err, SP_E_LIMIT, "cannot catch signal %d", sigs[i]);
        }
        return 0;
}

void sp_daemon_run(sp_daemon *d)
{
        event_base_dispatch(d->base);
}

void sp_daemon_loop_free(sp_daemon *d)
{
        for (size_t i = 0; i < SP_ARRAY_SIZE(d->stop); i++)
                if (d->stop[i])
                        event_free(d->stop[i]);
        if (d->base)
                event_base_free(d->base);
        memset(d, 0, sizeof(*d));
}
