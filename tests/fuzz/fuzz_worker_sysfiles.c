/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: the kernel text files the worker parses — mountinfo, cgroup
 * control files (single values, flat keyed files, cgroup.procs, controller
 * lists, mount options) — and template/sandbox names. The same bytes go to
 * every parser. Never crashes; failures carry an error; what is accepted
 * holds the parsers' promises. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cgroup/cgroup_internal.h"
#include "rootfs/mountinfo.h"
#include "rootfs/rootfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int mount_cb(const wk_mountinfo_entry *e, void *userdata, sp_error **err)
{
        (void)err;
        size_t size = *(size_t *)userdata;
        if (!e->root || !e->mount_point || !e->mount_options || !e->fstype || !e->source || !e->super_options)
                abort();
        /* Decoding only shrinks. */
        if (strlen(e->mount_point) > size || strlen(e->source) > size)
                abort();
        if (e->mount_id < 0 || e->parent_id < 0)
                abort();
        (void)wk_mountinfo_has_option(e->super_options, "rw");
        return 0;
}

static int pid_cb(pid_t pid, void *userdata)
{
        (void)userdata;
        if (pid <= 0)
                abort();
        return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *text = (const char *)data;

        sp_error *e = NULL;
        if (wk_mountinfo_parse(text, size, mount_cb, &size, &e) < 0 && !e)
                abort();
        sp_error_free(e);
        e = NULL;
        wk_mountinfo_entry one = {0};
        if (wk_mountinfo_parse_line(text, size, &one, &e) == 0)
                wk_mountinfo_entry_clear(&one);
        else if (!e || one.mount_point)
                abort();
        sp_error_free(e);

        uint64_t v;
        (void)wk__cg_parse_u64(text, size, &v);
        static const char *const keys[] = {"oom_kill", "usage_usec", "populated", "frozen", ""};
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
                int r = wk__cg_parse_keyed(text, size, keys[i], &v);
                if (r < -1 || r > 1)
                        abort();
        }
        (void)wk__cg_parse_pids(text, size, pid_cb, NULL);
        unsigned c2 = wk__cg_parse_v2_controllers(text, size);
        if (c2 & ~(WK_CGROUP_CPU | WK_CGROUP_MEMORY | WK_CGROUP_PIDS | WK_CGROUP_IO))
                abort();

        /* The parsers below take C strings. */
        char *s = malloc(size + 1);
        if (!s)
                abort();
        memcpy(s, data, size);
        s[size] = '\0';
        (void)wk__cg_parse_v1_options(s);
        if (wk_rootfs_name_validate("name", s, NULL) == 0) {
                size_t n = strlen(s);
                if (n == 0 || n > WK_ROOTFS_NAME_MAX || strchr(s, '/') || strstr(s, "..") || s[0] == '.')
                        abort();
        }
        free(s);
        return 0;
}
