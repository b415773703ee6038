/* SPDX-License-Identifier: Apache-2.0 */
/* A worker's sandbox network (see net.h). */
#include "net/net.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/log.h"

struct wk_net {
        wk_net_pool pool;
};

int wk_net_new(const wk_net_config *cfg, wk_net **ret, sp_error **err)
{
        wk_net_pool pool;
        if (wk_net_pool_parse(cfg->cidr ? cfg->cidr : WK_NET_DEFAULT_CIDR, &pool, err) < 0 ||
            (cfg->ifprefix && wk_net_pool_set_ifprefix(&pool, cfg->ifprefix, err) < 0))
                return -SP_E_INVALID;
        wk_net *n = calloc(1, sizeof(*n));
        if (!n)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        n->pool = pool;
        *ret = n;
        return 0;
}

void wk_net_free(wk_net *n)
{
        free(n);
}

const wk_net_pool *wk_net_pool_of(const wk_net *n)
{
        return &n->pool;
}

static int open_netns(pid_t pid, int *ret, sp_error **err)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
        *ret = open(path, O_RDONLY | O_CLOEXEC);
        if (*ret < 0)
                return sp_error_set_errno(err, SP_E_IO, errno, "the network namespace of process %d", (int)pid);
        return 0;
}

int wk_net_sandbox_up(wk_net *n, uint32_t slot, pid_t pid, sp_error **err)
{
        wk_net_link l;
        if (wk_net_link_of(&n->pool, slot, &l, err) < 0)
                return -SP_E_LIMIT;
        _cleanup_close_ int fd = -1;
        if (open_netns(pid, &fd, err) < 0)
                return -SP_E_IO;
        return wk_net_link_create(&l, fd, err) < 0 ? -SP_E_IO : 0;
}

int wk_net_sandbox_adopt(wk_net *n, uint32_t slot, pid_t pid, const char *saved_if, sp_error **err)
{
        wk_net_link l;
        if (wk_net_link_of(&n->pool, slot, &l, err) < 0)
                return -SP_E_LIMIT;
        if (saved_if && *saved_if && strcmp(saved_if, l.host_if) != 0) {
                wk_net_link old = {0};
                snprintf(old.host_if, sizeof(old.host_if), "%s", saved_if);
                _cleanup_error_ sp_error *e = NULL;
                if (wk_net_link_delete(&old, &e) < 0)
                        sp_log_warn("sandbox link %s: %s", saved_if, e->message);
        }
        if (wk_net_link_exists(&l))
                return 0;
        sp_log_warn("sandbox link %s was missing: making it again", l.host_if);
        return wk_net_sandbox_up(n, slot, pid, err);
}

void wk_net_sandbox_down(wk_net *n, uint32_t slot)
{
        wk_net_link l;
        if (wk_net_link_of(&n->pool, slot, &l, NULL) < 0)
                return;
        _cleanup_error_ sp_error *e = NULL;
        if (wk_net_link_delete(&l, &e) < 0)
                sp_log_warn("sandbox link %s: %s", l.host_if, e->message);
}
