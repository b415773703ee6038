/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The error value used across the project.
 *
 * Every function that can fail takes `sp_error **err` as its last parameter,
 * returns a negative number (or NULL) on failure and sets *err to a newly
 * allocated error. Callers add context on the way up with sp_error_wrap() and
 * only the top (HTTP handler, RPC dispatcher, main) reports it, through
 * sp_errc_http_status() and sp_errc_name(), which map codes to the one error
 * shape {"error":{"code":"...","message":"..."}} (encoded and decoded by
 * error_shape.h). One table holds each code's name and HTTP status; the
 * reverse mappings below read the same table.
 *
 * Passing err == NULL is allowed: the error is then discarded.
 */
#ifndef SPACE_ERROR_H
#define SPACE_ERROR_H

#include <stdarg.h>

typedef enum sp_errc {
        SP_OK = 0,
        SP_E_INVALID, /* bad input: 400 invalid_argument */
        SP_E_UNAUTHENTICATED, /* 401 unauthenticated */
        SP_E_PERMISSION, /* 403 permission_denied */
        SP_E_NOT_FOUND, /* 404 not_found */
        SP_E_METHOD, /* 405 method_not_allowed */
        SP_E_TIMEOUT, /* 408 / deadline exceeded: timeout */
        SP_E_CONFLICT, /* 409 conflict (already exists, wrong state) */
        SP_E_TOO_LARGE, /* 413 too_large */
        SP_E_UNSUPPORTED, /* 415 unsupported */
        SP_E_LIMIT, /* 429 resource_exhausted (quota, capacity) */
        SP_E_INTERNAL, /* 500 internal */
        SP_E_UNAVAILABLE, /* 503 unavailable (dependency down, retry) */
        SP_E_IO, /* 500 io_error: a system call failed */
        SP_E_PRECONDITION, /* 400 failed_precondition: valid, but the system is not in a state to serve it */
        SP_E__MAX
} sp_errc;

typedef struct sp_error {
        sp_errc code;
        int sys_errno; /* errno that caused it, or 0 */
        char *message; /* owned, never NULL */
} sp_error;

/* Sets *err (if err is not NULL and *err is NULL) and returns -(int)code.
 * A second error on an already set *err is dropped: the first one wins. */
int sp_error_set(sp_error **err, sp_errc code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* As sp_error_set(), appending ": strerror(errnum)" and recording errnum. */
int sp_error_set_errno(sp_error **err, sp_errc code, int errnum, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
int sp_error_setv(sp_error **err, sp_errc code, int errnum, const char *fmt, va_list ap)
        __attribute__((format(printf, 4, 0)));

/* Prefixes the message of *err with "context: ". Returns -(int)(*err)->code,
 * or -SP_E_INTERNAL when there is no error to wrap. */
int sp_error_wrap(sp_error **err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Moves *src into *dst (if *dst is empty), leaving *src NULL. */
void sp_error_move(sp_error **dst, sp_error **src);

/* Frees the error; accepts NULL; returns NULL. */
sp_error *sp_error_free(sp_error *e);
static inline void sp_error_freep(sp_error **e)
{
        *e = sp_error_free(*e);
}
#define _cleanup_error_ __attribute__((cleanup(sp_error_freep)))

/* "not_found", "invalid_argument", ... — the code string of the error shape. */
const char *sp_errc_name(sp_errc code);
/* The HTTP status for the code (SP_OK → 200). */
int sp_errc_http_status(sp_errc code);
/* The code whose sp_errc_name() is name, or SP_E__MAX if none. */
sp_errc sp_errc_from_name(const char *name);
/* The code for an HTTP error status when the answer does not say it: the
 * first code with that status (400 invalid_argument, 500 internal), 502
 * unavailable, 504 timeout, anything else internal. */
sp_errc sp_errc_from_http_status(int status);
/* Maps an errno to the closest code (ENOENT → not found, EEXIST → conflict, ...). */
sp_errc sp_errc_from_errno(int errnum);

#endif
