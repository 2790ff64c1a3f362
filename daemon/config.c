// SPDX-License-Identifier: BSD-3-Clause
/*
 * config.c - see config.h.
 *
 * One table, `opts`, says everything about an option: its name, where its value lives in
 * struct config (offset and size, so a reload can compare the old and new value of any
 * option without knowing its type), how its text is read, and whether it can change
 * while dashd runs. The command line (getopt_long), the file (inih) and the reload all
 * go through it.
 */
#include "config.h"

#include "backend.h"
#include "metrics_http.h"

#include "kernels/cpu/pool.h"
#include "proto/wire.h"

#include <errno.h>
#include <sys/socket.h>
#include <getopt.h>
#include <ini.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_QUEUE 256
#define DEFAULT_SESSION_TIMEOUT_S 30.0
#define DEFAULT_AUDIT_MAX_BYTES ((uint64_t)1 << 30)
#define DEFAULT_AUDIT_KEEP 8
#define DEFAULT_REPLY_BYTES ((uint64_t)256 << 20)
/* Per client (limits.h): generous enough for every client we know, small enough that one
 * process cannot take the daemon's memory maps (vm.max_map_count is 65530 by default). */
#define DEFAULT_LIMIT_SESSIONS 256
#define DEFAULT_LIMIT_CONNECTIONS 64 /* without a session: those with one are the sessions' */
#define DEFAULT_LIMIT_BUFFERS 8192

enum kind { K_STR, K_ADDR, K_INT, K_SIZE, K_SECONDS, K_ENUM }; /* K_ADDR: a K_STR that metrics_http_parse_addr takes */

struct opt {
    const char *name;    /* long option; the file's key ([limits]: without "limit-") */
    const char *section; /* "dashd" or "limits" */
    enum kind kind;
    size_t off, size;
    long long lo, hi;                 /* K_INT */
    const char *const *names;         /* K_ENUM, NULL-terminated; values below */
    const int *values;
    const char *want;                 /* what a value must be, for messages */
    int live;                         /* takes effect on SIGHUP */
};

static const char *const backend_names[] = {"auto", "cpu", "cuda", NULL};
static const int backend_values[] = {CONFIG_BACKEND_AUTO, CONFIG_BACKEND_CPU, CONFIG_BACKEND_CUDA};
static const char *const level_names[] = {"error", "warn", "info", "debug", NULL};
static const int level_values[] = {LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG};
static const char *const audit_level_names[] = {"off", "outputs", "all", NULL};
static const int audit_level_values[] = {AUDIT_OFF, AUDIT_OUTPUTS, AUDIT_ALL};
static const char *const sync_names[] = {"none", "batch", "every", NULL};
static const int sync_values[] = {AUDIT_SYNC_NONE, AUDIT_SYNC_BATCH, AUDIT_SYNC_EVERY};
/* --kernels vN is CUATTN_IMPL_* value N (v1 CUDA cores, v2 mma.sync, v3 wgmma). */
static const char *const kernel_names[] = {"auto", "v1", "v2", "v3", NULL};
static const int kernel_values[] = {BACKEND_KERNELS_AUTO, 1, 2, 3};

#define F(field) offsetof(struct config, field), sizeof(((struct config *)0)->field)
#define ENUM(n) n##_names, n##_values

static const struct opt opts[] = {
    {"endpoint", "dashd", K_STR, F(endpoint), 0, 0, NULL, NULL, "an endpoint of 1..255 characters", 0},
    {"backend", "dashd", K_ENUM, F(backend), 0, 0, ENUM(backend), "cpu, cuda or auto", 0},
    {"device", "dashd", K_INT, F(device), 0, 1023, NULL, NULL, "a CUDA device ordinal in 0..1023", 0},
    {"kernels", "dashd", K_ENUM, F(kernels), 0, 0, ENUM(kernel), "auto, v1, v2 or v3", 0},
    {"threads", "dashd", K_INT, F(threads), 1, POOL_THREADS_MAX, NULL, NULL, "an integer in 1..256", 0},
    {"queue", "dashd", K_INT, F(queue), 1, 1000000, NULL, NULL, "an integer in 1..1000000", 0},
    {"session-timeout", "dashd", K_SECONDS, F(session_timeout_s), 0, 0, NULL, NULL,
     "seconds in 0.001..4294967", 0},
    {"log-level", "dashd", K_ENUM, F(level), 0, 0, ENUM(level), "error, warn, info or debug", 1},
    {"audit", "dashd", K_STR, F(audit_path), 0, 0, NULL, NULL, "a file path", 1},
    {"audit-level", "dashd", K_ENUM, F(audit_level), 0, 0, ENUM(audit_level), "off, outputs or all", 0},
    {"audit-sync", "dashd", K_ENUM, F(audit_sync), 0, 0, ENUM(sync), "none, batch or every", 0},
    {"audit-max-size", "dashd", K_SIZE, F(audit_max_bytes), 0, 0, NULL, NULL,
     "bytes, with an optional K, M or G", 0},
    {"audit-keep", "dashd", K_INT, F(audit_keep), 1, 1000, NULL, NULL, "an integer in 1..1000", 0},
    {"max-connections", "dashd", K_INT, F(max_connections), 1, 1000000, NULL, NULL,
     "an integer in 1..1000000", 0},
    {"max-reply-bytes", "dashd", K_SIZE, F(reply_bytes), 0, 0, NULL, NULL,
     "bytes, with an optional K, M or G", 1},
    {"op-memory", "dashd", K_SIZE, F(op_memory), 0, 0, NULL, NULL,
     "bytes, with an optional K, M or G (0: half the memory dashd may use)", 0},
    {"metrics", "dashd", K_ADDR, F(metrics), 0, 0, NULL, NULL,
     "ADDR:PORT (127.0.0.1:9464, [::1]:9464; port 0: any free one)", 0},
    {"limit-connections", "limits", K_INT, F(limits.connections), 0, UINT32_MAX, NULL, NULL,
     "an integer (0: no limit)", 1},
    {"limit-sessions", "limits", K_INT, F(limits.sessions), 0, UINT32_MAX, NULL, NULL,
     "an integer (0: no limit)", 1},
    {"limit-buffers", "limits", K_INT, F(limits.buffers), 0, UINT32_MAX, NULL, NULL,
     "an integer (0: no limit)", 1},
    {"limit-registered-bytes", "limits", K_SIZE, F(limits.registered_bytes), 0, 0, NULL, NULL,
     "bytes, with an optional K, M or G (0: no limit)", 1},
    {"limit-in-flight", "limits", K_INT, F(limits.in_flight), 0, UINT32_MAX, NULL, NULL,
     "an integer (0: no limit)", 1},
    {"limit-request-bytes", "limits", K_SIZE, F(limits.request_bytes), 0, 0, NULL, NULL,
     "bytes, with an optional K, M or G (0: no limit)", 1},
};
#define N_OPTS (sizeof opts / sizeof opts[0])

void config_defaults(struct config *c)
{
    memset(c, 0, sizeof *c);
    c->backend = CONFIG_BACKEND_AUTO;
    c->queue = DEFAULT_QUEUE;
    c->session_timeout_s = DEFAULT_SESSION_TIMEOUT_S;
    c->level = LOG_INFO;
    c->audit_level = AUDIT_OUTPUTS;
    c->audit_sync = AUDIT_SYNC_BATCH;
    c->audit_max_bytes = DEFAULT_AUDIT_MAX_BYTES;
    c->audit_keep = DEFAULT_AUDIT_KEEP;
    c->kernels = BACKEND_KERNELS_AUTO;
    c->reply_bytes = DEFAULT_REPLY_BYTES;
    c->limits.sessions = DEFAULT_LIMIT_SESSIONS;
    c->limits.connections = DEFAULT_LIMIT_CONNECTIONS;
    c->limits.buffers = DEFAULT_LIMIT_BUFFERS;
}

__attribute__((format(printf, 3, 4))) static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* "4096", "64K", "256M", "1G" (powers of 1024): 0 and *ret, or -1. */
static int parse_size(const char *s, uint64_t *ret)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -1;
    int shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift)
        end++;
    if (*end || v > (UINT64_MAX >> shift))
        return -1;
    *ret = (uint64_t)v << shift;
    return 0;
}

/* Option names compare with '_' read as '-'. */
static int name_is(const char *want, const char *name)
{
    for (; *want && *name; want++, name++)
        if (*want != (*name == '_' ? '-' : *name))
            return 0;
    return !*want && !*name;
}

static const struct opt *find_opt(const char *name)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if (name_is(opts[i].name, name))
            return &opts[i];
    return NULL;
}

static int set_opt(struct config *c, const struct opt *o, const char *v, char *err, size_t errlen)
{
    unsigned char *field = (unsigned char *)c + o->off;
    char *end;
    switch (o->kind) {
    case K_STR:
    case K_ADDR: {
        struct sockaddr_storage sa;
        size_t salen;
        if (!*v || strlen(v) >= o->size ||
            (o->kind == K_ADDR && metrics_http_parse_addr(v, &sa, &salen) != 0))
            goto bad;
        memcpy(field, v, strlen(v) + 1);
        break;
    }
    case K_INT: {
        errno = 0;
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || x < o->lo || x > o->hi)
            goto bad;
        uint32_t u = (uint32_t)x; /* every K_INT field is 32 bits; ranges are >= 0 */
        memcpy(field, &u, sizeof u);
        break;
    }
    case K_SIZE: {
        uint64_t x;
        if (parse_size(v, &x))
            goto bad;
        memcpy(field, &x, sizeof x);
        break;
    }
    case K_SECONDS: {
        errno = 0;
        double t = strtod(v, &end);
        /* The timeout travels as uint32 milliseconds in HelloReply. */
        if (errno || end == v || *end || !isfinite(t) || t < 0.001 || t > 4294967.0)
            goto bad;
        memcpy(field, &t, sizeof t);
        break;
    }
    case K_ENUM: {
        size_t i = 0;
        while (o->names[i] && strcmp(o->names[i], v) != 0)
            i++;
        if (!o->names[i])
            goto bad;
        memcpy(field, &o->values[i], sizeof(int));
        break;
    }
    }
    if (field == (unsigned char *)&c->audit_level)
        c->audit_level_set = 1;
    return 0;
bad:
    return fail(err, errlen, "--%s needs %s, not '%s'", o->name, o->want, v);
}

int config_set(struct config *c, const char *name, const char *value, char *err, size_t errlen)
{
    const struct opt *o = find_opt(name);
    if (!o)
        return fail(err, errlen, "unknown option '%s'", name);
    return set_opt(c, o, value, err, errlen);
}

struct load_ctx {
    struct config *c;
    const char *path;
    char *err;
    size_t errlen;
    int failed;
};

/* inih's handler: Debian's inih passes no line number; ini_parse_file() returns the line
 * of the first key refused here, and the message is completed with it. */
static int on_ini(void *user, const char *section, const char *key, const char *value)
{
    struct load_ctx *x = user;
    char why[512];
    if (x->failed)
        return 0;
    const struct opt *o = NULL;
    if (strcmp(section, "limits") == 0) {
        char full[96];
        snprintf(full, sizeof full, "limit-%s", key);
        o = find_opt(full);
    } else if (strcmp(section, "dashd") == 0) {
        o = find_opt(key);
        if (o && strcmp(o->section, "dashd") != 0)
            o = NULL; /* limit-* keys belong in [limits] */
    } else {
        x->failed = 1;
        fail(x->err, x->errlen, "unknown section [%s] (dashd's sections are [dashd] and "
             "[limits])", section);
        return 0;
    }
    if (!o) {
        x->failed = 1;
        fail(x->err, x->errlen, "unknown key '%s' in [%s]", key, section);
        return 0;
    }
    if (set_opt(x->c, o, value, why, sizeof why) != 0) {
        x->failed = 1;
        fail(x->err, x->errlen, "%s = %s: %s", key, value, why);
        return 0;
    }
    return 1;
}

int config_load(struct config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return fail(err, errlen, "cannot read the config file %s: %s", path, strerror(errno));
    struct load_ctx x = {.c = c, .path = path, .err = err, .errlen = errlen};
    int rc = ini_parse_file(f, on_ini, &x);
    fclose(f);
    if (x.failed) {
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        return fail(err, errlen, "%s:%d: %s", path, rc, why);
    }
    if (rc != 0)
        return fail(err, errlen, "%s:%d: not a line of an INI file (key = value, [section], "
                    "# or ; comment)", path, rc);
    return 0;
}

int config_check(struct config *c, char *err, size_t errlen)
{
    if (c->kernels != BACKEND_KERNELS_AUTO && c->backend == CONFIG_BACKEND_CPU)
        return fail(err, errlen, "--kernels chooses the cuda backend's kernels; --backend cpu "
                    "runs the CPU engine");
    if (c->audit_level_set && c->audit_level != AUDIT_OFF && !c->audit_path[0])
        return fail(err, errlen, "--audit-level %s needs --audit PATH",
                    audit_level_name((enum audit_level)c->audit_level));
    if (!c->endpoint[0] && wire_default_endpoint(c->endpoint, sizeof c->endpoint) != 0)
        return fail(err, errlen, "the default endpoint is too long; pass --endpoint");
    const char *path = wire_ipc_path(c->endpoint);
    if (path && (!*path || strlen(path) > 107))
        return fail(err, errlen, "the ipc path of %s must be 1..107 characters", c->endpoint);
    return 0;
}

size_t config_diff(const struct config *a, const struct config *b, struct config_change *ret,
                   size_t max)
{
    size_t n = 0;
    for (size_t i = 0; i < N_OPTS && n < max; i++) {
        const struct opt *o = &opts[i];
        const unsigned char *x = (const unsigned char *)a + o->off;
        const unsigned char *y = (const unsigned char *)b + o->off;
        int differ = o->kind == K_STR || o->kind == K_ADDR
                         ? strcmp((const char *)x, (const char *)y) != 0
                                      : memcmp(x, y, o->size) != 0;
        if (differ)
            ret[n++] = (struct config_change){.name = o->name, .live = o->live};
    }
    return n;
}

void config_format(const struct config *c, const char *name, char *buf, size_t len)
{
    const struct opt *o = find_opt(name);
    if (!o) {
        snprintf(buf, len, "?");
        return;
    }
    const unsigned char *field = (const unsigned char *)c + o->off;
    uint32_t u;
    uint64_t x;
    double t;
    int e;
    switch (o->kind) {
    case K_STR:
    case K_ADDR:
        snprintf(buf, len, "'%s'", (const char *)field);
        break;
    case K_INT:
        memcpy(&u, field, sizeof u);
        snprintf(buf, len, "%u", u);
        break;
    case K_SIZE:
        memcpy(&x, field, sizeof x);
        snprintf(buf, len, "%llu", (unsigned long long)x);
        break;
    case K_SECONDS:
        memcpy(&t, field, sizeof t);
        snprintf(buf, len, "%g", t);
        break;
    case K_ENUM:
        memcpy(&e, field, sizeof e);
        snprintf(buf, len, "?");
        for (size_t i = 0; o->names[i]; i++)
            if (o->values[i] == e)
                snprintf(buf, len, "%s", o->names[i]);
        break;
    }
}

const void *config_longopts(void)
{
    static struct option longopts[N_OPTS + 4];
    if (!longopts[0].name) {
        for (size_t i = 0; i < N_OPTS; i++)
            longopts[i] = (struct option){opts[i].name, required_argument, NULL, (int)i};
        longopts[N_OPTS] = (struct option){"config", required_argument, NULL, CONFIG_OPT_CONFIG};
        longopts[N_OPTS + 1] = (struct option){"help", no_argument, NULL, CONFIG_OPT_HELP};
        longopts[N_OPTS + 2] = (struct option){"version", no_argument, NULL, CONFIG_OPT_VERSION};
    }
    return longopts;
}

const char *config_option_name(int val)
{
    return val >= 0 && (size_t)val < N_OPTS ? opts[val].name : NULL;
}
