/* SPDX-License-Identifier: Apache-2.0 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "space/error.h"

static const struct {
        const char *name;
        int status;
} codes[SP_E__MAX] = {
        [SP_OK] = {"ok", 200},
        [SP_E_INVALID] = {"invalid_argument", 400},
        [SP_E_UNAUTHENTICATED] = {"unauthenticated", 401},
        [SP_E_PERMISSION] = {"permission_denied", 403},
        [SP_E_NOT_FOUND] = {"not_found", 404},
        [SP_E_METHOD] = {"method_not_allowed", 405},
        [SP_E_TIMEOUT] = {"timeout", 408},
        [SP_E_CONFLICT] = {"conflict", 409},
        [SP_E_TOO_LARGE] = {"too_large", 413},
        [SP_E_UNSUPPORTED] = {"unsupported", 415},
        [SP_E_LIMIT] = {"resource_exhausted", 429},
        [SP_E_INTERNAL] = {"internal", 500},
        [SP_E_UNAVAILABLE] = {"unavailable", 503},
        [SP_E_IO] = {"io_error", 500},
        [SP_E_PRECONDITION] = {"failed_precondition", 400},
};

static sp_errc clamp(sp_errc code)
{
        return (code <= SP_OK || code >= SP_E__MAX) ? SP_E_INTERNAL : code;
}

const char *sp_errc_name(sp_errc code)
{
        if (code == SP_OK)
                return codes[SP_OK].name;
        return codes[clamp(code)].name;
}

int sp_errc_http_status(sp_errc code)
{
        if (code == SP_OK)
                return 200;
        return codes[clamp(code)].status;
}

sp_errc sp_errc_from_name(const char *name)
{
        for (int c = SP_E_INVALID; c < SP_E__MAX; c++)
                if (strcmp(codes[c].name, name) == 0)
                        return (sp_errc)c;
        return SP_E__MAX;
}

sp_errc sp_errc_from_http_status(int status)
{
        /* The first code of the table with that status: 400 is invalid_argument,
         * 500 internal. */
        for (int c = SP_E_INVALID; c < SP_E__MAX; c++)
                if (codes[c].status == status)
                        return (sp_errc)c;
        /* What gateways answer for a dependency that is down or slow. */
        if (status == 502)
                return SP_E_UNAVAILABLE;
        if (status == 504)
                return SP_E_TIMEOUT;
        return SP_E_INTERNAL;
}

sp_errc sp_errc_from_errno(int errnum)
{
        switch (errnum) {
        case ENOENT:
        case ESRCH:
                return SP_E_NOT_FOUND;
        case EEXIST:
        case ENOTEMPTY:
        case EBUSY:
                return SP_E_CONFLICT;
        case EINVAL:
        case ENAMETOOLONG:
        case ENOTDIR:
        case EISDIR:
        case ELOOP:
                return SP_E_INVALID;
        case EACCES:
        case EPERM:
        case EROFS:
                return SP_E_PERMISSION;
        case ENOSPC:
        case EDQUOT:
        case EMFILE:
        case ENFILE:
        case ENOMEM:
                return SP_E_LIMIT;
        case ETIMEDOUT:
                return SP_E_TIMEOUT;
        case EFBIG:
        case E2BIG:
                return SP_E_TOO_LARGE;
        case ECONNREFUSED:
        case ECONNRESET:
        case EHOSTUNREACH:
        case ENETUNREACH:
        case EAGAIN:
                return SP_E_UNAVAILABLE;
        default:
                return SP_E_IO;
        }
}

int sp_error_setv(sp_error **err, sp_errc code, int errnum, const char *fmt, va_list ap)
{
        code = clamp(code);
        if (!err || *err)
                return -(int)code;

        char *msg = NULL;
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = NULL;
        if (msg && errnum) {
                char *full = NULL;
                if (asprintf(&full, "%s: %s", msg, strerror(errnum)) >= 0) {
                        free(msg);
                        msg = full;
                }
        }

        sp_error *e = calloc(1, sizeof(*e));
        if (!e || !msg) {
                /* Out of memory while reporting: keep a static-free fallback. */
                free(e);
                free(msg);
                e = calloc(1, sizeof(*e));
                if (!e)
                        abort();
                e->message = strdup("out of memory");
                if (!e->message)
                        abort();
                e->code = SP_E_LIMIT;
                *err = e;
                return -(int)code;
        }
        e->code = code;
        e->sys_errno = errnum;
        e->message = msg;
        *err = e;
        return -(int)code;
}

int sp_error_set(sp_error **err, sp_errc code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = sp_error_setv(err, code, 0, fmt, ap);
        va_end(ap);
        return r;
}

int sp_error_set_errno(sp_error **err, sp_errc code, int errnum, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = sp_error_setv(err, code, errnum, fmt, ap);
        va_end(ap);
        return r;
}

int sp_error_wrap(sp_error **err, const char *fmt, ...)
{
        if (!err || !*err)
                return -(int)SP_E_INTERNAL;

        char *ctx = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&ctx, fmt, ap);
        va_end(ap);
        if (n >= 0) {
                char *full = NULL;
                if (asprintf(&full, "%s: %s", ctx, (*err)->message) >= 0) {
                        free((*err)->message);
                        (*err)->message = full;
                }
                free(ctx);
        }
        return -(int)(*err)->code;
}

void sp_error_move(sp_error **dst, sp_error **src)
{
        if (!src || !*src)
                return;
        if (dst && !*dst) {
                *dst = *src;
                *src = NULL;
                return;
        }
        *src = sp_error_free(*src);
}

sp_error *sp_error_free(sp_error *e)
{
        if (e) {
                free(e->message);
                free(e);
        }
        return NULL;
}
