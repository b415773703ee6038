/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Operators' commands: `spacectl worker` (with `worker join-token`),
 * `spacectl tenant` and `spacectl key`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "space/cleanup.h"
#include "space/json.h"

#define MAX_LIST_PAGES 1000

/* Every page of the listing at path (which holds a '?'), whose items are
 * in field: *ret gets them all in one array (a new reference). */
static int list_all(ctl_ctx *ctx, const char *path, const char *field, json_object **ret, sp_error **err)
{
        _cleanup_json_ json_object *list = json_object_new_array();
        _cleanup_free_ char *cursor = NULL;
        for (int page = 0;; page++) {
                if (page == MAX_LIST_PAGES)
                        return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "more than %d pages", MAX_LIST_PAGES);
                _cleanup_buf_ sp_buf target = SP_BUF_INIT;
                sp_buf_appendf(&target, NULL, "%s&limit=1000", path);
                if (cursor) {
                        sp_buf_append_str(&target, "&cursor=", NULL);
                        ctl_url_escape(&target, cursor);
                }
                _cleanup_json_ json_object *resp = NULL;
                int r = ctl_api(ctx, "GET", target.data, NULL, NULL, &resp, err);
                if (r < 0)
                        return r;
                json_object *items = NULL, *nc = NULL;
                json_object_object_get_ex(resp, field, &items);
                for (size_t i = 0; items && i < json_object_array_length(items); i++)
                        json_object_array_add(list, json_object_get(json_object_array_get_idx(items, i)));
                json_object_object_get_ex(resp, "next_cursor", &nc);
                free(cursor);
                cursor = nc && json_object_is_type(nc, json_type_string) ? strdup(json_object_get_string(nc)) : NULL;
                if (!cursor)
                        break;
        }
        *ret = TAKE_PTR(list);
        return 0;
}

/* Prints {field: list} (--json) and returns true, or returns false for the caller's table. */
static bool print_list_json(ctl_ctx *ctx, const char *field, json_object *list)
{
        if (!ctx->json)
                return false;
        _cleanup_json_ json_object *o = json_object_new_object();
        json_object_object_add(o, field, json_object_get(list));
        ctl_print_json(ctx, o);
        return true;
}

/* ---- workers ---- */

int ctl_worker_id(ctl_ctx *ctx, const char *arg, char *out, size_t len, sp_error **err)
{
        _cleanup_json_ json_object *resp = NULL;
        int r = ctl_api(ctx, "GET", "/v1/workers", NULL, NULL, &resp, err);
        if (r < 0)
                return r;
        json_object *list = NULL;
        json_object_object_get_ex(resp, "workers", &list);
        for (size_t i = 0; list && i < json_object_array_length(list); i++) {
                json_object *w = json_object_array_get_idx(list, i);
                if (strcmp(ctl_jstr(w, "id"), arg) == 0 || strcmp(ctl_jstr(w, "name"), arg) == 0) {
                        snprintf(out, len, "%s", ctl_jstr(w, "id"));
                        return 0;
                }
        }
        return ctl_fail(ctx, CTL_EXIT_API, err, SP_E_NOT_FOUND, "worker %s not found (not_found)", arg);
}

static void worker_path(sp_buf *b, const char *id, const char *suffix)
{
        sp_buf_append_str(b, "/v1/workers/", NULL);
        ctl_url_escape(b, id);
        sp_buf_append_str(b, suffix, NULL);
}

static int run_worker_ls(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *resp = NULL;
        int r = ctl_api(ctx, "GET", "/v1/workers", NULL, NULL, &resp, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, resp);
                return 0;
        }
        json_object *list = NULL;
        json_object_object_get_ex(resp, "workers", &list);
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"NAME", "ID", "STATE", "BACKEND", "ADDRESS", "SANDBOXES", "SLOTS", "CPU",
                                            "MEMORY", "JOBS", "HEARTBEAT", NULL});
        for (size_t i = 0; list && i < json_object_array_length(list); i++) {
                json_object *w = json_object_array_get_idx(list, i);
                char slots[48], cpu[48], mem[48], jobs[80], hb[32];
                /* Jobs running / job threads, and "+N" requests waiting (its last heartbeat). */
                if (strcmp(ctl_jstr(w, "observed.jobs.threads"), "-") == 0)
                        snprintf(jobs, sizeof(jobs), "-");
                else if (strcmp(ctl_jstr(w, "observed.jobs.queued"), "0") == 0)
                        snprintf(jobs, sizeof(jobs), "%s/%s", ctl_jstr(w, "observed.jobs.running"),
                                 ctl_jstr(w, "observed.jobs.threads"));
                else
                        snprintf(jobs, sizeof(jobs), "%s/%s +%s", ctl_jstr(w, "observed.jobs.running"),
                                 ctl_jstr(w, "observed.jobs.threads"), ctl_jstr(w, "observed.jobs.queued"));
                snprintf(slots, sizeof(slots), "%s/%s", ctl_jstr(w, "used.slots"), ctl_jstr(w, "capacity.slots"));
                snprintf(cpu, sizeof(cpu), "%s/%sm", ctl_jstr(w, "used.cpu_millis"),
                         ctl_jstr(w, "capacity.cpu_millis"));
                snprintf(mem, sizeof(mem), "%s/%sMi", ctl_jstr(w, "used.memory_mb"), ctl_jstr(w, "capacity.memory_mb"));
                ctl_jage(w, "last_heartbeat", hb, sizeof(hb));
                /* Every backend it runs, its default first. */
                char backends[64] = "";
                json_object *bl = NULL;
                if (json_object_object_get_ex(w, "backends", &bl) && json_object_is_type(bl, json_type_array))
                        for (size_t k = 0; k < json_object_array_length(bl); k++) {
                                size_t len = strlen(backends);
                                snprintf(backends + len, sizeof(backends) - len, "%s%s", k ? "," : "",
                                         json_object_get_string(json_object_array_get_idx(bl, k)));
                        }
                ctl_table_row(&t,
                              (const char *[]){ctl_jstr(w, "name"), ctl_jstr(w, "id"), ctl_jstr(w, "state"),
                                               backends[0] ? backends : ctl_jstr(w, "backend"), ctl_jstr(w, "address"),
                                               ctl_jstr(w, "sandboxes"), slots, cpu, mem, jobs, hb});
        }
        ctl_table_print(ctx, &t);
        return 0;
}

static int run_worker_get(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        char id[128];
        int r = ctl_worker_id(ctx, a->pos[0], id, sizeof(id), err);
        if (r < 0)
                return r;
        _cleanup_json_ json_object *w = NULL;
        r = ctl_api_on(ctx, "GET", "/v1/workers/", id, "", &w, err);
        if (r < 0)
                return r;
        json_object *drain = NULL;
        if (ctx->json || !json_object_object_get_ex(w, "drain", &drain) || !drain) {
                ctl_print_any(ctx, w);
                return 0;
        }
        /* A drain: the sandboxes left there with why, one a line, and where the others went. */
        json_object_get(drain);
        json_object_object_del(w, "drain");
        ctl_print_object(ctx, w);
        fprintf(ctx->out, "drain.started_at: %s\n", ctl_jstr(drain, "started_at"));
        json_object *left = NULL, *moved = NULL;
        json_object_object_get_ex(drain, "left", &left);
        json_object_object_get_ex(drain, "moved", &moved);
        for (size_t i = 0; left && i < json_object_array_length(left); i++) {
                json_object *e = json_object_array_get_idx(left, i);
                fprintf(ctx->out, "drain.left: %s %s (wanted %s): %s\n", ctl_jstr(e, "id"), ctl_jstr(e, "state"),
                        ctl_jstr(e, "desired_state"), ctl_jstr(e, "message"));
        }
        for (size_t i = 0; moved && i < json_object_array_length(moved); i++) {
                json_object *e = json_object_array_get_idx(moved, i);
                char size[32];
                ctl_human_bytes(size, strtoll(ctl_jstr(e, "bytes"), NULL, 10));
                fprintf(ctx->out, "drain.moved: %s to %s (%s now), %s, at %s\n", ctl_jstr(e, "sandbox_id"),
                        ctl_jstr(e, "to"), ctl_jstr(e, "state"), size, ctl_jstr(e, "at"));
        }
        json_object_put(drain);
        return 0;
}

/* cordon, uncordon, unquarantine, allow-rejoin: the command's name is the route's (drain: drain.c). */
static int run_worker_action(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        char id[128];
        int r = ctl_worker_id(ctx, a->pos[0], id, sizeof(id), err);
        if (r < 0)
                return r;
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        worker_path(&path, id, "/");
        sp_buf_append_str(&path, a->cmd->name, NULL);
        _cleanup_json_ json_object *w = NULL;
        r = ctl_api(ctx, "POST", path.data, NULL, NULL, &w, err);
        if (r < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, w);
        else
                fprintf(ctx->out, "%s %s\n", ctl_jstr(w, "name"), ctl_jstr(w, "state"));
        return 0;
}

/* ---- join tokens ---- */

static int run_token_create(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        if (ctl_arg(a, "role"))
                json_object_object_add(body, "role", json_object_new_string(ctl_arg(a, "role")));
        if (ctl_arg(a, "description"))
                json_object_object_add(body, "description", json_object_new_string(ctl_arg(a, "description")));
        int64_t v;
        int r;
        if (ctl_arg(a, "ttl")) {
                if ((r = ctl_parse_seconds(ctl_arg(a, "ttl"), &v, err)) < 0) {
                        sp_error_wrap(err, "--ttl");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                json_object_object_add(body, "ttl_s", json_object_new_int64(v));
        }
        if (ctl_arg(a, "uses")) {
                if ((r = ctl_parse_int(ctl_arg(a, "uses"), 0, 1000, &v, err)) < 0) {
                        sp_error_wrap(err, "--uses");
                        return ctl_failed(ctx, CTL_EXIT_USAGE, r);
                }
                json_object_object_add(body, "uses", json_object_new_int64(v));
        }
        _cleanup_json_ json_object *tok = NULL;
        r = ctl_api(ctx, "POST", "/v1/join-tokens", body, NULL, &tok, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, tok);
                return 0;
        }
        fprintf(ctx->out, "%s\n", ctl_jstr(tok, "token"));
        fprintf(stderr, "join token %s for a %s, expires %s, %s uses (0: any); it is shown only now\n",
                ctl_jstr(tok, "id"), ctl_jstr(tok, "role"), ctl_jstr(tok, "expires_at"), ctl_jstr(tok, "uses"));
        return 0;
}

/* DELETE on a path answering 204; prints "<id> revoked". */
static int revoke_id(ctl_ctx *ctx, const char *collection, const char *id, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_appendf(&path, NULL, "/v1/%s/", collection);
        ctl_url_escape(&path, id);
        int r = ctl_api(ctx, "DELETE", path.data, NULL, NULL, NULL, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "id", json_object_new_string(id));
                json_object_object_add(o, "revoked", json_object_new_boolean(true));
                ctl_print_json(ctx, o);
        } else {
                fprintf(ctx->out, "%s revoked\n", id);
        }
        return 0;
}

static int run_token_ls(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *list = NULL;
        int r = list_all(ctx, "/v1/join-tokens?", "join_tokens", &list, err);
        if (r < 0 || print_list_json(ctx, "join_tokens", list))
                return r;
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"ID", "ROLE", "STATE", "USES LEFT", "EXPIRES", "AGE", "DESCRIPTION", NULL});
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *k = json_object_array_get_idx(list, i);
                char age[32];
                const char *uses = ctl_jstr(k, "uses_left");
                ctl_table_row(&t, (const char *[]){ctl_jstr(k, "id"), ctl_jstr(k, "role"), ctl_jstr(k, "state"),
                                                   strcmp(uses, "-") == 0 ? "any" : uses, ctl_jstr(k, "expires_at"),
                                                   ctl_jage(k, "created_at", age, sizeof(age)),
                                                   ctl_jstr(k, "description")});
        }
        ctl_table_print(ctx, &t);
        return 0;
}

static int run_token_revoke(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        return revoke_id(ctx, "join-tokens", a->pos[0], err);
}

/* Deletes a join token whatever its state (DELETE ...?purge=true). */
static int run_token_rm(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        int r = ctl_api_on(ctx, "DELETE", "/v1/join-tokens/", a->pos[0], "?purge=true", NULL, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                _cleanup_json_ json_object *o = json_object_new_object();
                json_object_object_add(o, "id", json_object_new_string(a->pos[0]));
                json_object_object_add(o, "deleted", json_object_new_boolean(true));
                ctl_print_json(ctx, o);
        } else {
                fprintf(ctx->out, "%s deleted\n", a->pos[0]);
        }
        return 0;
}

/* ---- tenants and keys ---- */

static int run_tenant_create(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "name", json_object_new_string(a->pos[0]));
        _cleanup_json_ json_object *t = NULL;
        int r = ctl_api(ctx, "POST", "/v1/tenants", body, NULL, &t, err);
        if (r < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, t);
        else
                fprintf(ctx->out, "%s\n", ctl_jstr(t, "id"));
        return 0;
}

static int run_tenant_rm(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *t = NULL;
        int r = ctl_api_on(ctx, "DELETE", "/v1/tenants/", a->pos[0], "", &t, err);
        if (r < 0)
                return r;
        if (ctx->json)
                ctl_print_json(ctx, t);
        else
                fprintf(ctx->out, "%s deleted (%s keys revoked, %s templates being deleted)\n", ctl_jstr(t, "id"),
                        ctl_jstr(t, "keys_revoked"), ctl_jstr(t, "templates_deleted"));
        return 0;
}

static int run_tenant_ls(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *list = NULL;
        int r = list_all(ctx, "/v1/tenants?", "tenants", &list, err);
        if (r < 0 || print_list_json(ctx, "tenants", list))
                return r;
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"ID", "NAME", "AGE", NULL});
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *o = json_object_array_get_idx(list, i);
                char age[32];
                ctl_table_row(&t, (const char *[]){ctl_jstr(o, "id"), ctl_jstr(o, "name"),
                                                   ctl_jage(o, "created_at", age, sizeof(age))});
        }
        ctl_table_print(ctx, &t);
        return 0;
}

static int run_key_ls(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_buf_ sp_buf path = SP_BUF_INIT;
        sp_buf_append_str(&path, "/v1/keys?", NULL);
        if (ctl_arg(a, "tenant")) {
                sp_buf_append_str(&path, "tenant_id=", NULL);
                ctl_url_escape(&path, ctl_arg(a, "tenant"));
        }
        _cleanup_json_ json_object *list = NULL;
        int r = list_all(ctx, path.data, "keys", &list, err);
        if (r < 0 || print_list_json(ctx, "keys", list))
                return r;
        _cleanup_table_ ctl_table t;
        ctl_table_init(&t, (const char *[]){"ID", "NAME", "TENANT", "ADMIN", "STATE", "AGE", NULL});
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *k = json_object_array_get_idx(list, i);
                char age[32];
                bool revoked = strcmp(ctl_jstr(k, "revoked"), "true") == 0;
                ctl_table_row(&t, (const char *[]){ctl_jstr(k, "id"), ctl_jstr(k, "name"), ctl_jstr(k, "tenant_id"),
                                                   ctl_jstr(k, "admin"), revoked ? "revoked" : "active",
                                                   ctl_jage(k, "created_at", age, sizeof(age))});
        }
        ctl_table_print(ctx, &t);
        return 0;
}

static int run_key_create(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object_object_add(body, "name", json_object_new_string(a->pos[0]));
        if (ctl_flag(a, "admin"))
                json_object_object_add(body, "admin", json_object_new_boolean(true));
        if (ctl_arg(a, "tenant"))
                json_object_object_add(body, "tenant_id", json_object_new_string(ctl_arg(a, "tenant")));
        _cleanup_json_ json_object *k = NULL;
        int r = ctl_api(ctx, "POST", "/v1/keys", body, NULL, &k, err);
        if (r < 0)
                return r;
        if (ctx->json) {
                ctl_print_json(ctx, k);
                return 0;
        }
        fprintf(ctx->out, "%s\n", ctl_jstr(k, "secret"));
        fprintf(stderr, "key %s (%s%s) of tenant %s; the secret is shown only now\n", ctl_jstr(k, "id"),
                ctl_jstr(k, "name"), strcmp(ctl_jstr(k, "admin"), "true") == 0 ? ", admin" : "",
                ctl_jstr(k, "tenant_id"));
        return 0;
}

static int run_key_revoke(ctl_ctx *ctx, const ctl_args *a, sp_error **err)
{
        return revoke_id(ctx, "keys", a->pos[0], err);
}

static const ctl_opt token_create_opts[] = {
        {"role", "ROLE", 0, "who may join with it: worker (default) or dataplane"},
        {"description", "TEXT", 0, "what the token is for"},
        {"ttl", "DURATION", 0, "how long it is valid (default 1h; 1m to 30d)"},
        {"uses", "N", 0, "how many workers may join with it (default 1; 0: any until it expires)"},
        {0},
};

static const ctl_cmd token_cmds[] = {
        {.name = "ls", .summary = "list join tokens (never their secrets)", .run = run_token_ls},
        {.name = "create",
         .summary = "create a bootstrap token for new workers or data planes (prints it)",
         .opts = token_create_opts,
         .run = run_token_create},
        {.name = "revoke",
         .usage = "ID",
         .summary = "revoke a join token (it stays listed, as revoked)",
         .min_args = 1,
         .max_args = 1,
         .run = run_token_revoke},
        {.name = "rm",
         .usage = "ID",
         .summary = "delete a join token, whatever its state (it can no longer be used and leaves the list)",
         .min_args = 1,
         .max_args = 1,
         .run = run_token_rm},
        {0},
};

static const ctl_group token_group = {"join-token", "Join tokens: how new workers join the cluster (admin).",
                                      token_cmds};

#define WORKER_ACTION(verb, what) \
        { \
                .name = verb, .usage = "WORKER", .summary = what, .min_args = 1, .max_args = 1, \
                .run = run_worker_action \
        }

static const ctl_cmd worker_cmds[] = {
        {.name = "ls", .summary = "list the workers", .run = run_worker_ls},
        {.name = "get",
         .usage = "WORKER",
         .summary = "show a worker (by id or name)",
         .min_args = 1,
         .max_args = 1,
         .run = run_worker_get},
        WORKER_ACTION("cordon", "place no new sandboxes on a worker"),
        WORKER_ACTION("uncordon", "place sandboxes on a cordoned or draining worker again"),
        {.name = "drain",
         .usage = "WORKER",
         .summary = "cordon a worker and move its sandboxes to other workers",
         .min_args = 1,
         .max_args = 1,
         .opts = ctl_worker_drain_opts,
         .run = ctl_run_worker_drain,
         .help = "Suspended and stopped sandboxes are moved and stay so; running and paused ones are suspended,\n"
                 "moved, and run (or are paused) again on the other worker. One that no other worker can take\n"
                 "stays, and spacectl worker get says why."},
        WORKER_ACTION("unquarantine", "lift a worker's quarantine"),
        WORKER_ACTION("allow-rejoin",
                      "let a worker that lost its state join again under its name (once, within the hour)"),
        {.name = "join-token", .summary = "create, list, revoke and delete join tokens", .group = &token_group},
        {0},
};

const ctl_group ctl_group_worker = {"worker", "Workers: the cluster's nodes (admin).", worker_cmds};

static const ctl_cmd tenant_cmds[] = {
        {.name = "ls", .summary = "list tenants", .run = run_tenant_ls},
        {.name = "create",
         .usage = "NAME",
         .summary = "create a tenant (prints its id)",
         .min_args = 1,
         .max_args = 1,
         .run = run_tenant_create},
        {.name = "rm",
         .usage = "ID",
         .summary = "delete a tenant without live sandboxes: revokes its keys, deletes its templates",
         .min_args = 1,
         .max_args = 1,
         .run = run_tenant_rm},
        {.name = "usage",
         .usage = "[ID]",
         .summary = "a tenant's quotas, their use and the rate limits (default: your own tenant; admins: any)",
         .min_args = 0,
         .max_args = 1,
         .run = ctl_tenant_usage_run},
        {.name = "quota",
         .usage = "ID",
         .summary = "set a tenant's quotas (admin): each a number, none (no limit) or default (the cluster's)",
         .min_args = 1,
         .max_args = 1,
         .opts = ctl_tenant_quota_opts,
         .run = ctl_tenant_quota_run},
        {0},
};

const ctl_group ctl_group_tenant = {"tenant", "Tenants: who owns sandboxes, templates and keys, their quotas (admin).",
                                    tenant_cmds};

static const ctl_opt key_create_opts[] = {
        {"admin", NULL, 0, "an admin key (admins only)"},
        {"tenant", "ID", 0, "for another tenant (admins only; default: your own)"},
        {0},
};

static const ctl_opt key_ls_opts[] = {
        {"tenant", "ID", 0, "only this tenant's keys (admins; others see only their own tenant's)"},
        {0},
};

static const ctl_cmd key_cmds[] = {
        {.name = "ls", .summary = "list API keys (never their secrets)", .opts = key_ls_opts, .run = run_key_ls},
        {.name = "create",
         .usage = "NAME",
         .summary = "create an API key (prints its secret, shown only now)",
         .min_args = 1,
         .max_args = 1,
         .opts = key_create_opts,
         .run = run_key_create},
        {.name = "revoke",
         .usage = "ID",
         .summary = "revoke an API key of your tenant (admins: of any tenant)",
         .min_args = 1,
         .max_args = 1,
         .run = run_key_revoke},
        {0},
};

const ctl_group ctl_group_key = {"key", "API keys.", key_cmds};
