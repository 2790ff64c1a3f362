// SPDX-License-Identifier: BSD-3-Clause
/*
 * ctl_stats.c - `dashctl stats`: the daemon's counters, and one row per client session.
 *
 * Text is a table sized to its contents; --json is one JSON object with the raw numbers
 * (bytes, microseconds), for scripts. Everything printed comes from one Stats reply, so
 * the numbers are one consistent snapshot. The session dashctl itself uses does not
 * exist: it connects without one (ctl_daemon.c), so every row is a real client.
 */
#include "client/dashctl/ctl.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: dashctl stats [options]\n"
    "\n"
    "Print dashd's counters: totals, queue depth and capacity, and one row per client\n"
    "session (id, name, pid, run tag, requests, errors, forwards, backwards, buffers,\n"
    "bytes registered, p50/p99 latency, requests in flight).\n"
    "\n"
    "  --json           one JSON object instead of text (bytes and microseconds as numbers)\n"
    "  --timeout MS     wait at most MS milliseconds for the daemon (default 2000)\n"
    "  --endpoint E     the daemon's ZeroMQ endpoint (default: $DASHD_ENDPOINT, else\n"
    "                   ipc://$XDG_RUNTIME_DIR/dashd.sock, else\n"
    "                   ipc:///tmp/dashd-<uid>/dashd.sock; refused when another user\n"
    "                   could have put its socket there: docs/libdash.md)\n"
    "  -h, --help       this text\n"
    "\n"
    "Exit status: 0 success, 1 no daemon or no answer, 2 bad option or value.\n";

enum { OPT_JSON = 256, OPT_TIMEOUT, OPT_ENDPOINT };

static const struct option long_opts[] = {
    {"json", no_argument, NULL, OPT_JSON},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"endpoint", required_argument, NULL, OPT_ENDPOINT},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* ---- text ----------------------------------------------------------------------------- */

#define COLS 13
#define CELL 48
#define NAME_COLS 24 /* names and run tags longer than this are cut, with a '~' */

static const char *const headers[COLS] = {
    "SESSION", "NAME",    "PID",     "RUN TAG", "REQUESTS", "ERRORS", "FWD",
    "BWD",     "BUFFERS", "BYTES",   "P50",     "P99",      "IN FLIGHT",
};

struct cell {
    char s[CELL];
    size_t cols; /* characters shown: what padding is counted in */
};

static void fmt_bytes(char *dst, size_t len, uint64_t b)
{
    static const char units[] = "KMGTPE";
    if (b < 1024) {
        snprintf(dst, len, "%lluB", (unsigned long long)b);
        return;
    }
    double v = (double)b;
    int u = -1;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(dst, len, "%.1f%ciB", v, units[u]);
}

static void fmt_us(char *dst, size_t len, uint64_t us)
{
    if (us < 1000)
        snprintf(dst, len, "%lluus", (unsigned long long)us);
    else if (us < 1000000)
        snprintf(dst, len, "%.1fms", (double)us / 1e3);
    else
        snprintf(dst, len, "%.2fs", (double)us / 1e6);
}

static void set_num(struct cell *c, uint64_t v)
{
    c->cols = (size_t)snprintf(c->s, sizeof c->s, "%llu", (unsigned long long)v);
}

static void set_str(struct cell *c, const char *s)
{
    c->cols = ctl__text(c->s, sizeof c->s, *s ? s : "-", NAME_COLS);
}

static void fill_row(struct cell *row, const struct dash_client_stats *cs)
{
    set_num(&row[0], cs->session_id);
    set_str(&row[1], cs->client_name);
    set_num(&row[2], cs->pid);
    set_str(&row[3], cs->run_tag);
    set_num(&row[4], cs->requests);
    set_num(&row[5], cs->errors);
    set_num(&row[6], cs->forwards);
    set_num(&row[7], cs->backwards);
    set_num(&row[8], cs->buffers);
    fmt_bytes(row[9].s, sizeof row[9].s, cs->bytes_registered);
    fmt_us(row[10].s, sizeof row[10].s, cs->latency_p50_us);
    fmt_us(row[11].s, sizeof row[11].s, cs->latency_p99_us);
    set_num(&row[12], cs->in_flight);
    for (int i = 9; i <= 11; i++)
        row[i].cols = strlen(row[i].s);
}

/* Text columns are left-aligned, numbers right-aligned. */
static int is_text_col(int i)
{
    return i == 1 || i == 3;
}

static void print_row(const struct cell *row, const size_t *width)
{
    for (int i = 0; i < COLS; i++) {
        size_t pad = width[i] - row[i].cols;
        if (i)
            fputs("  ", stdout);
        if (!is_text_col(i))
            printf("%*s", (int)pad, "");
        fputs(row[i].s, stdout);
        if (is_text_col(i) && i != COLS - 1)
            printf("%*s", (int)pad, "");
    }
    putchar('\n');
}

static int print_text(const struct dash_stats *s)
{
    char up[64], ver[CELL], be[CELL];
    ctl__duration(up, sizeof up, s->uptime_ms);
    ctl__text(ver, sizeof ver, *s->server_version ? s->server_version : "(unknown version)", 32);
    ctl__text(be, sizeof be, *s->backend ? s->backend : "unknown", 16);
    printf("dashd %s, backend %s, %u threads, up %s\n", ver, be, s->threads, up);
    if (*s->gpu_sharing) {
        char sh[CELL];
        ctl__text(sh, sizeof sh, s->gpu_sharing, 16);
        printf("GPU sharing: %s%s\n", sh,
               strcmp(s->gpu_sharing, "contexts") == 0
                   ? " (no MPS: each stream-ordered op costs GPU context switches; docs/mps.md)"
                   : "");
    }
    printf("requests %llu (%llu errors), queue %u/%u, %u session%s", (unsigned long long)s->requests,
           (unsigned long long)s->errors, s->queue_depth, s->queue_capacity, s->sessions,
           s->sessions == 1 ? "" : "s");
    if (s->n_clients < s->sessions)
        printf(" (the %zu oldest listed)", s->n_clients);
    printf("\n");
    if (*s->audit_path) {
        char path[CELL * 2];
        ctl__text(path, sizeof path, s->audit_path, 80);
        printf("audit %s (level %s): %llu records written, %llu dropped, %llu write errors\n",
               path, s->audit_level, (unsigned long long)s->audit_written,
               (unsigned long long)s->audit_dropped, (unsigned long long)s->audit_write_errors);
    }
    if (!s->n_clients)
        return CTL_EXIT_OK;

    struct cell *rows = calloc(s->n_clients + 1, sizeof(struct cell) * COLS);
    if (!rows) {
        fprintf(stderr, "dashctl stats: %s\n", dash_strerror(DASH_ENOMEM));
        return CTL_EXIT_FAIL;
    }
    size_t width[COLS];
    for (int i = 0; i < COLS; i++) {
        snprintf(rows[i].s, CELL, "%s", headers[i]);
        rows[i].cols = strlen(headers[i]);
    }
    for (size_t r = 0; r < s->n_clients; r++)
        fill_row(&rows[(r + 1) * COLS], &s->clients[r]);
    for (int i = 0; i < COLS; i++) {
        width[i] = 0;
        for (size_t r = 0; r <= s->n_clients; r++)
            if (rows[r * COLS + (size_t)i].cols > width[i])
                width[i] = rows[r * COLS + (size_t)i].cols;
    }
    putchar('\n');
    for (size_t r = 0; r <= s->n_clients; r++)
        print_row(&rows[r * COLS], width);
    free(rows);
    return CTL_EXIT_OK;
}

/* ---- JSON ----------------------------------------------------------------------------- */

static void json_u64(const char *name, uint64_t v, int last)
{
    printf("\"%s\": %llu%s", name, (unsigned long long)v, last ? "" : ", ");
}

static void json_str(const char *name, const char *v, int last)
{
    printf("\"%s\": ", name);
    ctl__json_string(v);
    fputs(last ? "" : ", ", stdout);
}

static void print_json(const struct dash_stats *s, const char *endpoint)
{
    printf("{");
    json_str("endpoint", endpoint, 0);
    json_str("server_version", s->server_version, 0);
    json_str("backend", s->backend, 0);
    json_u64("uptime_ms", s->uptime_ms, 0);
    json_u64("threads", s->threads, 0);
    json_u64("queue_depth", s->queue_depth, 0);
    json_u64("queue_capacity", s->queue_capacity, 0);
    json_u64("requests", s->requests, 0);
    json_u64("errors", s->errors, 0);
    json_u64("sessions", s->sessions, 0);
    if (*s->gpu_sharing)
        json_str("gpu_sharing", s->gpu_sharing, 0);
    if (*s->audit_path) {
        json_str("audit_path", s->audit_path, 0);
        json_str("audit_level", s->audit_level, 0);
        json_u64("audit_written", s->audit_written, 0);
        json_u64("audit_dropped", s->audit_dropped, 0);
        json_u64("audit_write_errors", s->audit_write_errors, 0);
    }
    printf("\"clients\": [");
    for (size_t i = 0; i < s->n_clients; i++) {
        const struct dash_client_stats *c = &s->clients[i];
        printf("%s\n  {", i ? "," : "");
        json_u64("session_id", c->session_id, 0);
        json_str("client_name", c->client_name, 0);
        json_u64("pid", c->pid, 0);
        json_str("run_tag", c->run_tag, 0);
        if (c->world_size) { /* a rank of a distributed run */
            json_u64("rank", c->rank, 0);
            json_u64("world_size", c->world_size, 0);
        }
        json_u64("requests", c->requests, 0);
        json_u64("errors", c->errors, 0);
        json_u64("forwards", c->forwards, 0);
        json_u64("backwards", c->backwards, 0);
        json_u64("buffers", c->buffers, 0);
        json_u64("bytes_registered", c->bytes_registered, 0);
        json_u64("latency_p50_us", c->latency_p50_us, 0);
        json_u64("latency_p99_us", c->latency_p99_us, 0);
        json_u64("in_flight", c->in_flight, 1);
        printf("}");
    }
    printf("%s]}\n", s->n_clients ? "\n" : "");
}

/* ---- the command ---------------------------------------------------------------------- */

int ctl_stats(int argc, char **argv)
{
    int json = 0, help = 0, timeout_ms = CTL_TIMEOUT_MS_DEFAULT, rc = 0, opt;
    const char *endpoint_arg = NULL;
    char endpoint[CTL_ENDPOINT_MAX];

    opterr = 0;
    optind = 0;
    while (rc == 0 && (opt = getopt_long(argc, argv, ":h", long_opts, NULL)) != -1) {
        switch (opt) {
        case OPT_JSON:
            json = 1;
            break;
        case OPT_TIMEOUT:
            rc = ctl__parse_int("stats", "timeout", optarg, 1, CTL_TIMEOUT_MS_MAX, &timeout_ms);
            break;
        case OPT_ENDPOINT:
            endpoint_arg = optarg;
            break;
        case 'h':
            help = 1;
            break;
        default:
            rc = ctl__getopt_error("stats", opt, argc, argv, OPT_JSON);
            break;
        }
    }
    if ((rc = ctl__after_options("stats", rc, help, usage_text, argc, argv, endpoint_arg,
                                 endpoint, sizeof endpoint)) >= 0)
        return rc;

    struct dash_client *c;
    if ((rc = ctl__connect(endpoint, timeout_ms, &c)) != 0)
        return ctl__connect_failed("stats", endpoint, timeout_ms, rc);
    struct dash_stats *s;
    rc = dash_stats(c, &s);
    dash_close(c);
    if (rc) {
        fprintf(stderr, "dashctl stats: no stats from dashd at %s: %s\n", endpoint,
                dash_strerror(rc));
        return CTL_EXIT_FAIL;
    }
    int status = CTL_EXIT_OK;
    if (json)
        print_json(s, endpoint);
    else
        status = print_text(s);
    dash_stats_free(s);
    return status;
}
