// SPDX-License-Identifier: BSD-3-Clause
/*
 * session.c - see session.h.
 *
 * Sessions sit in a hash table keyed by routing id (FNV-1a; ZeroMQ's generated ids are 5
 * bytes) and in a doubly linked list for iteration and the idle sweep.
 */
#include "session.h"

#include "log.h"
#include "proc.h"
#include "proto/errors.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>

#define SESS_BUCKETS 256

/* The libdash-named objects of a session whose connection ended while its process had not
 * yet gone (sess_drop_disconnected). */
struct sess_reclaim {
    uint64_t session_id;
    uint32_t pid;     /* as Hello said: the names' */
    int64_t peer_pid; /* the connection's */
    uint64_t until_ns;
    char **names;
    size_t n;
    struct sess_reclaim *next;
};

struct sess_table {
    struct session *bucket[SESS_BUCKETS];
    struct sess_reclaim *reclaim;
    struct session *head;
    uint32_t count;
    uint64_t next_session_id;
    uint64_t next_buffer_id;
};

static size_t hash_rid(const void *rid, size_t len)
{
    const unsigned char *p = rid;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return (size_t)(h % SESS_BUCKETS);
}

struct sess_table *sess_table_new(void)
{
    struct sess_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->next_session_id = 1;
    t->next_buffer_id = 1;
    return t;
}

void sess_table_free(struct sess_table *t)
{
    if (!t)
        return;
    while (t->head)
        sess_drop(t, t->head);
    sess_reclaim_poll(t, UINT64_MAX); /* what has gone by now, and forget the rest */
    free(t);
}

struct session *sess_find(struct sess_table *t, const void *rid, size_t rid_len)
{
    for (struct session *s = t->bucket[hash_rid(rid, rid_len)]; s; s = s->hash_next)
        if (s->rid_len == rid_len && memcmp(s->rid, rid, rid_len) == 0)
            return s;
    return NULL;
}

int sess_create(struct sess_table *t, const void *rid, size_t rid_len, struct session **ret_sess)
{
    if (rid_len > SESS_RID_MAX)
        return DASH_EINVAL;
    struct session *s = calloc(1, sizeof *s);
    if (!s)
        return DASH_ENOMEM;
    s->id = t->next_session_id++;
    memcpy(s->rid, rid, rid_len);
    s->rid_len = rid_len;
    s->peer_uid = -1;
    s->peer_pid = -1;
    size_t b = hash_rid(rid, rid_len);
    s->hash_next = t->bucket[b];
    t->bucket[b] = s;
    s->next = t->head;
    if (t->head)
        t->head->prev = s;
    t->head = s;
    t->count++;
    *ret_sess = s;
    return 0;
}

/* The shm objects s registered under libdash's names ("/dash-<pid>-..."), as a malloc'd
 * array of strdup'd names; 0 if none (or no memory: then nothing is reclaimed). */
static size_t libdash_names(const struct session *s, char ***ret_names)
{
    *ret_names = NULL;
    if (s->pid == 0 || s->n_bufs == 0)
        return 0;
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "/dash-%u-", s->pid);
    char **names = calloc(s->n_bufs, sizeof *names);
    if (!names)
        return 0;
    size_t k = 0;
    for (size_t i = 0; i < s->n_bufs; i++) {
        const char *name = shmbuf_name(s->bufs[i].buf);
        if (name && strncmp(name, prefix, (size_t)n) == 0 && (names[k] = strdup(name)))
            k++;
    }
    if (!k) {
        free(names);
        return 0;
    }
    *ret_names = names;
    return k;
}

static void unlink_names(uint64_t session_id, uint32_t pid, char **names, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (shm_unlink(names[i]) == 0)
            log_info("session %llu: client pid %u is gone; unlinked its shared memory %s",
                     (unsigned long long)session_id, pid, names[i]);
        else if (errno != ENOENT)
            log_warn("session %llu: cannot unlink %s of gone client pid %u: %s",
                     (unsigned long long)session_id, names[i], pid, strerror(errno));
    }
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static void unlink_table(struct sess_table *t, struct session *s)
{
    struct session **pp = &t->bucket[hash_rid(s->rid, s->rid_len)];
    while (*pp != s)
        pp = &(*pp)->hash_next;
    *pp = s->hash_next;
    if (s->prev)
        s->prev->next = s->next;
    else
        t->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    t->count--;
    if (s->client) {
        limits_session_end(s->client, (uint32_t)s->n_bufs, s->bytes_registered);
        limits_unref(s->client);
    }
    evring_unref(s->events);
    for (size_t i = 0; i < s->n_bufs; i++)
        shmbuf_unref(s->bufs[i].buf);
    free(s->bufs);
    free(s);
}

/* Drop s, unlinking its libdash objects if `gone` (asked once by the caller: an exiting
 * process can read as gone and then, a moment later, not yet). */
static void drop(struct sess_table *t, struct session *s, int gone)
{
    if (gone) {
        char **names;
        size_t n = libdash_names(s, &names);
        unlink_names(s->id, s->pid, names, n);
        free_names(names, n);
    }
    unlink_table(t, s);
}

void sess_drop(struct sess_table *t, struct session *s)
{
    drop(t, s, proc_gone(s->peer_pid));
}

void sess_drop_disconnected(struct sess_table *t, struct session *s, uint64_t now_ns)
{
    int gone = proc_gone(s->peer_pid);
    if (s->peer_pid <= 0 || gone) {
        drop(t, s, gone);
        return;
    }
    struct sess_reclaim *r = calloc(1, sizeof *r);
    if (r && (r->n = libdash_names(s, &r->names)) > 0) {
        r->session_id = s->id;
        r->pid = s->pid;
        r->peer_pid = s->peer_pid;
        r->until_ns = now_ns + (uint64_t)SESS_RECLAIM_WAIT_MS * 1000000u;
        r->next = t->reclaim;
        t->reclaim = r;
    } else {
        free(r);
    }
    unlink_table(t, s);
}

void sess_reclaim_poll(struct sess_table *t, uint64_t now_ns)
{
    for (struct sess_reclaim **pp = &t->reclaim; *pp;) {
        struct sess_reclaim *r = *pp;
        int gone = proc_gone(r->peer_pid);
        if (!gone && now_ns < r->until_ns) {
            pp = &r->next;
            continue;
        }
        if (gone)
            unlink_names(r->session_id, r->pid, r->names, r->n);
        *pp = r->next;
        free_names(r->names, r->n);
        free(r);
    }
}

struct session *sess_first(struct sess_table *t)
{
    return t->head;
}

struct session *sess_next(struct session *s)
{
    return s->next;
}

uint32_t sess_count(const struct sess_table *t)
{
    return t->count;
}

int sess_buf_add(struct sess_table *t, struct session *s, struct shmbuf *b, size_t max,
                 uint64_t *ret_id)
{
    if (s->n_bufs >= max)
        return DASH_ENOSPC;
    if (s->n_bufs == s->cap_bufs) {
        size_t cap = s->cap_bufs ? s->cap_bufs * 2 : 8;
        struct sess_buf *nb = realloc(s->bufs, cap * sizeof *nb);
        if (!nb)
            return DASH_ENOMEM;
        s->bufs = nb;
        s->cap_bufs = cap;
    }
    uint64_t id = t->next_buffer_id++;
    s->bufs[s->n_bufs++] = (struct sess_buf){id, b};
    s->bytes_registered += shmbuf_size(b);
    *ret_id = id;
    return 0;
}

static struct sess_buf *find(const struct session *s, uint64_t id)
{
    size_t lo = 0, hi = s->n_bufs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->bufs[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->n_bufs && s->bufs[lo].id == id ? &s->bufs[lo] : NULL;
}

struct shmbuf *sess_buf_find(const struct session *s, uint64_t id)
{
    struct sess_buf *e = find(s, id);
    return e ? e->buf : NULL;
}

int sess_buf_remove(struct session *s, uint64_t id)
{
    struct sess_buf *e = find(s, id);
    if (!e)
        return DASH_ENOBUF;
    s->bytes_registered -= shmbuf_size(e->buf);
    if (s->client)
        limits_buffer_end(s->client, shmbuf_size(e->buf));
    shmbuf_unref(e->buf);
    size_t i = (size_t)(e - s->bufs);
    memmove(&s->bufs[i], &s->bufs[i + 1], (s->n_bufs - i - 1) * sizeof *e);
    s->n_bufs--;
    return 0;
}

void sess_latency_add(struct session *s, uint64_t us)
{
    s->lat_us[s->lat_next] = us;
    s->lat_next = (s->lat_next + 1) % SESS_LATENCIES;
    if (s->lat_count < SESS_LATENCIES)
        s->lat_count++;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

uint64_t sess_latency_pct(const struct session *s, double p)
{
    if (s->lat_count == 0)
        return 0;
    uint64_t v[SESS_LATENCIES];
    memcpy(v, s->lat_us, s->lat_count * sizeof v[0]);
    qsort(v, s->lat_count, sizeof v[0], cmp_u64);
    /* Nearest rank: the smallest value with at least p% of the samples at or below it. */
    size_t rank = (size_t)ceil(p / 100.0 * s->lat_count);
    if (rank < 1)
        rank = 1;
    if (rank > s->lat_count)
        rank = s->lat_count;
    return v[rank - 1];
}
