/* SPDX-License-Identifier: Apache-2.0 */
/* spacectl's output: JSON, key/value listings and aligned tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "space/time.h"

void ctl_print_json(ctl_ctx *ctx, json_object *o)
{
        fprintf(ctx->out, "%s\n",
                json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE));
}

static json_object *lookup(json_object *o, const char *path)
{
        char part[128];
        while (o && *path) {
                size_t n = strcspn(path, ".");
                if (n >= sizeof(part))
                        return NULL;
                memcpy(part, path, n);
                part[n] = '\0';
                json_object *next = NULL;
                if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, part, &next))
                        return NULL;
                o = next;
                path += n;
                if (*path == '.')
                        path++;
        }
        return o;
}

const char *ctl_jstr(json_object *o, const char *path)
{
        json_object *v = lookup(o, path);
        if (!v || json_object_is_type(v, json_type_object) || json_object_is_type(v, json_type_array))
                return "-";
        return json_object_get_string(v);
}

const char *ctl_jage(json_object *o, const char *path, char *buf, size_t len)
{
        const char *s = ctl_jstr(o, path);
        int64_t t;
        if (strcmp(s, "-") == 0 || sp_time_parse_rfc3339(s, &t, NULL) < 0)
                return "-";
        int64_t secs = (sp_now_real_us() - t) / SP_USEC_PER_SEC;
        if (secs < 0)
                secs = 0;
        if (secs < 120)
                snprintf(buf, len, "%llds", (long long)secs);
        else if (secs < 2 * 3600)
                snprintf(buf, len, "%lldm", (long long)(secs / 60));
        else if (secs < 2 * 86400)
                snprintf(buf, len, "%lldh", (long long)(secs / 3600));
        else
                snprintf(buf, len, "%lldd", (long long)(secs / 86400));
        return buf;
}

static void print_value(ctl_ctx *ctx, const char *prefix, json_object *v)
{
        if (json_object_is_type(v, json_type_object) && json_object_object_length(v) > 0) {
                json_object_object_foreach (v, key, val) {
                        char sub[256];
                        snprintf(sub, sizeof(sub), "%s.%s", prefix, key);
                        print_value(ctx, sub, val);
                }
                return;
        }
        fprintf(ctx->out, "%s: ", prefix);
        if (!v) {
                fputs("-", ctx->out);
        } else if (json_object_is_type(v, json_type_array)) {
                size_t n = json_object_array_length(v);
                for (size_t i = 0; i < n; i++) {
                        json_object *e = json_object_array_get_idx(v, i);
                        fprintf(ctx->out, "%s%s", i ? ", " : "",
                                json_object_is_type(e, json_type_string) ? json_object_get_string(e)
                                                                         : json_object_to_json_string(e));
                }
        } else if (json_object_is_type(v, json_type_object)) {
                fputs("-", ctx->out);
        } else {
                fputs(json_object_get_string(v), ctx->out);
        }
        fputc('\n', ctx->out);
}

void ctl_print_object(ctl_ctx *ctx, json_object *o)
{
        json_object_object_foreach (o, key, val) {
                print_value(ctx, key, val);
        }
}

/* ---- tables ---- */

void ctl_table_init(ctl_table *t, const char *const *header)
{
        memset(t, 0, sizeof(*t));
        while (header[t->ncols])
                t->ncols++;
        ctl_table_row(t, header);
}

void ctl_table_row(ctl_table *t, const char *const *cells)
{
        char **grown = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(char *));
        if (!grown)
                abort();
        t->cells = grown;
        for (size_t i = 0; i < t->ncols; i++) {
                char *c = strdup(cells[i] ? cells[i] : "-");
                if (!c)
                        abort();
                /* One line per row: control characters would break the columns. */
                for (char *p = c; *p; p++)
                        if ((unsigned char)*p < 0x20)
                                *p = ' ';
                t->cells[t->nrows * t->ncols + i] = c;
        }
        t->nrows++;
}

void ctl_table_print(ctl_ctx *ctx, const ctl_table *t)
{
        size_t *width = calloc(t->ncols ? t->ncols : 1, sizeof(size_t));
        if (!width)
                abort();
        for (size_t r = 0; r < t->nrows; r++)
                for (size_t c = 0; c < t->ncols; c++) {
                        size_t n = strlen(t->cells[r * t->ncols + c]);
                        if (n > width[c])
                                width[c] = n;
                }
        for (size_t r = 0; r < t->nrows; r++) {
                for (size_t c = 0; c < t->ncols; c++) {
                        const char *cell = t->cells[r * t->ncols + c];
                        if (c + 1 == t->ncols)
                                fprintf(ctx->out, "%s\n", cell);
                        else
                                fprintf(ctx->out, "%-*s  ", (int)width[c], cell);
                }
        }
        free(width);
}

void ctl_table_free(ctl_table *t)
{
        for (size_t i = 0; i < t->nrows * t->ncols; i++)
                free(t->cells[i]);
        free(t->cells);
        memset(t, 0, sizeof(*t));
}

const char *ctl_jjoin(json_object *o, const char *key, char *buf, size_t len)
{
        json_object *arr = NULL;
        buf[0] = '\0';
        size_t used = 0;
        if (json_object_object_get_ex(o, key, &arr) && json_object_is_type(arr, json_type_array))
                for (size_t i = 0; i < json_object_array_length(arr) && used + 1 < len; i++) {
                        int n = snprintf(buf + used, len - used, "%s%s", i ? "," : "",
                                         json_object_get_string(json_object_array_get_idx(arr, i)));
                        used += n > 0 ? (size_t)n : 0;
                }
        if (used >= len - 1 && len > 4)
                memcpy(buf + len - 4, "...", 4);
        return buf[0] ? buf : "-";
}
