/* SPDX-License-Identifier: Apache-2.0 */
/* The host's registry of direct-mode clusters' uid ranges (uidrange.h). */
#include "uidrange.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"

#define MAX_RANGES 4096
#define MAX_FILE (4 << 20)

typedef struct range {
        char dir[PATH_MAX];
        uint32_t base, count;
} range;

typedef struct registry {
        range *r;
        size_t n;
} registry;

static void registry_free(registry *g)
{
        free(g->r);
        g->r = NULL;
        g->n = 0;
}

const char *ctl_uidrange_registry(void)
{
        const char *e = getenv("SPACE_DIRECT_UID_REGISTRY");
        return e && *e ? e : CTL_UIDRANGE_REGISTRY;
}

/* Takes the registry's lock (a file beside it, made with its directory). */
static int lock_registry(const char *path, int *ret_fd, sp_error **err)
{
        char dir[PATH_MAX], lock[PATH_MAX + 8];
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
                *slash = '\0';
                if (sp_mkdir_p(dir, 0755, err) < 0)
                        return -SP_E_IO;
        }
        snprintf(lock, sizeof(lock), "%s.lock", path);
        int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "open %s", lock);
        while (flock(fd, LOCK_EX) < 0) {
                if (errno != EINTR) {
                        int saved = errno;
                        close(fd);
                        return sp_error_set_errno(err, SP_E_IO, saved, "lock %s", lock);
                }
        }
        *ret_fd = fd;
        return 0;
}

static bool valid_range(uint64_t base, uint64_t count)
{
        return count >= CTL_UIDRANGE_ALIGN && count % CTL_UIDRANGE_ALIGN == 0 && base >= CTL_UIDRANGE_FIRST &&
               base % CTL_UIDRANGE_ALIGN == 0 && base <= CTL_UIDRANGE_BASE_MAX && base + count <= CTL_UIDRANGE_END;
}

/* Reads the registry (none yet: empty). */
static int load(const char *path, registry *g, sp_error **err)
{
        memset(g, 0, sizeof(*g));
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (access(path, F_OK) != 0 && errno == ENOENT)
                return 0;
        if (sp_file_read(path, MAX_FILE, &b, err) < 0)
                return sp_error_wrap(err, "the uid range registry");
        _cleanup_json_ json_object *o = NULL;
        json_object *arr = NULL;
        if (sp_json_parse(b.data ? b.data : "", b.len, &o, NULL) < 0 || !json_object_is_type(o, json_type_object) ||
            !json_object_object_get_ex(o, "ranges", &arr) || !json_object_is_type(arr, json_type_array) ||
            json_object_array_length(arr) > MAX_RANGES)
                return sp_error_set(err, SP_E_INVALID,
                                    "%s is not a uid range registry (fix or remove it by hand: clusters' ranges "
                                    "must never be handed out twice)",
                                    path);
        size_t n = json_object_array_length(arr);
        g->r = calloc(n + 1, sizeof(range));
        if (!g->r)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(arr, i), *d = NULL, *bv = NULL, *cv = NULL;
                if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, "state_dir", &d) ||
                    !json_object_is_type(d, json_type_string) || json_object_get_string_len(d) < 1 ||
                    json_object_get_string_len(d) >= PATH_MAX || !json_object_object_get_ex(e, "base", &bv) ||
                    !json_object_is_type(bv, json_type_int) || !json_object_object_get_ex(e, "count", &cv) ||
                    !json_object_is_type(cv, json_type_int) || json_object_get_int64(bv) < 0 ||
                    json_object_get_int64(cv) < 0 ||
                    !valid_range((uint64_t)json_object_get_int64(bv), (uint64_t)json_object_get_int64(cv))) {
                        registry_free(g);
                        return sp_error_set(err, SP_E_INVALID,
                                            "%s: entry %zu is not a uid range (fix or remove it by hand)", path, i);
                }
                range *r = &g->r[g->n++];
                snprintf(r->dir, sizeof(r->dir), "%s", json_object_get_string(d));
                r->base = (uint32_t)json_object_get_int64(bv);
                r->count = (uint32_t)json_object_get_int64(cv);
        }
        return 0;
}

static int save(const char *path, const registry *g, sp_error **err)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object *arr = json_object_new_array();
        json_object_object_add(o, "ranges", arr);
        for (size_t i = 0; i < g->n; i++) {
                json_object *e = json_object_new_object();
                json_object_object_add(e, "state_dir", json_object_new_string(g->r[i].dir));
                json_object_object_add(e, "base", json_object_new_int64(g->r[i].base));
                json_object_object_add(e, "count", json_object_new_int64(g->r[i].count));
                json_object_array_add(arr, e);
        }
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        if (sp_file_write_atomic(path, s, strlen(s), 0644, err) < 0)
                return sp_error_wrap(err, "the uid range registry");
        return 0;
}

/* Whether the cluster of entry r still exists. */
static bool alive(const range *r)
{
        char p[PATH_MAX + 16];
        snprintf(p, sizeof(p), "%s/direct.json", r->dir);
        return access(p, F_OK) == 0;
}

static bool overlaps(const registry *g, uint64_t base, uint64_t count)
{
        for (size_t i = 0; i < g->n; i++)
                if (base < (uint64_t)g->r[i].base + g->r[i].count && g->r[i].base < base + count)
                        return true;
        return false;
}

int ctl_uidrange_reserve(const char *path, const char *state_dir, uint32_t count, uint32_t preferred,
                         uint32_t *ret_base, sp_error **err)
{
        char dir[PATH_MAX];
        if (!realpath(state_dir, dir))
                return sp_error_set_errno(err, SP_E_IO, errno, "%s", state_dir);
        if (!valid_range(CTL_UIDRANGE_FIRST, count))
                return sp_error_set(err, SP_E_INVALID, "a uid range of %u ids: a multiple of 65536 that fits is needed",
                                    count);
        _cleanup_close_ int lock = -1;
        if (lock_registry(path, &lock, err) < 0)
                return -SP_E_IO;
        _cleanup_(registry_free) registry g = {0};
        if (load(path, &g, err) < 0)
                return -(int)(*err)->code;
        /* Ours, or the ranges of clusters that are gone (reclaimed). */
        size_t kept = 0;
        const range *mine = NULL;
        for (size_t i = 0; i < g.n; i++) {
                if (strcmp(g.r[i].dir, dir) != 0 && !alive(&g.r[i]))
                        continue;
                g.r[kept++] = g.r[i];
        }
        g.n = kept;
        for (size_t i = 0; i < g.n; i++)
                if (strcmp(g.r[i].dir, dir) == 0)
                        mine = &g.r[i];
        if (mine) {
                if (mine->count < count)
                        return sp_error_set(err, SP_E_CONFLICT,
                                            "the cluster in %s holds %u host uids (%u sandboxes) and now needs %u: "
                                            "start its worker with at most that many slots",
                                            dir, mine->count, mine->count / CTL_UIDRANGE_ALIGN, count);
                uint32_t base = mine->base;
                if (save(path, &g, err) < 0) /* the reclaimed ones dropped */
                        return -SP_E_IO;
                *ret_base = base;
                return 0;
        }
        uint64_t base = 0;
        if (preferred && valid_range(preferred, count) && !overlaps(&g, preferred, count)) {
                base = preferred;
        } else {
                /* The lowest free range: past every range it meets. */
                for (uint64_t b = CTL_UIDRANGE_FIRST; b <= CTL_UIDRANGE_BASE_MAX && b + count <= CTL_UIDRANGE_END;) {
                        uint64_t next = 0;
                        for (size_t i = 0; i < g.n; i++)
                                if (b < (uint64_t)g.r[i].base + g.r[i].count && g.r[i].base < b + count)
                                        next = next > (uint64_t)g.r[i].base + g.r[i].count
                                                       ? next
                                                       : (uint64_t)g.r[i].base + g.r[i].count;
                        if (!next) {
                                base = b;
                                break;
                        }
                        b = (next + CTL_UIDRANGE_ALIGN - 1) / CTL_UIDRANGE_ALIGN * CTL_UIDRANGE_ALIGN;
                }
        }
        if (!base)
                return sp_error_set(err, SP_E_LIMIT,
                                    "no free range of %u host uids is left in %s: remove clusters with spacectl down "
                                    "--purge",
                                    count, path);
        if (g.n >= MAX_RANGES)
                return sp_error_set(err, SP_E_LIMIT, "%s holds %d ranges already", path, MAX_RANGES);
        range *nr = realloc(g.r, (g.n + 1) * sizeof(range));
        if (!nr)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        g.r = nr;
        memset(&g.r[g.n], 0, sizeof(range));
        snprintf(g.r[g.n].dir, sizeof(g.r[g.n].dir), "%s", dir);
        g.r[g.n].base = (uint32_t)base;
        g.r[g.n].count = count;
        g.n++;
        if (save(path, &g, err) < 0)
                return -SP_E_IO;
        *ret_base = (uint32_t)base;
        return 0;
}

int ctl_uidrange_release(const char *path, const char *state_dir, sp_error **err)
{
        char dir[PATH_MAX];
        if (!realpath(state_dir, dir))
                snprintf(dir, sizeof(dir), "%s", state_dir);
        if (access(path, F_OK) != 0)
                return 0;
        _cleanup_close_ int lock = -1;
        if (lock_registry(path, &lock, err) < 0)
                return -SP_E_IO;
        _cleanup_(registry_free) registry g = {0};
        if (load(path, &g, err) < 0)
                return -(int)(*err)->code;
        size_t kept = 0;
        for (size_t i = 0; i < g.n; i++)
                if (strcmp(g.r[i].dir, dir) != 0)
                        g.r[kept++] = g.r[i];
        if (kept == g.n)
                return 0;
        g.n = kept;
        return save(path, &g, err);
}
