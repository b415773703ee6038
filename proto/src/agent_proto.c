/* SPDX-License-Identifier: Apache-2.0 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "space/agent_proto.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/json.h"

static void put32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int pr_agent_header_encode(uint8_t *out, uint8_t type, uint8_t stream, uint32_t channel, size_t len, sp_error **err)
{
        if (len > PR_AGENT_MAX_PAYLOAD)
                return sp_error_set(err, SP_E_TOO_LARGE, "agent frame payload of %zu bytes exceeds %u", len,
                                    PR_AGENT_MAX_PAYLOAD);
        memset(out, 0, PR_AGENT_HEADER_SIZE);
        put32(out, (uint32_t)len);
        out[4] = type;
        out[5] = stream;
        put32(out + 8, channel);
        return 0;
}

int pr_agent_frame_append(sp_buf *out, uint8_t type, uint8_t stream, uint32_t channel, const void *payload, size_t len,
                          sp_error **err)
{
        uint8_t h[PR_AGENT_HEADER_SIZE];
        if (pr_agent_header_encode(h, type, stream, channel, len, err) < 0)
                return -SP_E_TOO_LARGE;
        if (sp_buf_reserve(out, sizeof(h) + len, err) < 0)
                return -SP_E_TOO_LARGE;
        sp_buf_append(out, h, sizeof(h), NULL);
        return sp_buf_append(out, payload, len, err);
}

int pr_agent_frame_append_json(sp_buf *out, uint8_t type, uint32_t channel, json_object *obj, sp_error **err)
{
        const char *s = sp_json_str(obj);
        return pr_agent_frame_append(out, type, 0, channel, s, strlen(s), err);
}

int pr_agent_frame_append_window(sp_buf *out, uint8_t stream, uint32_t channel, uint32_t credit, sp_error **err)
{
        uint8_t p[4];
        put32(p, credit);
        return pr_agent_frame_append(out, PR_AGENT_WINDOW, stream, channel, p, sizeof(p), err);
}

int pr_agent_header_decode(const uint8_t *p, pr_agent_frame *ret, sp_error **err)
{
        pr_agent_frame f = {
                .length = get32(p),
                .type = p[4],
                .stream = p[5],
                .channel = get32(p + 8),
        };
        if (p[6] || p[7])
                return sp_error_set(err, SP_E_INVALID, "agent frame: reserved bits set");
        if (f.type < PR_AGENT_HELLO || f.type > PR_AGENT_CANCEL)
                return sp_error_set(err, SP_E_INVALID, "agent frame: unknown type %u", f.type);
        if (f.stream >= PR_STREAM__MAX)
                return sp_error_set(err, SP_E_INVALID, "agent frame: unknown stream %u", f.stream);
        if (f.length > PR_AGENT_MAX_PAYLOAD)
                return sp_error_set(err, SP_E_TOO_LARGE, "agent frame: payload of %u bytes exceeds %u", f.length,
                                    PR_AGENT_MAX_PAYLOAD);
        if ((f.type == PR_AGENT_WINDOW && f.length != 4) ||
            ((f.type == PR_AGENT_EOF || f.type == PR_AGENT_CANCEL) && f.length != 0))
                return sp_error_set(err, SP_E_INVALID, "agent frame: bad length %u for type %u", f.length, f.type);
        if (f.type == PR_AGENT_HELLO && f.channel != 0)
                return sp_error_set(err, SP_E_INVALID, "agent frame: HELLO on channel %u", f.channel);
        if (f.type != PR_AGENT_HELLO && f.channel == 0)
                return sp_error_set(err, SP_E_INVALID, "agent frame: type %u on channel 0", f.type);
        *ret = f;
        return 0;
}

int pr_agent_decoder_feed(pr_agent_decoder *d, const void *data, size_t len, pr_agent_frame_cb cb, void *userdata,
                          sp_error **err)
{
        const uint8_t *p = data;
        while (len > 0 || d->buf.len >= PR_AGENT_HEADER_SIZE) {
                /* Fast path: whole frames straight from the input, no copy. */
                const uint8_t *base;
                size_t avail;
                if (d->buf.len == 0) {
                        base = p;
                        avail = len;
                } else {
                        base = (const uint8_t *)d->buf.data;
                        avail = d->buf.len;
                }
                pr_agent_frame f;
                if (avail >= PR_AGENT_HEADER_SIZE) {
                        if (pr_agent_header_decode(base, &f, err) < 0)
                                return -SP_E_INVALID;
                        if (avail >= PR_AGENT_HEADER_SIZE + f.length) {
                                f.payload = base + PR_AGENT_HEADER_SIZE;
                                int r = cb(&f, userdata, err);
                                if (r < 0)
                                        return r;
                                size_t used = PR_AGENT_HEADER_SIZE + f.length;
                                if (d->buf.len == 0) {
                                        p += used;
                                        len -= used;
                                } else {
                                        sp_buf_consume(&d->buf, used);
                                }
                                continue;
                        }
                }
                if (len == 0)
                        break;
                /* Need more bytes: move (part of) the input into the buffer. */
                size_t want;
                if (d->buf.len < PR_AGENT_HEADER_SIZE) {
                        want = PR_AGENT_HEADER_SIZE - d->buf.len;
                        if (d->buf.len == 0 && len >= PR_AGENT_HEADER_SIZE)
                                want = len; /* only a partial frame is left in the input */
                } else {
                        want = PR_AGENT_HEADER_SIZE + f.length - d->buf.len;
                }
                if (want > len)
                        want = len;
                if (sp_buf_append(&d->buf, p, want, err) < 0)
                        return -SP_E_TOO_LARGE;
                p += want;
                len -= want;
        }
        return 0;
}

void pr_agent_decoder_free(pr_agent_decoder *d)
{
        sp_buf_free(&d->buf);
}

size_t pr_agent_sync_feed(pr_agent_sync *s, const void *data, size_t n)
{
        static const uint8_t magic[] = PR_AGENT_SYNC_MAGIC;
        const uint8_t *p = data;
        for (size_t i = 0; i < n && !s->done; i++) {
                if (p[i] == magic[s->matched])
                        s->matched++;
                else
                        s->matched = p[i] == magic[0] ? 1 : 0;
                if (s->matched == PR_AGENT_SYNC_LEN) {
                        s->done = true;
                        return i + 1;
                }
        }
        return s->done ? 0 : n;
}

int pr_agent_window_decode(const pr_agent_frame *f, uint32_t *ret, sp_error **err)
{
        if (f->type != PR_AGENT_WINDOW || f->length != 4)
                return sp_error_set(err, SP_E_INVALID, "not a WINDOW frame");
        uint32_t v = get32(f->payload);
        if (v == 0 || v > PR_AGENT_MAX_CREDIT)
                return sp_error_set(err, SP_E_INVALID, "WINDOW credit %u out of range", v);
        *ret = v;
        return 0;
}

static const char *const op_names[] = {
        [PR_OP_EXEC] = "exec",       [PR_OP_ATTACH] = "attach", [PR_OP_RELEASE] = "release", [PR_OP_STAT] = "stat",
        [PR_OP_LIST] = "list",       [PR_OP_READ] = "read",     [PR_OP_WRITE] = "write",     [PR_OP_MKDIR] = "mkdir",
        [PR_OP_MOVE] = "move",       [PR_OP_REMOVE] = "remove", [PR_OP_CHMOD] = "chmod",     [PR_OP_PING] = "ping",
        [PR_OP_CONNECT] = "connect",
};

const char *pr_agent_op_name(pr_agent_op op)
{
        return op >= PR_OP_EXEC && op < PR_OP__MAX ? op_names[op] : "?";
}

static int dup_string(json_object *o, const char *field, bool required, size_t max, char **ret, sp_error **err)
{
        const char *s = NULL;
        if (sp_json_get_string(o, field, required, max, &s, err) < 0)
                return -SP_E_INVALID;
        if (!s)
                return 0;
        if (!(*ret = strdup(s)))
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        return 0;
}

/* A host name: 1-63 letters, digits, '-' and '.'. */
static int get_hostname(json_object *o, char **ret, sp_error **err)
{
        if (dup_string(o, "hostname", false, 63, ret, err) < 0)
                return -SP_E_INVALID;
        if (!*ret)
                return 0;
        bool ok = **ret != '\0';
        for (const char *p = *ret; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
                      *p == '.'))
                        ok = false;
        return ok ? 0 : sp_error_set(err, SP_E_INVALID, "field 'hostname' is not a host name");
}

static int get_seed(json_object *o, pr_agent_request *r, sp_error **err)
{
        const char *s = NULL;
        if (sp_json_get_string(o, "seed", false, 4 * PR_AGENT_SEED_MAX / 3 + 4, &s, err) < 0)
                return -SP_E_INVALID;
        if (!s)
                return 0;
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_base64_decode(&b, s, strlen(s), 0, NULL) < 0 || b.len < PR_AGENT_SEED_MIN || b.len > PR_AGENT_SEED_MAX)
                return sp_error_set(err, SP_E_INVALID, "field 'seed' must be %d to %d bytes in base64",
                                    PR_AGENT_SEED_MIN, PR_AGENT_SEED_MAX);
        memcpy(r->seed, b.data, b.len);
        r->seed_len = b.len;
        return 0;
}

static int get_path(json_object *o, const char *field, bool required, char **ret, sp_error **err)
{
        if (dup_string(o, field, required, PR_AGENT_MAX_PATH, ret, err) < 0)
                return -SP_E_INVALID;
        if (*ret && **ret == '\0')
                return sp_error_set(err, SP_E_INVALID, "field '%s' must not be empty", field);
        return 0;
}

static int get_mode(json_object *o, pr_agent_request *r, sp_error **err)
{
        int64_t mode = -1;
        if (sp_json_get_int(o, "mode", false, 0, 07777, &mode, err) < 0)
                return -SP_E_INVALID;
        if (mode >= 0) {
                r->mode = (uint32_t)mode;
                r->has_mode = true;
        }
        return 0;
}

static bool session_ok(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n > 64)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!strchr("abcdefghijklmnopqrstuvwxyz0123456789_-", s[i]))
                        return false;
        return true;
}

static int get_session(json_object *o, pr_agent_request *r, sp_error **err)
{
        if (dup_string(o, "session", true, 64, &r->session, err) < 0)
                return -SP_E_INVALID;
        if (!session_ok(r->session))
                return sp_error_set(err, SP_E_INVALID, "field 'session' must be 1-64 characters [a-z0-9_-]");
        return 0;
}

static int parse_exec(json_object *o, pr_agent_request *r, sp_error **err)
{
        static const char *const allowed[] = {"op",   "session", "argv",  "env",    "cwd",
                                              "user", "pty",     "stdin", "window", NULL};
        if (sp_json_check_fields(o, allowed, err) < 0 || get_session(o, r, err) < 0)
                return -SP_E_INVALID;
        if (sp_json_get_strv(o, "argv", true, PR_AGENT_MAX_ARGV, PR_AGENT_MAX_STRING, &r->argv, err) < 0)
                return -SP_E_INVALID;
        if (!r->argv[0] || !r->argv[0][0])
                return sp_error_set(err, SP_E_INVALID, "field 'argv' must name a program");
        json_object *env = NULL;
        if (sp_json_get_string_map(o, "env", false, PR_AGENT_MAX_ENV, 256, PR_AGENT_MAX_STRING, &env, err) < 0)
                return -SP_E_INVALID;
        size_t n = env ? (size_t)json_object_object_length(env) : 0;
        r->env = calloc(n + 1, sizeof(char *));
        if (!r->env)
                return sp_error_set(err, SP_E_LIMIT, "out of memory");
        if (env) {
                size_t i = 0;
                json_object_object_foreach (env, key, val) {
                        if (strchr(key, '='))
                                return sp_error_set(err, SP_E_INVALID, "field 'env': name '%.64s' contains '='", key);
                        if (asprintf(&r->env[i], "%s=%s", key, json_object_get_string(val)) < 0) {
                                r->env[i] = NULL;
                                return sp_error_set(err, SP_E_LIMIT, "out of memory");
                        }
                        i++;
                }
        }
        if (get_path(o, "cwd", false, &r->cwd, err) < 0 || dup_string(o, "user", false, 64, &r->user, err) < 0)
                return -SP_E_INVALID;
        if (r->user && !r->user[0])
                return sp_error_set(err, SP_E_INVALID, "field 'user' must not be empty");
        json_object *pty = NULL;
        if (sp_json_get_object(o, "pty", false, &pty, err) < 0)
                return -SP_E_INVALID;
        if (pty) {
                static const char *const pty_fields[] = {"rows", "cols", NULL};
                int64_t rows = 24, cols = 80;
                if (sp_json_check_fields(pty, pty_fields, err) < 0 ||
                    sp_json_get_int(pty, "rows", false, 1, 65535, &rows, err) < 0 ||
                    sp_json_get_int(pty, "cols", false, 1, 65535, &cols, err) < 0)
                        return sp_error_wrap(err, "field 'pty'");
                r->pty = true;
                r->rows = (uint16_t)rows;
                r->cols = (uint16_t)cols;
        }
        return sp_json_get_bool(o, "stdin", false, &r->stdin_open, err);
}

int pr_agent_request_parse(const void *json, size_t len, pr_agent_request *ret, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        pr_agent_request r = {0};
        const char *op = NULL;
        int rc = -SP_E_INVALID;
        if (sp_json_parse(json, len, &o, err) < 0)
                goto fail;
        if (sp_json_get_string(o, "op", true, 16, &op, err) < 0)
                goto fail;
        for (int i = PR_OP_EXEC; i < PR_OP__MAX; i++)
                if (strcmp(op, op_names[i]) == 0)
                        r.op = (pr_agent_op)i;
        if (!r.op) {
                sp_error_set(err, SP_E_INVALID, "unknown op '%.16s'", op);
                goto fail;
        }

        switch (r.op) {
        case PR_OP_EXEC:
                if (parse_exec(o, &r, err) < 0)
                        goto fail;
                break;
        case PR_OP_ATTACH: {
                static const char *const f[] = {"op", "session", "stdout_offset", "stderr_offset", "window", NULL};
                if (sp_json_check_fields(o, f, err) < 0 || get_session(o, &r, err) < 0 ||
                    sp_json_get_int(o, "stdout_offset", true, 0, INT64_MAX, &r.stdout_offset, err) < 0 ||
                    sp_json_get_int(o, "stderr_offset", true, 0, INT64_MAX, &r.stderr_offset, err) < 0)
                        goto fail;
                break;
        }
        case PR_OP_RELEASE: {
                static const char *const f[] = {"op", "session", NULL};
                if (sp_json_check_fields(o, f, err) < 0 || get_session(o, &r, err) < 0)
                        goto fail;
                break;
        }
        case PR_OP_STAT:
        case PR_OP_LIST:
        case PR_OP_READ:
        case PR_OP_WRITE:
        case PR_OP_MKDIR:
        case PR_OP_REMOVE:
        case PR_OP_CHMOD: {
                static const char *const f[] = {"op",   "path",   "user",    "owner",     "offset", "length", "limit",
                                                "mode", "append", "parents", "recursive", "window", "follow", NULL};
                r.length = -1;
                r.limit = 10000;
                if (sp_json_check_fields(o, f, err) < 0 || get_path(o, "path", true, &r.path, err) < 0 ||
                    dup_string(o, "user", false, 64, &r.user, err) < 0 ||
                    dup_string(o, "owner", false, 64, &r.owner, err) < 0 ||
                    sp_json_get_int(o, "offset", false, 0, INT64_MAX, &r.offset, err) < 0 ||
                    sp_json_get_int(o, "length", false, 0, INT64_MAX, &r.length, err) < 0 ||
                    sp_json_get_int(o, "limit", false, 1, 100000, &r.limit, err) < 0 || get_mode(o, &r, err) < 0 ||
                    sp_json_get_bool(o, "append", false, &r.append, err) < 0 ||
                    sp_json_get_bool(o, "parents", false, &r.parents, err) < 0 ||
                    sp_json_get_bool(o, "recursive", false, &r.recursive, err) < 0 ||
                    sp_json_get_bool(o, "follow", false, &r.follow, err) < 0)
                        goto fail;
                if (r.op == PR_OP_CHMOD && !r.has_mode) {
                        sp_error_set(err, SP_E_INVALID, "missing required field 'mode'");
                        goto fail;
                }
                break;
        }
        case PR_OP_MOVE: {
                static const char *const f[] = {"op", "from", "to", "user", "owner", NULL};
                if (sp_json_check_fields(o, f, err) < 0 || get_path(o, "from", true, &r.path, err) < 0 ||
                    get_path(o, "to", true, &r.to, err) < 0 || dup_string(o, "user", false, 64, &r.user, err) < 0 ||
                    dup_string(o, "owner", false, 64, &r.owner, err) < 0)
                        goto fail;
                break;
        }
        case PR_OP_PING: {
                static const char *const f[] = {"op", "sync", "time_ns", "hostname", "seed", NULL};
                if (sp_json_check_fields(o, f, err) < 0 || sp_json_get_bool(o, "sync", false, &r.sync, err) < 0 ||
                    sp_json_get_int(o, "time_ns", false, 1, INT64_MAX, &r.time_ns, err) < 0 ||
                    get_hostname(o, &r.hostname, err) < 0 || get_seed(o, &r, err) < 0)
                        goto fail;
                break;
        }
        case PR_OP_CONNECT: {
                static const char *const f[] = {"op", "port", "window", NULL};
                int64_t port = 0;
                if (sp_json_check_fields(o, f, err) < 0 || sp_json_get_int(o, "port", true, 1, 65535, &port, err) < 0)
                        goto fail;
                r.port = (uint16_t)port;
                break;
        }
        case PR_OP__MAX:
                break;
        }
        if (r.owner && !r.owner[0]) {
                sp_error_set(err, SP_E_INVALID, "field 'owner' must not be empty");
                goto fail;
        }
        if (r.owner && r.user) {
                sp_error_set(err, SP_E_INVALID, "fields 'user' and 'owner' are mutually exclusive");
                goto fail;
        }
        int64_t window = PR_AGENT_DEFAULT_WINDOW;
        if (sp_json_get_int(o, "window", false, 4096, PR_AGENT_MAX_CREDIT, &window, err) < 0)
                goto fail;
        r.window = (uint32_t)window;
        *ret = r;
        return 0;
fail:
        pr_agent_request_free(&r);
        return rc;
}

void pr_agent_request_free(pr_agent_request *r)
{
        free(r->session);
        sp_strv_freep(&r->argv);
        sp_strv_freep(&r->env);
        free(r->cwd);
        free(r->user);
        free(r->owner);
        free(r->path);
        free(r->to);
        free(r->hostname);
        explicit_bzero(r->seed, sizeof(r->seed));
        memset(r, 0, sizeof(*r));
}

json_object *pr_agent_request_to_json(const pr_agent_request *r)
{
        json_object *o = json_object_new_object();
        json_object_object_add(o, "op", json_object_new_string(pr_agent_op_name(r->op)));
        if (r->session)
                json_object_object_add(o, "session", json_object_new_string(r->session));
        if (r->argv) {
                json_object *a = json_object_new_array();
                for (char **p = r->argv; *p; p++)
                        json_object_array_add(a, json_object_new_string(*p));
                json_object_object_add(o, "argv", a);
        }
        if (r->env && r->env[0]) {
                json_object *e = json_object_new_object();
                for (char **p = r->env; *p; p++) {
                        const char *eq = strchr(*p, '=');
                        if (!eq)
                                continue;
                        char key[257];
                        snprintf(key, sizeof(key), "%.*s", (int)(eq - *p), *p);
                        json_object_object_add(e, key, json_object_new_string(eq + 1));
                }
                json_object_object_add(o, "env", e);
        }
        if (r->cwd)
                json_object_object_add(o, "cwd", json_object_new_string(r->cwd));
        if (r->user)
                json_object_object_add(o, "user", json_object_new_string(r->user));
        if (r->owner)
                json_object_object_add(o, "owner", json_object_new_string(r->owner));
        if (r->pty) {
                json_object *p = json_object_new_object();
                json_object_object_add(p, "rows", json_object_new_int(r->rows));
                json_object_object_add(p, "cols", json_object_new_int(r->cols));
                json_object_object_add(o, "pty", p);
        }
        if (r->op == PR_OP_EXEC && r->stdin_open)
                json_object_object_add(o, "stdin", json_object_new_boolean(true));
        if (r->op == PR_OP_ATTACH) {
                json_object_object_add(o, "stdout_offset", json_object_new_int64(r->stdout_offset));
                json_object_object_add(o, "stderr_offset", json_object_new_int64(r->stderr_offset));
        }
        if (r->op == PR_OP_MOVE) {
                json_object_object_add(o, "from", json_object_new_string(r->path ? r->path : ""));
                json_object_object_add(o, "to", json_object_new_string(r->to ? r->to : ""));
        } else if (r->path) {
                json_object_object_add(o, "path", json_object_new_string(r->path));
        }
        if (r->window && r->window != PR_AGENT_DEFAULT_WINDOW &&
            (r->op == PR_OP_EXEC || r->op == PR_OP_ATTACH || r->op == PR_OP_READ || r->op == PR_OP_CONNECT))
                json_object_object_add(o, "window", json_object_new_int64(r->window));
        if (r->op == PR_OP_READ && r->offset)
                json_object_object_add(o, "offset", json_object_new_int64(r->offset));
        if (r->op == PR_OP_READ && r->length >= 0)
                json_object_object_add(o, "length", json_object_new_int64(r->length));
        if (r->op == PR_OP_CONNECT)
                json_object_object_add(o, "port", json_object_new_int(r->port));
        if (r->op == PR_OP_PING && r->sync)
                json_object_object_add(o, "sync", json_object_new_boolean(true));
        if (r->op == PR_OP_PING && r->time_ns > 0)
                json_object_object_add(o, "time_ns", json_object_new_int64(r->time_ns));
        if (r->op == PR_OP_PING && r->hostname)
                json_object_object_add(o, "hostname", json_object_new_string(r->hostname));
        if (r->op == PR_OP_PING && r->seed_len) {
                sp_buf b = SP_BUF_INIT;
                if (sp_base64_encode(&b, r->seed, r->seed_len, 0, NULL) == 0)
                        json_object_object_add(o, "seed", json_object_new_string(b.data));
                sp_buf_free(&b);
        }
        if (r->op == PR_OP_LIST)
                json_object_object_add(o, "limit", json_object_new_int64(r->limit));
        if (r->has_mode)
                json_object_object_add(o, "mode", json_object_new_int((int32_t)r->mode));
        if (r->append)
                json_object_object_add(o, "append", json_object_new_boolean(true));
        if (r->parents)
                json_object_object_add(o, "parents", json_object_new_boolean(true));
        if (r->recursive)
                json_object_object_add(o, "recursive", json_object_new_boolean(true));
        if (r->follow)
                json_object_object_add(o, "follow", json_object_new_boolean(true));
        return o;
}

int pr_agent_control_parse(const void *json, size_t len, pr_agent_control *ret, sp_error **err)
{
        _cleanup_json_ json_object *o = NULL;
        static const char *const f[] = {"signal", "kill", "resize", NULL};
        pr_agent_control c = {0};
        int64_t sig = 0, rows = 0, cols = 0;
        json_object *resize = NULL;
        static const char *const rf[] = {"rows", "cols", NULL};
        if (sp_json_parse(json, len, &o, err) < 0 || sp_json_check_fields(o, f, err) < 0 ||
            sp_json_get_int(o, "signal", false, 1, SIGRTMAX, &sig, err) < 0 ||
            sp_json_get_bool(o, "kill", false, &c.kill, err) < 0 ||
            sp_json_get_object(o, "resize", false, &resize, err) < 0)
                return sp_error_wrap(err, "control");
        if (resize && (sp_json_check_fields(resize, rf, err) < 0 ||
                       sp_json_get_int(resize, "rows", true, 1, 65535, &rows, err) < 0 ||
                       sp_json_get_int(resize, "cols", true, 1, 65535, &cols, err) < 0))
                return sp_error_wrap(err, "control: resize");
        if (!sig && !c.kill && !resize)
                return sp_error_set(err, SP_E_INVALID, "control: empty message");
        c.signal = (int)sig;
        c.rows = (uint16_t)rows;
        c.cols = (uint16_t)cols;
        *ret = c;
        return 0;
}
