/* SPDX-License-Identifier: Apache-2.0 */
/* spacectl's connections to the data plane: where the URLs the API hands
 * out point, the bearer header, and error answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "space/cleanup.h"

#define MAX_ERROR_BODY (64 * 1024)
/* Attach streams are read with explicit timeouts; this bounds every other wait. */
#define IO_TIMEOUT_MS 90000

char *ctl_dp_base(ctl_ctx *ctx, const char *url, const char **ret_target, sp_error **err)
{
        if (ctl_connect(ctx, err) < 0)
                return NULL;
        /* The path starts at the first "/v1/" after the authority. */
        const char *auth = strstr(url, "://");
        const char *v1 = auth ? strstr(auth + 3, "/v1/") : NULL;
        if (!v1) {
                ctl_fail(ctx, CTL_EXIT_CONNECT, err, SP_E_INVALID,
                         "the API handed out a data-plane URL without /v1/: %.200s", url);
                return NULL;
        }
        const char *setting = ctx->settings.v[CTL_F_DATAPLANE_URL];
        char *base = setting ? strdup(setting) : strndup(url, (size_t)(v1 - url));
        if (!base) {
                ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        *ret_target = v1;
        return base;
}

sp_http_client *ctl_dp_client(ctl_ctx *ctx, const char *url, char **ret_target, sp_error **err)
{
        const char *v1 = NULL;
        _cleanup_free_ char *base = ctl_dp_base(ctx, url, &v1, err);
        if (!base)
                return NULL;
        const char *setting = ctx->settings.v[CTL_F_DATAPLANE_URL];
        _cleanup_free_ char *target = strdup(v1);
        if (!target) {
                ctl_fail(ctx, CTL_EXIT_API, err, SP_E_LIMIT, "out of memory");
                return NULL;
        }
        sp_http_client_config cfg = {
                .ca_file = ctx->settings.v[CTL_F_CA_FILE],
                .io_timeout_ms = IO_TIMEOUT_MS,
                .user_agent = "spacectl/" SPACE_VERSION,
        };
        sp_http_client *c = sp_http_client_new(base, &cfg, err);
        if (!c) {
                sp_error_wrap(err, "the data plane at %s (%s)", base,
                              setting ? ctl_source_name(ctx->settings.source[CTL_F_DATAPLANE_URL]) : "from the API");
                ctl_failed(ctx, CTL_EXIT_CONFIG, -1);
                return NULL;
        }
        *ret_target = TAKE_PTR(target);
        return c;
}

int ctl_dp_fail(ctl_ctx *ctx, sp_http_client *c, int status, sp_error **err)
{
        _cleanup_buf_ sp_buf body = SP_BUF_INIT;
        char buf[4096];
        for (;;) {
                ssize_t n = sp_http_client_read(c, buf, sizeof(buf), -1, NULL);
                if (n <= 0 || body.len + (size_t)n > MAX_ERROR_BODY)
                        break;
                sp_buf_append(&body, buf, (size_t)n, NULL);
        }
        return ctl_http_fail(ctx, status, &body, err);
}

int ctl_dp_auth(char *buf, size_t len, const char *token, sp_error **err)
{
        for (const char *p = token; *p; p++)
                if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
                        return sp_error_set(err, SP_E_INVALID,
                                            "the API handed out a token with a byte a header "
                                            "cannot carry");
        int n = snprintf(buf, len, "Authorization: Bearer %s", token);
        if (n < 0 || (size_t)n >= len)
                return sp_error_set(err, SP_E_INVALID, "the API handed out a token longer than %zu bytes", len - 30);
        return 0;
}
