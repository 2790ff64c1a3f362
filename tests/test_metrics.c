// SPDX-License-Identifier: BSD-3-Clause
/*
 * test_metrics.c - the Prometheus endpoint (daemon/metrics.c, daemon/metrics_http.c) of a
 * real dashd, scraped with curl: counters move by exactly what was sent (pings, a
 * forward, error replies by code, per-client series of a libdash client), histograms are
 * well formed, the totals agree with what `dashctl stats` gets at the same moment, only
 * GET/HEAD /metrics is served, idle HTTP connections do not stall the daemon, and a bad
 * or busy address is refused at start.
 *
 * The endpoint serves a snapshot up to METRICS_HTTP_FRESH_MS old, so each scrape here
 * waits that long after the requests it is to see.
 */
#include "suites.h"
#include "harness.h"
#include "testutil.h"
#include "client/dash.h"
#include "daemon/metrics_http.h"

#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static struct dashd_proc D;
static unsigned port;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* The port dashd logged ("metrics at http://127.0.0.1:PORT/metrics"), or 0. */
static unsigned logged_port(const char *log_path)
{
    FILE *f = fopen(log_path, "r");
    if (!f)
        return 0;
    char line[1024];
    unsigned p = 0;
    while (!p && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "metrics at http://127.0.0.1:");
        if (at)
            p = (unsigned)strtoul(at + strlen("metrics at http://127.0.0.1:"), NULL, 10);
    }
    fclose(f);
    return p;
}

static int suite_init(void)
{
    if (dashd_start(&D, "--threads 1 --metrics 127.0.0.1:0") != 0)
        return -1;
    port = logged_port(D.log_path);
    return port ? 0 : -1;
}

static int suite_clean(void)
{
    if (D.pid > 0)
        return dashd_stop(&D) == 0 ? 0 : -1;
    return 0;
}

/* GET /metrics with curl, after the snapshot interval: the body (malloc'd) or NULL. */
static char *scrape(void)
{
    sleep_ms(METRICS_HTTP_FRESH_MS + 20);
    char cmd[256], *out = NULL;
    snprintf(cmd, sizeof cmd, "curl -sS --fail --max-time 5 http://127.0.0.1:%u/metrics", port);
    if (tu_run(cmd, &out) != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* The value of the series whose line starts with `key` followed by a space; NAN if none. */
static double value(const char *text, const char *key)
{
    size_t n = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, key, n) == 0 && l[n] == ' ')
            return strtod(l + n + 1, NULL);
    return NAN;
}

/* The value of the first series named `name` whose labels contain `label`; NAN if none. */
static double value_where(const char *text, const char *name, const char *label)
{
    size_t n = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *eol = strchr(l, '\n');
        size_t len = eol ? (size_t)(eol - l) : strlen(l);
        if (strncmp(l, name, n) != 0 || l[n] != '{')
            continue;
        const char *close = memchr(l, '}', len);
        const char *hit = strstr(l, label);
        if (close && hit && hit < close)
            return strtod(close + 2, NULL);
    }
    return NAN;
}

static double sum_of(const char *text, const char *name)
{
    double s = 0;
    size_t n = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, name, n) == 0 && l[n] == '{') {
            const char *close = strchr(l, '}');
            s += strtod(close + 2, NULL);
        }
    return s;
}

static int raw_code(struct raw_client *r, Dash__Request *req)
{
    Dash__Reply *rep = raw_call(r, req, 5000);
    int code = rep ? rep->code : 1;
    wire_free_reply(rep);
    return code;
}

static void test_metrics_scrape_counts_what_was_sent(void)
{
    char *s0 = scrape();
    CU_ASSERT_FATAL(s0 != NULL);
    CU_ASSERT(value(s0, "dashd_build_info{version=\"0.1.0\",backend=\"cpu\"}") == 1);

    /* a libdash client: a session with one buffer and one forward */
    struct dash_connect_opts o = {.client_name = "metrics-test", .run_tag = "run \"m1\""};
    struct dash_client *c;
    CU_ASSERT_FATAL(dash_connect(D.endpoint, &o, &c) == 0);
    const int64_t B = 1, S = 32, H = 2, Dh = 32;
    const uint64_t qb = (uint64_t)(B * S * H * Dh * 2), lb = (uint64_t)(B * H * S * 4);
    struct dash_buffer *buf;
    CU_ASSERT_FATAL(dash_shm_alloc(c, 4 * qb + lb, &buf) == 0);
    struct tu_rng r;
    tu_rng_init(&r, tu_seed());
    tu_fill(dash_buffer_data(buf), DTYPE_BF16, 3 * B * S * H * Dh, &r, 1.0);
    struct dash_tensor q = dash_tensor_dense(buf, 0, B, S, H, Dh);
    struct dash_tensor k = dash_tensor_dense(buf, qb, B, S, H, Dh);
    struct dash_tensor v = dash_tensor_dense(buf, 2 * qb, B, S, H, Dh);
    struct dash_tensor out = dash_tensor_dense(buf, 3 * qb, B, S, H, Dh);
    struct dash_tensor lse = dash_tensor_lse(buf, 4 * qb, B, H, S);
    struct dash_attn a = {.dtype = DASH_BF16, .mask = DASH_MASK_CAUSAL};
    CU_ASSERT_FATAL(dash_forward(c, &a, &q, &k, &v, &out, &lse, NULL) == 0);
    char *s1 = scrape();
    CU_ASSERT_FATAL(s1 != NULL);

    /* five pings, a malformed message, and a request without a session */
    for (int i = 0; i < 5; i++)
        CU_ASSERT(dash_ping(c, 5000, NULL) == 0);
    struct raw_client *raw = raw_connect(D.endpoint);
    CU_ASSERT_FATAL(raw != NULL);
    static const unsigned char junk[] = {0x08, 0x07, 0xff, 0xff, 0xff};
    CU_ASSERT(raw_send(raw, junk, sizeof junk) == 0);
    Dash__Reply *rep = raw_recv(raw, 5000);
    CU_ASSERT(rep && rep->code == DASH_EMALFORMED);
    wire_free_reply(rep);
    Dash__UnregisterBuffer ub = DASH__UNREGISTER_BUFFER__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 77;
    req.body_case = DASH__REQUEST__BODY_UNREGISTER_BUFFER;
    req.unregister_buffer = &ub;
    CU_ASSERT(raw_code(raw, &req) == DASH_ENOSESSION);
    char *s2 = scrape();
    CU_ASSERT_FATAL(s2 != NULL);

    /* the forward: counted once, in the request counter and the histograms */
    const char *fwd = "dashd_requests_total{op=\"forward\"}";
    CU_ASSERT(value(s1, fwd) - value(s0, fwd) == 1);
    const char *lat_count = "dashd_op_latency_seconds_count{op=\"forward\"}";
    CU_ASSERT(value(s1, lat_count) - value(s0, lat_count) == 1);
    const char *run_sum = "dashd_op_run_seconds_sum{op=\"forward\"}";
    CU_ASSERT(value(s1, run_sum) > value(s0, run_sum));
    CU_ASSERT(value(s1, "dashd_op_latency_seconds_bucket{op=\"forward\",le=\"+Inf\"}") ==
              value(s1, lat_count));
    /* buckets are cumulative */
    double prev = 0;
    const char *les[] = {"5e-05", "0.0001", "0.001", "0.01", "0.1", "1", "10", "+Inf"};
    for (size_t i = 0; i < sizeof les / sizeof les[0]; i++) {
        char key[128];
        snprintf(key, sizeof key, "dashd_op_latency_seconds_bucket{op=\"forward\",le=\"%s\"}",
                 les[i]);
        double v2 = value(s1, key);
        CU_ASSERT(!isnan(v2) && v2 >= prev);
        prev = v2;
    }
    /* the pings and the errors, by code */
    const char *ping = "dashd_requests_total{op=\"ping\"}";
    CU_ASSERT(value(s2, ping) - value(s1, ping) == 5);
    const char *mal = "dashd_errors_total{code=\"DASH_EMALFORMED\"}";
    CU_ASSERT(value(s2, mal) - value(s1, mal) == 1);
    const char *malreq = "dashd_requests_total{op=\"malformed\"}";
    CU_ASSERT(value(s2, malreq) - value(s1, malreq) == 1);
    const char *nos = "dashd_errors_total{code=\"DASH_ENOSESSION\"}";
    CU_ASSERT(value(s2, nos) - value(s1, nos) == 1);
    CU_ASSERT(sum_of(s2, "dashd_errors_total") - sum_of(s1, "dashd_errors_total") == 2);

    /* the client's own series, its run tag's quote escaped */
    const char *who = "client=\"metrics-test\",run_tag=\"run \\\"m1\\\"\"";
    CU_ASSERT(value_where(s2, "dashd_client_forwards_total", who) == 1);
    CU_ASSERT(value_where(s2, "dashd_client_registered_bytes", who) ==
              (double)dash_buffer_size(buf));
    CU_ASSERT(value_where(s2, "dashd_client_buffers", who) == 1);
    CU_ASSERT(value_where(s2, "dashd_client_requests_total", who) >= 8);
    CU_ASSERT(value(s2, "dashd_registered_bytes") >= (double)dash_buffer_size(buf));
    CU_ASSERT(value(s2, "dashd_sessions") >= 1);
    CU_ASSERT(value(s2, "dashd_queue_depth") == 0);

    /* one definition: StatsReply's totals are the endpoint's sums (plus the Stats itself) */
    char *s3 = scrape();
    struct dash_stats *st;
    CU_ASSERT_FATAL(s3 && dash_stats(c, &st) == 0);
    CU_ASSERT((double)st->requests == sum_of(s3, "dashd_requests_total") + 1);
    CU_ASSERT((double)st->errors == sum_of(s3, "dashd_errors_total"));
    dash_stats_free(st);

    raw_close(raw);
    CU_ASSERT(dash_buffer_free(c, buf) == 0);
    dash_close(c);
    free(s0);
    free(s1);
    free(s2);
    free(s3);
}

/* The HTTP status curl got for `args`, or -1. */
static int http_status(const char *args)
{
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, "curl -s -o /dev/null -w '%%{http_code}' --max-time 5 %s", args);
    int rc = tu_run(cmd, &out);
    int status = rc == 0 && out ? atoi(out) : -1;
    free(out);
    return status;
}

static void test_metrics_only_get_and_head_of_metrics_are_served(void)
{
    char args[256];
    snprintf(args, sizeof args, "http://127.0.0.1:%u/metrics", port);
    CU_ASSERT(http_status(args) == 200);
    snprintf(args, sizeof args, "-I http://127.0.0.1:%u/metrics", port);
    CU_ASSERT(http_status(args) == 200);
    snprintf(args, sizeof args, "http://127.0.0.1:%u/", port);
    CU_ASSERT(http_status(args) == 404);
    snprintf(args, sizeof args, "http://127.0.0.1:%u/metrics/../etc/passwd", port);
    CU_ASSERT(http_status(args) == 404);
    snprintf(args, sizeof args, "-X POST -d x=1 http://127.0.0.1:%u/metrics", port);
    CU_ASSERT(http_status(args) == 405);
    snprintf(args, sizeof args, "-X DELETE http://127.0.0.1:%u/metrics", port);
    CU_ASSERT(http_status(args) == 405);
    /* the content type Prometheus expects */
    char cmd[256], *out = NULL;
    snprintf(cmd, sizeof cmd, "curl -s -D - -o /dev/null --max-time 5 http://127.0.0.1:%u/metrics",
             port);
    CU_ASSERT(tu_run(cmd, &out) == 0 && out &&
              strstr(out, "text/plain; version=0.0.4; charset=utf-8") != NULL);
    free(out);
}

static void test_metrics_idle_http_connections_do_not_stall_requests(void)
{
    /* every connection the endpoint allows, each with half a request line, held open */
    int fds[METRICS_HTTP_CONNECTIONS];
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    for (int i = 0; i < METRICS_HTTP_CONNECTIONS; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM, 0);
        CU_ASSERT_FATAL(fds[i] >= 0);
        CU_ASSERT(connect(fds[i], (struct sockaddr *)&sa, sizeof sa) == 0);
        CU_ASSERT(write(fds[i], "GET /metr", 9) == 9);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 20; i++)
        CU_ASSERT(raw_ping_endpoint(D.endpoint, 1000) == 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    CU_ASSERT(s < 5.0); /* each well under a second; 20 in a row on a loaded machine */
    for (int i = 0; i < METRICS_HTTP_CONNECTIONS; i++)
        close(fds[i]);
    /* and the endpoint serves again once they are gone */
    char *text = NULL;
    for (int i = 0; i < 20 && !text; i++)
        text = scrape();
    CU_ASSERT(text != NULL);
    free(text);
}

static void test_metrics_bad_or_busy_address_is_refused_at_start(void)
{
    const char *bad[] = {"localhost:9464", "127.0.0.1", "127.0.0.1:70000", "127.0.0.1:-1",
                         "::1:9464", "[::1]9464", "1.2.3:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[512], *out = NULL;
        snprintf(cmd, sizeof cmd, "%s/dashd --backend cpu --endpoint ipc:///tmp/dashd-m-%d.sock "
                 "--metrics '%s' 2>&1", tu_build_dir(), (int)getpid(), bad[i]);
        CU_ASSERT(tu_run(cmd, &out) == 2);
        CU_ASSERT(out && strstr(out, "--metrics needs ADDR:PORT") != NULL);
        free(out);
    }
    /* a port someone else listens on */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    socklen_t len = sizeof sa;
    CU_ASSERT_FATAL(bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 1) == 0 &&
                    getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s/dashd --backend cpu --endpoint ipc:///tmp/dashd-m-%d.sock "
             "--metrics 127.0.0.1:%u 2>&1", tu_build_dir(), (int)getpid(),
             (unsigned)ntohs(sa.sin_port));
    CU_ASSERT(tu_run(cmd, &out) == 1);
    CU_ASSERT(out && strstr(out, "cannot serve there") != NULL);
    free(out);
    close(fd);
}


/* A daemon with more than FD_SETSIZE (1024) descriptors open - over a thousand client
 * connections, which --max-connections allows (4096) - still serves its metrics: the
 * connection a scrape opens gets a descriptor above 1024. */
static void test_metrics_served_with_more_than_fd_setsize_descriptors(void)
{
    enum { N = 1100 };
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < N + 64) {
        printf("\n    skipped: the open-file limit is below %d", N + 64);
        return;
    }
    const char *path = wire_ipc_path(D.endpoint);
    CU_ASSERT_FATAL(path != NULL);
    struct sockaddr_un ua = {.sun_family = AF_UNIX};
    snprintf(ua.sun_path, sizeof ua.sun_path, "%s", path);
    /* bare connections, held within the daemon's handshake time */
    static int fds[N];
    int n = 0;
    for (; n < N; n++) {
        fds[n] = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[n] < 0 || connect(fds[n], (struct sockaddr *)&ua, sizeof ua) != 0) {
            if (fds[n] >= 0)
                close(fds[n]);
            break;
        }
    }
    CU_ASSERT_FATAL(n == N);
    sleep_ms(300); /* the daemon accepts them all */
    char *text = scrape();
    CU_ASSERT(text != NULL && strstr(text, "dashd_uptime_seconds") != NULL);
    free(text);
    for (int i = 0; i < n; i++)
        close(fds[i]);
}

int suite_metrics(void)
{
    CU_pSuite s = CU_add_suite("metrics", suite_init, suite_clean);
    if (!s)
        return -1;
    ADD_TEST(s, test_metrics_scrape_counts_what_was_sent);
    ADD_TEST(s, test_metrics_only_get_and_head_of_metrics_are_served);
    ADD_TEST(s, test_metrics_idle_http_connections_do_not_stall_requests);
    ADD_TEST(s, test_metrics_bad_or_busy_address_is_refused_at_start);
    ADD_TEST(s, test_metrics_served_with_more_than_fd_setsize_descriptors);
    return 0;
}
