/* SPDX-License-Identifier: Apache-2.0 */
/*
 * E2B requests decoded without I/O (see request.h).
 */
#include "request.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "space/cleanup.h"
#include "space/json.h"

static int64_t int_field(json_object *o, const char *k, int64_t def)
{
        json_object *v = NULL;
        return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_int) ? json_object_get_int64(v)
                                                                                            : def;
}

/* A JSON object from body (empty: {}); what is not an object is not_object. */
static int parse_object(const char *body, size_t len, const char *not_object, json_object **ret, sp_error **err)
{
        if (len == 0) {
                *ret = json_object_new_object();
                return 0;
        }
        json_object *o = NULL;
        if (sp_json_parse(body, len, &o, err) < 0)
                return -1;
        if (!json_object_is_type(o, json_type_object)) {
                json_object_put(o);
                return sp_error_set(err, SP_E_INVALID, "%s", not_object);
        }
        *ret = o;
        return 0;
}

/* ---- envd ---- */

int e2b_request_message(const char *body, size_t len, bool stream, json_object **ret, sp_error **err)
{
        if (stream) {
                if (len < 5)
                        return sp_error_set(err, SP_E_INVALID, "a stream request is one envelope");
                const uint8_t *p = (const uint8_t *)body;
                uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
                if (p[0] != 0)
                        return sp_error_set(err, SP_E_INVALID, "compressed or end-stream envelopes are not accepted");
                if (n != len - 5)
                        return sp_error_set(err, SP_E_INVALID, "the envelope's length does not match the body");
                body += 5;
                len -= 5;
        }
        return parse_object(body, len, "the request is not a JSON object", ret, err);
}

int e2b_request_user(const char *authorization, char **ret_user, sp_error **err)
{
        *ret_user = NULL;
        if (!authorization || strncasecmp(authorization, "Basic ", 6) != 0)
                return 0;
        const char *b64 = authorization + 6;
        _cleanup_buf_ sp_buf dec = SP_BUF_INIT;
        if (strlen(b64) > E2B_REQUEST_MAX_BASIC || sp_base64_decode(&dec, b64, strlen(b64), 0, NULL) < 0 || !dec.data)
                return sp_error_set(err, SP_E_INVALID, "malformed Authorization header");
        char *colon = memchr(dec.data, ':', dec.len);
        size_t ul = colon ? (size_t)(colon - dec.data) : dec.len;
        if (ul > E2B_REQUEST_MAX_USER)
                return sp_error_set(err, SP_E_INVALID, "user name too long");
        /* A NUL would cut the name short: "ro\0x" is not "ro". */
        if (memchr(dec.data, '\0', ul))
                return sp_error_set(err, SP_E_INVALID, "malformed Authorization header");
        if (ul > 0 && !(*ret_user = strndup(dec.data, ul)))
                abort();
        return 0;
}

/* Whether cmd is a shell that runs `eval "$V"` as it runs a "-c" script. */
static bool is_shell(const char *cmd)
{
        static const char *const shells[] = {"sh", "bash", "dash", "ash", "ksh", "zsh"};
        const char *base = strrchr(cmd, '/');
        base = base ? base + 1 : cmd;
        for (size_t i = 0; i < SP_ARRAY_SIZE(shells); i++)
                if (strcmp(base, shells[i]) == 0)
                        return true;
        return false;
}

/* Linux takes at most 128 KiB in one argument (MAX_ARG_STRLEN) but 2 MiB of
 * arguments and environment together (a quarter of the 8 MiB stack limit),
 * and the agent at most 64 KiB in one string. So a shell's "-c" script longer
 * than E2B_REQUEST_MAX_ARG goes into the environment in pieces of at most
 * that size, E2B_REQUEST_SCRIPT_VAR0, 1, ..., cut between UTF-8 characters,
 * and the argument becomes
 *   eval "unset V0 V1 ...;$V0$V1..."
 * which the shell expands before running it: the script runs as it would
 * from "-c" (same $0 and arguments), without the pieces in its environment.
 * env is the session's environment (a new object it owns). */
static int move_script(json_object *argv, json_object *env, sp_error **err)
{
        size_t n = json_object_array_length(argv), at = 0;
        if (n < 3 || !is_shell(json_object_get_string(json_object_array_get_idx(argv, 0))))
                return 0;
        for (size_t i = 1; i + 1 < n && !at; i++) {
                json_object *a = json_object_array_get_idx(argv, i);
                if (json_object_is_type(a, json_type_string) && strcmp(json_object_get_string(a), "-c") == 0)
                        at = i + 1;
        }
        json_object *script = at ? json_object_array_get_idx(argv, at) : NULL;
        if (!script || !json_object_is_type(script, json_type_string))
                return 0;
        const char *text = json_object_get_string(script);
        size_t len = (size_t)json_object_get_string_len(script);
        if (len <= E2B_REQUEST_MAX_ARG)
                return 0;
        if (len > E2B_REQUEST_MAX_COMMAND)
                return sp_error_set(err, SP_E_INVALID, "the command is longer than %d bytes", E2B_REQUEST_MAX_COMMAND);
        if (memchr(text, '\0', len))
                return sp_error_set(err, SP_E_INVALID, "the command contains a NUL byte");
        _cleanup_buf_ sp_buf names = SP_BUF_INIT, refs = SP_BUF_INIT, boot = SP_BUF_INIT;
        size_t k = 0;
        for (size_t off = 0; off < len; k++) {
                size_t piece = len - off < E2B_REQUEST_MAX_ARG ? len - off : E2B_REQUEST_MAX_ARG;
                if (off + piece < len) {
                        /* End between characters: the next piece does not start with a
                         * continuation byte (10xxxxxx), unless the text is not UTF-8. */
                        size_t cut = piece;
                        while (cut + 3 > piece && cut > 1 && ((unsigned char)text[off + cut] & 0xC0) == 0x80)
                                cut--;
                        if (((unsigned char)text[off + cut] & 0xC0) != 0x80)
                                piece = cut;
                }
                char name[64];
                snprintf(name, sizeof(name), "%s%zu", E2B_REQUEST_SCRIPT_VAR, k);
                json_object_object_add(env, name, json_object_new_string_len(text + off, (int)piece));
                sp_buf_appendf(&names, NULL, " %s", name);
                sp_buf_appendf(&refs, NULL, "$%s", name);
                off += piece;
        }
        sp_buf_appendf(&boot, NULL, "eval \"unset%s;%s\"", names.data, refs.data);
        json_object_array_put_idx(argv, at, json_object_new_string_len(boot.data, (int)boot.len));
        return 0;
}

int e2b_request_start(json_object *req, const char *user, const char *connect_timeout_ms, json_object **ret_body,
                      bool *ret_pty, sp_error **err)
{
        json_object *proc = NULL, *v = NULL, *pty = NULL;
        const char *cmd = NULL;
        if (!json_object_object_get_ex(req, "process", &proc) || !(cmd = sp_json_member_str(proc, "cmd")) || !*cmd)
                return sp_error_set(err, SP_E_INVALID, "process.cmd is required");
        _cleanup_json_ json_object *body = json_object_new_object();
        json_object *argv = json_object_new_array();
        json_object_array_add(argv, json_object_new_string(cmd));
        if (json_object_object_get_ex(proc, "args", &v) && json_object_is_type(v, json_type_array))
                for (size_t i = 0; i < json_object_array_length(v); i++)
                        json_object_array_add(argv, json_object_get(json_object_array_get_idx(v, i)));
        json_object_object_add(body, "argv", argv);
        json_object *envs = NULL;
        bool has_envs = json_object_object_get_ex(proc, "envs", &envs) && json_object_is_type(envs, json_type_object);
        json_object *env = json_object_new_object();
        if (has_envs) {
                json_object_object_foreach (envs, name, value)
                        json_object_object_add(env, name, json_object_get(value));
        }
        if (move_script(argv, env, err) < 0) {
                json_object_put(env);
                return -SP_E_INVALID;
        }
        if (has_envs || json_object_object_length(env) > 0)
                json_object_object_add(body, "env", env);
        else
                json_object_put(env);
        /* envd starts in the template's workdir, else the user's home: ours
         * is the home (the agent resolves ~, and a relative cwd from there). */
        const char *cwd = sp_json_member_str(proc, "cwd");
        json_object_object_add(body, "cwd", json_object_new_string(cwd && *cwd ? cwd : E2B_REQUEST_DEFAULT_CWD));
        if (user)
                json_object_object_add(body, "user", json_object_new_string(user));
        /* envd keeps stdin open unless asked not to. */
        bool want_stdin = !json_object_object_get_ex(req, "stdin", &v) || json_object_get_boolean(v);
        bool is_pty = false;
        if (json_object_object_get_ex(req, "pty", &pty) && json_object_is_type(pty, json_type_object)) {
                json_object *size = NULL, *p = json_object_new_object();
                int64_t rows = 24, cols = 80;
                if (json_object_object_get_ex(pty, "size", &size)) {
                        if (json_object_object_get_ex(size, "rows", &v))
                                rows = json_object_get_int64(v);
                        if (json_object_object_get_ex(size, "cols", &v))
                                cols = json_object_get_int64(v);
                }
                json_object_object_add(p, "rows", json_object_new_int64(rows));
                json_object_object_add(p, "cols", json_object_new_int64(cols));
                json_object_object_add(body, "pty", p);
                is_pty = true;
        }
        json_object_object_add(body, "stdin", json_object_new_boolean(want_stdin || is_pty));
        /* The tag goes to the session as it is: the public API refuses one it cannot keep. */
        if (json_object_object_get_ex(req, "tag", &v) && v &&
            !(json_object_is_type(v, json_type_string) && json_object_get_string_len(v) == 0)) {
                if (!json_object_is_type(v, json_type_string))
                        return sp_error_set(err, SP_E_INVALID, "tag must be a string");
                json_object_object_add(body, "tag", json_object_get(v));
        }
        if (connect_timeout_ms) {
                char *end = NULL;
                long long ms = strtoll(connect_timeout_ms, &end, 10);
                if (*end || ms < 0 || ms > (long long)E2B_REQUEST_MAX_TIMEOUT_S * 1000)
                        return sp_error_set(err, SP_E_INVALID, "invalid Connect-Timeout-Ms");
                json_object_object_add(body, "timeout_s", json_object_new_int64((ms + 999) / 1000));
        }
        *ret_body = TAKE_PTR(body);
        *ret_pty = is_pty;
        return 0;
}

bool e2b_request_tag_ok(const char *tag)
{
        size_t n = strlen(tag);
        if (n == 0 || n > E2B_REQUEST_MAX_TAG)
                return false;
        for (const unsigned char *c = (const unsigned char *)tag; *c; c++)
                if (*c < 0x20 || *c == 0x7f)
                        return false;
        return sp_utf8_valid(tag, n);
}

int e2b_request_selector(json_object *req, int64_t *ret_pid, const char **ret_tag, sp_error **err)
{
        json_object *proc = NULL, *pid = NULL, *tag = NULL;
        if (!json_object_object_get_ex(req, "process", &proc) || !json_object_is_type(proc, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "missing process selector");
        if (!json_object_object_get_ex(proc, "pid", &pid)) {
                if (!json_object_object_get_ex(proc, "tag", &tag))
                        return sp_error_set(err, SP_E_INVALID, "the process selector needs a pid or a tag");
                if (!json_object_is_type(tag, json_type_string))
                        return sp_error_set(err, SP_E_INVALID, "the process selector's tag must be a string");
                const char *t = json_object_get_string(tag);
                /* envd answers not_found for a tag no process has: one no session can carry is such. */
                if ((size_t)json_object_get_string_len(tag) != strlen(t) || !e2b_request_tag_ok(t))
                        return sp_error_set(err, SP_E_NOT_FOUND, "process with tag %.*s not found", E2B_REQUEST_MAX_TAG,
                                            t);
                *ret_pid = 0;
                *ret_tag = t;
                return 0;
        }
        int64_t v = json_object_get_int64(pid);
        if (v <= 0 || v > INT32_MAX)
                return sp_error_set(err, SP_E_INVALID, "invalid pid");
        *ret_pid = v;
        *ret_tag = NULL;
        return 0;
}

int e2b_request_input(json_object *req, sp_buf *out, sp_error **err)
{
        json_object *input = NULL, *v = NULL;
        const char *b64 = NULL;
        if (!json_object_object_get_ex(req, "input", &input) ||
            !((json_object_object_get_ex(input, "stdin", &v) || json_object_object_get_ex(input, "pty", &v)) &&
              (b64 = json_object_get_string(v))))
                return sp_error_set(err, SP_E_INVALID, "input.stdin or input.pty is required");
        if (strlen(b64) > E2B_REQUEST_MAX_INPUT)
                return sp_error_set(err, SP_E_INVALID, "input too large");
        return sp_base64_decode(out, b64, strlen(b64), 0, err) < 0 ? -1 : 0;
}

bool e2b_request_resize(json_object *req, int64_t *ret_rows, int64_t *ret_cols)
{
        json_object *pty = NULL, *size = NULL, *v = NULL;
        if (!json_object_object_get_ex(req, "pty", &pty) || !json_object_object_get_ex(pty, "size", &size))
                return false;
        *ret_rows = json_object_object_get_ex(size, "rows", &v) ? json_object_get_int64(v) : 24;
        *ret_cols = json_object_object_get_ex(size, "cols", &v) ? json_object_get_int64(v) : 80;
        return true;
}

int e2b_request_signal(json_object *req, const char **ret_name, sp_error **err)
{
        json_object *v = NULL;
        const char *sig = json_object_object_get_ex(req, "signal", &v) ? json_object_get_string(v) : NULL;
        if (!sig || strncmp(sig, "SIGNAL_SIG", 10) != 0 || strlen(sig) > 20)
                return sp_error_set(err, SP_E_INVALID, "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        *ret_name = sig + 10;
        return 0;
}

int e2b_request_path(json_object *req, const char *key, const char **ret, sp_error **err)
{
        const char *p = sp_json_member_str(req, key);
        if (!p || !*p || strlen(p) > E2B_REQUEST_MAX_PATH)
                return sp_error_set(err, SP_E_INVALID, "%s: a path of 1 to 4096 bytes is required", key);
        *ret = p;
        return 0;
}

int e2b_request_depth(json_object *req, int *ret, sp_error **err)
{
        json_object *v = NULL;
        int64_t depth = json_object_object_get_ex(req, "depth", &v) ? json_object_get_int64(v) : 1;
        if (depth == 0)
                depth = 1;
        if (depth < 1 || depth > E2B_REQUEST_MAX_DEPTH)
                return sp_error_set(err, SP_E_INVALID, "depth must be 1 to 16");
        *ret = (int)depth;
        return 0;
}

/* ---- REST ---- */

int e2b_request_body(const char *body, size_t len, json_object **ret, sp_error **err)
{
        return parse_object(body, len, "the body is not a JSON object", ret, err);
}

/* Whether s is an IPv4 address or CIDR (an E2B allowOut entry may be either, or a name). */
static bool is_addr(const char *s)
{
        size_t n = strspn(s, "0123456789./");
        return n == strlen(s) && strchr(s, '.') != NULL;
}

int e2b_request_egress(json_object *in, bool update, json_object **ret, sp_error **err)
{
        *ret = NULL;
        json_object *v = NULL, *net = NULL, *allow = NULL, *deny = NULL;
        int internet = -1; /* allow_internet_access: -1 absent */
        if (json_object_object_get_ex(in, "allow_internet_access", &v) && v) {
                if (!json_object_is_type(v, json_type_boolean))
                        return sp_error_set(err, SP_E_INVALID, "allow_internet_access must be a boolean");
                internet = json_object_get_boolean(v);
        }
        if (update)
                net = in;
        else if (!json_object_object_get_ex(in, "network", &net))
                net = NULL;
        if (net) {
                if (!json_object_is_type(net, json_type_object))
                        return sp_error_set(err, SP_E_INVALID, "network must be an object");
                if ((json_object_object_get_ex(net, "allowOut", &allow) && allow &&
                     !json_object_is_type(allow, json_type_array)) ||
                    (json_object_object_get_ex(net, "denyOut", &deny) && deny &&
                     !json_object_is_type(deny, json_type_array)))
                        return sp_error_set(err, SP_E_INVALID, "network.allowOut and network.denyOut must be arrays");
        }
        bool deny_all = internet == 0;
        for (size_t i = 0; deny && i < json_object_array_length(deny); i++) {
                const char *d = json_object_get_string(json_object_array_get_idx(deny, i));
                if (d && strcmp(d, "0.0.0.0/0") == 0)
                        deny_all = true;
                else
                        return sp_error_set(err, SP_E_INVALID,
                                            "network.denyOut: only 0.0.0.0/0 is supported here (egress profiles "
                                            "are allowlists: list what is allowed in allowOut)");
        }
        size_t nallow = allow ? json_object_array_length(allow) : 0;
        if (!deny_all) {
                /* Internet access, or nothing said (the cluster's default, none). */
                if (internet == 1 || nallow)
                        *ret = json_object_new_string("public");
                else if (update)
                        *ret = json_object_new_string("none");
                return 0;
        }
        if (nallow == 0) {
                *ret = json_object_new_string("none");
                return 0;
        }
        json_object *p = json_object_new_object(), *domains = json_object_new_array(), *cidrs = json_object_new_array();
        json_object_object_add(p, "name", json_object_new_string("e2b-allow-out"));
        for (size_t i = 0; i < nallow; i++) {
                json_object *e = json_object_array_get_idx(allow, i);
                const char *s = json_object_get_string(e);
                if (!json_object_is_type(e, json_type_string) || !*s) {
                        json_object_put(domains);
                        json_object_put(cidrs);
                        json_object_put(p);
                        return sp_error_set(err, SP_E_INVALID, "network.allowOut[%zu] must be a string", i);
                }
                if (!is_addr(s)) {
                        json_object_array_add(domains, json_object_new_string(s));
                } else {
                        /* A bare address is its /32. */
                        char c[64];
                        snprintf(c, sizeof(c), "%.40s%s", s, strchr(s, '/') ? "" : "/32");
                        json_object_array_add(cidrs, json_object_new_string(c));
                }
        }
        json_object_object_add(p, "domains", domains);
        json_object_object_add(p, "cidrs", cidrs);
        *ret = p;
        return 0;
}

int e2b_request_create(json_object *in, const char *template_default, json_object **ret_body, sp_error **err)
{
        const char *tpl = sp_json_member_str(in, "templateID");
        char first[E2B_TEMPLATE_NAME_MAX + 1];
        if (!tpl || !*tpl || strcmp(tpl, "base") == 0) {
                /* The first of the list (the create tries the others after it: rest.c). */
                size_t n = strcspn(template_default, ",");
                snprintf(first, sizeof(first), "%.*s", (int)(n < sizeof(first) - 1 ? n : sizeof(first) - 1),
                         template_default);
                tpl = first;
        }
        int64_t timeout = int_field(in, "timeout", E2B_REQUEST_DEFAULT_TIMEOUT_S);
        json_object *v = NULL;
        bool auto_pause = json_object_object_get_ex(in, "autoPause", &v) && json_object_get_boolean(v);
        if (timeout < 0 || timeout > E2B_REQUEST_MAX_TIMEOUT_S)
                return sp_error_set(err, SP_E_INVALID, "timeout must be 0 to 2592000 seconds");
        json_object *body = json_object_new_object();
        json_object_object_add(body, "template", json_object_new_string(tpl));
        if (json_object_object_get_ex(in, "metadata", &v) && v)
                json_object_object_add(body, "metadata", json_object_get(v));
        if (json_object_object_get_ex(in, "envVars", &v) && v)
                json_object_object_add(body, "env", json_object_get(v));
        json_object_object_add(body, "timeout_s", json_object_new_int64(timeout));
        json_object_object_add(body, "end_action", json_object_new_string(auto_pause ? "suspend" : "kill"));
        /* autoResume {"enabled": bool} (the SDK's lifecycle.autoResume): traffic
         * to a port wakes the paused sandbox (docs/ingress.md). */
        json_object *ar = NULL, *en = NULL;
        if (json_object_object_get_ex(in, "autoResume", &ar) && ar) {
                if (!json_object_is_type(ar, json_type_object) || !json_object_object_get_ex(ar, "enabled", &en) ||
                    !json_object_is_type(en, json_type_boolean)) {
                        json_object_put(body);
                        return sp_error_set(err, SP_E_INVALID, "autoResume must be {\"enabled\": true|false}");
                }
                json_object_object_add(body, "auto_resume", json_object_new_boolean(json_object_get_boolean(en)));
        }
        json_object *egress = NULL;
        if (e2b_request_egress(in, false, &egress, err) < 0) {
                json_object_put(body);
                return -SP_E_INVALID;
        }
        if (egress)
                json_object_object_add(body, "egress", egress);
        *ret_body = body;
        return 0;
}

int e2b_request_ingress(json_object *in, const char **ret, sp_error **err)
{
        *ret = "public";
        json_object *net = NULL, *v = NULL;
        if (!json_object_object_get_ex(in, "network", &net) || !net)
                return 0;
        if (!json_object_is_type(net, json_type_object))
                return sp_error_set(err, SP_E_INVALID, "network must be an object");
        if (!json_object_object_get_ex(net, "allowPublicTraffic", &v) || !v)
                return 0;
        if (!json_object_is_type(v, json_type_boolean))
                return sp_error_set(err, SP_E_INVALID, "network.allowPublicTraffic must be a boolean");
        if (!json_object_get_boolean(v))
                *ret = "token";
        return 0;
}

int e2b_request_timeout(json_object *in, bool required, int64_t *ret, sp_error **err)
{
        int64_t t = int_field(in, "timeout", -1);
        if (t > E2B_REQUEST_MAX_TIMEOUT_S || (required && t < 0))
                return sp_error_set(err, SP_E_INVALID, "timeout must be 0 to 2592000 seconds");
        *ret = t < 0 ? -1 : t;
        return 0;
}

static int hexval(char c)
{
        return c >= '0' && c <= '9'   ? c - '0'
               : c >= 'a' && c <= 'f' ? c - 'a' + 10
               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                      : -1;
}

/* Percent-decodes s[0..n) into out (a '+' stays a '+'). */
static void unescape(sp_buf *out, const char *s, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 2]) >= 0) {
                        char c = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
                        sp_buf_append(out, &c, 1, NULL);
                        i += 2;
                } else {
                        sp_buf_append(out, s + i, 1, NULL);
                }
        }
        sp_buf_append(out, "", 0, NULL);
}

/* Adds "&metadata.K=V" for each pair of E2B's metadata query ("k=v&k2=v2",
 * each part percent-encoded). */
static int metadata_filter(sp_buf *target, const char *q, sp_error **err)
{
        int pairs = 0;
        for (const char *p = q; *p;) {
                size_t n = strcspn(p, "&");
                const char *eq = memchr(p, '=', n);
                if (n > 0) {
                        if (!eq)
                                return sp_error_set(err, SP_E_INVALID, "metadata filter: expected key=value");
                        if (++pairs > E2B_REQUEST_MAX_METADATA)
                                return sp_error_set(err, SP_E_INVALID, "metadata filter: at most 8 pairs");
                        _cleanup_buf_ sp_buf k = SP_BUF_INIT, v = SP_BUF_INIT;
                        unescape(&k, p, (size_t)(eq - p));
                        unescape(&v, eq + 1, n - (size_t)(eq - p) - 1);
                        sp_buf_append_str(target, "&metadata.", NULL);
                        e2b_url_escape(target, k.data ? k.data : "");
                        sp_buf_append_str(target, "=", NULL);
                        e2b_url_escape(target, v.data ? v.data : "");
                }
                p += n;
                if (*p == '&')
                        p++;
        }
        return 0;
}

int e2b_request_list(const char *limit, const char *next_token, const char *metadata, const char *state, sp_buf *target,
                     bool *ret_running, bool *ret_paused, sp_error **err)
{
        char *end = NULL;
        long n = limit ? strtol(limit, &end, 10) : 100;
        if ((limit && (*end || end == limit)) || n < 1 || n > E2B_REQUEST_MAX_LIST)
                return sp_error_set(err, SP_E_INVALID, "limit must be 1 to 1000");
        sp_buf_appendf(target, NULL, "/v1/sandboxes?limit=%ld", n);
        if (next_token && *next_token) {
                sp_buf_append_str(target, "&cursor=", NULL);
                e2b_url_escape(target, next_token);
        }
        if (metadata && metadata_filter(target, metadata, err) < 0)
                return -1;
        bool want_running = true, want_paused = true;
        if (state && *state) {
                want_running = want_paused = false;
                for (const char *p = state; *p;) {
                        size_t k = strcspn(p, ",");
                        if (k == 7 && strncmp(p, "running", 7) == 0)
                                want_running = true;
                        else if (k == 6 && strncmp(p, "paused", 6) == 0)
                                want_paused = true;
                        else
                                return sp_error_set(err, SP_E_INVALID, "state must be running or paused");
                        p += k;
                        if (*p == ',')
                                p++;
                }
        }
        *ret_running = want_running;
        *ret_paused = want_paused;
        return 0;
}

int e2b_request_logs(const char *start, const char *limit, size_t max, int64_t *ret_start_ms, size_t *ret_limit,
                     sp_error **err)
{
        int64_t s = 0;
        if (start && *start) {
                if (strspn(start, "0123456789") != strlen(start) || strlen(start) > 15)
                        return sp_error_set(err, SP_E_INVALID, "start must be milliseconds since the epoch");
                s = strtoll(start, NULL, 10);
        }
        size_t n = max;
        if (limit && *limit) {
                unsigned long long v = strspn(limit, "0123456789") == strlen(limit) && strlen(limit) <= 15
                                               ? strtoull(limit, NULL, 10)
                                               : 0;
                if (v < 1 || v > max)
                        return sp_error_set(err, SP_E_INVALID, "limit must be 1 to %zu", max);
                n = (size_t)v;
        }
        *ret_start_ms = s;
        *ret_limit = n;
        return 0;
}

/* ---- the public API's answers ---- */

bool e2b_ingress_domain(const char *url, char *out, size_t n)
{
        static const char first[] = "{port}-";
        if (n)
                out[0] = '\0';
        const char *host = url ? strstr(url, "://") : NULL;
        if (!host || n == 0)
                return false;
        host += 3;
        size_t len = strcspn(host, "/?#");
        if (len <= strlen(first) || strncmp(host, first, strlen(first)) != 0)
                return false;
        const char *dot = memchr(host, '.', len);
        if (!dot)
                return false;
        const char *d = dot + 1;
        size_t dn = len - (size_t)(d - host);
        /* A host name and a port: what E2B puts after "{port}-{id}.". */
        if (dn == 0 || dn >= n || d[0] == '.' || d[0] == ':' ||
            strspn(d, "abcdefghijklmnopqrstuvwxyz"
                      "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:") < dn)
                return false;
        memcpy(out, d, dn);
        out[dn] = '\0';
        return true;
}
