/* SPDX-License-Identifier: Apache-2.0 */
#ifndef WK_RPC_SERVICE_INTERNAL_H
#define WK_RPC_SERVICE_INTERNAL_H

#include "node/node.h"
#include "space/rpc.h"
#include <openssl/ssl.h>

typedef struct wk_service_ctx {
        wk_node *node;
        int64_t max_port_connections; /* ConnectPort calls open at once */
        bool allow_unauthenticated;
        SSL_CTX *peer_ctx; /* the worker's client context toward other workers (NULL: none) */
} wk_service_ctx;

extern wk_service_ctx wk__svc;

/* Fails the call with e and frees e; returns -1. */
int wk__fail(sp_rpc_call *call, sp_error *e);
/* Ends call with an agent channel's EXIT: its error in the one shape, or the
 * result as the answer (streaming: the END trailer). */
void wk__call_finish_from_exit(sp_rpc_call *call, json_object *result, bool streaming);
/* The END trailer of an import (s: pr_wk_import_trailer_schema) or an upload
 * (pr_wk_upload_trailer_schema, with the archive's bytes): the template name. */
json_object *wk__template_trailer(const pr_schema *s, const char *name, int64_t bytes);

/* sessions.c */
void wk__h_exec(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_get_session(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_list_sessions(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_signal(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_kill(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_resize(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_close_stdin(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_attach(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_write_stdin(sp_rpc_call *call, json_object *req, void *ud);
/* templates.c */
void wk__h_upload_template(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_read_template_artifact(sp_rpc_call *call, json_object *req, void *ud);
/* files.c */
void wk__h_file_simple(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_read_file(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_write_file(sp_rpc_call *call, json_object *req, void *ud);
/* artifacts.c */
void wk__h_export_sandbox(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_read_sandbox_artifact(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_import_sandbox(sp_rpc_call *call, json_object *req, void *ud);
void wk__h_delete_stored_sandbox(sp_rpc_call *call, json_object *req, void *ud);
/* ports.c */
void wk__h_connect_port(sp_rpc_call *call, json_object *req, void *ud);

/* An egress profile as the gateway will read it (field 'egress' in errors). */
int wk__egress_check(json_object *egress, sp_error **err);

#endif
