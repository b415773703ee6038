/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Template uploads: PUT /v1/templates/{id}/upload streams the body, an
 * archive, into the worker's UploadTemplate (route/upload.c) and answers
 * what the worker stored, {"template":…,"bytes":N}. The token's max bounds
 * the upload: a larger Content-Length is refused here, before the worker is
 * called; a chunked body is stopped at it by the worker, which is told the
 * bound. The token's sto (when it has one) bounds what the template may hold
 * on the worker, archive and unpacked files together: the worker is told it
 * and refuses an archive that unpacks to more. Nothing of the archive is held
 * in memory.
 */
#include "route/request.h"
#include "route/routes.h"
#include "route/upload.h"
#include "space/cleanup.h"
#include "space/json.h"
#include "space/worker_rpc.h"

static const dp_upload_result template_result[] = {
        {"template", json_type_object},
        {"bytes", json_type_int},
        {NULL, json_type_null},
};

void dp_template_put_handler(sp_http_request *req, void *userdata)
{
        dp *d = userdata;
        _cleanup_error_ sp_error *e = NULL;
        dp_want want = {.kind = DP_KIND_TEMPLATE, .write = true, .template_id = sp_http_request_param(req, "id")};
        dp_claims c;
        if (dp__authenticate(d, req, DP_ROUTE_TEMPLATE_PUT, &want, &c) < 0)
                return;
        if (dp_request_template_put(sp_http_request_parser(req), c.max_bytes, &e) < 0) {
                dp__reply_error(d, req, DP_ROUTE_TEMPLATE_PUT, &c, e);
                return;
        }
        if (!dp__stream_admit(d, req, DP_ROUTE_TEMPLATE_PUT, &c))
                return;
        /* max_stored_bytes (0: none): the worker stops the import there, an archive's files counting too. */
        pr_wk_upload_template q = {.name = c.template_id,
                                   .format = c.format,
                                   .max_bytes = (int64_t)c.max_bytes,
                                   .max_stored_bytes = (int64_t)c.max_stored_bytes};
        _cleanup_json_ json_object *r = pr_msg_encode(&pr_wk_upload_template_schema, &q);
        dp_upload_spec spec = {.route = DP_ROUTE_TEMPLATE_PUT,
                               .method = "UploadTemplate",
                               .request = r,
                               .results = template_result,
                               .bytes = &d->metrics.template_bytes_in};
        dp__upload_start(d, req, &c, &spec);
}
