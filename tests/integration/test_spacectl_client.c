/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spacectl without a cluster: the real binary run with a temporary
 * configuration against nothing, or against a scripted fake of the public
 * API on loopback. Usage errors and their exit code, help, version and
 * completion scripts (checked by bash itself), profiles on disk (mode 0600,
 * strict parsing, keys never shown unless asked) and the precedence of
 * flags over the environment over the profile, an unreachable endpoint, and
 * the API client's behaviour: a retry after a dropped connection or a 503
 * carries the same Idempotency-Key, API errors come out in the API's words,
 * --wait gives up with its own exit code, and exec reads a data plane that
 * refuses raw frames as server-sent events.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "proc.h"
#include "space/cleanup.h"
#include "space/fileio.h"
#include "test_spacectl_util.h"

/* The suite's directory (made and removed by the runner, also when a test
 * fails), and each test's own directory in it. */
static char *suite_dir;
static char dir[400];

static void suite_up(void)
{
        suite_dir = sp_test_tmpdir("spacectl");
}

static void suite_down(void)
{
        sp_test_tmpdir_remove(suite_dir);
        free(suite_dir);
}

static void setup(void)
{
        snprintf(dir, sizeof(dir), "%s/t%d", suite_dir, (int)getpid());
        ck_assert_int_eq(mkdir(dir, 0700), 0);
        snprintf(ctl_config_path, sizeof(ctl_config_path), "%s/cfg/config.json", dir);
        snprintf(ctl_home, sizeof(ctl_home), "%s", dir);
}

/* ---- a scripted fake of the API ---- */

#define MAX_SEEN 32

typedef struct seen_request {
        char method[16];
        char target[512];
        char idem[128];
        char auth[256];
        char body[1024];
} seen_request;

/* Answers the n-th request (0-based): the full response, or NULL to close
 * the connection without a word. */
typedef const char *(*fake_fn)(int n, const seen_request *req);

typedef struct fake_api {
        int lfd, port;
        pthread_t thread;
        fake_fn fn;
        atomic_bool stop;
        atomic_int n;
        seen_request seen[MAX_SEEN];
} fake_api;

static bool read_request(int fd, seen_request *out)
{
        _cleanup_buf_ sp_buf head = SP_BUF_INIT;
        char c;
        while (!head.data || !strstr(head.data, "\r\n\r\n")) {
                if (recv(fd, &c, 1, 0) != 1)
                        return false;
                sp_buf_append(&head, &c, 1, NULL);
        }
        memset(out, 0, sizeof(*out));
        sscanf(head.data, "%15s %511s", out->method, out->target);
        const char *h = strcasestr(head.data, "\r\nidempotency-key: ");
        if (h)
                snprintf(out->idem, sizeof(out->idem), "%.*s", (int)strcspn(h + 19, "\r"), h + 19);
        h = strcasestr(head.data, "\r\nauthorization: ");
        if (h)
                snprintf(out->auth, sizeof(out->auth), "%.*s", (int)strcspn(h + 17, "\r"), h + 17);
        h = strcasestr(head.data, "\r\ncontent-length: ");
        size_t len = h ? strtoul(h + 18, NULL, 10) : 0;
        for (size_t i = 0; i < len; i++) {
                if (recv(fd, &c, 1, 0) != 1)
                        return false;
                if (i + 1 < sizeof(out->body))
                        out->body[i] = c;
        }
        return true;
}

static void *fake_loop(void *arg)
{
        fake_api *f = arg;
        while (!atomic_load(&f->stop)) {
                struct pollfd p = {.fd = f->lfd, .events = POLLIN};
                if (poll(&p, 1, 50) <= 0)
                        continue;
                int fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                struct timeval tv = {.tv_sec = 10};
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
                seen_request req;
                while (read_request(fd, &req)) {
                        int n = atomic_fetch_add(&f->n, 1);
                        if (n < MAX_SEEN)
                                f->seen[n] = req;
                        const char *resp = f->fn(n, &req);
                        if (!resp)
                                break;
                        ck_assert_int_eq(send(fd, resp, strlen(resp), MSG_NOSIGNAL), (ssize_t)strlen(resp));
                }
                close(fd);
        }
        return NULL;
}

static void fake_start(fake_api *f, fake_fn fn)
{
        memset(f, 0, sizeof(*f));
        f->fn = fn;
        f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sin = {.sin_family = AF_INET};
        sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sin, sizeof(sin)), 0);
        ck_assert_int_eq(listen(f->lfd, 16), 0);
        socklen_t sl = sizeof(sin);
        getsockname(f->lfd, (struct sockaddr *)&sin, &sl);
        f->port = ntohs(sin.sin_port);
        ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_loop, f), 0);
}

static void fake_stop(fake_api *f)
{
        atomic_store(&f->stop, true);
        pthread_join(f->thread, NULL);
        close(f->lfd);
}

static const char *endpoint_of(const fake_api *f)
{
        static char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", f->port);
        return url;
}

/* A JSON response (in a static buffer per call site). */
static const char *json_resp(char *buf, size_t len, const char *status, const char *body)
{
        snprintf(buf, len, "HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s", status,
                 strlen(body), body);
        return buf;
}

static const char *envelope(void)
{
        static char buf[512];
        return json_resp(buf, sizeof(buf), "202 Accepted",
                         "{\"operation\":{\"id\":\"op_1\",\"state\":\"pending\",\"kind\":\"create\"},"
                         "\"sandbox\":{\"id\":\"sbx_1\",\"state\":\"creating\"}}");
}

/* Drops the first connection unanswered, then accepts. */
static const char *drop_then_accept(int n, const seen_request *req)
{
        return n == 0 ? NULL : envelope();
}

/* Unavailable twice, then accepts. */
static const char *busy_then_accept(int n, const seen_request *req)
{
        static char buf[512];
        if (n >= 2)
                return envelope();
        return json_resp(buf, sizeof(buf), "503 Service Unavailable",
                         "{\"error\":{\"code\":\"unavailable\",\"message\":\"the database is down\"}}");
}

/* A conflict in the one error shape. */
static const char *conflict(int n, const seen_request *req)
{
        static char buf[512];
        return json_resp(buf, sizeof(buf), "409 Conflict",
                         "{\"error\":{\"code\":\"conflict\",\"message\":\"sandbox sbx_1 is suspended, not "
                         "running\"}}");
}

/* Accepts a pause, then reports the operation as running forever. */
static const char *never_done(int n, const seen_request *req)
{
        static char buf[512];
        if (strcmp(req->method, "POST") == 0)
                return envelope();
        return json_resp(buf, sizeof(buf), "200 OK",
                         "{\"id\":\"op_1\",\"kind\":\"pause\",\"state\":\"running\",\"message\":\"pausing\"}");
}

/* The port of the fake that plays the API and a data plane from before raw frames. */
static int old_dp_port;

/* A session created, then a data plane that refuses ?format=raw (as one from before it does) and serves the
 * output as server-sent events. */
static const char *old_dataplane(int n, const seen_request *req)
{
        static char buf[2048];
        if (strcmp(req->method, "POST") == 0) {
                char body[1024];
                snprintf(body, sizeof(body),
                         "{\"attach_url\":\"http://127.0.0.1:%d/v1/sessions/ses_00000000000000000dp1/attach\","
                         "\"attach_token\":\"v1.t\",\"token_expires_at\":\"2030-01-01T00:00:00.000Z\","
                         "\"session\":{\"id\":\"ses_00000000000000000dp1\",\"state\":\"running\"}}",
                         old_dp_port);
                return json_resp(buf, sizeof(buf), "201 Created", body);
        }
        if (strstr(req->target, "format="))
                return json_resp(buf, sizeof(buf), "400 Bad Request",
                                 "{\"error\":{\"code\":\"invalid_argument\",\"message\":\"unknown query parameter "
                                 "'format'\"}}");
        const char *events = "id: 0\nevent: start\ndata: {\"session_id\":\"ses_00000000000000000dp1\",\"pid\":2}\n\n"
                             "id: 3\nevent: stdout\ndata: aGkK\n\n"
                             "id: 7\nevent: stderr\ndata: ZXJyCg==\n\n"
                             "id: 7\nevent: exit\ndata: {\"code\":3,\"signal\":0,\"oom\":false,\"killed\":false,"
                             "\"reason\":\"\"}\n\n";
        snprintf(buf, sizeof(buf),
                 "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %zu\r\n\r\n%s", strlen(events),
                 events);
        return buf;
}

/* ---- tests ---- */

START_TEST(usage_errors_exit_2)
{
        struct {
                const char *args[8];
                const char *needle;
        } cases[] = {
                {{"nosuch", NULL}, "unknown command 'nosuch'"},
                {{"sandbox", "create", "--template", "base", "--bogus", NULL}, "unknown option '--bogus'"},
                {{"sandbox", "get", NULL}, "missing arguments: spacectl sandbox get ID"},
                {{"sandbox", "get", "a", "b", NULL}, "too many arguments"},
                {{"sandbox", "create", NULL}, "--template is required"},
                {{"sandbox", "create", "--template", "base", "--memory", "lots", NULL}, "--memory"},
                {{"sandbox", "create", "--template", "base", "--cpu", "1.2345", NULL}, "--cpu"},
                {{"sandbox", "create", "--template", "base", "--env", "NOEQUALS", NULL}, "KEY=VALUE"},
                {{"sandbox", "create", "--template", "a", "--template", "b", NULL}, "given twice"},
                {{"sandbox", "ls", "--all", "--limit", "5", NULL}, "contradict"},
                {{"sandbox", "ls", "--limit", "0", NULL}, "--limit"},
                {{"sandbox", "pause", "sbx_1", "--wait-timeout", "soon", NULL}, "--wait-timeout"},
                {{"template", "build", "t", "--dir", "relative/path", NULL}, "absolute"},
                {{"template", "build", "t", NULL}, "--dir, --tar, --oci"},
                {{"completion", "fish", NULL}, "bash or zsh"},
                {{"sandbox", "ls", "--json=yes", NULL}, "takes no value"},
                {{"sandbox", "ls", "--state", NULL}, "needs a value"},
                {{"-x", NULL}, "unknown option '-x'"},
        };
        for (size_t i = 0; i < SP_ARRAY_SIZE(cases); i++) {
                _cleanup_ctl_result_ ctl_result r = ctl_runv(NULL, NULL, cases[i].args);
                ctl_assert_code(r, 2);
                ck_assert_msg(strncmp(r.err.data, "spacectl: ", 10) == 0, "stderr: %s", r.err.data);
                ck_assert_msg(strstr(r.err.data, cases[i].needle), "case %zu: stderr: %s", i, r.err.data);
                ck_assert_str_eq(r.out.data, "");
        }
        /* A group without a command shows its commands on stderr. */
        _cleanup_ctl_result_ ctl_result g = ctl_run(NULL, NULL, "worker", NULL);
        ctl_assert_code(g, 2);
        ck_assert_ptr_nonnull(strstr(g.err.data, "cordon"));
}
END_TEST

START_TEST(help_version_completion)
{
        _cleanup_ctl_result_ ctl_result h = ctl_run(NULL, NULL, "--help", NULL);
        ctl_assert_code(h, 0);
        ck_assert_ptr_nonnull(strstr(h.out.data, "sandbox"));
        ck_assert_ptr_nonnull(strstr(h.out.data, "Exit codes"));
        _cleanup_ctl_result_ ctl_result hc = ctl_run(NULL, NULL, "help", "sandbox", "create", NULL);
        ctl_assert_code(hc, 0);
        ck_assert_ptr_nonnull(strstr(hc.out.data, "--idempotency-key KEY"));
        _cleanup_ctl_result_ ctl_result hf = ctl_run(NULL, NULL, "worker", "join-token", "create", "-h", NULL);
        ctl_assert_code(hf, 0);
        ck_assert_ptr_nonnull(strstr(hf.out.data, "--uses N"));
        _cleanup_ctl_result_ ctl_result v = ctl_run(NULL, NULL, "version", NULL);
        ctl_assert_code(v, 0);
        /* -q, the short --quiet, anywhere (it once crashed the parser). */
        _cleanup_ctl_result_ ctl_result vq = ctl_run(NULL, NULL, "-q", "version", NULL);
        ctl_assert_code(vq, 0);
        ck_assert_str_eq(vq.out.data, v.out.data);
        _cleanup_ctl_result_ ctl_result vq2 = ctl_run(NULL, NULL, "version", "-q", NULL);
        ctl_assert_code(vq2, 0);
        _cleanup_ctl_result_ ctl_result vj = ctl_run(NULL, NULL, "version", "--json", NULL);
        _cleanup_json_ json_object *o = ctl_json(&vj);
        char want[64];
        snprintf(want, sizeof(want), "spacectl %s\n", json_object_get_string(json_object_object_get(o, "version")));
        ck_assert_str_eq(v.out.data, want);

        /* Completion scripts name the commands and options of the table, and bash accepts its own. */
        _cleanup_ctl_result_ ctl_result b = ctl_run(NULL, NULL, "completion", "bash", NULL);
        ctl_assert_code(b, 0);
        const char *words[] = {"sandbox",
                               "cordon",
                               "join-token",
                               "--template",
                               "--wait-timeout",
                               "--idempotency-key",
                               "complete -o default -F _spacectl spacectl"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(words); i++)
                ck_assert_msg(strstr(b.out.data, words[i]), "bash completion lacks %s", words[i]);
        char path[600];
        snprintf(path, sizeof(path), "%s/completion.bash", dir);
        ck_assert_int_eq(sp_file_write_atomic(path, b.out.data, b.out.len, 0644, NULL), 0);
        /* Completing "spacectl sandbox cr" and "spacectl worker join-token create --u" in bash itself. */
        char cmd[1200];
        snprintf(cmd, sizeof(cmd),
                 "bash -c 'source %s; COMP_WORDS=(spacectl sandbox cr); COMP_CWORD=2; _spacectl; "
                 "echo \"${COMPREPLY[*]}\"; COMP_WORDS=(spacectl --profile p worker join-token create --u); "
                 "COMP_CWORD=6; _spacectl; echo \"${COMPREPLY[*]}\"'",
                 path);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        char line1[256] = "", line2[256] = "";
        ck_assert_ptr_nonnull(fgets(line1, sizeof(line1), p));
        ck_assert_ptr_nonnull(fgets(line2, sizeof(line2), p));
        ck_assert_int_eq(pclose(p), 0);
        ck_assert_str_eq(line1, "create\n");
        ck_assert_str_eq(line2, "--uses\n");
        _cleanup_ctl_result_ ctl_result z = ctl_run(NULL, NULL, "completion", "zsh", NULL);
        ctl_assert_code(z, 0);
        ck_assert(strncmp(z.out.data, "#compdef spacectl\n", 18) == 0);
        ck_assert_ptr_nonnull(strstr(z.out.data, "\"sandbox create\"|\"sandbox create \"*) cands=("));
        ck_assert_ptr_nonnull(strstr(z.out.data, "compdef _spacectl spacectl"));
}
END_TEST

static json_object *show(const char *const *env, const char *a1, const char *a2, const char *a3)
{
        _cleanup_ctl_result_ ctl_result r = ctl_run(env, NULL, "profile", "show", "--json", a1, a2, a3, NULL);
        ctl_assert_code(r, 0);
        return ctl_json(&r);
}

static const char *field(json_object *o, const char *key)
{
        json_object *v = NULL;
        return json_object_object_get_ex(o, key, &v) && v ? json_object_get_string(v) : NULL;
}

START_TEST(profiles_and_precedence)
{
        char ca[600];
        snprintf(ca, sizeof(ca), "%s/ca.pem", dir);
        ck_assert_int_eq(sp_file_write_atomic(ca, "not checked until used\n", 23, 0644, NULL), 0);
        /* Nothing configured: the default endpoint. */
        _cleanup_json_ json_object *d = show(NULL, NULL, NULL, NULL);
        ck_assert_str_eq(field(d, "endpoint"), "http://127.0.0.1:7070");
        ck_assert_str_eq(field(d, "endpoint_source"), "default");
        ck_assert_ptr_null(field(d, "profile"));

        _cleanup_ctl_result_ ctl_result s1 =
                ctl_run(NULL, NULL, "profile", "set", "alpha", "--endpoint", "http://127.0.0.1:1001", "--api-key",
                        "secret-alpha", "--ca", ca, NULL);
        ctl_assert_code(s1, 0);
        ck_assert_ptr_nonnull(strstr(s1.out.data, "(current)")); /* the first profile becomes current */
        _cleanup_ctl_result_ ctl_result s2 = ctl_run(NULL, "secret-beta\n", "profile", "set", "beta", "--endpoint",
                                                     "https://space.example:7443/prefix", "--api-key", "-", NULL);
        ctl_assert_code(s2, 0);
        ck_assert_ptr_null(strstr(s2.out.data, "(current)"));
        _cleanup_ctl_result_ ctl_result s3 = ctl_run(NULL, NULL, "profile", "set", "gamma", "--endpoint", "http://h",
                                                     "--api-key", "secret-gamma", "--json", NULL);
        ctl_assert_code(s3, 0);
        ck_assert_ptr_null(strstr(s3.out.data, "secret"));
        _cleanup_json_ json_object *g = ctl_json(&s3);
        ck_assert_str_eq(field(g, "api_key_set"), "true");
        ck_assert_str_eq(field(g, "current"), "false");
        /* The file and its directory are private. */
        struct stat st;
        ck_assert_int_eq(stat(ctl_config_path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);
        char cfgdir[600];
        snprintf(cfgdir, sizeof(cfgdir), "%s/cfg", dir);
        ck_assert_int_eq(stat(cfgdir, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0700);

        /* ls and show never print a key unless asked. */
        _cleanup_ctl_result_ ctl_result ls = ctl_run(NULL, NULL, "profile", "ls", NULL);
        ctl_assert_code(ls, 0);
        ck_assert_ptr_nonnull(strstr(ls.out.data, "alpha"));
        ck_assert_ptr_nonnull(strstr(ls.out.data, "https://space.example:7443/prefix"));
        ck_assert_ptr_null(strstr(ls.out.data, "secret"));
        _cleanup_ctl_result_ ctl_result lsj = ctl_run(NULL, NULL, "profile", "ls", "--json", NULL);
        ck_assert_ptr_null(strstr(lsj.out.data, "secret"));
        _cleanup_json_ json_object *l = ctl_json(&lsj);
        ck_assert_str_eq(field(l, "current"), "alpha");
        ck_assert_int_eq(json_object_array_length(json_object_object_get(l, "profiles")), 3);
        _cleanup_ctl_result_ ctl_result sh = ctl_run(NULL, NULL, "profile", "show", NULL);
        ck_assert_ptr_null(strstr(sh.out.data, "secret"));
        ck_assert_ptr_nonnull(strstr(sh.out.data, "api_key: (set; --reveal shows it) (profile)"));
        _cleanup_json_ json_object *rv = show(NULL, "--reveal", NULL, NULL);
        ck_assert_str_eq(field(rv, "api_key"), "secret-alpha");
        ck_assert_str_eq(field(rv, "ca_file"), ca);

        /* Precedence: the current profile < SPACE_PROFILE < --profile; profile < env < flag per setting. */
        _cleanup_json_ json_object *p0 = show(NULL, NULL, NULL, NULL);
        ck_assert_str_eq(field(p0, "profile"), "alpha");
        ck_assert_str_eq(field(p0, "endpoint"), "http://127.0.0.1:1001");
        const char *env_b[] = {"SPACE_PROFILE=beta", NULL};
        _cleanup_json_ json_object *p1 = show(env_b, NULL, NULL, NULL);
        ck_assert_str_eq(field(p1, "profile"), "beta");
        ck_assert_str_eq(field(p1, "profile_source"), "env");
        ck_assert_str_eq(field(p1, "endpoint"), "https://space.example:7443/prefix");
        _cleanup_json_ json_object *p2 = show(env_b, "--profile", "alpha", NULL);
        ck_assert_str_eq(field(p2, "profile"), "alpha");
        ck_assert_str_eq(field(p2, "profile_source"), "flag");
        const char *env_e[] = {"SPACE_ENDPOINT=http://127.0.0.1:2002", "SPACE_API_KEY=from-env", NULL};
        _cleanup_json_ json_object *p3 = show(env_e, "--reveal", NULL, NULL);
        ck_assert_str_eq(field(p3, "endpoint"), "http://127.0.0.1:2002");
        ck_assert_str_eq(field(p3, "endpoint_source"), "env");
        ck_assert_str_eq(field(p3, "api_key"), "from-env");
        ck_assert_str_eq(field(p3, "ca_file_source"), "profile");
        _cleanup_json_ json_object *p4 = show(env_e, "--reveal", "--endpoint", "http://127.0.0.1:3003");
        ck_assert_str_eq(field(p4, "endpoint"), "http://127.0.0.1:3003");
        ck_assert_str_eq(field(p4, "endpoint_source"), "flag");
        ck_assert_str_eq(field(p4, "api_key_source"), "env");

        /* use, rm, and what is refused. */
        _cleanup_ctl_result_ ctl_result u = ctl_run(NULL, NULL, "profile", "use", "beta", NULL);
        ctl_assert_code(u, 0);
        _cleanup_json_ json_object *p5 = show(NULL, NULL, NULL, NULL);
        ck_assert_str_eq(field(p5, "profile"), "beta");
        _cleanup_ctl_result_ ctl_result un = ctl_run(NULL, NULL, "profile", "set", "beta", "--unset", "api_key", NULL);
        ctl_assert_code(un, 0);
        _cleanup_json_ json_object *p6 = show(NULL, NULL, NULL, NULL);
        ck_assert_str_eq(field(p6, "api_key_set"), "false");
        _cleanup_ctl_result_ ctl_result rm = ctl_run(NULL, NULL, "profile", "rm", "beta", NULL);
        ctl_assert_code(rm, 0);
        _cleanup_json_ json_object *p7 = show(NULL, NULL, NULL, NULL);
        ck_assert_ptr_null(field(p7, "profile")); /* the current one was removed */
        _cleanup_ctl_result_ ctl_result nope = ctl_run(NULL, NULL, "profile", "use", "nope", NULL);
        ctl_assert_code(nope, 4);
        _cleanup_ctl_result_ ctl_result missing = ctl_run(NULL, NULL, "--profile", "nope", "sandbox", "ls", NULL);
        ctl_assert_code(missing, 4);
        ck_assert_ptr_nonnull(strstr(missing.err.data, "profile 'nope' (--profile) does not exist"));
        _cleanup_ctl_result_ ctl_result bad_url =
                ctl_run(NULL, NULL, "profile", "set", "x", "--endpoint", "ftp://x", NULL);
        ctl_assert_code(bad_url, 2);
        _cleanup_ctl_result_ ctl_result bad_name =
                ctl_run(NULL, NULL, "profile", "set", "a/b", "--endpoint", "http://h", NULL);
        ctl_assert_code(bad_name, 2);
        _cleanup_ctl_result_ ctl_result nothing = ctl_run(NULL, NULL, "profile", "set", "x", NULL);
        ctl_assert_code(nothing, 2);
        _cleanup_ctl_result_ ctl_result bad_ep = ctl_run(NULL, NULL, "--endpoint", "ftp://x", "sandbox", "ls", NULL);
        ctl_assert_code(bad_ep, 4);

        /* A file readable by others is used, with a warning. */
        ck_assert_int_eq(chmod(ctl_config_path, 0644), 0);
        _cleanup_ctl_result_ ctl_result loose = ctl_run(NULL, NULL, "profile", "ls", NULL);
        ctl_assert_code(loose, 0);
        ck_assert_ptr_nonnull(strstr(loose.err.data, "readable by others"));
        /* Saving makes it private again. */
        _cleanup_ctl_result_ ctl_result again = ctl_run(NULL, NULL, "profile", "use", "alpha", NULL);
        ctl_assert_code(again, 0);
        ck_assert_int_eq(stat(ctl_config_path, &st), 0);
        ck_assert_int_eq(st.st_mode & 0777, 0600);

        /* A broken file is an error that names it and the key; nothing is overwritten. */
        const char *broken[] = {"{",
                                "[]",
                                "{\"profiles\":{\"a\":{\"endpoint\":1}}}",
                                "{\"profiles\":{\"a\":{\"colour\":\"red\"}}}",
                                "{\"extra\":true}",
                                "{\"profiles\":{\"bad name\":{}}}",
                                "{\"current\":7}"};
        for (size_t i = 0; i < SP_ARRAY_SIZE(broken); i++) {
                ck_assert_int_eq(sp_file_write_atomic(ctl_config_path, broken[i], strlen(broken[i]), 0600, NULL), 0);
                _cleanup_ctl_result_ ctl_result b =
                        ctl_run(NULL, NULL, "profile", "set", "a", "--endpoint", "http://h", NULL);
                ctl_assert_code(b, 4);
                ck_assert_msg(strstr(b.err.data, ctl_config_path), "%s", b.err.data);
                _cleanup_buf_ sp_buf after = SP_BUF_INIT;
                ck_assert_int_eq(sp_file_read(ctl_config_path, 4096, &after, NULL), 0);
                ck_assert_str_eq(after.data, broken[i]);
        }
}
END_TEST

START_TEST(unreachable_endpoint_exit_3)
{
        int port = sp_test_free_port(NULL);
        ck_assert_int_gt(port, 0);
        char url[64];
        snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "--endpoint", url, "sandbox", "ls", NULL);
        ctl_assert_code(r, 3);
        ck_assert_msg(strstr(r.err.data, "spacectl: connect to 127.0.0.1:") && strstr(r.err.data, "refused"), "%s",
                      r.err.data);
        /* A CA file that is not there: the configuration is wrong, nothing is sent. */
        snprintf(url, sizeof(url), "https://127.0.0.1:%d", port);
        _cleanup_ctl_result_ ctl_result c =
                ctl_run(NULL, NULL, "--endpoint", url, "--ca", "/nonexistent/ca.pem", "sandbox", "ls", NULL);
        ctl_assert_code(c, 4);
        ck_assert_ptr_nonnull(strstr(c.err.data, "/nonexistent/ca.pem"));
}
END_TEST

START_TEST(retries_keep_the_idempotency_key)
{
        fake_api f;
        fake_start(&f, drop_then_accept);
        _cleanup_ctl_result_ ctl_result r =
                ctl_run(NULL, NULL, "--endpoint", endpoint_of(&f), "--api-key", "k1", "sandbox", "create", "--template",
                        "base", "--memory", "1G", "--env", "A=1", "--no-wait", "--json", NULL);
        fake_stop(&f);
        ctl_assert_code(r, 0);
        ck_assert_int_eq(atomic_load(&f.n), 2);
        ck_assert_str_eq(f.seen[0].method, "POST");
        ck_assert_str_eq(f.seen[0].target, "/v1/sandboxes");
        ck_assert_str_ne(f.seen[0].idem, "");
        ck_assert_str_eq(f.seen[0].idem, f.seen[1].idem);
        ck_assert_str_eq(f.seen[0].body, f.seen[1].body);
        ck_assert_str_eq(f.seen[0].auth, "Bearer k1");
        ck_assert_str_eq(f.seen[0].body,
                         "{\"template\":\"base\",\"resources\":{\"memory_mb\":1024},\"env\":{\"A\":\"1\"}}");
        /* --no-wait --json prints the API's answer. */
        _cleanup_json_ json_object *o = ctl_json(&r);
        ck_assert_ptr_nonnull(json_object_object_get(o, "operation"));

        /* 503 twice, then accepted: three requests, one key; a key of ours is kept. */
        fake_start(&f, busy_then_accept);
        _cleanup_ctl_result_ ctl_result b =
                ctl_run(NULL, NULL, "--endpoint", endpoint_of(&f), "sandbox", "create", "--template", "base",
                        "--idempotency-key", "mine-1", "--no-wait", NULL);
        fake_stop(&f);
        ctl_assert_code(b, 0);
        ck_assert_str_eq(b.out.data, "sbx_1\n");
        ck_assert_int_eq(atomic_load(&f.n), 3);
        for (int i = 0; i < 3; i++)
                ck_assert_str_eq(f.seen[i].idem, "mine-1");
        ck_assert_str_eq(f.seen[0].auth, ""); /* no key configured: no header */

        /* Two invocations are two creates: two keys. */
        fake_start(&f, drop_then_accept);
        _cleanup_ctl_result_ ctl_result c1 =
                ctl_run(NULL, NULL, "--endpoint", endpoint_of(&f), "sandbox", "pause", "sbx_1", "--no-wait", NULL);
        _cleanup_ctl_result_ ctl_result c2 =
                ctl_run(NULL, NULL, "--endpoint", endpoint_of(&f), "sandbox", "pause", "sbx_1", "--no-wait", NULL);
        fake_stop(&f);
        ctl_assert_code(c1, 0);
        ctl_assert_code(c2, 0);
        ck_assert_str_eq(c1.out.data, "op_1\n");
        ck_assert_int_eq(atomic_load(&f.n), 3);
        ck_assert_str_eq(f.seen[0].target, "/v1/sandboxes/sbx_1/pause");
        ck_assert_str_eq(f.seen[0].idem, f.seen[1].idem);
        ck_assert_str_ne(f.seen[1].idem, f.seen[2].idem);
}
END_TEST

START_TEST(api_errors_and_wait_timeout)
{
        fake_api f;
        fake_start(&f, conflict);
        _cleanup_ctl_result_ ctl_result r =
                ctl_run(NULL, NULL, "--endpoint", endpoint_of(&f), "sandbox", "resume", "sbx_1", NULL);
        fake_stop(&f);
        ctl_assert_code(r, 1);
        ck_assert_str_eq(r.err.data, "spacectl: sandbox sbx_1 is suspended, not running (conflict)\n");
        ck_assert_int_eq(atomic_load(&f.n), 1); /* a conflict is not retried */

        fake_start(&f, never_done);
        _cleanup_ctl_result_ ctl_result w = ctl_run(NULL, NULL, "--endpoint", endpoint_of(&f), "--progress", "sandbox",
                                                    "pause", "sbx_1", "--wait-timeout", "1500ms", NULL);
        fake_stop(&f);
        ctl_assert_code(w, 5);
        ck_assert_msg(strstr(w.err.data, "operation op_1 is still running"), "%s", w.err.data);
        /* --progress on a pipe: one line per change of state. */
        ck_assert_msg(strstr(w.err.data, "pause sbx_1: operation running, state running: pausing"), "%s", w.err.data);
        ck_assert_ptr_nonnull(strstr(f.seen[1].target, "/v1/operations/op_1?wait="));
}
END_TEST

START_TEST(exec_reads_events_from_a_dataplane_without_raw_frames)
{
        fake_api f;
        fake_start(&f, old_dataplane);
        old_dp_port = f.port;
        _cleanup_ctl_result_ ctl_result r = ctl_run(NULL, NULL, "--endpoint", endpoint_of(&f), "--api-key", "k1",
                                                    "exec", "--no-stdin", "sbx_1", "--", "sh", "-c", "x", NULL);
        fake_stop(&f);
        ck_assert_msg(r.code == 3, "exit %d: %s", r.code, r.err.data);
        ck_assert_msg(strcmp(r.out.data, "hi\n") == 0, "out '%s', err '%s'", r.out.data, r.err.data);
        ck_assert_msg(strstr(r.err.data, "err\n"), "%s", r.err.data);
        /* Raw frames asked for first, then the event stream, from the start both times. */
        ck_assert_int_eq(atomic_load(&f.n), 3);
        ck_assert_str_eq(f.seen[1].target, "/v1/sessions/ses_00000000000000000dp1/attach?format=raw");
        ck_assert_str_eq(f.seen[2].target, "/v1/sessions/ses_00000000000000000dp1/attach");
        ck_assert_str_eq(f.seen[2].auth, "Bearer v1.t");
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("spacectl_client");
        TCase *tc = tcase_create("client");
        tcase_set_timeout(tc, 120);
        tcase_add_unchecked_fixture(tc, suite_up, suite_down);
        tcase_add_checked_fixture(tc, setup, NULL);
        tcase_add_test(tc, usage_errors_exit_2);
        tcase_add_test(tc, help_version_completion);
        tcase_add_test(tc, profiles_and_precedence);
        tcase_add_test(tc, unreachable_endpoint_exit_3);
        tcase_add_test(tc, retries_keep_the_idempotency_key);
        tcase_add_test(tc, api_errors_and_wait_timeout);
        tcase_add_test(tc, exec_reads_events_from_a_dataplane_without_raw_frames);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        return sp_test_main(suite());
}
