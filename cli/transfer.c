/* SPDX-License-Identifier: Apache-2.0 */
/* Progress of a transfer on stderr: bytes, a bar when the size is known, the rate. */
#include <stdio.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/time.h"

/* Nothing for a transfer done within this long, then updates this often. */
#define PROGRESS_AFTER_US (500 * SP_USEC_PER_MSEC)
#define PROGRESS_EVERY_TTY_US (100 * SP_USEC_PER_MSEC)
#define PROGRESS_EVERY_US (2 * SP_USEC_PER_SEC)

void ctl_human_bytes(char out[static 32], int64_t n)
{
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        double v = (double)n;
        size_t u = 0;
        while (v >= 1024 && u + 1 < SP_ARRAY_SIZE(units)) {
                v /= 1024;
                u++;
        }
        snprintf(out, 32, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void ctl_xfer_tick(ctl_xfer *x, bool final)
{
        int64_t now = sp_now_mono_us();
        if (!x->p.on || now - x->start_us < PROGRESS_AFTER_US)
                return;
        if (!final && now - x->last_us < (x->p.tty ? PROGRESS_EVERY_TTY_US : PROGRESS_EVERY_US))
                return;
        x->last_us = now;
        char done[32], total[32], rate[32];
        ctl_human_bytes(done, x->done);
        ctl_human_bytes(rate, (int64_t)((double)x->done * SP_USEC_PER_SEC / (double)(now - x->start_us)));
        if (x->total > 0) {
                char bar[21];
                int fill = (int)(x->done * 20 / x->total);
                for (int i = 0; i < 20; i++)
                        bar[i] = i < fill ? '#' : '-';
                bar[20] = '\0';
                ctl_human_bytes(total, x->total);
                ctl_progress_update(&x->p, "%s [%s] %3d%% %s/%s %s/s", x->label, bar, (int)(x->done * 100 / x->total),
                                    done, total, rate);
        } else {
                ctl_progress_update(&x->p, "%s %s %s/s", x->label, done, rate);
        }
}

void ctl_xfer_begin(ctl_ctx *ctx, ctl_xfer *x, const char *label, int64_t total)
{
        ctl_progress_begin(ctx, &x->p);
        x->label = label;
        x->total = total;
        x->done = 0;
        x->start_us = x->last_us = sp_now_mono_us();
}
