/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests: the scheduler. A table of fleets, each with the worker it must
 * choose or the code and exact message of its refusal (every refusal reason,
 * "later" versus "never", warm and room preference, labels, exclusion, huge
 * numbers), then spreading over repeated placements, determinism under every
 * order of the input, the cap on the explanation, and bad arguments. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "harness.h"
#include "sched/sched.h"
#include "space/cleanup.h"

#define MAXW 32
#define BIG INT64_MAX

/* A worker as a table row writes it; labels are JSON text. Its id is "wkr_" + name. */
typedef struct tw {
        const char *name, *health, *admin, *backend, *labels;
        int64_t cpu_cap, mem_cap, slots_cap, cpu_used, mem_used, slots_used;
        bool tpl;
        int64_t warm;
        int64_t threads, pending; /* job threads and jobs to do (0, 0 unless given) */
} tw;

/* A request as a table row writes it; the template is always "tpl_x". */
typedef struct tr {
        const char *backend, *labels;
        int64_t cpu, mem;
        const char *exclude;
} tr;

/* Brace-list macros, kept on one line each. */
/* clang-format off */
#define W(n, h, a, be, lab, cc, mc, sc, cu, mu, su, tpl, warm) {n, h, a, be, lab, cc, mc, sc, cu, mu, su, tpl, warm, 0, 0}
/* A healthy, active, empty jail worker with 4 CPUs, 8 GiB and 10 slots. */
#define OK(n) W(n, "ready", "active", "jail", NULL, 4000, 8192, 10, 0, 0, 0, true, 0)
#define USED(n, cu, mu, su) W(n, "ready", "active", "jail", NULL, 4000, 8192, 10, cu, mu, su, true, 0)
#define LAB(n, lab) W(n, "ready", "active", "jail", lab, 4000, 8192, 10, 0, 0, 0, true, 0)
#define WARM(n, cu, warm) W(n, "ready", "active", "jail", NULL, 4000, 8192, 10, cu, 0, 0, true, warm)
/* A worker with cu CPU used, t job threads and p jobs to do (w warm sandboxes). */
#define JOBS(n, cu, w, t, p) {n, "ready", "active", "jail", NULL, 4000, 8192, 10, cu, 0, 0, true, w, t, p}
/* A worker that differs from OK() in its health, admin state or backend. */
#define STATE(n, h, a, be) W(n, h, a, be, NULL, 4000, 8192, 10, 0, 0, 0, true, 0)
/* A worker that differs from OK() in its capacities. */
#define CAP(n, cc, mc, sc) W(n, "ready", "active", "jail", NULL, cc, mc, sc, 0, 0, 0, true, 0)
#define RQ(be, lab, cpu, mem, excl) {be, lab, cpu, mem, excl}
#define REQ RQ("jail", NULL, 1000, 512, NULL)
/* A table row refused with code c and message m, or choosing index i. */
#define NW(...) (sizeof((tw[]){__VA_ARGS__}) / sizeof(tw))
#define REFUSE(what, rq, c, m, ...) {what, rq, {__VA_ARGS__}, NW(__VA_ARGS__), c, 0, m}
#define CHOOSE(what, rq, i, ...) {what, rq, {__VA_ARGS__}, NW(__VA_ARGS__), 0, i, NULL}
/* clang-format on */

typedef struct fleet {
        cp_sched_request req;
        cp_sched_worker w[MAXW];
        char id[MAXW][80];
        size_t n;
} fleet;

static json_object *parse(const char *text)
{
        if (!text)
                return NULL;
        json_object *o = json_tokener_parse(text);
        ck_assert_msg(o != NULL, "bad JSON in the test table: %s", text);
        return o;
}

static void fleet_build(fleet *f, const tr *r, const tw *ws, size_t n)
{
        ck_assert_uint_le(n, MAXW);
        *f = (fleet){.n = n};
        f->req = (cp_sched_request){.template_id = "tpl_x",
                                    .backend = r->backend,
                                    .labels = parse(r->labels),
                                    .cpu_millis = r->cpu,
                                    .memory_mb = r->mem,
                                    .exclude_worker = r->exclude};
        for (size_t i = 0; i < n; i++) {
                const tw *t = &ws[i];
                snprintf(f->id[i], sizeof(f->id[i]), "wkr_%s", t->name);
                f->w[i] = (cp_sched_worker){.id = f->id[i],
                                            .name = t->name,
                                            .backend = t->backend,
                                            .health = t->health,
                                            .admin_state = t->admin,
                                            .labels = parse(t->labels),
                                            .cpu_millis_capacity = t->cpu_cap,
                                            .memory_mb_capacity = t->mem_cap,
                                            .slots_capacity = t->slots_cap,
                                            .cpu_millis_used = t->cpu_used,
                                            .memory_mb_used = t->mem_used,
                                            .slots_used = t->slots_used,
                                            .has_template = t->tpl,
                                            .warm = t->warm,
                                            .job_threads = t->threads,
                                            .jobs_pending = t->pending};
        }
}

static void fleet_free(fleet *f)
{
        json_object_put(f->req.labels);
        for (size_t i = 0; i < f->n; i++)
                json_object_put(f->w[i].labels);
}

/* Places on the fleet; returns the code and sets *idx (SIZE_MAX when refused). */
static int place(fleet *f, size_t *idx, sp_error **err)
{
        *idx = SIZE_MAX;
        return cp_sched_place(&f->req, f->w, f->n, idx, err);
}

typedef struct row {
        const char *what;
        tr req;
        tw w[4];
        size_t n;
        int code; /* 0, -SP_E_LIMIT or -SP_E_UNAVAILABLE */
        size_t index; /* when code is 0 */
        const char *msg; /* otherwise, the whole message */
} row;

#define NOPE "no worker can place it: "

static const row rows[] = {
        /* Each refusal reason alone. */
        REFUSE("unreachable", REQ, -SP_E_UNAVAILABLE, NOPE "node-a: unreachable",
               STATE("node-a", "unreachable", "active", "jail")),
        REFUSE("quarantined", REQ, -SP_E_UNAVAILABLE, NOPE "node-a: quarantined",
               STATE("node-a", "quarantined", "active", "jail")),
        REFUSE("no health", REQ, -SP_E_UNAVAILABLE, NOPE "node-a: health unknown",
               STATE("node-a", NULL, "active", "jail")),
        REFUSE("cordoned", REQ, -SP_E_UNAVAILABLE, NOPE "node-a: cordoned",
               STATE("node-a", "ready", "cordoned", "jail")),
        REFUSE("draining", REQ, -SP_E_UNAVAILABLE, NOPE "node-a: draining",
               STATE("node-a", "ready", "draining", "jail")),
        REFUSE("no admin state", REQ, -SP_E_UNAVAILABLE, NOPE "node-a: admin state unknown",
               STATE("node-a", "ready", NULL, "jail")),
        REFUSE("wrong backend", REQ, -SP_E_UNAVAILABLE, NOPE "node-e: backend qemu, not jail",
               STATE("node-e", "ready", "active", "qemu")),
        REFUSE("no backend", REQ, -SP_E_UNAVAILABLE, NOPE "node-e: backend unknown, not jail",
               STATE("node-e", "ready", "active", NULL)),
        REFUSE("no labels at all", RQ("jail", "{\"gpu\":\"a100\"}", 1000, 512, NULL), -SP_E_UNAVAILABLE,
               NOPE "node-d: lacks label gpu=a100", OK("node-d")),
        REFUSE("label missing", RQ("jail", "{\"gpu\":\"a100\"}", 1000, 512, NULL), -SP_E_UNAVAILABLE,
               NOPE "node-d: lacks label gpu=a100", LAB("node-d", "{\"zone\":\"b\"}")),
        REFUSE("second label missing", RQ("jail", "{\"gpu\":\"a100\",\"zone\":\"b\"}", 1000, 512, NULL),
               -SP_E_UNAVAILABLE, NOPE "node-d: lacks label zone=b", LAB("node-d", "{\"gpu\":\"a100\"}")),
        REFUSE("label unequal", RQ("jail", "{\"gpu\":\"a100\"}", 1000, 512, NULL), -SP_E_UNAVAILABLE,
               NOPE "node-d: has label gpu=h100, not a100", LAB("node-d", "{\"gpu\":\"h100\"}")),
        REFUSE("label not a string", RQ("jail", "{\"gpu\":\"1\"}", 1000, 512, NULL), -SP_E_UNAVAILABLE,
               NOPE "node-d: has label gpu=(not a string), not 1", LAB("node-d", "{\"gpu\":1}")),
        REFUSE("labels not an object", RQ("jail", "{\"gpu\":\"a100\"}", 1000, 512, NULL), -SP_E_UNAVAILABLE,
               NOPE "node-d: lacks label gpu=a100", LAB("node-d", "[\"gpu\"]")),
        REFUSE("no template", REQ, -SP_E_UNAVAILABLE, NOPE "node-f: no template tpl_x",
               W("node-f", "ready", "active", "jail", NULL, 4000, 8192, 10, 0, 0, 0, false, 0)),
        REFUSE("too few CPUs in all", REQ, -SP_E_UNAVAILABLE, NOPE "node-c: needs 1000m of CPU, has 500m in all",
               CAP("node-c", 500, 8192, 10)),
        REFUSE("too little memory in all", REQ, -SP_E_UNAVAILABLE,
               NOPE "node-c: needs 512 MiB of memory, has 256 MiB in all", CAP("node-c", 4000, 256, 10)),
        REFUSE("no slots in all", REQ, -SP_E_UNAVAILABLE, NOPE "node-g: has no slots", CAP("node-g", 4000, 8192, 0)),
        REFUSE("negative capacity", REQ, -SP_E_UNAVAILABLE, NOPE "node-c: needs 1000m of CPU, has 0m in all",
               CAP("node-c", -1, 8192, 10)),
        REFUSE("CPU busy", REQ, -SP_E_LIMIT, NOPE "node-c: needs 1000m of CPU, 500m free", USED("node-c", 3500, 0, 0)),
        REFUSE("memory busy", REQ, -SP_E_LIMIT, NOPE "node-c: needs 512 MiB of memory, 128 MiB free",
               USED("node-c", 0, 8064, 0)),
        REFUSE("slots full", REQ, -SP_E_LIMIT, NOPE "node-g: no free slot", USED("node-g", 0, 0, 10)),
        REFUSE("overcommitted", REQ, -SP_E_LIMIT, NOPE "node-c: needs 512 MiB of memory, 0 MiB free",
               USED("node-c", 0, 9000, 0)),
        REFUSE("excluded", RQ("jail", NULL, 1000, 512, "wkr_node-a"), -SP_E_UNAVAILABLE,
               NOPE "node-a: excluded (moving the sandbox away from it)", OK("node-a")),

        /* A permanent reason wins over a lack of room, so the code says "never". */
        REFUSE("wrong backend and full", REQ, -SP_E_UNAVAILABLE, NOPE "node-e: backend qemu, not jail",
               W("node-e", "ready", "active", "qemu", NULL, 4000, 8192, 10, 4000, 8192, 10, true, 0)),
        REFUSE("cordoned and full", REQ, -SP_E_UNAVAILABLE, NOPE "node-a: cordoned",
               W("node-a", "ready", "cordoned", "jail", NULL, 4000, 8192, 10, 4000, 8192, 10, true, 0)),
        REFUSE("too small in all and busy", REQ, -SP_E_UNAVAILABLE, NOPE "node-c: needs 1000m of CPU, has 500m in all",
               W("node-c", "ready", "active", "jail", NULL, 500, 8192, 10, 0, 8192, 0, true, 0)),
        REFUSE("excluded and full", RQ("jail", NULL, 1000, 512, "wkr_node-c"), -SP_E_UNAVAILABLE,
               NOPE "node-c: excluded (moving the sandbox away from it)", USED("node-c", 4000, 0, 0)),

        /* Several workers: one that only lacks room makes it "later". */
        REFUSE("cordoned and busy", REQ, -SP_E_LIMIT,
               NOPE "node-a: cordoned; node-b: needs 512 MiB of memory, 128 MiB free",
               STATE("node-a", "ready", "cordoned", "jail"), USED("node-b", 0, 8064, 0)),
        REFUSE("busy and unreachable", REQ, -SP_E_LIMIT, NOPE "node-b: no free slot; node-a: unreachable",
               USED("node-b", 0, 0, 10), STATE("node-a", "unreachable", "active", "jail")),
        REFUSE("all never", RQ("jail", NULL, 1000, 512, "wkr_node-c"), -SP_E_UNAVAILABLE,
               NOPE "node-a: unreachable; node-b: needs 512 MiB of memory, has 256 MiB in all; "
                    "node-c: excluded (moving the sandbox away from it); node-f: no template tpl_x",
               STATE("node-a", "unreachable", "active", "jail"), CAP("node-b", 4000, 256, 10),
               USED("node-c", 4000, 0, 0),
               W("node-f", "ready", "active", "jail", NULL, 4000, 8192, 10, 0, 0, 0, false, 0)),

        /* Eligibility. */
        CHOOSE("any backend (NULL)", RQ(NULL, NULL, 1000, 512, NULL), 0, STATE("node-a", "ready", "active", "qemu")),
        CHOOSE("any backend (empty)", RQ("", NULL, 1000, 512, NULL), 0,
               STATE("node-a", "ready", "active", "firecracker")),
        CHOOSE("extra labels are fine", RQ("jail", "{\"gpu\":\"a100\"}", 1000, 512, NULL), 1,
               LAB("node-a", "{\"gpu\":\"h100\"}"), LAB("node-b", "{\"zone\":\"b\",\"gpu\":\"a100\"}")),
        CHOOSE("no labels requested", REQ, 0, LAB("node-a", "{\"gpu\":\"a100\"}")),
        CHOOSE("empty labels requested", RQ("jail", "{}", 1000, 512, NULL), 0, OK("node-a")),
        CHOOSE("fits exactly", REQ, 0, USED("node-a", 3000, 7680, 9)),
        CHOOSE("needs nothing", RQ("jail", NULL, 0, 0, NULL), 0, CAP("node-a", 0, 0, 1)),
        CHOOSE("skips the ineligible", REQ, 1,
               W("node-a", "ready", "cordoned", "jail", NULL, 4000, 8192, 10, 0, 0, 0, true, 1),
               USED("node-b", 3000, 0, 0), USED("node-c", 0, 8000, 0)),
        CHOOSE("excluded is never chosen", RQ("jail", NULL, 1000, 512, "wkr_node-a"), 1, WARM("node-a", 0, 3),
               USED("node-b", 3000, 0, 0)),

        /* Preference. */
        CHOOSE("warm first", REQ, 1, OK("node-a"), WARM("node-b", 3000, 1)),
        CHOOSE("warm count beyond one does not matter", REQ, 1, WARM("node-a", 2000, 5), WARM("node-b", 0, 1)),
        CHOOSE("more room", REQ, 1, USED("node-a", 2000, 0, 0), USED("node-b", 1000, 0, 0), USED("node-c", 0, 6000, 0)),
        /* node-a has more CPU and memory left in absolute terms, node-b a larger share. */
        CHOOSE("room is a fraction", REQ, 1,
               W("node-a", "ready", "active", "jail", NULL, 64000, 65536, 10, 0, 49152, 0, true, 0), OK("node-b")),
        CHOOSE("slots count as room", REQ, 1,
               W("node-a", "ready", "active", "jail", NULL, 4000, 8192, 2, 0, 0, 1, true, 0), OK("node-b")),
        CHOOSE("tie: smaller name", REQ, 2, OK("node-b"), OK("node-c"), OK("node-a")),
        /* Job queues (issue 18): a create waits on a worker whose threads are all taken. */
        CHOOSE("a thread free before more room", REQ, 1, JOBS("node-a", 0, 0, 4, 4), JOBS("node-b", 3000, 0, 4, 1)),
        CHOOSE("all threads taken: the shorter queue", REQ, 1, JOBS("node-a", 0, 0, 4, 9),
               JOBS("node-b", 3000, 0, 2, 6)),
        CHOOSE("threads free on both: room decides", REQ, 1, JOBS("node-a", 2000, 0, 4, 0), JOBS("node-b", 0, 0, 4, 3)),
        CHOOSE("threads not reported: not held against it", REQ, 0, JOBS("node-a", 0, 0, 0, 50),
               JOBS("node-b", 1000, 0, 4, 1)),
        CHOOSE("warm before a free thread", REQ, 0, JOBS("node-a", 3000, 1, 4, 12), JOBS("node-b", 0, 0, 4, 0)),
        CHOOSE("a long queue is no reason to refuse", REQ, 0, JOBS("node-a", 0, 0, 4, 400)),

        /* Huge numbers: no overflow, exact comparison. */
        CHOOSE("huge capacity, negative usage", RQ("jail", NULL, BIG, BIG, NULL), 0,
               W("node-a", "ready", "active", "jail", NULL, BIG, BIG, BIG, INT64_MIN, INT64_MIN, INT64_MIN, true, 0)),
        REFUSE("huge request, one MiB short", RQ("jail", NULL, 0, BIG, NULL), -SP_E_LIMIT,
               NOPE "node-a: needs 9223372036854775807 MiB of memory, 9223372036854775806 MiB free",
               W("node-a", "ready", "active", "jail", NULL, BIG, BIG, BIG, 0, 1, 0, true, 0)),
        REFUSE("huge usage", REQ, -SP_E_LIMIT, NOPE "node-a: needs 1000m of CPU, 0m free",
               W("node-a", "ready", "active", "jail", NULL, BIG, BIG, BIG, BIG, BIG, BIG, true, 0)),
        /* Scores 1 - 2/BIG and 1 - 1/BIG are equal as doubles: only an exact
         * comparison sees that node-b has one MiB more. */
        CHOOSE("huge: exact room comparison", RQ("jail", NULL, 0, 0, NULL), 1,
               W("node-a", "ready", "active", "jail", NULL, BIG, BIG, BIG, 0, 2, 0, true, 0),
               W("node-b", "ready", "active", "jail", NULL, BIG, BIG, BIG, 0, 1, 0, true, 0)),
};

START_TEST(table)
{
        const row *r = &rows[_i];
        fleet f;
        fleet_build(&f, &r->req, r->w, r->n);
        _cleanup_error_ sp_error *err = NULL;
        size_t idx;
        int code = place(&f, &idx, &err);
        ck_assert_msg(code == r->code, "%s: returned %d, want %d (%s)", r->what, code, r->code,
                      err ? err->message : "no error");
        if (r->code == 0) {
                ck_assert_msg(idx == r->index, "%s: chose %zu, want %zu", r->what, idx, r->index);
                ck_assert_ptr_null(err);
        } else {
                ck_assert_msg(idx == SIZE_MAX, "%s: *ret_index set on failure", r->what);
                ck_assert_int_eq(-code, err->code);
                ck_assert_str_eq(err->message, r->msg);
        }
        fleet_free(&f);
}
END_TEST

/* Places n sandboxes one after another, charging each to the chosen worker. */
static void place_many(fleet *f, size_t count, size_t placed[MAXW])
{
        for (size_t k = 0; k < count; k++) {
                _cleanup_error_ sp_error *err = NULL;
                size_t idx;
                ck_assert_msg(place(f, &idx, &err) == 0, "placement %zu: %s", k, err ? err->message : "");
                placed[idx]++;
                f->w[idx].cpu_millis_used += f->req.cpu_millis;
                f->w[idx].memory_mb_used += f->req.memory_mb;
                f->w[idx].slots_used++;
        }
}

START_TEST(spreads)
{
        static const tw ws[] = {OK("node-a"), OK("node-b"), OK("node-c")};
        static const tr req = REQ;
        fleet f;
        fleet_build(&f, &req, ws, 3);
        size_t placed[MAXW] = {0};
        place_many(&f, 2, placed);
        ck_assert_uint_eq(placed[0], 1);
        ck_assert_uint_eq(placed[1], 1);
        ck_assert_uint_eq(placed[2], 0);

        /* Four CPUs each: twelve fill the fleet evenly, the thirteenth waits. */
        place_many(&f, 10, placed);
        for (size_t i = 0; i < 3; i++)
                ck_assert_uint_eq(placed[i], 4);
        _cleanup_error_ sp_error *err = NULL;
        size_t idx;
        ck_assert_int_eq(place(&f, &idx, &err), -SP_E_LIMIT);
        ck_assert_str_eq(err->message, NOPE "node-a: needs 1000m of CPU, 0m free; "
                                            "node-b: needs 1000m of CPU, 0m free; node-c: needs 1000m of CPU, 0m free");
        fleet_free(&f);
}
END_TEST

static bool next_permutation(size_t *p, size_t n)
{
        size_t i = n - 1;
        while (i > 0 && p[i - 1] >= p[i])
                i--;
        if (i == 0)
                return false;
        size_t j = n - 1;
        while (p[j] <= p[i - 1])
                j--;
        size_t t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
        for (size_t a = i, b = n - 1; a < b; a++, b--) {
                t = p[a];
                p[a] = p[b];
                p[b] = t;
        }
        return true;
}

START_TEST(same_choice_in_every_order)
{
        /* Three empty workers tie on room (node-b, node-d, and node-f renamed
         * node-b below, which differs from node-b only by its larger id);
         * node-c and node-e tie behind them. */
        static const tw ws[] = {USED("node-e", 1000, 0, 0),
                                USED("node-c", 1000, 0, 0),
                                OK("node-d"),
                                OK("node-b"),
                                USED("node-a", 2000, 0, 0),
                                OK("node-f")};
        static const tr req = REQ;
        size_t perm[] = {0, 1, 2, 3, 4, 5};
        size_t tried = 0;
        do {
                tw shuffled[6];
                for (size_t i = 0; i < 6; i++)
                        shuffled[i] = ws[perm[i]];
                fleet f;
                fleet_build(&f, &req, shuffled, 6);
                /* node-f is renamed node-b: the same name, a larger id ("wkr_node-f"). */
                for (size_t i = 0; i < 6; i++)
                        if (strcmp(f.w[i].id, "wkr_node-f") == 0)
                                f.w[i].name = "node-b";
                _cleanup_error_ sp_error *err = NULL;
                size_t idx;
                ck_assert_int_eq(place(&f, &idx, &err), 0);
                ck_assert_str_eq(f.w[idx].id, "wkr_node-b");
                fleet_free(&f);
                tried++;
        } while (next_permutation(perm, 6));
        ck_assert_uint_eq(tried, 720);
}
END_TEST

/* A fleet of n cordoned workers node-00, node-01, ...; the last one instead
 * lacks only room when last_busy. */
static void cordoned_fleet(fleet *f, size_t n, bool last_busy)
{
        static char names[MAXW][32];
        tw ws[MAXW];
        for (size_t i = 0; i < n; i++) {
                snprintf(names[i], sizeof(names[i]), "node-%02zu", i);
                ws[i] = (tw)W(names[i], "ready", "cordoned", "jail", NULL, 4000, 8192, 10, 0, 0, 0, true, 0);
        }
        if (last_busy) {
                ws[n - 1].admin = "active";
                ws[n - 1].slots_used = 10;
        }
        static const tr req = REQ;
        fleet_build(f, &req, ws, n);
}

START_TEST(explanation_is_capped)
{
        static const struct {
                size_t n;
                bool last_busy;
                int code;
                const char *tail; /* the message's end */
                const char *absent;
        } cases[] = {
                {20, false, -SP_E_UNAVAILABLE, "; node-19: cordoned", "more"},
                {21, false, -SP_E_UNAVAILABLE, "; node-19: cordoned; and 1 more", "node-20"},
                {25, false, -SP_E_UNAVAILABLE, "; node-19: cordoned; and 5 more", "node-20"},
                /* The one worker that could take it later is past the cap: still "later". */
                {25, true, -SP_E_LIMIT, "; node-19: cordoned; and 5 more", "node-24"},
                {20, true, -SP_E_LIMIT, "; node-18: cordoned; node-19: no free slot", "more"},
        };
        for (size_t c = 0; c < SP_ARRAY_SIZE(cases); c++) {
                fleet f;
                cordoned_fleet(&f, cases[c].n, cases[c].last_busy);
                _cleanup_error_ sp_error *err = NULL;
                size_t idx;
                ck_assert_int_eq(place(&f, &idx, &err), cases[c].code);
                const char *m = err->message, *head = NOPE "node-00: cordoned; node-01: cordoned; ";
                ck_assert_msg(strncmp(m, head, strlen(head)) == 0, "case %zu: %s", c, m);
                size_t ml = strlen(m), tl = strlen(cases[c].tail);
                ck_assert_msg(ml > tl && strcmp(m + ml - tl, cases[c].tail) == 0, "case %zu: %s", c, m);
                ck_assert_msg(strstr(m, cases[c].absent) == NULL, "case %zu: %s", c, m);
                fleet_free(&f);
        }
}
END_TEST

START_TEST(long_names_are_cut)
{
        char name[201];
        memset(name, 'x', 200);
        name[200] = '\0';
        tw ws[MAXW];
        for (size_t i = 0; i < MAXW; i++)
                ws[i] = (tw)W(name, name, "active", "jail", NULL, 4000, 8192, 10, 0, 0, 0, true, 0);
        static const tr req = REQ;
        fleet f;
        fleet_build(&f, &req, ws, MAXW);
        _cleanup_error_ sp_error *err = NULL;
        size_t idx;
        ck_assert_int_eq(place(&f, &idx, &err), -SP_E_UNAVAILABLE);
        /* Names and reasons cut at 64 characters, nothing cut off the end. */
        char x65[66];
        memset(x65, 'x', 65);
        x65[65] = '\0';
        ck_assert_ptr_null(strstr(err->message, x65));
        ck_assert_ptr_nonnull(strstr(err->message, x65 + 1));
        ck_assert_uint_eq(strlen(err->message), strlen(NOPE) + 20 * (64 + 2 + 64) + 19 * 2 + strlen("; and 12 more"));
        ck_assert_ptr_nonnull(strstr(err->message, "; and 12 more"));
        fleet_free(&f);
}
END_TEST

START_TEST(names_fall_back_to_ids)
{
        static const tw ws[] = {W("", "unreachable", "active", "jail", NULL, 4000, 8192, 10, 0, 0, 0, true, 0),
                                W("", "unreachable", "active", "jail", NULL, 4000, 8192, 10, 0, 0, 0, true, 0)};
        static const tr req = REQ;
        fleet f;
        fleet_build(&f, &req, ws, 2);
        f.w[0].id = "wkr_1";
        f.w[1].id = NULL;
        f.w[1].name = NULL;
        _cleanup_error_ sp_error *err = NULL;
        size_t idx;
        ck_assert_int_eq(place(&f, &idx, &err), -SP_E_UNAVAILABLE);
        ck_assert_str_eq(err->message, NOPE "wkr_1: unreachable; (unnamed): unreachable");
        fleet_free(&f);
}
END_TEST

START_TEST(zero_workers)
{
        static const tr req = REQ;
        fleet f;
        fleet_build(&f, &req, NULL, 0);
        size_t idx = 7;
        _cleanup_error_ sp_error *err = NULL;
        ck_assert_int_eq(cp_sched_place(&f.req, NULL, 0, &idx, &err), -SP_E_UNAVAILABLE);
        ck_assert_int_eq(err->code, SP_E_UNAVAILABLE);
        ck_assert_str_eq(err->message, "no workers have joined the cluster");
        ck_assert_uint_eq(idx, 7);
        /* err may be NULL: the code alone comes back. */
        ck_assert_int_eq(cp_sched_place(&f.req, f.w, 0, &idx, NULL), -SP_E_UNAVAILABLE);
        fleet_free(&f);
}
END_TEST

/* A move (ctrl/move.c) excludes the worker it leaves and those that refused
 * it: never chosen, even when they are the only ones that fit or are warm,
 * and named as excluded in the refusal. */
START_TEST(exclusion_list)
{
        static const tw ws[] = {WARM("node-a", 0, 3), OK("node-b"), OK("node-c"), USED("node-d", 3500, 0, 0)};
        static const tr req = REQ;
        fleet f;
        fleet_build(&f, &req, ws, 4);
        const char *ex[] = {"wkr_node-a", "wkr_node-b", NULL};
        f.req.exclude_workers = ex;
        f.req.nexclude_workers = 3; /* a NULL entry is skipped */
        size_t idx;
        _cleanup_error_ sp_error *err = NULL;
        ck_assert_int_eq(place(&f, &idx, &err), 0);
        ck_assert_uint_eq(idx, 2);
        /* With node-c excluded too, only node-d is left, and it is full. */
        const char *more[] = {"wkr_node-a", "wkr_node-b", "wkr_node-c"};
        f.req.exclude_workers = more;
        f.req.nexclude_workers = 3;
        ck_assert_int_eq(place(&f, &idx, &err), -SP_E_LIMIT);
        ck_assert_str_eq(err->message, NOPE "node-a: excluded (moving the sandbox away from it); node-b: excluded "
                                            "(moving the sandbox away from it); node-c: excluded (moving the sandbox "
                                            "away from it); node-d: needs 1000m of CPU, 500m free");
        /* exclude_worker and the list together. */
        sp_error_free(TAKE_PTR(err));
        f.req.exclude_workers = more + 1;
        f.req.nexclude_workers = 1;
        f.req.exclude_worker = "wkr_node-c";
        ck_assert_int_eq(place(&f, &idx, &err), 0);
        ck_assert_uint_eq(idx, 0);
        fleet_free(&f);
}
END_TEST

/* A sandbox whose disk quota exceeds a worker's storage pool is never placed
 * there; a pool without a working margin free (the quota or a twentieth of
 * the pool, whichever is less) takes none; quotas overcommit otherwise; a
 * worker that reports no pool is not checked. */
START_TEST(disk_quotas_fit_the_storage_pool)
{
        static const tw ws[] = {OK("node-a"), OK("node-b"), OK("node-c")};
        static const tr req = REQ;
        fleet f;
        fleet_build(&f, &req, ws, 3);
        f.w[0].disk_mb_capacity = 20 * 1024; /* a 20 GiB pool */
        f.w[1].disk_mb_capacity = 100 * 1024;
        f.w[1].disk_mb_used = 100 * 1024 - 4000; /* 4000 MiB free: under a twentieth */
        f.w[2].disk_mb_capacity = 100 * 1024;
        f.req.disk_mb = 1024 * 1024; /* 1 TiB */
        size_t idx = 7;
        sp_error *err = NULL;
        ck_assert_int_eq(cp_sched_place(&f.req, f.w, 2, &idx, &err), -SP_E_UNAVAILABLE);
        ck_assert_msg(strstr(err->message, "node-a: needs 1048576 MiB of disk, its storage pool has 20480 MiB in all"),
                      "%s", err->message);
        sp_error_freep(&err);
        /* A 10 GiB quota on a pool with 4000 MiB free: full (5120 MiB margin) ... */
        f.req.disk_mb = 10240;
        ck_assert_int_eq(cp_sched_place(&f.req, f.w + 1, 1, &idx, &err), -SP_E_LIMIT);
        ck_assert_msg(strstr(err->message, "its storage pool is full (4000 MiB free, 5120 MiB needed)"), "%s",
                      err->message);
        sp_error_freep(&err);
        /* ... a 2 GiB quota fits there (quotas overcommit), and the full pool of node-a takes it too. */
        f.req.disk_mb = 2048;
        ck_assert_int_eq(cp_sched_place(&f.req, f.w + 1, 1, &idx, &err), 0);
        f.w[0].disk_mb_used = 20 * 1024 - 1800;
        f.req.disk_mb = 20 * 1024;
        ck_assert_int_eq(cp_sched_place(&f.req, f.w, 1, &idx, &err), 0);
        /* Not reported (0): not checked. */
        f.w[2].disk_mb_capacity = 0;
        f.req.disk_mb = 1024 * 1024;
        ck_assert_int_eq(cp_sched_place(&f.req, f.w + 2, 1, &idx, &err), 0);
        f.req.disk_mb = -1;
        ck_assert_int_eq(cp_sched_place(&f.req, f.w, 3, &idx, &err), -SP_E_INVALID);
        sp_error_freep(&err);
        fleet_free(&f);
}
END_TEST

START_TEST(bad_arguments)
{
        static const tw ws[] = {OK("node-a")};
        static const tr req = REQ;
        static const struct {
                const char *template_id, *labels;
                int64_t cpu, mem;
                const char *msg;
        } cases[] = {
                {NULL, NULL, 1, 1, "the request names no template"},
                {"", NULL, 1, 1, "the request names no template"},
                {"tpl_x", NULL, -1, 1, "requested CPU, memory and disk must not be negative"},
                {"tpl_x", NULL, 1, INT64_MIN, "requested CPU, memory and disk must not be negative"},
                {"tpl_x", "[\"gpu\"]", 1, 1, "requested labels must be an object"},
                {"tpl_x", "\"gpu\"", 1, 1, "requested labels must be an object"},
                {"tpl_x", "{\"gpu\":\"a100\",\"n\":2}", 1, 1, "requested label 'n' must be a string"},
                {"tpl_x", "{\"gpu\":null}", 1, 1, "requested label 'gpu' must be a string"},
        };
        for (size_t c = 0; c < SP_ARRAY_SIZE(cases); c++) {
                fleet f;
                fleet_build(&f, &req, ws, 1);
                f.req.template_id = cases[c].template_id;
                f.req.cpu_millis = cases[c].cpu;
                f.req.memory_mb = cases[c].mem;
                f.req.labels = parse(cases[c].labels);
                size_t idx = 7;
                _cleanup_error_ sp_error *err = NULL;
                ck_assert_int_eq(cp_sched_place(&f.req, f.w, 1, &idx, &err), -SP_E_INVALID);
                ck_assert_str_eq(err->message, cases[c].msg);
                ck_assert_uint_eq(idx, 7);
                fleet_free(&f);
        }

        fleet f;
        fleet_build(&f, &req, ws, 1);
        size_t idx = 7;
        _cleanup_error_ sp_error *err = NULL;
        ck_assert_int_eq(cp_sched_place(NULL, f.w, 1, &idx, &err), -SP_E_INVALID);
        ck_assert_int_eq(cp_sched_place(&f.req, NULL, 1, &idx, NULL), -SP_E_INVALID);
        ck_assert_int_eq(cp_sched_place(&f.req, f.w, 1, NULL, NULL), -SP_E_INVALID);
        ck_assert_uint_eq(idx, 7);
        /* The same fleet is fine. */
        ck_assert_int_eq(cp_sched_place(&f.req, f.w, 1, &idx, NULL), 0);
        ck_assert_uint_eq(idx, 0);
        fleet_free(&f);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("sched");
        TCase *tc = tcase_create("place");
        tcase_add_loop_test(tc, table, 0, (int)SP_ARRAY_SIZE(rows));
        tcase_add_test(tc, spreads);
        tcase_add_test(tc, same_choice_in_every_order);
        tcase_add_test(tc, exclusion_list);
        suite_add_tcase(s, tc);
        TCase *ex = tcase_create("explain");
        tcase_add_test(ex, explanation_is_capped);
        tcase_add_test(ex, long_names_are_cut);
        tcase_add_test(ex, names_fall_back_to_ids);
        tcase_add_test(ex, zero_workers);
        tcase_add_test(ex, bad_arguments);
        tcase_add_test(ex, disk_quotas_fit_the_storage_pool);
        suite_add_tcase(s, ex);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
