/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl audit: the audit log (GET /v1/audit), filtered, page after page;
 * with --follow it keeps polling with the last page's cursor, which the API
 * guarantees misses no record that commits late (docs/api.md, "Audit log").
 * Polling rather than a long-poll: the API has long-polls for operations
 * only, and a notification per audit record would cost every mutation.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/time.h"

/* The most records printed without --follow when --limit is not given. */
#define DEFAULT_MAX_RECORDS 1000
/* How far back --follow starts without --since or --cursor. */
#define FOLLOW_LOOKBACK_S 60

/* s with every control byte (C0, DEL) written as \xNN: what a tenant put in an id (its own
 * refused call's path) must not move the cursor, clear a line or forge one on the terminal. */
static const char *safe(const char *s, char *out, size_t n)
{
        size_t o = 0;
        for (; *s && o + 5 < n; s++) {
                unsigned char ch = (unsigned char)*s;
                if (ch < 0x20 || ch == 0x7f)
                        o += (size_t)snprintf(out + o, n - o, "\\x%02x", ch);
                else
                        out[o++] = (char)ch;
        }
        out[o] = '\0';
        return out;
}

static void print_record(ctl_ctx *ctx, json_object *rec)
{
        if (ctx->json) {
                fprintf(ctx->out, "%s\n", json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN));
                return;
        }
        char object[200];
        const char *type = ctl_jstr(rec, "object_type"), *id = ctl_jstr(rec, "object_id");
        snprintf(object, sizeof(object), "%s%s%s", type, strcmp(id, "-") == 0 ? "" : "/",
                 strcmp(id, "-") == 0 ? "" : id);
        char outcome[48];
        const char *st = ctl_jstr(rec, "status");
        if (strcmp(ctl_jstr(rec, "outcome"), "ok") == 0 || strcmp(st, "-") == 0)
                snprintf(outcome, sizeof(outcome), "%s", ctl_jstr(rec, "outcome"));
        else
                snprintf(outcome, sizeof(outcome), "%s(%s)", ctl_jstr(rec, "outcome"), st);
        char b[7][1100];
        fprintf(ctx->out, "%-27s %-24s %-46s %-16s %-24s %-24s %s\n", safe(ctl_jstr(rec, "at"), b[0], sizeof(b[0])),
                safe(ctl_jstr(rec, "action"), b[1], sizeof(b[1])), safe(object, b[2], sizeof(b[2])),
                safe(outcome, b[3], sizeof(b[3])), safe(ctl_jstr(rec, "key_id"), b[4], sizeof(b[4])),
                safe(ctl_jstr(rec, "tenant_id"), b[5], sizeof(b[5])),
                safe(ctl_jstr(rec, "request_id"), b[6], sizeof(b[6])));
}

/* --since/--until: an RFC 3339 time as it is, or a duration meaning that long ago. */
static int time_arg(ctl_ctx *ctx, const ctl_args *a, const char *name, char out[static 40], sp_error **err)
{
        out[0] = '\0';
        const char *s = ctl_arg(a, name);
        if (!s)
                return 0;
        int64_t us = 0;
        if (sp_time_parse_rfc3339(s, &us, NULL) == 0) {
                snprintf(out, 40, "%s", s);
                return 0;
        }
        int64_t ago = 0;
        int r = ctl_parse_seconds(s, &ago, err);
        if (r < 0) {
                sp_error_wrap(err, "--%s: neither an RFC 3339 time nor a duration", name);
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        char ts[32];
        sp_time_format_rfc3339(sp_now_real_us() - ago * SP_USEC_PER_SEC, ts);
        snprintf(out, 40, "%s", ts);
        return 0;
}

int ctl_run_audit(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int64_t max = 0, interval_s = 2, for_s = 0;
        const char *s;
        int r;
        bool follow = ctl_flag(a, "follow");
        if ((s = ctl_arg(a, "limit")) && (r = ctl_parse_int(s, 1, INT64_C(1) << 40, &max, err)) < 0) {
                sp_error_wrap(err, "--limit");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        if ((s = ctl_arg(a, "interval")) && (r = ctl_parse_seconds(s, &interval_s, err)) < 0) {
                sp_error_wrap(err, "--interval");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        if ((s = ctl_arg(a, "for")) && (r = ctl_parse_seconds(s, &for_s, err)) < 0) {
                sp_error_wrap(err, "--for");
                return ctl_failed(ctx, CTL_EXIT_USAGE, r);
        }
        if ((for_s || ctl_arg(a, "interval")) && !follow)
                return ctl_fail(ctx, CTL_EXIT_USAGE, err, SP_E_INVALID, "--for and --interval go with --follow");
        if (interval_s < 1)
                interval_s = 1;
        if (!max && !follow)
                max = DEFAULT_MAX_RECORDS;
        char since[40], until[40];
        if (time_arg(ctx, a, "since", since, err) < 0 || time_arg(ctx, a, "until", until, err) < 0)
                return -1;
        /* Following from nowhere in particular starts a minute back, not at the beginning of the
         * log (--since or --cursor for more). */
        if (follow && !since[0] && !ctl_arg(a, "cursor"))
                sp_time_format_rfc3339(sp_now_real_us() - FOLLOW_LOOKBACK_S * SP_USEC_PER_SEC, since);
        _cleanup_buf_ sp_buf base = SP_BUF_INIT;
        /* The filters, each "&name=value"; every request is /v1/audit?limit=N<filters>[&cursor=C]. */
        sp_buf_append_str(&base, "", NULL);
        static const struct {
                const char *opt, *param;
        } filters[] = {{"tenant", "tenant_id"}, {"key", "key_id"},    {"object-type", "object_type"},
                       {"object", "object_id"}, {"action", "action"}, {"outcome", "outcome"}};
        for (size_t i = 0; i < SP_ARRAY_SIZE(filters); i++)
                if ((s = ctl_arg(a, filters[i].opt))) {
                        sp_buf_appendf(&base, NULL, "&%s=", filters[i].param);
                        ctl_url_escape(&base, s);
                }
        const char *times[][2] = {{"since", since}, {"until", until}};
        for (size_t i = 0; i < 2; i++)
                if (times[i][1][0]) {
                        sp_buf_appendf(&base, NULL, "&%s=", times[i][0]);
                        ctl_url_escape(&base, times[i][1]);
                }
        _cleanup_free_ char *cursor = (s = ctl_arg(a, "cursor")) ? strdup(s) : NULL;
        int64_t printed = 0;
        int64_t end = for_s ? sp_now_mono_us() + for_s * SP_USEC_PER_SEC : 0;
        for (;;) {
                _cleanup_buf_ sp_buf target = SP_BUF_INIT;
                /* Pages end where --limit does, so that the cursor printed then goes on from there. */
                int64_t want = max ? max - printed : 1000;
                sp_buf_appendf(&target, NULL, "/v1/audit?limit=%lld", (long long)(want < 1000 ? want : 1000));
                sp_buf_append(&target, base.data, base.len, NULL);
                if (cursor) {
                        sp_buf_append_str(&target, "&cursor=", NULL);
                        ctl_url_escape(&target, cursor);
                }
                _cleanup_json_ json_object *page = NULL;
                if ((r = ctl_api(ctx, "GET", target.data, NULL, NULL, &page, err)) < 0)
                        return r;
                json_object *recs = NULL, *nc = NULL;
                json_object_object_get_ex(page, "records", &recs);
                for (size_t i = 0; recs && i < json_object_array_length(recs); i++) {
                        print_record(ctx, json_object_array_get_idx(recs, i));
                        printed++;
                }
                fflush(ctx->out);
                if (json_object_object_get_ex(page, "next_cursor", &nc) && json_object_is_type(nc, json_type_string)) {
                        free(cursor);
                        cursor = strdup(json_object_get_string(nc));
                }
                bool more = strcmp(ctl_jstr(page, "has_more"), "true") == 0;
                if (max && printed >= max) {
                        if (more)
                                fprintf(stderr, "spacectl: more records: go on with --cursor %s\n",
                                        cursor ? cursor : "");
                        return 0;
                }
                if (more)
                        continue;
                if (!follow || (end && sp_now_mono_us() >= end))
                        return 0;
                usleep((useconds_t)(interval_s * 1000000));
                if (end && sp_now_mono_us() >= end)
                        return 0;
        }
}

const ctl_opt ctl_audit_opts[] = {
        {"tenant", "ID", 0, "only this tenant's records (admins; other keys see their own tenant's only)"},
        {"key", "ID", 0, "only what this API key did (or was refused)"},
        {"object-type", "TYPE", 0, "only records about this kind of object: sandbox, session, template, key, ..."},
        {"object", "ID", 0, "only records about this object (its id, or name for templates, profiles, secrets)"},
        {"action", "ACTION", 0, "only this action (sandbox.create), or those starting with a prefix (sandbox.)"},
        {"outcome", "OUTCOME", 0, "only ok, denied or failed"},
        {"since", "TIME", 0, "records at or after this time: RFC 3339, or a duration ago (1h, 2d)"},
        {"until", "TIME", 0, "records before this time: RFC 3339, or a duration ago"},
        {"limit", "N", 0, "print at most N records (default 1000 without --follow; then says how to go on)"},
        {"cursor", "CURSOR", 0, "start after this position (a cursor an earlier run printed)"},
        {"follow", NULL, CTL_OPT_SHORT('f'),
         "keep printing new records until interrupted (from a minute back unless --since or --cursor)"},
        {"interval", "DURATION", 0, "with --follow: how often to poll (default 2s)"},
        {"for", "DURATION", 0, "with --follow: stop after this long (10s, 5m)"},
        {0},
};
