/* SPDX-License-Identifier: Apache-2.0 */
/* Users and groups from the sandbox's own /etc files (the agent is static: no NSS). */
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "space/cleanup.h"

/* The sandbox owns /etc: its passwd or group may be a FIFO (which would block
 * the single-threaded agent forever), a device or a huge file. Only a regular
 * file is read, and only its first DB_MAX bytes. */
#define DB_MAX (4 << 20)

static FILE *open_db(const char *path)
{
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return NULL;
        struct stat st;
        FILE *f = NULL;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
                f = fdopen(fd, "re");
        if (!f)
                close(fd);
        return f;
}

/* Splits a colon-separated line into at most n fields, in place. */
static int split(char *line, char **f, int n)
{
        int i = 0;
        f[i++] = line;
        for (char *p = line; *p && i < n; p++)
                if (*p == ':') {
                        *p = '\0';
                        f[i++] = p + 1;
                }
        char *nl = strchr(f[i - 1], '\n');
        if (nl)
                *nl = '\0';
        return i;
}

static bool parse_id(const char *s, unsigned long *ret)
{
        if (!*s)
                return false;
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (*end || v > 0x7fffffffUL)
                return false;
        *ret = v;
        return true;
}

int ag_user_lookup(const char *name, ag_user *ret, sp_error **err)
{
        ag_user u = {.uid = 0, .gid = 0};
        const char *want = name && *name ? name : "root";
        unsigned long numeric = 0;
        bool by_id = parse_id(want, &numeric);
        bool found = false;

        _cleanup_fclose_ FILE *pw = open_db("/etc/passwd");
        char line[1024];
        while (pw && ftell(pw) < DB_MAX && fgets(line, sizeof(line), pw)) {
                char *f[7];
                if (split(line, f, 7) < 7)
                        continue;
                unsigned long uid, gid;
                if (!parse_id(f[2], &uid) || !parse_id(f[3], &gid))
                        continue;
                if (by_id ? uid != numeric : strcmp(f[0], want) != 0)
                        continue;
                u.uid = (uid_t)uid;
                u.gid = (gid_t)gid;
                snprintf(u.name, sizeof(u.name), "%s", f[0]);
                snprintf(u.home, sizeof(u.home), "%s", *f[5] ? f[5] : "/");
                snprintf(u.shell, sizeof(u.shell), "%s", *f[6] ? f[6] : "/bin/sh");
                found = true;
                break;
        }
        if (!found) {
                if (strcmp(want, "root") == 0 || (by_id && numeric == 0)) {
                        /* A root filesystem without /etc/passwd still has root. */
                        snprintf(u.name, sizeof(u.name), "root");
                        snprintf(u.home, sizeof(u.home), "/root");
                        snprintf(u.shell, sizeof(u.shell), "/bin/sh");
                } else if (by_id) {
                        /* An unnamed numeric user: allowed, like docker --user 1234. */
                        u.uid = (uid_t)numeric;
                        u.gid = (gid_t)numeric;
                        snprintf(u.name, sizeof(u.name), "%lu", numeric);
                        snprintf(u.home, sizeof(u.home), "/");
                        snprintf(u.shell, sizeof(u.shell), "/bin/sh");
                } else {
                        return sp_error_set(err, SP_E_NOT_FOUND, "user '%.64s' not found in the sandbox", want);
                }
        }

        u.groups[u.ngroups++] = u.gid;
        _cleanup_fclose_ FILE *gr = open_db("/etc/group");
        char gline[4096];
        while (gr && ftell(gr) < DB_MAX && fgets(gline, sizeof(gline), gr) &&
               u.ngroups < (int)SP_ARRAY_SIZE(u.groups)) {
                char *f[4];
                if (split(gline, f, 4) < 4)
                        continue;
                unsigned long gid;
                if (!parse_id(f[2], &gid) || gid == u.gid)
                        continue;
                char *save = NULL;
                for (char *m = strtok_r(f[3], ",", &save); m; m = strtok_r(NULL, ",", &save))
                        if (strcmp(m, u.name) == 0) {
                                u.groups[u.ngroups++] = (gid_t)gid;
                                break;
                        }
        }
        *ret = u;
        return 0;
}

int ag_path_resolve(const ag_user *u, const char *path, char *out, size_t outlen, sp_error **err)
{
        int n;
        if (path[0] == '/')
                n = snprintf(out, outlen, "%s", path);
        else if (path[0] == '~' && (path[1] == '/' || path[1] == '\0'))
                n = snprintf(out, outlen, "%s%s", u->home, path + 1);
        else
                n = snprintf(out, outlen, "%s/%s", strcmp(u->home, "/") == 0 ? "" : u->home, path);
        if (n < 0 || (size_t)n >= outlen)
                return sp_error_set(err, SP_E_INVALID, "path too long");
        return 0;
}

int ag_id_name(const char *db, unsigned long id, char *out, size_t outlen)
{
        _cleanup_fclose_ FILE *f = open_db(db);
        char line[4096];
        while (f && ftell(f) < DB_MAX && fgets(line, sizeof(line), f)) {
                char *fld[4];
                unsigned long v;
                if (split(line, fld, 4) < 3 || !parse_id(fld[2], &v) || v != id || !*fld[0])
                        continue;
                int n = snprintf(out, outlen, "%s", fld[0]);
                return n >= 0 && (size_t)n < outlen ? 0 : -1;
        }
        return -1;
}
