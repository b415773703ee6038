/* SPDX-License-Identifier: Apache-2.0 */
/*
 * space-rpc: a low-level client of the internal RPC, for operators and
 * scripts until spacectl speaks the public API.
 *
 *   space-rpc [--addr HOST:PORT|unix:PATH] METHOD [JSON]
 *       a unary call; prints the JSON answer, or the error and exits 1
 *   space-rpc [--addr ...] exec SANDBOX [--] ARGV...
 *       runs a command in a sandbox (Exec + AttachSession): its stdout and
 *       stderr to ours, its exit code as ours
 *
 * Cleartext only (a worker started with --insecure on loopback); TLS comes
 * with spacectl.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "space/cleanup.h"
#include "space/id.h"
#include "space/json.h"
#include "space/rpc.h"
#include "space/worker_rpc.h"

static const char *addr = "127.0.0.1:7071";

static void usage(void)
{
        fprintf(stderr, "usage: space-rpc [--addr ADDR] METHOD [JSON]\n"
                        "       space-rpc [--addr ADDR] exec SANDBOX [--] ARGV...\n");
        exit(2);
}

static int unary(const char *method, const char *json)
{
        _cleanup_json_ json_object *req = NULL, *resp = NULL;
        _cleanup_error_ sp_error *e = NULL;
        if (sp_json_parse(json, strlen(json), &req, &e) < 0) {
                fprintf(stderr, "space-rpc: request: %s\n", e->message);
                return 2;
        }
        if (sp_rpc_call_sync(addr, NULL, method, req, 600000, &resp, &e) < 0) {
                fprintf(stderr, "space-rpc: %s: %s (%s)\n", method, e->message, sp_errc_name(e->code));
                return 1;
        }
        printf("%s\n", json_object_to_json_string_ext(resp, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE));
        return 0;
}

typedef struct {
        struct event_base *base;
        int code;
        bool done;
} exec_state;

static void on_frame(sp_rpc_stream *s, sp_rpc_frame_type type, const uint8_t *p, size_t n, void *ud)
{
        (void)s;
        exec_state *st = ud;
        if (type == SP_RPC_FRAME_DATA && n >= 9) {
                FILE *f = p[0] == 2 ? stderr : stdout;
                fwrite(p + 9, 1, n - 9, f);
                fflush(f);
        } else if (type == SP_RPC_FRAME_JSON) {
                _cleanup_json_ json_object *o = NULL;
                json_object *ev, *code, *sig;
                if (sp_json_parse((const char *)p, n, &o, NULL) == 0 && json_object_object_get_ex(o, "event", &ev) &&
                    strcmp(json_object_get_string(ev), "exit") == 0) {
                        st->code = json_object_object_get_ex(o, "code", &code) ? json_object_get_int(code) : 1;
                        if (json_object_object_get_ex(o, "signal", &sig) && json_object_get_int(sig))
                                st->code = 128 + json_object_get_int(sig);
                }
        }
}

static void on_end(sp_rpc_stream *s, json_object *trailer, const sp_error *err, void *ud)
{
        (void)s;
        (void)trailer;
        exec_state *st = ud;
        if (err) {
                fprintf(stderr, "space-rpc: attach: %s\n", err->message);
                st->code = 1;
        }
        st->done = true;
        event_base_loopbreak(st->base);
}

static int exec_cmd(const char *sandbox, int argc, char **argv)
{
        char ses[SP_ID_MAX];
        if (sp_id_new("ses", ses, NULL) < 0)
                return 1;
        _cleanup_json_ json_object *a = json_object_new_array(), *resp = NULL;
        for (int i = 0; i < argc; i++)
                json_object_array_add(a, json_object_new_string(argv[i]));
        _cleanup_json_ json_object *req =
                pr_msg_encode(&pr_wk_exec_schema, &(pr_wk_exec){.sandbox_id = sandbox, .session_id = ses, .argv = a});
        _cleanup_error_ sp_error *e = NULL;
        if (sp_rpc_call_sync(addr, NULL, "Exec", req, 60000, &resp, &e) < 0) {
                fprintf(stderr, "space-rpc: exec: %s\n", e->message);
                return 127;
        }
        exec_state st = {.base = event_base_new(), .code = 1};
        sp_rpc_client *cli = sp_rpc_client_new(st.base, addr, NULL, &e);
        _cleanup_json_ json_object *att =
                pr_msg_encode(&pr_wk_attach_session_schema, &(pr_wk_attach_session){.session_id = ses});
        static const sp_rpc_stream_ops ops = {.on_frame = on_frame, .on_end = on_end};
        if (!cli || !sp_rpc_client_stream(cli, "AttachSession", att, 0, &ops, &st, &e)) {
                fprintf(stderr, "space-rpc: attach: %s\n", e ? e->message : "?");
                return 1;
        }
        while (!st.done)
                event_base_dispatch(st.base);
        sp_rpc_client_free(cli);
        event_base_free(st.base);
        return st.code;
}

int main(int argc, char **argv)
{
        int i = 1;
        if (i + 1 < argc && strcmp(argv[i], "--addr") == 0) {
                addr = argv[i + 1];
                i += 2;
        }
        if (i >= argc)
                usage();
        if (strcmp(argv[i], "exec") == 0) {
                if (i + 2 > argc - 1 + 1 || i + 1 >= argc)
                        usage();
                const char *sandbox = argv[i + 1];
                int first = i + 2;
                if (first < argc && strcmp(argv[first], "--") == 0)
                        first++;
                if (first >= argc)
                        usage();
                return exec_cmd(sandbox, argc - first, argv + first);
        }
        return unary(argv[i], i + 1 < argc ? argv[i + 1] : "{}");
}
