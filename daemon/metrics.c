// SPDX-License-Identifier: BSD-3-Clause
/*
 * metrics.c - see metrics.h.
 *
 * Naming follows Prometheus' conventions: dashd_ prefix, base units (seconds, bytes),
 * _total on counters, histograms as cumulative _bucket{le=...} series with _sum and
 * _count. Label values are escaped (backslash, quote, newline) and bytes that are not
 * valid UTF-8 become '?', since client names and run tags are whatever clients sent.
 */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const op_names[METRICS_OP_COUNT] = {
#define METRICS_OP_NAME(name, text) text,
    METRICS_OPS(METRICS_OP_NAME)
#undef METRICS_OP_NAME
};

static const int codes[METRICS_CODES - 1] = {
#define METRICS_CODE_VALUE(name, value, msg) value,
    DASH_ERRNO_MAP(METRICS_CODE_VALUE)
#undef METRICS_CODE_VALUE
};

static const uint64_t bucket_us[METRICS_BUCKETS - 1] = METRICS_BUCKETS_US;

enum metrics_op metrics_op_of(const Dash__Request *req)
{
    switch (req->body_case) {
    case DASH__REQUEST__BODY_HELLO:
        return METRICS_OP_HELLO;
    case DASH__REQUEST__BODY_REGISTER_BUFFER:
        return METRICS_OP_REGISTER_BUFFER;
    case DASH__REQUEST__BODY_UNREGISTER_BUFFER:
        return METRICS_OP_UNREGISTER_BUFFER;
    case DASH__REQUEST__BODY_REGISTER_EVENTS:
        return METRICS_OP_REGISTER_EVENTS;
    case DASH__REQUEST__BODY_FORWARD:
        return METRICS_OP_FORWARD;
    case DASH__REQUEST__BODY_BACKWARD:
        return METRICS_OP_BACKWARD;
    case DASH__REQUEST__BODY_STATS:
        return METRICS_OP_STATS;
    case DASH__REQUEST__BODY_PING:
        return METRICS_OP_PING;
    case DASH__REQUEST__BODY_GOODBYE:
        return METRICS_OP_GOODBYE;
    default:
        return METRICS_OP_UNKNOWN;
    }
}

void metrics_count_request(struct metrics *m, enum metrics_op op)
{
    m->requests[op < METRICS_OP_COUNT ? op : METRICS_OP_UNKNOWN]++;
}

void metrics_count_reply(struct metrics *m, int code)
{
    if (code == 0)
        return;
    int i = 0;
    while (i < METRICS_CODES - 1 && codes[i] != code)
        i++;
    m->errors[i]++;
}

static void hist_add(struct metrics_hist *h, uint64_t ns)
{
    int b = 0;
    while (b < METRICS_BUCKETS - 1 && ns > bucket_us[b] * 1000)
        b++;
    h->count[b]++;
    h->sum_ns += ns;
}

void metrics_count_op(struct metrics *m, int backward, uint64_t latency_ns, uint64_t queue_ns,
                      uint64_t run_ns, int on_gpu)
{
    int i = backward ? 1 : 0;
    hist_add(&m->latency[i], latency_ns);
    hist_add(&m->queue[i], queue_ns);
    hist_add(&m->run[i], run_ns);
    if (on_gpu)
        m->gpu_ns[i] += run_ns;
}

uint64_t metrics_requests(const struct metrics *m)
{
    uint64_t n = 0;
    for (int i = 0; i < METRICS_OP_COUNT; i++)
        n += m->requests[i];
    return n;
}

uint64_t metrics_errors(const struct metrics *m)
{
    uint64_t n = 0;
    for (int i = 0; i < METRICS_CODES; i++)
        n += m->errors[i];
    return n;
}

/* ---- rendering --------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1..4), or 0. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
          : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 2 && s[0] < 0xc2)
        return 0; /* overlong */
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* A label value as the text format wants it, between quotes. */
static void put_label(FILE *f, const char *v)
{
    fputc('"', f);
    const unsigned char *s = (const unsigned char *)(v ? v : "");
    while (*s) {
        int n = utf8_len(s);
        if (n == 0) {
            fputc('?', f);
            s++;
        } else if (*s == '\\' || *s == '"') {
            fputc('\\', f);
            fputc(*s++, f);
        } else if (*s == '\n') {
            fputs("\\n", f);
            s++;
        } else {
            fwrite(s, 1, (size_t)n, f);
            s += n;
        }
    }
    fputc('"', f);
}

static void head(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(FILE *f, const char *name, const char *help, const struct metrics_hist h[2])
{
    head(f, name, "histogram", help);
    for (int i = 0; i < 2; i++) {
        const char *op = i ? "backward" : "forward";
        uint64_t cum = 0;
        for (int b = 0; b < METRICS_BUCKETS; b++) {
            cum += h[i].count[b];
            if (b < METRICS_BUCKETS - 1)
                fprintf(f, "%s_bucket{op=\"%s\",le=\"%g\"} %llu\n", name, op,
                        (double)bucket_us[b] / 1e6, (unsigned long long)cum);
            else
                fprintf(f, "%s_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", name, op,
                        (unsigned long long)cum);
        }
        fprintf(f, "%s_sum{op=\"%s\"} %.9f\n%s_count{op=\"%s\"} %llu\n", name, op,
                (double)h[i].sum_ns / 1e9, name, op, (unsigned long long)cum);
    }
}

/* One per-client series: name{session=..,client=..,run_tag=..,pid=..} value. */
static void client_line(FILE *f, const char *name, const Dash__ClientStats *c, const char *extra,
                        double v)
{
    fprintf(f, "%s{session=\"%llu\",client=", name, (unsigned long long)c->session_id);
    put_label(f, c->client_name);
    fputs(",run_tag=", f);
    put_label(f, c->run_tag);
    fprintf(f, ",pid=\"%u\"%s} %.17g\n", c->pid, extra ? extra : "", v);
}

static void clients(FILE *f, const Dash__StatsReply *st)
{
    static const struct {
        const char *name, *type, *help;
        int field;
    } series[] = {
        {"dashd_client_requests_total", "counter", "Messages from the session", 0},
        {"dashd_client_errors_total", "counter", "Error replies to the session", 1},
        {"dashd_client_forwards_total", "counter", "Forwards the session had answered", 2},
        {"dashd_client_backwards_total", "counter", "Backwards the session had answered", 3},
        {"dashd_client_registered_bytes", "gauge", "Bytes of the buffers the session holds", 4},
        {"dashd_client_buffers", "gauge", "Buffers the session holds", 5},
        {"dashd_client_in_flight", "gauge", "Ops of the session queued or running", 6},
        {"dashd_client_latency_seconds", "gauge",
         "Forward/Backward latency of the session's last 1024 ops, receipt to reply, by quantile", 7},
    };
    for (size_t k = 0; k < sizeof series / sizeof series[0]; k++) {
        head(f, series[k].name, series[k].type, series[k].help);
        for (size_t i = 0; i < st->n_clients; i++) {
            const Dash__ClientStats *c = st->clients[i];
            switch (series[k].field) {
            case 0: client_line(f, series[k].name, c, NULL, (double)c->requests); break;
            case 1: client_line(f, series[k].name, c, NULL, (double)c->errors); break;
            case 2: client_line(f, series[k].name, c, NULL, (double)c->forwards); break;
            case 3: client_line(f, series[k].name, c, NULL, (double)c->backwards); break;
            case 4: client_line(f, series[k].name, c, NULL, (double)c->bytes_registered); break;
            case 5: client_line(f, series[k].name, c, NULL, (double)c->buffers); break;
            case 6: client_line(f, series[k].name, c, NULL, (double)c->in_flight); break;
            default:
                client_line(f, series[k].name, c, ",quantile=\"0.5\"",
                            (double)c->latency_p50_us / 1e6);
                client_line(f, series[k].name, c, ",quantile=\"0.99\"",
                            (double)c->latency_p99_us / 1e6);
            }
        }
    }
}

char *metrics_render(const struct metrics *m, const void *stats, size_t stats_len,
                     size_t *ret_len)
{
    Dash__StatsReply *st = dash__stats_reply__unpack(NULL, stats_len, stats);
    if (!st)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        dash__stats_reply__free_unpacked(st, NULL);
        return NULL;
    }
    head(f, "dashd_build_info", "gauge", "dashd's version and backend");
    fputs("dashd_build_info{version=", f);
    put_label(f, st->server_version);
    fputs(",backend=", f);
    put_label(f, st->backend);
    fputs("} 1\n", f);
    head(f, "dashd_uptime_seconds", "gauge", "Seconds since dashd started");
    fprintf(f, "dashd_uptime_seconds %.3f\n", (double)st->uptime_ms / 1e3);
    head(f, "dashd_engine_threads", "gauge", "Threads (CPU engine) or SMs (GPU) the backend uses");
    fprintf(f, "dashd_engine_threads %u\n", st->threads);

    head(f, "dashd_requests_total", "counter", "Messages received, by what they asked for");
    for (int i = 0; i < METRICS_OP_COUNT; i++)
        fprintf(f, "dashd_requests_total{op=\"%s\"} %llu\n", op_names[i],
                (unsigned long long)m->requests[i]);
    head(f, "dashd_errors_total", "counter", "Error replies, by code");
    for (int i = 0; i < METRICS_CODES; i++)
        fprintf(f, "dashd_errors_total{code=\"%s\"} %llu\n",
                i < METRICS_CODES - 1 ? dash_errname(codes[i]) : "other",
                (unsigned long long)m->errors[i]);

    head(f, "dashd_queue_depth", "gauge", "Ops accepted and not yet answered");
    fprintf(f, "dashd_queue_depth %u\n", st->queue_depth);
    head(f, "dashd_queue_capacity", "gauge", "Ops accepted before DASH_EBUSY");
    fprintf(f, "dashd_queue_capacity %u\n", st->queue_capacity);

    hist(f, "dashd_op_latency_seconds", "Forward/Backward from receipt to reply", m->latency);
    hist(f, "dashd_op_queue_seconds", "Forward/Backward from receipt to the worker starting it",
         m->queue);
    hist(f, "dashd_op_run_seconds", "Forward/Backward time on the backend (GPU time on the GPU)",
         m->run);
    head(f, "dashd_gpu_seconds_total", "counter", "GPU time of the ops the GPU ran");
    for (int i = 0; i < 2; i++)
        fprintf(f, "dashd_gpu_seconds_total{op=\"%s\"} %.9f\n", i ? "backward" : "forward",
                (double)m->gpu_ns[i] / 1e9);

    uint64_t bytes = 0, bufs = 0;
    for (size_t i = 0; i < st->n_clients; i++) {
        bytes += st->clients[i]->bytes_registered;
        bufs += st->clients[i]->buffers;
    }
    head(f, "dashd_sessions", "gauge", "Client sessions");
    fprintf(f, "dashd_sessions %u\n", st->sessions);
    head(f, "dashd_registered_bytes", "gauge", "Bytes of all registered buffers");
    fprintf(f, "dashd_registered_bytes %llu\n", (unsigned long long)bytes);
    head(f, "dashd_buffers", "gauge", "Registered buffers");
    fprintf(f, "dashd_buffers %llu\n", (unsigned long long)bufs);
    if (st->audit_path) {
        head(f, "dashd_audit_records_written_total", "counter", "Audit records written");
        fprintf(f, "dashd_audit_records_written_total %llu\n",
                (unsigned long long)st->audit_written);
        head(f, "dashd_audit_records_dropped_total", "counter",
             "Audit records lost because the writer fell behind");
        fprintf(f, "dashd_audit_records_dropped_total %llu\n",
                (unsigned long long)st->audit_dropped);
        head(f, "dashd_audit_write_errors_total", "counter", "Failed audit writes");
        fprintf(f, "dashd_audit_write_errors_total %llu\n",
                (unsigned long long)st->audit_write_errors);
    }
    clients(f, st);
    dash__stats_reply__free_unpacked(st, NULL);
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    *ret_len = len;
    return text;
}
