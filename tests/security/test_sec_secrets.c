/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The credential broker from inside real sandboxes (docs/secrets.md). One
 * worker with its gateway confined to the test's own internet (inet.h,
 * whose HTTPS server logs the credentials it receives); sandboxes get
 * bindings as the control plane sends them (CreateSandbox and SetEgress
 * "secrets"), each value random per run:
 *
 *   - the bound header to the bound host arrives with the real value (a
 *     bearer header, an x-api-key, basic auth), and the sandbox's client
 *     verifies the gateway's certificate against the CA installed in its
 *     trust store;
 *   - the placeholder sent anywhere else arrives as it is: another host
 *     (TLS not ended there), another header, the URL, the body, a
 *     placeholder of another sandbox; a Host that is not the TLS name is
 *     refused; expired and over-rate secrets are refused by the gateway;
 *     a secret taken away (SetEgress without it) stops at the next request;
 *   - the value is nowhere the sandbox or an operator looks: the sandbox's
 *     files, environment and processes' memory, the worker's state, logs
 *     and metrics, its RPC answers and error messages;
 *   - the gateway restarted alone, or with the worker: the values come
 *     back from the worker, or are missing (503) until sent again.
 * Needs root.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "netenv.h"
#include "space/buf.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "space/json.h"

static const sp_test_inet_record records[] = {
        {"api.test", "10.213.201.1"},
        {"other.test", "10.213.201.2"},
        {"gh.test", "10.213.201.3"},
        {"old.test", "10.213.201.4"},
};

#define PROFILE "{\"name\":\"agents\",\"domains\":[\"api.test\",\"other.test\",\"gh.test\",\"old.test\"]}"

static sp_test_netenv env;
static sp_test_netbox S = {.id = "sbx_secrets000000000000s"}; /* has the secrets */
static sp_test_netbox T = {.id = "sbx_secrets000000000000t"}; /* another sandbox (of another tenant) */

/* Values and placeholders: random per run. */
static char v_bearer[48], v_key[48], v_gh[48], v_old[48], v_t[48];
static char p_bearer[48], p_key[48], p_gh[48], p_old[48], p_t[48];

static void rand_hex(char *out, const char *prefix, size_t nbytes)
{
        uint8_t r[16];
        ck_assert_int_eq(getrandom(r, nbytes, 0), (ssize_t)nbytes);
        int n = sprintf(out, "%s", prefix);
        for (size_t i = 0; i < nbytes; i++)
                n += sprintf(out + n, "%02x", r[i]);
}

/* The bindings of S (with = false: as SetEgress after bearer was taken away). */
static char *bindings_s(bool with_bearer)
{
        char *out = NULL;
        ck_assert_int_ge(
                asprintf(&out,
                         "[%s%s%s"
                         "{\"id\":\"sec_key\",\"name\":\"key\",\"placeholder\":\"%s\",\"hosts\":[\"api.test\"],"
                         "\"inject\":{\"header\":\"x-api-key\"},\"value\":\"%s\",\"rate_per_min\":2},"
                         "{\"id\":\"sec_gh\",\"name\":\"gh\",\"placeholder\":\"%s\",\"hosts\":[\"gh.test\"],"
                         "\"inject\":{\"basic\":{\"username\":\"x-access-token\"}},\"value\":\"%s\"},"
                         "{\"id\":\"sec_old\",\"name\":\"old\",\"placeholder\":\"%s\",\"hosts\":[\"old.test\"],"
                         "\"inject\":{\"header\":\"Authorization\"},\"value\":\"%s\",\"expires_at\":%lld}]",
                         with_bearer ? "{\"id\":\"sec_bearer\",\"name\":\"bearer\",\"placeholder\":\"" : "",
                         with_bearer ? p_bearer : "",
                         with_bearer ? "\",\"hosts\":[\"api.test\"],\"inject\":{\"header\":\"Authorization\","
                                       "\"format\":\"Bearer {{secret}}\"},\"value\":\"VALUE\"},"
                                     : "",
                         p_key, v_key, p_gh, v_gh, p_old, v_old, (long long)time(NULL) - 60),
                0);
        /* The bearer's value goes in last (the format above holds a placeholder for it). */
        char *at = strstr(out, "\"VALUE\"");
        if (at) {
                char *full = NULL;
                ck_assert_int_ge(asprintf(&full, "%.*s\"%s\"%s", (int)(at - out), out, v_bearer, at + 7), 0);
                free(out);
                out = full;
        }
        return out;
}

static void fixture_up(void)
{
        rand_hex(v_bearer, "sk-live-", 12);
        rand_hex(v_key, "key-", 12);
        rand_hex(v_gh, "ghp_", 12);
        rand_hex(v_old, "old-", 12);
        rand_hex(v_t, "tt-", 12);
        rand_hex(p_bearer, "space-secret-", 16);
        rand_hex(p_key, "space-secret-", 16);
        rand_hex(p_gh, "space-secret-", 16);
        rand_hex(p_old, "space-secret-", 16);
        rand_hex(p_t, "space-secret-", 16);
        sp_test_netenv_up(&env, "secrets", records, SP_ARRAY_SIZE(records), NULL);
        _cleanup_free_ char *b = bindings_s(true), *fields = NULL, *tf = NULL;
        ck_assert_int_ge(asprintf(&fields,
                                  "\"tenant_id\":\"ten_one\",\"egress\":" PROFILE
                                  ",\"env\":{\"OPENAI_API_KEY\":\"%s\",\"KEY\":\"%s\",\"GH\":\"%s\",\"OLD\":\"%s\"},"
                                  "\"secrets\":%s",
                                  p_bearer, p_key, p_gh, p_old, b),
                         0);
        sp_test_netbox_new(&env, &S, fields);
        ck_assert_int_ge(asprintf(&tf,
                                  "\"tenant_id\":\"ten_two\",\"egress\":" PROFILE ",\"env\":{\"MINE\":\"%s\"},"
                                  "\"secrets\":[{\"id\":\"sec_t\",\"name\":\"t\",\"placeholder\":\"%s\",\"hosts\":["
                                  "\"api.test\"],\"inject\":{\"header\":\"Authorization\",\"format\":\"Bearer "
                                  "{{secret}}\"},\"value\":\"%s\"}]",
                                  p_t, p_t, v_t),
                         0);
        sp_test_netbox_new(&env, &T, tf);
}

static void fixture_down(void)
{
        sp_test_netenv_down(&env, (sp_test_netbox *const[]){&S, &T}, 2);
}

/* What the internet logged for a request ("hdr authorization <value>"). */
static int seen(const char *what, const char *value)
{
        char needle[200];
        snprintf(needle, sizeof(needle), "%s %s", what, value);
        return sp_test_inet_seen(&env.in, needle);
}

static char *sh(const sp_test_netbox *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *sh(const sp_test_netbox *b, const char *fmt, ...)
{
        char *script = NULL;
        va_list ap;
        va_start(ap, fmt);
        ck_assert_int_ge(vasprintf(&script, fmt, ap), 0);
        va_end(ap);
        /* The tests talk to the agent directly: the sandbox's env (which the
         * worker adds to each command) is given here. */
        char *full = NULL;
        if (b == &S)
                ck_assert_int_ge(asprintf(&full, "OPENAI_API_KEY=%s KEY=%s GH=%s OLD=%s; %s", p_bearer, p_key, p_gh,
                                          p_old, script),
                                 0);
        else
                ck_assert_int_ge(asprintf(&full, "MINE=%s; %s", p_t, script), 0);
        char *out = sp_test_netbox_sh(b, full);
        free(full);
        free(script);
        return out;
}

/* The first file under dir (GNU grep -r, as the host's root) that holds one
 * of the patterns ("" if none; the caller frees). */
static char *host_grep(const char *dir, const char *const *patterns, const char *exclude)
{
        _cleanup_buf_ sp_buf cmd = SP_BUF_INIT;
        sp_buf_appendf(&cmd, NULL, "grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev %s%s",
                       exclude ? "--exclude=" : "", exclude ? exclude : "");
        for (size_t i = 0; patterns[i]; i++)
                sp_buf_appendf(&cmd, NULL, " -e '%s'", patterns[i]);
        sp_buf_appendf(&cmd, NULL, " '%s' | head -1", dir);
        sp_buf_append(&cmd, "", 1, NULL);
        FILE *g = popen(cmd.data, "r");
        ck_assert(g);
        char hit[600] = "";
        (void)!fgets(hit, sizeof(hit), g);
        pclose(g);
        return strdup(hit);
}

/* curl (from the host, in S's network namespace: to the gateway it is S)
 * with args, verifying against ca (NULL: S's own bundle); its output. */
static char *curl_in_s(const char *args, const char *ca, int *status)
{
        char netns[64], bundle[128], log[800], cmd[3000];
        int pid = sp_test_netbox_pid(&env, &S);
        snprintf(netns, sizeof(netns), "/proc/%d/ns/net", pid);
        snprintf(bundle, sizeof(bundle), "/proc/%d/root/etc/ssl/certs/ca-certificates.crt", pid);
        snprintf(log, sizeof(log), "%s/curl.out", env.top);
        /* The gateway relays to addresses it resolved for S: S asks first. */
        free(sp_test_netbox_sh(&S, "nslookup api.test >/dev/null 2>&1; echo"));
        /* Each --next starts its options afresh: the CA and the address go in every part. */
        char common[300];
        snprintf(common, sizeof(common), "-sS --max-time 10 --cacert '%s' --resolve api.test:443:10.213.201.1",
                 ca ? ca : bundle);
        _cleanup_buf_ sp_buf c = SP_BUF_INIT;
        sp_buf_appendf(&c, NULL, "curl %s ", common);
        for (const char *a = args; *a;) {
                const char *next = strstr(a, "--next");
                size_t n = next ? (size_t)(next - a) + 6 : strlen(a);
                sp_buf_append(&c, a, n, NULL);
                if (next)
                        sp_buf_appendf(&c, NULL, " %s", common);
                a += n;
        }
        sp_buf_append(&c, "", 1, NULL);
        snprintf(cmd, sizeof(cmd), "%s 2>&1", c.data);
        const char *argv[] = {"sh", "-c", cmd, NULL};
        pid_t p;
        sp_error *e = NULL;
        unlink(log);
        sp_test_ok(sp_test_spawn(argv, &(sp_test_spawn_opts){.netns = netns, .log_path = log}, &p, &e), &e);
        sp_test_ok(sp_test_child_wait(p, 20000, status, &e), &e);
        return sp_test_file_tail(log, 20);
}

#define LOGGED(b, ...) sp_test_netbox_logged(&env, b, (const char *const[]){__VA_ARGS__, NULL})
#define WGET "timeout 10 wget -q -O - --no-check-certificate"

START_TEST(the_bound_header_gets_the_value)
{
        char *out = sh(&S, WGET " --header \"Authorization: Bearer $OPENAI_API_KEY\" https://api.test/v1 2>&1");
        if (!strstr(out, "tls api.test 10.213.201.1:443"))
                sp_test_netbox_dump(&env, &S);
        ck_assert_msg(strstr(out, "tls api.test 10.213.201.1:443"), "%s", out);
        free(out);
        char auth[96];
        snprintf(auth, sizeof(auth), "Bearer %s", v_bearer);
        ck_assert_int_eq(seen("hdr authorization", auth), 1);
        ck_assert_int_eq(seen("hdr authorization Bearer", p_bearer), 0);
        ck_assert(LOGGED(&S, "kind", "secret", "secret_id", "sec_bearer", "secret", "bearer", "name", "api.test",
                         "rule", "injected", "decision", "allowed"));

        /* x-api-key; and basic auth, the username the secret's. */
        out = sh(&S, WGET " --header \"x-api-key: $KEY\" https://api.test/k 2>&1");
        ck_assert_msg(strstr(out, "tls api.test"), "%s", out);
        free(out);
        ck_assert_int_eq(seen("hdr x-api-key", v_key), 1);
        out = sh(&S,
                 WGET " --header \"Authorization: Basic $(printf 'me:%%s' \"$GH\" | base64)\" https://gh.test/ 2>&1");
        ck_assert_msg(strstr(out, "tls gh.test"), "%s", out);
        free(out);
        _cleanup_buf_ sp_buf plain = SP_BUF_INIT, enc = SP_BUF_INIT;
        sp_buf_appendf(&plain, NULL, "x-access-token:%s", v_gh);
        sp_base64_encode(&enc, plain.data, plain.len, 0, NULL);
        sp_buf_append(&enc, "", 1, NULL);
        char basic[200];
        snprintf(basic, sizeof(basic), "Basic %s", enc.data);
        ck_assert_int_eq(seen("hdr authorization", basic), 1);
}
END_TEST

/* The sandbox's own clients verify the gateway: its CA is in the trust store. */
START_TEST(the_sandbox_trusts_its_ca_and_only_it)
{
        char *out = sh(&S, "grep -c BEGIN /usr/local/share/ca-certificates/space-sandbox-ca.crt; "
                           "grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt");
        ck_assert_msg(strcmp(out, "1\n1\n") == 0, "%s", out);
        free(out);
        /* No key in it: the CA's stays on the host. */
        char root[64];
        snprintf(root, sizeof(root), "/proc/%d/root/", sp_test_netbox_pid(&env, &S));
        char *hit = host_grep(root, (const char *const[]){"PRIVATE KEY", NULL}, NULL);
        ck_assert_msg(hit[0] == '\0', "a key in the sandbox: %s", hit);
        free(hit);
        /* The variables that point runtimes with their own stores at it. */
        char path[800];
        snprintf(path, sizeof(path), "%s/state/sandboxes/%s/sandbox.json", env.top, S.id);
        _cleanup_json_ json_object *o = json_object_from_file(path);
        json_object *envo = NULL, *v = NULL;
        ck_assert(o && json_object_object_get_ex(o, "env", &envo));
        ck_assert(json_object_object_get_ex(envo, "NODE_EXTRA_CA_CERTS", &v));
        ck_assert_str_eq(json_object_get_string(v), "/usr/local/share/ca-certificates/space-sandbox-ca.crt");
        ck_assert(json_object_object_get_ex(envo, "REQUESTS_CA_BUNDLE", &v));
        ck_assert_str_eq(json_object_get_string(v), "/etc/ssl/certs/ca-certificates.crt");
        /* A verifying client with S's bundle; and with another CA, which the gateway's certificate is not from. */
        char hdr[120], args[400];
        snprintf(hdr, sizeof(hdr), "Authorization: Bearer %s", p_bearer);
        snprintf(args, sizeof(args), "-H '%s' https://api.test/curl", hdr);
        int status = 0;
        char *got = curl_in_s(args, NULL, &status);
        ck_assert_msg(status == 0 && strstr(got, "tls api.test"), "status %d: %s", status, got);
        free(got);
        got = curl_in_s(args, env.in.ca_path, &status);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 60, "status %d: %s", status,
                      got); /* its certificate */
        free(got);
}
END_TEST

/* Every request on a kept-alive connection is read: each gets its
 * injection, a chunked body is passed through and the request after it is
 * still seen, and a Host other than the TLS name is refused. */
START_TEST(every_request_on_a_connection_is_read)
{
        char args[1200], auth[96];
        int status = 0;
        snprintf(args, sizeof(args),
                 "-H 'Authorization: Bearer %s' https://api.test/ka1 https://api.test/ka2 "
                 "--next -H 'Authorization: Bearer %s' -H 'Transfer-Encoding: chunked' --data-binary 'x=%s' "
                 "https://api.test/chunked "
                 "--next -H 'Authorization: Bearer %s' https://api.test/ka3",
                 p_bearer, p_bearer, p_bearer, p_bearer);
        /* The internet logs an accept when it comes: an earlier case's last one (the gateway dials
         * upstream while the client still checks its certificate) may come late, so the count is
         * taken once it stays the same for half a second (at most 5 s). */
        int before = sp_test_inet_seen(&env.in, "accept tcp 10.213.201.1:443");
        for (int i = 0, again = -1; i < 10 && again != before; i++) {
                usleep(500000);
                again = before;
                before = sp_test_inet_seen(&env.in, "accept tcp 10.213.201.1:443");
        }
        char *out = curl_in_s(args, NULL, &status);
        ck_assert_msg(status == 0 && strstr(out, "tls api.test"), "status %d: %s", status, out);
        free(out);
        snprintf(auth, sizeof(auth), "Bearer %s", v_bearer);
        ck_assert_int_eq(seen("hdr authorization", auth), 6); /* two before, four now */
        ck_assert_int_eq(sp_test_inet_seen(&env.in, "req GET /ka3"), 1);
        ck_assert_int_eq(sp_test_inet_seen(&env.in, "host=api.test body=58"),
                         1); /* the chunked body, whole: 2f, 47 bytes, 0 */
        ck_assert_int_eq(sp_test_inet_seen(&env.in, "accept tcp 10.213.201.1:443") - before, 1);
        ck_assert(LOGGED(&S, "kind", "secret", "rule", "placeholder-elsewhere", "detail",
                         "in a request body; not replaced"));
        /* Host: another name, on the TLS connection to api.test. */
        snprintf(args, sizeof(args),
                 "-H 'Host: other.test' -H 'Authorization: Bearer %s' -w '%%{http_code}' "
                 "https://api.test/mis",
                 p_bearer);
        out = curl_in_s(args, NULL, &status);
        ck_assert_msg(strstr(out, "421"), "%s", out);
        free(out);
        ck_assert_int_eq(sp_test_inet_seen(&env.in, "req GET /mis"), 0);
        ck_assert(LOGGED(&S, "kind", "secret", "rule", "host-mismatch"));
}
END_TEST

START_TEST(placeholders_elsewhere_stay_placeholders)
{
        /* Another host: TLS not ended there; the placeholder goes as it is. */
        free(sh(&S,
                WGET " --header \"Authorization: Bearer $OPENAI_API_KEY\" https://other.test/ >/dev/null 2>&1; " WGET
                     " --header \"Authorization: Bearer $OPENAI_API_KEY\" http://other.test/ >/dev/null 2>&1"));
        ck_assert_int_eq(seen("hdr authorization Bearer", p_bearer), 2);
        /* Another header of the bound host, and the URL. */
        free(sh(&S, WGET " --header \"x-api-key: $OPENAI_API_KEY\" https://api.test/ >/dev/null 2>&1; " WGET
                         " \"https://api.test/?k=$OPENAI_API_KEY\" >/dev/null 2>&1"));
        ck_assert_int_eq(seen("hdr x-api-key", p_bearer), 1);
        char req[120];
        snprintf(req, sizeof(req), "/?k=%s", p_bearer);
        ck_assert_int_eq(seen("GET", req), 1);
        ck_assert(LOGGED(&S, "kind", "secret", "secret_id", "sec_bearer", "rule", "placeholder-elsewhere", "detail",
                         "in header x-api-key; not replaced"));
        ck_assert(LOGGED(&S, "kind", "secret", "secret_id", "sec_bearer", "rule", "placeholder-elsewhere", "detail",
                         "in the request target; not replaced"));
        /* The body. */
        free(sh(&S, WGET " --post-data \"token=$OPENAI_API_KEY\" https://api.test/post >/dev/null 2>&1"));
        ck_assert(LOGGED(&S, "kind", "secret", "rule", "placeholder-elsewhere", "detail",
                         "in a request body; not replaced"));
        /* Another sandbox's placeholder, from T to the host both are bound to. */
        free(sh(&T, WGET " --header \"Authorization: Bearer %s\" https://api.test/t >/dev/null 2>&1", p_bearer));
        ck_assert_int_eq(seen("hdr authorization Bearer", p_bearer), 3);
        ck_assert(LOGGED(&T, "kind", "secret", "rule", "placeholder-unknown"));
        /* T's own works (for T). */
        free(sh(&T, WGET " --header \"Authorization: Bearer $MINE\" https://api.test/mine >/dev/null 2>&1"));
        char auth[96];
        snprintf(auth, sizeof(auth), "Bearer %s", v_t);
        ck_assert_int_eq(seen("hdr authorization", auth), 1);
        snprintf(auth, sizeof(auth), "Bearer %s", v_bearer);
        ck_assert_int_eq(seen("hdr authorization", auth), 6); /* only the earlier tests' */
}
END_TEST

START_TEST(expired_over_rate_and_taken_away_stop)
{
        char *out = sh(&S, WGET " -S --header \"Authorization: $OLD\" https://old.test/ 2>&1; echo rc=$?");
        ck_assert_msg(strstr(out, "403"), "%s", out);
        free(out);
        ck_assert_int_eq(seen("hdr authorization", v_old), 0);
        ck_assert_int_eq(sp_test_inet_seen(&env.in, "tcp 10.213.201.4:443 req"), 0);
        ck_assert(LOGGED(&S, "kind", "secret", "secret_id", "sec_old", "rule", "expired", "decision", "refused"));

        /* Two a minute: the third is refused (the first test used one). */
        out = sh(&S, "for i in 1 2 3; do " WGET " --header \"x-api-key: $KEY\" https://api.test/r >/dev/null 2>&1 "
                     "&& echo ok || echo no; done");
        ck_assert_str_eq(out, "ok\nno\nno\n");
        free(out);
        ck_assert_int_eq(seen("hdr x-api-key", v_key), 2);
        ck_assert(LOGGED(&S, "kind", "secret", "secret_id", "sec_key", "rule", "rate-limit"));

        /* Taken away: the next request carries the placeholder only — also when the change
         * that still had it (an older generation) arrives after. */
        _cleanup_free_ char *b = bindings_s(false), *req = NULL, *with = bindings_s(true), *stale = NULL;
        ck_assert_int_ge(asprintf(&req,
                                  "{\"id\":\"%s\",\"egress\":" PROFILE ",\"secrets\":%s,\"egress_generation\":10}",
                                  S.id, b),
                         0);
        sp_error *e = sp_test_netenv_try(&env, "SetEgress", req, NULL);
        ck_assert_msg(!e, "%s", e ? e->message : "");
        ck_assert_int_ge(asprintf(&stale,
                                  "{\"id\":\"%s\",\"egress\":" PROFILE ",\"secrets\":%s,\"egress_generation\":9}", S.id,
                                  with),
                         0);
        e = sp_test_netenv_try(&env, "SetEgress", stale, NULL);
        ck_assert_msg(!e, "%s", e ? e->message : "");
        free(sh(&S, WGET " --header \"Authorization: Bearer $OPENAI_API_KEY\" https://api.test/after >/dev/null 2>&1"));
        char auth[96];
        snprintf(auth, sizeof(auth), "Bearer %s", v_bearer);
        ck_assert_int_eq(seen("hdr authorization", auth), 6);
        ck_assert_int_eq(seen("hdr authorization Bearer", p_bearer), 4);
}
END_TEST

/* needle in the memory of process pid (readable mappings). */
static bool mem_has(int pid, const char *needle)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/maps", pid);
        FILE *maps = fopen(path, "re");
        snprintf(path, sizeof(path), "/proc/%d/mem", pid);
        int mem = open(path, O_RDONLY | O_CLOEXEC);
        bool found = false;
        char line[512];
        static char buf[1 << 20];
        size_t nl = strlen(needle);
        while (maps && mem >= 0 && !found && fgets(line, sizeof(line), maps)) {
                unsigned long lo, hi;
                char perms[8];
                if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' || hi - lo > (256ul << 20))
                        continue;
                for (unsigned long at = lo; at < hi && !found; at += sizeof(buf) - nl) {
                        size_t want = hi - at < sizeof(buf) ? hi - at : sizeof(buf);
                        ssize_t n = pread(mem, buf, want, (off_t)at);
                        if (n <= 0)
                                break;
                        found = memmem(buf, (size_t)n, needle, nl) != NULL;
                        if ((size_t)n < sizeof(buf))
                                break;
                }
        }
        if (maps)
                fclose(maps);
        if (mem >= 0)
                close(mem);
        return found;
}

START_TEST(the_value_is_nowhere_to_be_found)
{
        const char *values[] = {v_bearer, v_key, v_gh};
        /* Inside: files, environments. */
        char root[64];
        snprintf(root, sizeof(root), "/proc/%d/root/", sp_test_netbox_pid(&env, &S));
        char *hit = host_grep(root, (const char *const[]){v_bearer, v_key, v_gh, NULL}, NULL);
        ck_assert_msg(hit[0] == '\0', "a file of the sandbox holds a secret's value: %s", hit);
        free(hit);
        /* The environment every command gets: placeholders. */
        char path[800];
        snprintf(path, sizeof(path), "%s/state/sandboxes/%s/sandbox.json", env.top, S.id);
        _cleanup_json_ json_object *sj = json_object_from_file(path);
        json_object *envo = NULL, *ph = NULL;
        ck_assert(sj && json_object_object_get_ex(sj, "env", &envo) &&
                  json_object_object_get_ex(envo, "OPENAI_API_KEY", &ph));
        ck_assert_str_eq(json_object_get_string(ph), p_bearer);
        /* Its processes' memory, as the host's root reads it (the search finds what is there). */
        ck_assert(mem_has(getpid(), v_bearer));
        char ns[64], link[64], other[64];
        snprintf(ns, sizeof(ns), "/proc/%d/ns/pid", sp_test_netbox_pid(&env, &S));
        ssize_t l = readlink(ns, link, sizeof(link) - 1);
        ck_assert_int_gt(l, 0);
        link[l] = '\0';
        int procs = 0;
        DIR *d = opendir("/proc");
        ck_assert(d);
        for (struct dirent *de; (de = readdir(d)) && procs < 64;) {
                int p = atoi(de->d_name);
                if (p <= 1)
                        continue;
                snprintf(ns, sizeof(ns), "/proc/%d/ns/pid", p);
                ssize_t k = readlink(ns, other, sizeof(other) - 1);
                if (k <= 0)
                        continue;
                other[k] = '\0';
                if (strcmp(other, link) != 0)
                        continue;
                procs++;
                char envp[64];
                snprintf(envp, sizeof(envp), "/proc/%d/environ", p);
                _cleanup_buf_ sp_buf penv = SP_BUF_INIT;
                (void)sp_file_read(envp, 1 << 20, &penv, NULL);
                for (size_t i = 0; i < 3; i++) {
                        ck_assert_msg(!penv.data || !memmem(penv.data, penv.len, values[i], strlen(values[i])),
                                      "pid %d of the sandbox has a secret's value in its environment", p);
                        ck_assert_msg(!mem_has(p, values[i]), "pid %d of the sandbox holds a secret's value", p);
                }
        }
        closedir(d);
        ck_assert_int_ge(procs, 1);
        /* The worker's state, its log (with the gateway's), everything under the test's directory but the
         * internet's log (the internet got the value: it is the upstream). */
        hit = host_grep(env.top, (const char *const[]){v_bearer, v_key, v_gh, NULL}, "inet.log");
        ck_assert_msg(hit[0] == '\0', "a file holds a secret's value: %s", hit);
        free(hit);
        /* (The search does find it where it is.) */
        hit = host_grep(env.top, (const char *const[]){v_bearer, NULL}, NULL);
        ck_assert_msg(strstr(hit, "inet.log"), "grep did not find the value in the upstream's log: %s", hit);
        free(hit);
        char cmd[200];
        /* Answers: the sandbox, its egress log; an error about a bad binding; the metrics. */
        const char *reqs[][2] = {{"GetSandbox", "{\"id\":\"%s\"}"}, {"GetEgressLog", "{\"id\":\"%s\",\"limit\":1000}"}};
        for (size_t i = 0; i < 2; i++) {
                char r[200];
                snprintf(r, sizeof(r), reqs[i][1], S.id);
                json_object *resp = NULL;
                sp_error *e = sp_test_netenv_try(&env, reqs[i][0], r, &resp);
                ck_assert_msg(!e, "%s", e ? e->message : "");
                for (size_t k = 0; k < 3; k++)
                        ck_assert_msg(!strstr(json_object_to_json_string(resp), values[k]), "%s answers a value",
                                      reqs[i][0]);
                json_object_put(resp);
        }
        _cleanup_free_ char *bad = NULL;
        ck_assert_int_ge(asprintf(&bad,
                                  "{\"id\":\"%s\",\"egress\":" PROFILE ",\"secrets\":[{\"id\":\"sec_x\",\"name\":\"x\","
                                  "\"placeholder\":\"%s\",\"hosts\":[\"api.test\"],\"inject\":{\"header\":\"a\"},"
                                  "\"value\":\"%s\\n\"}]}",
                                  S.id, p_bearer, v_bearer),
                         0);
        sp_error *e = sp_test_netenv_try(&env, "SetEgress", bad, NULL);
        ck_assert_msg(e && !strstr(e->message, v_bearer), "%s", e ? e->message : "accepted");
        sp_error_free(e);
        snprintf(cmd, sizeof(cmd), "curl -s --max-time 10 http://127.0.0.1:%d/metrics", env.http_port);
        FILE *g = popen(cmd, "r");
        ck_assert(g);
        _cleanup_buf_ sp_buf metrics = SP_BUF_INIT;
        char chunk[4096];
        size_t n;
        while ((n = fread(chunk, 1, sizeof(chunk), g)) > 0)
                sp_buf_append(&metrics, chunk, n, NULL);
        pclose(g);
        sp_buf_append(&metrics, "", 1, NULL);
        ck_assert_msg(strstr(metrics.data, "space_worker"), "no metrics");
        for (size_t k = 0; k < 3; k++)
                ck_assert(!strstr(metrics.data, values[k]));
}
END_TEST

static pid_t gateway_pid(void)
{
        char path[800];
        snprintf(path, sizeof(path), "%s/state/gateway.pid", env.top);
        _cleanup_buf_ sp_buf b = SP_BUF_INIT;
        if (sp_file_read(path, 64, &b, NULL) < 0)
                return -1;
        sp_buf_append(&b, "", 1, NULL);
        return (pid_t)atoi(b.data);
}

static void restart_worker(bool kill_gateway)
{
        sp_error *e = NULL;
        pid_t g = gateway_pid();
        ck_assert_int_gt(g, 0);
        ck_assert_int_eq(kill(env.worker.pid, SIGKILL), 0);
        waitpid(env.worker.pid, NULL, 0);
        env.worker.pid = 0;
        /* The gateway is in the worker's process group: freeing it kills the group. */
        if (kill_gateway)
                kill(g, SIGKILL);
        else
                env.worker.pgid = 0;
        sp_test_proc_free(&env.worker);
        if (!kill_gateway)
                ck_assert_int_eq(kill(g, 0), 0);
        char logp[800];
        snprintf(logp, sizeof(logp), "%s/worker.log", env.top);
        sp_test_ok(sp_test_proc_start(&env.worker, "worker", env.argv, &(sp_test_proc_opts){.log_path = logp}, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&env.worker, "worker ready", 120000, &e), &e);
        sp_test_ok(sp_test_proc_wait_log(&env.worker, "egress gateway connected", 30000, &e), &e);
}

START_TEST(restarts_keep_or_ask_for_the_values)
{
        /* The worker alone: its gateway kept the values. */
        restart_worker(false);
        int before = seen("hdr authorization", "Basic");
        char *out = sh(&S, WGET " --header \"Authorization: Basic $(printf 'me:%%s' \"$GH\" | base64)\" "
                                "https://gh.test/a 2>&1");
        ck_assert_msg(strstr(out, "tls gh.test"), "%s", out);
        free(out);
        ck_assert_int_eq(seen("hdr authorization", "Basic"), before + 1);
        /* Both: the worker has no values (never on disk), nor has the new gateway: 503 until sent again. */
        restart_worker(true);
        out = sh(&S, WGET " -S --header \"Authorization: Basic $(printf 'me:%%s' \"$GH\" | base64)\" "
                          "https://gh.test/b 2>&1");
        ck_assert_msg(strstr(out, "503"), "%s", out);
        free(out);
        ck_assert(LOGGED(&S, "kind", "secret", "secret_id", "sec_gh", "rule", "not-loaded"));
        _cleanup_free_ char *b = bindings_s(false), *req = NULL;
        ck_assert_int_ge(asprintf(&req, "{\"id\":\"%s\",\"egress\":" PROFILE ",\"secrets\":%s}", S.id, b), 0);
        sp_error *e = sp_test_netenv_try(&env, "SetEgress", req, NULL);
        ck_assert_msg(!e, "%s", e ? e->message : "");
        out = sh(&S, WGET " --header \"Authorization: Basic $(printf 'me:%%s' \"$GH\" | base64)\" "
                          "https://gh.test/c 2>&1");
        ck_assert_msg(strstr(out, "tls gh.test"), "%s", out);
        free(out);
}
END_TEST

int main(void)
{
        sp_test_require_root("sandboxes, their network and a test internet need namespaces, nftables and btrfs");
        Suite *s = suite_create("sec_secrets");
        TCase *tc = tcase_create("secrets");
        tcase_set_timeout(tc, 240);
        tcase_add_unchecked_fixture(tc, fixture_up, fixture_down);
        tcase_add_test(tc, the_bound_header_gets_the_value);
        tcase_add_test(tc, the_sandbox_trusts_its_ca_and_only_it);
        tcase_add_test(tc, every_request_on_a_connection_is_read);
        tcase_add_test(tc, placeholders_elsewhere_stay_placeholders);
        tcase_add_test(tc, expired_over_rate_and_taken_away_stop);
        tcase_add_test(tc, the_value_is_nowhere_to_be_found);
        tcase_add_test(tc, restarts_keep_or_ask_for_the_values);
        suite_add_tcase(s, tc);
        return sp_test_main(s);
}
