/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the OpenAPI document compiled into the control plane
 * (proto/openapi.yaml) and the route table the server registers describe the
 * same API — the same (method, path) pairs both ways, the same routes on a
 * real sp_http_server — and the document is whole: every operation has a
 * summary and responses, path parameters are declared, authentication
 * matches the table, every $ref resolves and schemas hold only schema
 * keywords. */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/openapi_doc.h"
#include "api/routes.h"
#include "harness.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/http.h"
#include "space/json.h"

#define MAX_ROUTES 256

/* A set of "METHOD /path" strings. */
typedef struct route_set {
        char *items[MAX_ROUTES];
        size_t n;
} route_set;

static void set_free(route_set *s)
{
        for (size_t i = 0; i < s->n; i++)
                free(s->items[i]);
        s->n = 0;
}

static bool set_has(const route_set *s, const char *item)
{
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->items[i], item) == 0)
                        return true;
        return false;
}

/* Adds "method path"; fails the test on a duplicate. */
static void set_add(route_set *s, const char *method, const char *path, const char *what)
{
        char *item = NULL;
        ck_assert_int_ge(asprintf(&item, "%s %s", method, path), 0);
        ck_assert_msg(!set_has(s, item), "%s lists %s twice", what, item);
        ck_assert_int_lt(s->n, MAX_ROUTES);
        s->items[s->n++] = item;
}

/* The entries of a that b lacks, one per line, into out. */
static void set_minus(const route_set *a, const route_set *b, sp_buf *out)
{
        for (size_t i = 0; i < a->n; i++)
                if (!set_has(b, a->items[i]))
                        sp_buf_appendf(out, NULL, "  %s\n", a->items[i]);
}

static void expect_sets_equal(const route_set *a, const char *a_name, const route_set *b, const char *b_name)
{
        _cleanup_buf_ sp_buf only_a = SP_BUF_INIT, only_b = SP_BUF_INIT;
        set_minus(a, b, &only_a);
        set_minus(b, a, &only_b);
        ck_assert_msg(only_a.len == 0 && only_b.len == 0, "in %s only:\n%sin %s only:\n%s", a_name,
                      only_a.len ? only_a.data : "  (none)\n", b_name, only_b.len ? only_b.data : "  (none)\n");
        ck_assert_uint_eq(a->n, b->n);
}

static json_object *load_doc(void)
{
        ck_assert_uint_eq(strlen(cp_openapi_json), cp_openapi_json_len);
        json_object *doc = NULL;
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(sp_json_parse(cp_openapi_json, cp_openapi_json_len, &doc, &e) == 0, "document: %s",
                      e ? e->message : "");
        ck_assert(json_object_is_type(doc, json_type_object));
        return doc;
}

static json_object *get(json_object *o, const char *key)
{
        json_object *v = NULL;
        if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v))
                return NULL;
        return v;
}

static const char *const http_methods[] = {"get", "put", "post", "delete", "patch", "options", "head", "trace", NULL};

static bool is_method(const char *key)
{
        for (size_t i = 0; http_methods[i]; i++)
                if (strcmp(key, http_methods[i]) == 0)
                        return true;
        return false;
}

static void upper(const char *s, char *out, size_t outlen)
{
        size_t i = 0;
        for (; s[i] && i + 1 < outlen; i++)
                out[i] = (char)(s[i] >= 'a' && s[i] <= 'z' ? s[i] - 32 : s[i]);
        out[i] = '\0';
}

/* The (method, path) pairs of the document's paths, HEAD aside. */
static void doc_routes(json_object *doc, route_set *out)
{
        json_object *paths = get(doc, "paths");
        ck_assert_msg(paths && json_object_is_type(paths, json_type_object), "document has no paths");
        json_object_object_foreach (paths, path, item) {
                ck_assert_msg(path[0] == '/', "path '%s' does not start with '/'", path);
                json_object_object_foreach (item, key, op) {
                        (void)op;
                        if (!is_method(key) || strcmp(key, "head") == 0)
                                continue;
                        char m[16];
                        upper(key, m, sizeof(m));
                        set_add(out, m, path, "the document");
                }
        }
}

/* A route pattern in OpenAPI spelling: "{x}" segments stay, a trailing "*x"
 * wildcard becomes "{x}". */
static void openapi_path(const char *pattern, char *out, size_t outlen)
{
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        for (const char *s = pattern; *s;) {
                const char *e = strchr(s + 1, '/');
                size_t n = e ? (size_t)(e - s) : strlen(s);
                if (n >= 2 && s[0] == '/' && s[1] == '*') {
                        ck_assert_msg(!e, "wildcard not last in %s", pattern);
                        sp_buf_appendf(&b, NULL, "/{%.*s}", (int)(n - 2), s + 2);
                } else {
                        sp_buf_append(&b, s, n, NULL);
                }
                s += n;
        }
        ck_assert_uint_lt(b.len, outlen);
        snprintf(out, outlen, "%s", b.data ? b.data : "");
}

static void table_routes(route_set *out, bool as_openapi)
{
        for (const cp_route *r = cp_api_routes; r->method; r++) {
                ck_assert_msg(r->pattern && r->handler, "route %s has no pattern or handler", r->method);
                if (strcmp(r->method, "HEAD") == 0)
                        continue;
                char path[512];
                if (as_openapi)
                        openapi_path(r->pattern, path, sizeof(path));
                else
                        snprintf(path, sizeof(path), "%s", r->pattern);
                set_add(out, r->method, path, "cp_api_routes");
        }
}

static const cp_route *table_route(const char *method, const char *path)
{
        for (const cp_route *r = cp_api_routes; r->method; r++) {
                char p[512];
                openapi_path(r->pattern, p, sizeof(p));
                if (strcmp(r->method, method) == 0 && strcmp(p, path) == 0)
                        return r;
        }
        return NULL;
}

/* ---- the document and the table ---- */

START_TEST(openapi_pattern_spelling)
{
        char out[128];
        openapi_path("/v1/sandboxes/{id}/files/*path", out, sizeof(out));
        ck_assert_str_eq(out, "/v1/sandboxes/{id}/files/{path}");
        openapi_path("/v1/sandboxes/{id}", out, sizeof(out));
        ck_assert_str_eq(out, "/v1/sandboxes/{id}");
        openapi_path("/healthz", out, sizeof(out));
        ck_assert_str_eq(out, "/healthz");
        openapi_path("/", out, sizeof(out));
        ck_assert_str_eq(out, "/");
        openapi_path("/a/*rest", out, sizeof(out));
        ck_assert_str_eq(out, "/a/{rest}");
}
END_TEST

START_TEST(document_paths_equal_route_table)
{
        _cleanup_json_ json_object *doc = load_doc();
        route_set in_doc = {0}, in_table = {0};
        doc_routes(doc, &in_doc);
        table_routes(&in_table, true);
        ck_assert_uint_gt(in_table.n, 4);
        expect_sets_equal(&in_doc, "proto/openapi.yaml", &in_table, "cp_api_routes");
        set_free(&in_doc);
        set_free(&in_table);
}
END_TEST

/* Collects what the server registered. */
static int collect(const char *method, const char *pattern, void *userdata)
{
        route_set *s = userdata;
        set_add(s, method, pattern, "the server");
        return 0;
}

START_TEST(server_registers_exactly_the_table)
{
        struct event_base *base = event_base_new();
        ck_assert_ptr_nonnull(base);
        sp_http_server *srv = sp_http_server_new(base, NULL, NULL);
        ck_assert_ptr_nonnull(srv);
        _cleanup_error_ sp_error *e = NULL;
        ck_assert_msg(cp_api_register_routes(srv, NULL, &e) == 0, "register: %s", e ? e->message : "");

        route_set served = {0}, in_table = {0};
        ck_assert_int_eq(sp_http_server_foreach_route(srv, collect, &served), 0);
        table_routes(&in_table, false);
        expect_sets_equal(&served, "the server", &in_table, "cp_api_routes");

        /* Registering the table twice on one server is refused: no route is silently doubled. */
        ck_assert_int_lt(cp_api_register_routes(srv, NULL, NULL), 0);
        set_free(&served);
        set_free(&in_table);
        sp_http_server_free(srv);
        event_base_free(base);
}
END_TEST

/* ---- the document is whole ---- */

/* Resolves a local "$ref" ("#/a/b~1c") against doc; NULL if it does not. */
static json_object *resolve(json_object *doc, const char *ref)
{
        if (strncmp(ref, "#/", 2) != 0)
                return NULL;
        json_object *cur = doc;
        for (const char *s = ref + 2; cur;) {
                const char *e = strchr(s, '/');
                size_t n = e ? (size_t)(e - s) : strlen(s);
                char tok[256];
                size_t k = 0;
                for (size_t i = 0; i < n && k + 1 < sizeof(tok); i++) {
                        if (s[i] == '~' && i + 1 < n && (s[i + 1] == '0' || s[i + 1] == '1')) {
                                tok[k++] = s[i + 1] == '0' ? '~' : '/';
                                i++;
                        } else {
                                tok[k++] = s[i];
                        }
                }
                tok[k] = '\0';
                cur = get(cur, tok);
                if (!e)
                        break;
                s = e + 1;
        }
        return cur;
}

/* Follows $ref chains (bounded). */
static json_object *deref(json_object *doc, json_object *o)
{
        for (int i = 0; i < 8 && o; i++) {
                json_object *ref = get(o, "$ref");
                if (!ref)
                        return o;
                o = resolve(doc, json_object_get_string(ref));
        }
        return o;
}

/* Checks every "$ref" under o; counts them. */
static void check_refs(json_object *doc, json_object *o, const char *where, size_t *count)
{
        if (json_object_is_type(o, json_type_array)) {
                for (size_t i = 0; i < json_object_array_length(o); i++)
                        check_refs(doc, json_object_array_get_idx(o, i), where, count);
                return;
        }
        if (!json_object_is_type(o, json_type_object))
                return;
        json_object_object_foreach (o, key, val) {
                if (strcmp(key, "$ref") == 0) {
                        ck_assert_msg(json_object_is_type(val, json_type_string), "%s: $ref is not a string", where);
                        const char *ref = json_object_get_string(val);
                        ck_assert_msg(resolve(doc, ref) != NULL, "%s: $ref '%s' does not resolve", where, ref);
                        (*count)++;
                } else {
                        char sub[512];
                        snprintf(sub, sizeof(sub), "%s/%s", where, key);
                        check_refs(doc, val, sub, count);
                }
        }
}

START_TEST(every_ref_resolves)
{
        _cleanup_json_ json_object *doc = load_doc();
        size_t refs = 0;
        check_refs(doc, doc, "#", &refs);
        ck_assert_uint_gt(refs, 50);

        /* The resolver itself: a bad reference is caught. */
        ck_assert_ptr_nonnull(resolve(doc, "#/components/schemas/Error"));
        ck_assert_ptr_nonnull(resolve(doc, "#/paths/~1v1~1sandboxes~1{id}"));
        ck_assert_ptr_null(resolve(doc, "#/components/schemas/Nope"));
        ck_assert_ptr_null(resolve(doc, "other.yaml#/x"));
        ck_assert_ptr_null(resolve(doc, "#/paths/v1/sandboxes"));
}
END_TEST

/* The keywords an OpenAPI 3.0 schema object may hold: anything else is a
 * typo or YAML gone wrong (an unquoted ", " in a flow mapping makes a key). */
static const char *const schema_keywords[] = {"$ref",
                                              "type",
                                              "format",
                                              "description",
                                              "enum",
                                              "nullable",
                                              "properties",
                                              "required",
                                              "items",
                                              "allOf",
                                              "oneOf",
                                              "anyOf",
                                              "not",
                                              "minimum",
                                              "maximum",
                                              "minLength",
                                              "maxLength",
                                              "pattern",
                                              "default",
                                              "example",
                                              "minItems",
                                              "maxItems",
                                              "uniqueItems",
                                              "title",
                                              "readOnly",
                                              "writeOnly",
                                              "exclusiveMinimum",
                                              "exclusiveMaximum",
                                              "multipleOf",
                                              "deprecated",
                                              "minProperties",
                                              "maxProperties",
                                              "additionalProperties",
                                              NULL};

static void check_schema(json_object *schema, const char *where, size_t *count)
{
        ck_assert_msg(json_object_is_type(schema, json_type_object), "%s: a schema must be an object", where);
        (*count)++;
        json_object_object_foreach (schema, key, val) {
                bool known = false;
                for (size_t i = 0; schema_keywords[i] && !known; i++)
                        known = strcmp(key, schema_keywords[i]) == 0;
                ck_assert_msg(known, "%s: '%s' is not a schema keyword", where, key);
                char sub[512];
                snprintf(sub, sizeof(sub), "%s/%s", where, key);
                if (strcmp(key, "properties") == 0) {
                        json_object_object_foreach (val, name, prop) {
                                char p[600];
                                snprintf(p, sizeof(p), "%s/%s", sub, name);
                                check_schema(prop, p, count);
                        }
                } else if (strcmp(key, "items") == 0 || strcmp(key, "not") == 0 ||
                           (strcmp(key, "additionalProperties") == 0 && json_object_is_type(val, json_type_object))) {
                        check_schema(val, sub, count);
                } else if (strcmp(key, "allOf") == 0 || strcmp(key, "oneOf") == 0 || strcmp(key, "anyOf") == 0) {
                        for (size_t i = 0; i < json_object_array_length(val); i++)
                                check_schema(json_object_array_get_idx(val, i), sub, count);
                }
        }
}

/* Checks every "schema" under o (parameters, media types). */
static void find_schemas(json_object *o, const char *where, size_t *count)
{
        if (json_object_is_type(o, json_type_array)) {
                for (size_t i = 0; i < json_object_array_length(o); i++)
                        find_schemas(json_object_array_get_idx(o, i), where, count);
                return;
        }
        if (!json_object_is_type(o, json_type_object))
                return;
        json_object_object_foreach (o, key, val) {
                char sub[512];
                snprintf(sub, sizeof(sub), "%s/%s", where, key);
                if (strcmp(key, "schema") == 0)
                        check_schema(val, sub, count);
                else
                        find_schemas(val, sub, count);
        }
}

START_TEST(schemas_use_only_known_keywords)
{
        _cleanup_json_ json_object *doc = load_doc();
        size_t count = 0;
        json_object *schemas = get(get(doc, "components"), "schemas");
        ck_assert_ptr_nonnull(schemas);
        json_object_object_foreach (schemas, name, schema) {
                char where[256];
                snprintf(where, sizeof(where), "#/components/schemas/%s", name);
                check_schema(schema, where, &count);
        }
        find_schemas(get(doc, "paths"), "#/paths", &count);
        find_schemas(get(get(doc, "components"), "parameters"), "#/components/parameters", &count);
        find_schemas(get(get(doc, "components"), "responses"), "#/components/responses", &count);
        find_schemas(get(get(doc, "components"), "requestBodies"), "#/components/requestBodies", &count);
        ck_assert_uint_gt(count, 100);
}
END_TEST

/* Whether a parameter list (path level or operation level) declares the
 * required path parameter name. */
static bool declares_path_param(json_object *doc, json_object *params, const char *name)
{
        if (!params || !json_object_is_type(params, json_type_array))
                return false;
        for (size_t i = 0; i < json_object_array_length(params); i++) {
                json_object *p = deref(doc, json_object_array_get_idx(params, i));
                json_object *in = get(p, "in"), *n = get(p, "name"), *req = get(p, "required");
                if (in && n && strcmp(json_object_get_string(in), "path") == 0 &&
                    strcmp(json_object_get_string(n), name) == 0)
                        return req && json_object_get_boolean(req);
        }
        return false;
}

static bool has_response(json_object *op, const char *status)
{
        return get(get(op, "responses"), status) != NULL;
}

START_TEST(every_operation_is_described)
{
        _cleanup_json_ json_object *doc = load_doc();
        json_object *openapi = get(doc, "openapi");
        ck_assert(openapi && strncmp(json_object_get_string(openapi), "3.0.", 4) == 0);
        json_object *global_security = get(doc, "security");
        ck_assert_msg(global_security && json_object_array_length(global_security) == 1 &&
                              get(json_object_array_get_idx(global_security, 0), "apiKey"),
                      "the document's default security is not the API key");
        ck_assert_ptr_nonnull(resolve(doc, "#/components/securitySchemes/apiKey"));

        size_t ops = 0;
        json_object_object_foreach (get(doc, "paths"), path, item) {
                json_object_object_foreach (item, key, op) {
                        if (!is_method(key))
                                continue;
                        ops++;
                        char m[16];
                        upper(key, m, sizeof(m));
                        json_object *summary = get(op, "summary");
                        ck_assert_msg(summary && json_object_is_type(summary, json_type_string) &&
                                              json_object_get_string_len(summary) > 0,
                                      "%s %s has no summary", m, path);
                        json_object *responses = get(op, "responses");
                        ck_assert_msg(responses && json_object_is_type(responses, json_type_object) &&
                                              json_object_object_length(responses) > 0,
                                      "%s %s has no responses", m, path);
                        bool success = false;
                        json_object_object_foreach (responses, status, resp) {
                                int code = atoi(status);
                                ck_assert_msg(strlen(status) == 3 && code >= 100 && code <= 599,
                                              "%s %s: response '%s' is not a status", m, path, status);
                                success |= code >= 200 && code < 300;
                                json_object *r = deref(doc, resp);
                                ck_assert_msg(r && get(r, "description"), "%s %s %s has no description", m, path,
                                              status);
                        }
                        ck_assert_msg(success, "%s %s has no 2xx response", m, path);

                        /* Every {param} of the path is declared, required, in: path. */
                        for (const char *s = strchr(path, '{'); s; s = strchr(s + 1, '{')) {
                                const char *e = strchr(s, '}');
                                ck_assert(e);
                                char name[64];
                                snprintf(name, sizeof(name), "%.*s", (int)(e - s - 1), s + 1);
                                ck_assert_msg(declares_path_param(doc, get(item, "parameters"), name) ||
                                                      declares_path_param(doc, get(op, "parameters"), name),
                                              "%s %s does not declare path parameter '%s'", m, path, name);
                        }

                        /* Authentication as the table says: open routes say security: [],
                         * the others inherit the API key and can answer 401; admin routes 403. */
                        const cp_route *r = table_route(m, path);
                        if (!r)
                                continue; /* reported by document_paths_equal_route_table */
                        json_object *sec = get(op, "security");
                        bool open =
                                sec && json_object_is_type(sec, json_type_array) && json_object_array_length(sec) == 0;
                        ck_assert_msg(open == (r->auth == CP_AUTH_NONE), "%s %s: security %s but the route %s", m, path,
                                      open ? "[]" : "apiKey", r->auth == CP_AUTH_NONE ? "is open" : "needs a key");
                        if (!open)
                                ck_assert_msg(has_response(op, "401"), "%s %s: no 401 response", m, path);
                        if (r->auth == CP_AUTH_ADMIN)
                                ck_assert_msg(has_response(op, "403"), "%s %s: admin route without 403", m, path);
                }
        }
        ck_assert_uint_gt(ops, 4);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("api_routes");
        TCase *tc = tcase_create("routes");
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, openapi_pattern_spelling);
        tcase_add_test(tc, document_paths_equal_route_table);
        tcase_add_test(tc, server_registers_exactly_the_table);
        tcase_add_test(tc, every_ref_resolves);
        tcase_add_test(tc, schemas_use_only_known_keywords);
        tcase_add_test(tc, every_operation_is_described);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
