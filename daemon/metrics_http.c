// SPDX-License-Identifier: BSD-3-Clause
/*
 * metrics_http.c - see metrics_http.h.
 */
#include "metrics_http.h"

#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* One moment's numbers; freed by whoever drops the last reference (the table's, or a
 * scrape's that was rendering when a newer one came). */
struct snap {
    struct metrics m;
    void *stats;
    size_t stats_len;
    uint64_t taken_ns;
    int refs; /* under mu */
};

struct metrics_http {
    struct MHD_Daemon *mhd;
    uv_async_t async;
    metrics_collect_fn collect;
    void *ctx;
    unsigned port;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    struct snap *snap; /* the latest; one reference; under mu */
    uint64_t gen;      /* snapshots made so far; under mu */
    int closed;        /* under mu */
    int async_open;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void snap_unref_locked(struct snap *s)
{
    if (s && --s->refs == 0) {
        free(s->stats);
        free(s);
    }
}

/* ---- the loop side ---------------------------------------------------------------------- */

static void on_async(uv_async_t *a)
{
    struct metrics_http *h = a->data;
    struct snap *s = calloc(1, sizeof *s);
    if (!s)
        return;
    int rc = h->collect(h->ctx, &s->m, &s->stats, &s->stats_len);
    if (rc) {
        free(s);
        return;
    }
    s->taken_ns = now_ns();
    s->refs = 1;
    pthread_mutex_lock(&h->mu);
    snap_unref_locked(h->snap);
    h->snap = s;
    h->gen++;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
}

/* ---- the endpoint's thread ------------------------------------------------------------- */

/* A snapshot no older than METRICS_HTTP_FRESH_MS if the loop makes one in time, else the
 * latest; with one reference for the caller. NULL: none at all (or closing). */
static struct snap *get_snap(struct metrics_http *h)
{
    pthread_mutex_lock(&h->mu);
    uint64_t now = now_ns();
    if (!h->closed && (!h->snap || now - h->snap->taken_ns > METRICS_HTTP_FRESH_MS * 1000000ull)) {
        uint64_t gen = h->gen;
        (void)uv_async_send(&h->async);
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += METRICS_HTTP_WAIT_MS / 1000;
        dl.tv_nsec += (long)(METRICS_HTTP_WAIT_MS % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        while (!h->closed && h->gen == gen)
            if (pthread_cond_timedwait(&h->cond, &h->mu, &dl) == ETIMEDOUT)
                break;
    }
    struct snap *s = h->closed ? NULL : h->snap;
    if (s)
        s->refs++;
    pthread_mutex_unlock(&h->mu);
    return s;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *body, size_t len,
                             int must_free)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (must_free)
            free(body);
        return MHD_NO;
    }
    (void)MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                                  status == MHD_HTTP_OK ? CONTENT_TYPE : "text/plain");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        (void)MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)con_cls;
    struct metrics_http *h = cls;
    static char not_found[] = "dashd serves /metrics only\n";
    static char not_allowed[] = "GET or HEAD /metrics\n";
    static char unavailable[] = "dashd did not produce its numbers in time\n";
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
        *upload_data_size = 0; /* a body, if any, is not read */
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, not_allowed, sizeof not_allowed - 1, 0);
    }
    if (strcmp(url, "/metrics") != 0)
        return reply(c, MHD_HTTP_NOT_FOUND, not_found, sizeof not_found - 1, 0);
    struct snap *s = get_snap(h);
    if (!s)
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, unavailable, sizeof unavailable - 1, 0);
    size_t len = 0;
    char *text = metrics_render(&s->m, s->stats, s->stats_len, &len);
    pthread_mutex_lock(&h->mu);
    snap_unref_locked(s);
    pthread_mutex_unlock(&h->mu);
    if (!text)
        return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, unavailable, sizeof unavailable - 1, 0);
    return reply(c, MHD_HTTP_OK, text, len, 1);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = '\0';
    log_warn("metrics endpoint: %s", line);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

int metrics_http_parse_addr(const char *spec, void *ret_sockaddr, size_t *ret_len)
{
    char host[64];
    const char *colon;
    if (!spec)
        return -EINVAL;
    if (spec[0] == '[') {
        const char *end = strchr(spec, ']');
        if (!end || end[1] != ':' || (size_t)(end - spec - 1) >= sizeof host)
            return -EINVAL;
        memcpy(host, spec + 1, (size_t)(end - spec - 1));
        host[end - spec - 1] = '\0';
        colon = end + 1;
    } else {
        colon = strrchr(spec, ':');
        if (!colon || (size_t)(colon - spec) >= sizeof host || strchr(spec, ':') != colon)
            return -EINVAL;
        memcpy(host, spec, (size_t)(colon - spec));
        host[colon - spec] = '\0';
    }
    char *end;
    errno = 0;
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port > 65535 || colon[1] == '-' || colon[1] == '+')
        return -EINVAL;
    if (spec[0] == '[') {
        struct sockaddr_in6 a6;
        memset(&a6, 0, sizeof a6);
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host, &a6.sin6_addr) != 1)
            return -EINVAL;
        memcpy(ret_sockaddr, &a6, sizeof a6);
        *ret_len = sizeof a6;
    } else {
        struct sockaddr_in a4;
        memset(&a4, 0, sizeof a4);
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &a4.sin_addr) != 1)
            return -EINVAL;
        memcpy(ret_sockaddr, &a4, sizeof a4);
        *ret_len = sizeof a4;
    }
    return 0;
}

struct metrics_http *metrics_http_new(uv_loop_t *loop, const char *spec,
                                      metrics_collect_fn collect, void *ctx, char *err,
                                      size_t errlen)
{
    struct sockaddr_storage sa;
    size_t salen;
    if (metrics_http_parse_addr(spec, &sa, &salen) != 0) {
        snprintf(err, errlen, "--metrics %s: want ADDR:PORT, ADDR an IPv4 address or an IPv6 "
                 "one in brackets ([::1]:9464)", spec);
        return NULL;
    }
    struct metrics_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "--metrics: out of memory");
        return NULL;
    }
    h->collect = collect;
    h->ctx = ctx;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&h->cond, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&h->mu, NULL);
    int rc = uv_async_init(loop, &h->async, on_async);
    if (rc) {
        snprintf(err, errlen, "--metrics: %s", uv_strerror(rc));
        goto free_h;
    }
    h->async.data = h;
    h->async_open = 1;
    /* poll or epoll, not select(): dashd has more than FD_SETSIZE descriptors open with
     * a thousand clients, and select() refuses a connection numbered above that */
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG |
                     (sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->mhd = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
                              MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, NULL,
                              MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                              MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_HTTP_CONNECTIONS,
                              MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                              MHD_OPTION_END);
    if (!h->mhd) {
        snprintf(err, errlen, "--metrics %s: cannot serve there (address in use or not ours?)",
                 spec);
        goto close_async;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(h->mhd, MHD_DAEMON_INFO_BIND_PORT);
    h->port = info ? info->port : 0;
    return h;

close_async:
    metrics_http_close(h); /* freed when the loop runs the close callback */
    return NULL;
free_h:
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cond);
    free(h);
    return NULL;
}

unsigned metrics_http_port(const struct metrics_http *h)
{
    return h->port;
}

static void on_async_closed(uv_handle_t *a)
{
    struct metrics_http *h = a->data;
    pthread_mutex_lock(&h->mu);
    snap_unref_locked(h->snap);
    h->snap = NULL;
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cond);
    free(h);
}

void metrics_http_close(struct metrics_http *h)
{
    if (!h || !h->async_open)
        return;
    pthread_mutex_lock(&h->mu);
    h->closed = 1;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->mu);
    if (h->mhd) {
        MHD_stop_daemon(h->mhd); /* joins the endpoint's thread */
        h->mhd = NULL;
    }
    h->async_open = 0;
    uv_close((uv_handle_t *)&h->async, on_async_closed);
}
