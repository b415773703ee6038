/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The public API's route table: every route the control plane serves, in one
 * place, so that the server registers exactly these and a test holds them
 * equal to proto/openapi.yaml, both ways.
 */
#ifndef CP_API_ROUTES_H
#define CP_API_ROUTES_H

#include <stdint.h>

#include "space/http.h"

typedef struct cp_api cp_api;
typedef struct cp_call cp_call;

/* Who may call a route. */
typedef enum cp_auth {
        CP_AUTH_NONE, /* health, metrics, the document */
        CP_AUTH_TENANT, /* any valid API key; the call is scoped to its tenant */
        CP_AUTH_ADMIN, /* an admin key */
} cp_auth;

typedef struct cp_route {
        const char *method; /* "GET", "POST", "DELETE" */
        const char *pattern; /* sp_http_route() syntax: "/v1/sandboxes/{id}" */
        void (*handler)(cp_call *c);
        cp_auth auth;
        uint64_t max_body; /* 0: the server's default (1 MiB) */
} cp_route;

/* Ended by an entry whose method is NULL. */
extern const cp_route cp_api_routes[];

/* Registers every route of cp_api_routes on srv, dispatching to api (which
 * may be NULL to only list them, e.g. in a test; requests then get 503). */
int cp_api_register_routes(sp_http_server *srv, cp_api *api, sp_error **err);

#endif
