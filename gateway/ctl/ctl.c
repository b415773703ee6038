/* SPDX-License-Identifier: Apache-2.0 */
/* The control socket: the worker's requests in, answers and audit records out (see msg.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/msg.h"
#include "gw.h"
#include "tls/tls.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/log.h"

/* A worker that does not read its audit records loses them beyond this. */
#define CLIENT_BACKLOG_MAX (8u << 20)
#define CLIENTS_MAX 8

typedef struct client {
        gw_ctl *ctl;
        struct bufferevent *bev;
} client;

struct gw_ctl {
        gw *g;
        struct evconnlistener *listener;
        client *clients[CLIENTS_MAX];
};

static void client_free(client *c)
{
        gw_ctl *ctl = c->ctl;
        for (size_t i = 0; i < CLIENTS_MAX; i++)
                if (ctl->clients[i] == c)
                        ctl->clients[i] = NULL;
        bufferevent_free(c->bev);
        free(c);
}

static void send_obj(client *c, json_object *o)
{
        struct evbuffer *out = bufferevent_get_output(c->bev);
        const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);
        evbuffer_add(out, s, strlen(s));
        evbuffer_add(out, "\n", 1);
}

static void reply(client *c, int64_t seq, const sp_error *e, int64_t secrets_missing)
{
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, "op", json_object_new_string(e ? "error" : "ok"));
        json_object_object_add(o, "seq", json_object_new_int64(seq));
        if (e)
                json_object_object_add(o, "error", json_object_new_string(e->message));
        else if (secrets_missing >= 0)
                json_object_object_add(o, "secrets_missing", json_object_new_int64(secrets_missing));
        send_obj(c, o);
}

static int parse_addr(const char *s, uint32_t *ret, sp_error **err)
{
        struct in_addr a;
        if (!s || inet_pton(AF_INET, s, &a) != 1)
                return sp_error_set(err, SP_E_INVALID, "'%s' is not an IPv4 address", s ? s : "");
        *ret = ntohl(a.s_addr);
        return 0;
}

static void mark_stale(gw_sandbox *sb, void *ud)
{
        (void)ud;
        sb->stale = true;
}

static void forget(gw_sandbox *sb, void *ud)
{
        gw *g = ud;
        if (g->relay)
                gw_relay_drop_sandbox(g->relay, sb->addr);
        sp_log_info_kv(SP_KV("sandbox_id", sb->id), "sandbox forgotten after a resync");
}

/* A sandbox's secrets and CA (both taken), as set: values the worker no
 * longer holds (it restarted) are kept from what the gateway had; each
 * secret's rate state stays with it. Returns how many have no value. */
static int64_t set_secrets(gw_sandbox *sb, gw_secrets *s, gw_sb_ca *ca)
{
        if (ca && gw_sb_ca_same(ca, sb->ca)) {
                gw_sb_ca_free(ca); /* the same CA: keep the one with its issued certificates */
                ca = sb->ca;
                sb->ca = NULL;
        }
        size_t missing = gw_secrets_keep_values(s, sb->secrets);
        gw_bucket rate[GW_SECRETS_MAX] = {0};
        for (size_t i = 0; i < gw_secrets_count(s); i++)
                for (size_t j = 0; j < gw_secrets_count(sb->secrets); j++)
                        if (strcmp(gw_secrets_at(s, i)->id, gw_secrets_at(sb->secrets, j)->id) == 0)
                                rate[i] = sb->secret_rate[j];
        memcpy(sb->secret_rate, rate, sizeof(rate));
        gw_secrets_unref(sb->secrets);
        sb->secrets = s;
        gw_sb_ca_free(sb->ca);
        sb->ca = ca;
        return (int64_t)missing;
}

static int handle(gw *g, const gw_ctl_req *r, int64_t *secrets_missing, sp_error **err)
{
        uint32_t addr = 0;
        if (strcmp(r->op, "set") == 0) {
                _cleanup_(gw_profile_unrefp) gw_profile *p = NULL;
                _cleanup_(gw_secrets_unrefp) gw_secrets *s = NULL;
                gw_sb_ca *ca = NULL;
                if (parse_addr(r->address, &addr, err) < 0 || gw_profile_resolve(r->profile, true, &p, err) < 0 ||
                    gw_secrets_parse(r->secrets, &s, err) < 0)
                        return -SP_E_INVALID;
                if (s && !g->tls)
                        return sp_error_set(err, SP_E_UNAVAILABLE, "this gateway cannot terminate TLS (see its log)");
                if (s && gw_sb_ca_parse(r->ca_cert, r->ca_key, &ca, err) < 0)
                        return -SP_E_INVALID;
                gw_sandbox *sb = gw_table_set(g->table, addr, r->sandbox_id, r->tenant_id, p);
                if (!sb) {
                        gw_sb_ca_free(ca);
                        return sp_error_set(err, SP_E_LIMIT, "out of memory");
                }
                *secrets_missing = set_secrets(sb, s, ca);
                s = NULL;
                /* Connections opened under the old profile hold only while the new one allows them. */
                if (g->relay)
                        gw_relay_recheck_sandbox(g->relay, sb);
                sp_log_debug_kv(SP_KV("sandbox_id", r->sandbox_id), "sandbox %s has profile %s", r->address,
                                gw_profile_name(p));
        } else if (strcmp(r->op, "del") == 0) {
                if (parse_addr(r->address, &addr, err) < 0)
                        return -SP_E_INVALID;
                if (g->relay)
                        gw_relay_drop_sandbox(g->relay, addr);
                gw_table_del(g->table, addr);
        } else if (strcmp(r->op, "sync_begin") == 0) {
                gw_table_each(g->table, mark_stale, NULL);
        } else if (strcmp(r->op, "sync_end") == 0) {
                gw_table_sweep(g->table, forget, g);
        }
        return 0;
}

static void on_read(struct bufferevent *bev, void *ud)
{
        client *c = ud;
        struct evbuffer *in = bufferevent_get_input(bev);
        for (;;) {
                size_t len = 0;
                char *line = evbuffer_readln(in, &len, EVBUFFER_EOL_LF);
                if (!line) {
                        if (evbuffer_get_length(in) > GW_CTL_LINE_MAX) {
                                sp_log_warn("control: a line longer than %d bytes: closing", GW_CTL_LINE_MAX);
                                client_free(c);
                        }
                        return;
                }
                _cleanup_error_ sp_error *e = NULL;
                _cleanup_json_ json_object *o = NULL;
                gw_ctl_req r;
                int64_t seq = 0, missing = -1;
                if (sp_json_parse(line, len, &o, &e) == 0) {
                        json_object *s = NULL;
                        if (json_object_object_get_ex(o, "seq", &s) && json_object_is_type(s, json_type_int))
                                seq = json_object_get_int64(s);
                        if (gw_ctl_req_decode(o, &r, &e) == 0)
                                (void)handle(c->ctl->g, &r, &missing, &e);
                }
                /* The line may hold secrets' values and a CA's key. */
                explicit_bzero(line, len);
                free(line);
                reply(c, seq, e, missing);
        }
}

static void on_event(struct bufferevent *bev, short what, void *ud)
{
        (void)bev;
        client *c = ud;
        if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
                sp_log_info("control: the worker went away");
                client_free(c);
        }
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen, void *ud)
{
        (void)l;
        (void)sa;
        (void)salen;
        gw_ctl *ctl = ud;
        size_t slot = CLIENTS_MAX;
        for (size_t i = 0; i < CLIENTS_MAX && slot == CLIENTS_MAX; i++)
                if (!ctl->clients[i])
                        slot = i;
        if (slot == CLIENTS_MAX) {
                sp_log_warn("control: more than %d clients: refused", CLIENTS_MAX);
                close(fd);
                return;
        }
        client *c = calloc(1, sizeof(*c));
        struct bufferevent *bev = c ? bufferevent_socket_new(ctl->g->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
        if (!bev) {
                free(c);
                close(fd);
                return;
        }
        c->ctl = ctl;
        c->bev = bev;
        ctl->clients[slot] = c;
        bufferevent_setcb(bev, on_read, NULL, on_event, c);
        bufferevent_enable(bev, EV_READ | EV_WRITE);
        sp_log_info("control: a worker connected");
}

int gw_ctl_new(gw *g, int listen_fd, gw_ctl **ret, sp_error **err)
{
        gw_ctl *c = calloc(1, sizeof(*c));
        if (!c)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        c->g = g;
        c->listener = evconnlistener_new(g->base, on_accept, c, LEV_OPT_CLOSE_ON_FREE, 0, listen_fd);
        if (!c->listener) {
                free(c);
                return sp_error_set(err, SP_E_LIMIT, "control socket: cannot listen");
        }
        *ret = c;
        return 0;
}

void gw_ctl_free(gw_ctl *c)
{
        if (!c)
                return;
        for (size_t i = 0; i < CLIENTS_MAX; i++)
                if (c->clients[i])
                        client_free(c->clients[i]);
        evconnlistener_free(c->listener);
        free(c);
}

void gw_ctl_broadcast(gw_ctl *c, json_object *o)
{
        for (size_t i = 0; i < CLIENTS_MAX; i++) {
                client *cl = c->clients[i];
                if (!cl)
                        continue;
                if (evbuffer_get_length(bufferevent_get_output(cl->bev)) > CLIENT_BACKLOG_MAX) {
                        c->g->counters.audit_dropped++;
                        continue;
                }
                send_obj(cl, o);
        }
}
