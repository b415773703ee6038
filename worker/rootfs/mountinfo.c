/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"

#include "rootfs/mountinfo.h"

#define MOUNTINFO_MAX_FIELDS 64

/* Decodes the kernel's octal escapes (\ooo) into a new string; \000 stays
 * literal, so that no path is cut short. */
static char *decode(const char *s, size_t len)
{
        char *out = malloc(len + 1);
        if (!out)
                abort();
        size_t o = 0;
        for (size_t i = 0; i < len; i++) {
                if (s[i] == '\\' && len - i >= 4 && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
                    s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7' &&
                    (s[i + 1] != '0' || s[i + 2] != '0' || s[i + 3] != '0')) {
                        out[o++] = (char)(((s[i + 1] - '0') << 6) | ((s[i + 2] - '0') << 3) | (s[i + 3] - '0'));
                        i += 3;
                } else {
                        out[o++] = s[i];
                }
        }
        out[o] = '\0';
        return out;
}

static int parse_int(const char *s, size_t len, unsigned long max, unsigned long *ret)
{
        if (len == 0 || len > 10)
                return -1;
        unsigned long v = 0;
        for (size_t i = 0; i < len; i++) {
                if (s[i] < '0' || s[i] > '9')
                        return -1;
                v = v * 10 + (unsigned long)(s[i] - '0');
        }
        if (v > max)
                return -1;
        *ret = v;
        return 0;
}

int wk_mountinfo_parse_line(const char *line, size_t len, wk_mountinfo_entry *ret, sp_error **err)
{
        if (len > 0 && line[len - 1] == '\n')
                len--;
        if (len > WK_MOUNTINFO_MAX_LINE)
                return sp_error_set(err, SP_E_TOO_LARGE, "mountinfo line longer than %d bytes", WK_MOUNTINFO_MAX_LINE);
        if (memchr(line, '\0', len))
                return sp_error_set(err, SP_E_INVALID, "mountinfo line contains a NUL byte");

        const char *f[MOUNTINFO_MAX_FIELDS];
        size_t fl[MOUNTINFO_MAX_FIELDS];
        size_t n = 0;
        for (size_t i = 0; i < len;) {
                if (line[i] == ' ') {
                        i++;
                        continue;
                }
                if (n == MOUNTINFO_MAX_FIELDS)
                        return sp_error_set(err, SP_E_INVALID, "mountinfo line has more than %d fields",
                                            MOUNTINFO_MAX_FIELDS);
                size_t start = i;
                while (i < len && line[i] != ' ')
                        i++;
                f[n] = line + start;
                fl[n] = i - start;
                n++;
        }

        /* id parent maj:min root mountpoint options [optional...] - fstype source superoptions */
        size_t sep = 0;
        for (size_t i = 6; i < n; i++) {
                if (fl[i] == 1 && f[i][0] == '-') {
                        sep = i;
                        break;
                }
        }
        if (n < 10 || sep == 0 || n != sep + 4)
                return sp_error_set(err, SP_E_INVALID, "malformed mountinfo line (%zu fields)", n);

        unsigned long id, parent, major, minor;
        const char *colon = memchr(f[2], ':', fl[2]);
        if (parse_int(f[0], fl[0], INT_MAX, &id) < 0 || parse_int(f[1], fl[1], INT_MAX, &parent) < 0 || !colon ||
            parse_int(f[2], (size_t)(colon - f[2]), UINT32_MAX, &major) < 0 ||
            parse_int(colon + 1, fl[2] - (size_t)(colon - f[2]) - 1, UINT32_MAX, &minor) < 0)
                return sp_error_set(err, SP_E_INVALID, "malformed mountinfo ids");

        wk_mountinfo_entry e = {
                .mount_id = (int)id,
                .parent_id = (int)parent,
                .major = (unsigned)major,
                .minor = (unsigned)minor,
                .root = decode(f[3], fl[3]),
                .mount_point = decode(f[4], fl[4]),
                .mount_options = decode(f[5], fl[5]),
                .fstype = decode(f[sep + 1], fl[sep + 1]),
                .source = decode(f[sep + 2], fl[sep + 2]),
                .super_options = decode(f[sep + 3], fl[sep + 3]),
        };
        *ret = e;
        return 0;
}

void wk_mountinfo_entry_clear(wk_mountinfo_entry *e)
{
        if (!e)
                return;
        free(e->root);
        free(e->mount_point);
        free(e->mount_options);
        free(e->fstype);
        free(e->source);
        free(e->super_options);
        memset(e, 0, sizeof(*e));
}

int wk_mountinfo_parse(const char *text, size_t len, wk_mountinfo_fn fn, void *userdata, sp_error **err)
{
        size_t lineno = 0;
        for (size_t pos = 0; pos < len;) {
                const char *nl = memchr(text + pos, '\n', len - pos);
                size_t end = nl ? (size_t)(nl - text) : len;
                lineno++;
                if (end > pos) {
                        wk_mountinfo_entry e;
                        if (wk_mountinfo_parse_line(text + pos, end - pos, &e, err) < 0)
                                return sp_error_wrap(err, "mountinfo line %zu", lineno);
                        int r = fn(&e, userdata, err);
                        wk_mountinfo_entry_clear(&e);
                        if (r != 0)
                                return r;
                }
                pos = end + 1;
        }
        return 0;
}

int wk_mountinfo_foreach(const char *path, wk_mountinfo_fn fn, void *userdata, sp_error **err)
{
        if (!path)
                path = "/proc/self/mountinfo";
        sp_buf b = SP_BUF_INIT;
        int r = sp_file_read(path, WK_MOUNTINFO_MAX_BYTES, &b, err);
        if (r >= 0)
                r = wk_mountinfo_parse(b.data ? b.data : "", b.len, fn, userdata, err);
        sp_buf_free(&b);
        return r;
}

struct find_ctx {
        const char *mount_point;
        wk_mountinfo_entry found;
        bool have;
};

static int find_cb(const wk_mountinfo_entry *e, void *userdata, sp_error **err)
{
        (void)err;
        struct find_ctx *c = userdata;
        if (strcmp(e->mount_point, c->mount_point) != 0)
                return 0;
        /* Later lines are mounted on top of earlier ones: keep the last. */
        wk_mountinfo_entry_clear(&c->found);
        c->found = (wk_mountinfo_entry){
                .mount_id = e->mount_id,
                .parent_id = e->parent_id,
                .major = e->major,
                .minor = e->minor,
                .root = strdup(e->root),
                .mount_point = strdup(e->mount_point),
                .mount_options = strdup(e->mount_options),
                .fstype = strdup(e->fstype),
                .source = strdup(e->source),
                .super_options = strdup(e->super_options),
        };
        if (!c->found.root || !c->found.mount_point || !c->found.mount_options || !c->found.fstype ||
            !c->found.source || !c->found.super_options)
                abort();
        c->have = true;
        return 0;
}

int wk_mountinfo_find(const char *mount_point, wk_mountinfo_entry *ret, sp_error **err)
{
        struct find_ctx c = {.mount_point = mount_point};
        int r = wk_mountinfo_foreach(NULL, find_cb, &c, err);
        if (r < 0) {
                wk_mountinfo_entry_clear(&c.found);
                return r;
        }
        if (!c.have)
                return 0;
        *ret = c.found;
        return 1;
}

bool wk_mountinfo_has_option(const char *opts, const char *opt)
{
        size_t n = strlen(opt);
        if (n == 0)
                return false;
        for (const char *p = opts; p && *p;) {
                const char *comma = strchr(p, ',');
                size_t l = comma ? (size_t)(comma - p) : strlen(p);
                if (l == n && memcmp(p, opt, n) == 0)
                        return true;
                p = comma ? comma + 1 : NULL;
        }
        return false;
}
