/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A sandbox's egress (docs/networking.md): its profile, handed to the
 * node's gateway whenever the sandbox runs (create, claim, restore, adopt)
 * and taken back when it stops; and its egress log, the audit records of
 * the gateway's decisions and of the firewall's drops, kept as JSON lines
 * in <state>/sandboxes/<key>/egress.log (the older half in egress.log.1).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/net.h"
#include "node/node_internal.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"
#include "space/log.h"

/* Each file of a sandbox's egress log holds about this much before the older
 * one is dropped. */
#define EGRESS_LOG_MAX (1u << 20)
#define EGRESS_LOG_LIMIT 1000

static json_object *none_profile(void)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "name", json_object_new_string("none"));
        return o;
}

void wk__egress_apply(wk_sandbox *sb, wk_node_egress_done done, void *ud)
{
        wk_net *net = sb->node->cfg.net;
        if (!net) {
                if (done)
                        done(NULL, ud);
                return;
        }
        _cleanup_json_ json_object *none = NULL;
        json_object *p = sb->egress;
        if (!p || sb->warm)
                p = none = none_profile();
        _cleanup_json_ json_object *secrets = sb->warm ? NULL : wk__secrets_spec(sb);
        wk_net_sandbox_policy(net, sb->slot, sb->warm ? sb->key : sb->id, sb->tenant_id, p, secrets, done, ud);
}

int wk__egress_resolv_conf(wk_sandbox *sb, const char *rootfs, sp_error **err)
{
        wk_net *net = sb->node->cfg.net;
        if (!net)
                return 0;
        char host[16];
        wk_net_host_address(net, sb->slot, host);
        return wk__resolv_conf_write(rootfs, host, err);
}

int wk__resolv_conf_write(const char *rootfs, const char *nameserver, sp_error **err)
{
        char text[64];
        int len = snprintf(text, sizeof(text), "nameserver %s\n", nameserver);
        /* The tree is the template's: never follow a link it holds out of it. */
        _cleanup_close_ int root = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        _cleanup_close_ int etc = root < 0 ? -1 : openat(root, "etc", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (etc < 0)
                /* No /etc of its own (or a link for one): the template's business. */
                return errno == ENOENT || errno == ELOOP || errno == ENOTDIR
                               ? 0
                               : sp_error_set_errno(err, SP_E_IO, errno, "the sandbox's /etc");
        if (unlinkat(etc, "resolv.conf", 0) < 0 && errno != ENOENT && errno != EISDIR)
                return sp_error_set_errno(err, SP_E_IO, errno, "the sandbox's /etc/resolv.conf");
        _cleanup_close_ int fd = openat(etc, "resolv.conf", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, text, (size_t)len) != len)
                return sp_error_set_errno(err, SP_E_IO, errno, "the sandbox's /etc/resolv.conf");
        return 0;
}

void wk__egress_forget(wk_sandbox *sb)
{
        if (sb->node->cfg.net)
                wk_net_sandbox_forget(sb->node->cfg.net, sb->slot);
}

int wk_node_sandbox_set_egress(wk_node *n, const char *id, json_object *egress, json_object *secrets,
                               int64_t generation, wk_node_egress_done done, void *ud, sp_error **err)
{
        wk_sandbox *sb = wk_node_sandbox_find(n, id);
        if (!sb)
                return sp_error_set(err, SP_E_NOT_FOUND, "sandbox %s not found", id);
        if (!json_object_is_type(egress, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "field 'egress' must be an object");
        if (generation > 0 && generation < sb->egress_generation) {
                /* Sent before a newer one that came first (another connection): not taken. */
                sp_log_info_kv(SP_KV("sandbox_id", id), "egress change %lld came after %lld: not taken",
                               (long long)generation, (long long)sb->egress_generation);
                if (done)
                        done(NULL, ud);
                return 0;
        }
        int64_t old_generation = sb->egress_generation;
        if (generation > 0)
                sb->egress_generation = generation;
        json_object *old = sb->egress, *old_secrets = json_object_get(sb->secrets);
        sb->egress = json_object_get(egress);
        bool live = sb->state == WK_SB_RUNNING || sb->state == WK_SB_PAUSED;
        /* A stopped sandbox gets its CA when it runs again. */
        if (wk__secrets_set(sb, secrets, err) < 0 || (live && wk__secrets_ready(sb, err) < 0) ||
            wk__sandbox_persist(sb, err) < 0) {
                json_object_put(sb->egress);
                sb->egress = old;
                json_object_put(sb->secrets);
                sb->secrets = old_secrets;
                sb->egress_generation = old_generation;
                return -SP_E_IO;
        }
        json_object_put(old);
        json_object_put(old_secrets);
        if (sb->state == WK_SB_RUNNING || sb->state == WK_SB_PAUSED)
                wk__egress_apply(sb, done, ud);
        else if (done)
                done(NULL, ud); /* applied when it runs again */
        return 0;
}

static wk_sandbox *by_record(wk_node *n, json_object *rec)
{
        json_object *v = NULL;
        if (json_object_object_get_ex(rec, "sandbox_id", &v)) {
                const char *id = json_object_get_string(v);
                for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next)
                        if (strcmp(sb->id, id) == 0 || strcmp(sb->key, id) == 0)
                                return sb;
        }
        if (!n->cfg.net)
                return NULL;
        /* A firewall drop is the sandbox's whose link it came in by, and no
         * sandbox's if it came in by another interface: its source may be
         * forged (a spoofed packet was logged as its victim's, or nobody's). */
        bool by_if = json_object_object_get_ex(rec, "interface", &v) && *json_object_get_string(v);
        if (!by_if && !json_object_object_get_ex(rec, "source", &v))
                return NULL;
        const char *want = json_object_get_string(v);
        for (wk_sandbox *sb = n->sandboxes; sb; sb = sb->next) {
                char have[32]; /* a host end's name or an address */
                if (by_if)
                        wk_net_host_if(n->cfg.net, sb->slot, have);
                else
                        wk_net_address(n->cfg.net, sb->slot, have);
                if (sb->state != WK_SB_SUSPENDED && strcmp(have, want) == 0)
                        return sb;
        }
        return NULL;
}

void wk_node_egress_record(wk_node *n, json_object *rec)
{
        wk_sandbox *sb = by_record(n, rec);
        if (!sb)
                return;
        json_object_object_del(rec, "op");
        if (!json_object_object_get_ex(rec, "sandbox_id", NULL))
                json_object_object_add(rec, "sandbox_id", json_object_new_string(sb->id));
        char path[PATH_MAX], old[PATH_MAX + 4];
        wk__path(path, sizeof(path), "%s/sandboxes/%s/egress.log", n->state_dir, sb->key);
        struct stat st;
        if (stat(path, &st) == 0 && (uint64_t)st.st_size >= EGRESS_LOG_MAX) {
                snprintf(old, sizeof(old), "%s.1", path);
                rename(path, old);
        }
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0)
                return;
        const char *s = json_object_to_json_string_ext(rec, JSON_C_TO_STRING_PLAIN);
        size_t len = strlen(s);
        _cleanup_free_ char *line = malloc(len + 1);
        if (line) {
                memcpy(line, s, len);
                line[len] = '\n';
                (void)!write(fd, line, len + 1);
        }
        close(fd);
}

static bool field_is(json_object *o, const char *key, const char *want)
{
        json_object *v = NULL;
        return !want || (json_object_object_get_ex(o, key, &v) && strcmp(json_object_get_string(v), want) == 0);
}

/* Appends the records of one file that pass q's filters to out. */
static void read_file(const char *path, const pr_wk_get_egress_log *q, json_object *out)
{
        _cleanup_buf_ sp_buf text = SP_BUF_INIT;
        if (sp_file_read(path, 2 * EGRESS_LOG_MAX, &text, NULL) < 0 || !text.data)
                return;
        char *save = NULL;
        for (char *line = strtok_r(text.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                json_object *o = NULL, *t = NULL;
                if (sp_json_parse(line, strlen(line), &o, NULL) < 0)
                        continue;
                int64_t time_us = json_object_object_get_ex(o, "time_us", &t) ? json_object_get_int64(t) : 0;
                if (!field_is(o, "decision", q->decision) || !field_is(o, "kind", q->kind) ||
                    (q->before_us > 0 && time_us >= q->before_us) || (q->after_us > 0 && time_us <= q->after_us)) {
                        json_object_put(o);
                        continue;
                }
                json_object_array_add(out, o);
        }
}

int wk_node_egress_log(wk_node *n, const char *id, const pr_wk_get_egress_log *q, json_object **ret, sp_error **err)
{
        wk_sandbox *sb = wk_node_sandbox_find(n, id);
        if (!sb)
                return sp_error_set(err, SP_E_NOT_FOUND, "sandbox %s not found", id);
        size_t limit = q->limit > 0 && q->limit <= EGRESS_LOG_LIMIT ? (size_t)q->limit : EGRESS_LOG_LIMIT;
        char path[PATH_MAX], old[PATH_MAX + 4];
        wk__path(path, sizeof(path), "%s/sandboxes/%s/egress.log", n->state_dir, sb->key);
        snprintf(old, sizeof(old), "%s.1", path);
        _cleanup_json_ json_object *all = json_object_new_array();
        read_file(old, q, all);
        read_file(path, q, all);
        size_t total = json_object_array_length(all), from = 0, to = total;
        if (q->after_us > 0)
                to = total > limit ? limit : total;
        else
                from = total > limit ? total - limit : 0;
        json_object *records = json_object_new_array();
        for (size_t i = from; i < to; i++)
                json_object_array_add(records, json_object_get(json_object_array_get_idx(all, i)));
        json_object *o = json_object_new_object();
        json_object_object_add(o, "records", records);
        json_object_object_add(o, "more", json_object_new_boolean(to - from < total));
        *ret = o;
        return 0;
}

bool wk_node_sandbox_secrets_missing(wk_node *n, const char *id)
{
        wk_sandbox *sb = wk_node_sandbox_find(n, id);
        return sb && wk__secrets_missing(sb);
}
