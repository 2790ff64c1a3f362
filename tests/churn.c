// SPDX-License-Identifier: BSD-3-Clause
/*
 * churn.c - see churn.h.
 */
#include "churn.h"

#include "harness.h"

#include "proto/wire.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define LOST_AFTER_MS 30000
#define HIST_STEP_US 10
#define HIST_BUCKETS 100001 /* 10 us steps up to 1 s, then one bucket for the rest */
#define PINGS_PER_QUITTER 8

/* The forward a quitter sends: (1, 64, 1, 32) float32 q, k, v, out and its lse. */
enum { F_S = 64, F_D = 32, F_T = F_S * F_D * 4 };
enum { OFF_Q = 0, OFF_K = F_T, OFF_V = 2 * F_T, OFF_OUT = 3 * F_T, OFF_LSE = 4 * F_T,
       BUF_SIZE = 4 * F_T + F_S * 4 };

struct churn {
    const struct churn_opts *o;
    char shm_name[64];
    double t_end;
    atomic_int stop;
    atomic_uint_fast64_t quitters, quitter_errors;
};

struct pinger {
    struct churn *ch;
    pthread_t th;
    uint64_t pings, late, lost;
    uint64_t max_us;
    uint64_t *hist;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int over(struct churn *ch)
{
    return atomic_load(&ch->stop) || now_s() >= ch->t_end;
}

static int send_req(struct raw_client *r, Dash__Request *req)
{
    void *buf;
    size_t len;
    if (wire_encode(&req->base, &buf, &len) != 0)
        return -1;
    int rc = raw_send(r, buf, len);
    free(buf);
    return rc;
}

/* Hello, register the shared buffer: its id, or 0. */
static uint64_t quitter_setup(struct churn *ch, struct raw_client *r)
{
    if (raw_hello(r, WIRE_PROTOCOL_VERSION) != 0)
        return 0;
    Dash__RegisterBuffer rb = DASH__REGISTER_BUFFER__INIT;
    rb.size = BUF_SIZE;
    rb.shm_name = ch->shm_name;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 2;
    req.body_case = DASH__REQUEST__BODY_REGISTER_BUFFER;
    req.register_buffer = &rb;
    Dash__Reply *rep = raw_call(r, &req, 10000);
    uint64_t id = rep && rep->code == 0 && rep->has_buffer_id ? rep->buffer_id : 0;
    wire_free_reply(rep);
    return id;
}

static void send_forward_and_pings(struct raw_client *r, uint64_t buf_id)
{
    int64_t shape4[4] = {1, F_S, 1, F_D}, shape3[3] = {1, 1, F_S};
    Dash__TensorRef t[5];
    const uint64_t offs[5] = {OFF_Q, OFF_K, OFF_V, OFF_OUT, OFF_LSE};
    for (int i = 0; i < 5; i++) {
        dash__tensor_ref__init(&t[i]);
        t[i].buffer_id = buf_id;
        t[i].offset = offs[i];
        t[i].n_shape = i == 4 ? 3 : 4;
        t[i].shape = i == 4 ? shape3 : shape4;
    }
    Dash__AttnParams p = DASH__ATTN_PARAMS__INIT;
    p.dtype = DASH__DTYPE__F32;
    p.mask = DASH__MASK__CAUSAL;
    Dash__Forward f = DASH__FORWARD__INIT;
    f.params = &p;
    f.q = &t[0], f.k = &t[1], f.v = &t[2], f.out = &t[3], f.lse = &t[4];
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = 3;
    req.body_case = DASH__REQUEST__BODY_FORWARD;
    req.forward = &f;
    (void)send_req(r, &req);
    Dash__Ping ping = DASH__PING__INIT;
    Dash__Request pr = DASH__REQUEST__INIT;
    pr.body_case = DASH__REQUEST__BODY_PING;
    pr.ping = &ping;
    for (int i = 0; i < PINGS_PER_QUITTER; i++) {
        pr.id = 10 + (uint64_t)i;
        (void)send_req(r, &pr);
    }
}

static void *quitter_main(void *arg)
{
    struct churn *ch = arg;
    unsigned seed = (unsigned)(uintptr_t)&seed ^ (unsigned)getpid();
    while (!over(ch)) {
        uint64_t n = atomic_fetch_add(&ch->quitters, 1);
        if (ch->o->quitters && n >= ch->o->quitters) {
            atomic_fetch_sub(&ch->quitters, 1);
            atomic_store(&ch->stop, 1);
            break;
        }
        struct raw_client *r = raw_connect(ch->o->endpoint);
        uint64_t id = r ? quitter_setup(ch, r) : 0;
        if (!id) {
            atomic_fetch_add(&ch->quitter_errors, 1);
            raw_close(r);
            continue;
        }
        send_forward_and_pings(r, id);
        /* Quit at once, or after a moment, with everything unanswered: linger 0. */
        int pause_us = (int)(rand_r(&seed) % 4) * 100;
        if (pause_us)
            usleep((useconds_t)pause_us);
        raw_close(r);
    }
    return NULL;
}

/* One ping, waited for: its round trip in us, or -1 when it was lost. */
static int64_t ping_once(struct pinger *p, struct raw_client *r, uint64_t id)
{
    Dash__Ping ping = DASH__PING__INIT;
    Dash__Request req = DASH__REQUEST__INIT;
    req.id = id;
    req.body_case = DASH__REQUEST__BODY_PING;
    req.ping = &ping;
    double t0 = now_s();
    if (send_req(r, &req) != 0)
        return -1;
    for (;;) {
        int left_ms = LOST_AFTER_MS - (int)((now_s() - t0) * 1000.0);
        Dash__Reply *rep = left_ms > 0 ? raw_recv(r, left_ms) : NULL;
        if (!rep)
            return -1;
        int mine = rep->id == id;
        wire_free_reply(rep);
        if (mine)
            break;
    }
    int64_t us = (int64_t)((now_s() - t0) * 1e6);
    if (us > (int64_t)p->ch->o->bound_ms * 1000)
        p->late++;
    return us;
}

static void *pinger_main(void *arg)
{
    struct pinger *p = arg;
    struct raw_client *r = raw_connect(p->ch->o->endpoint);
    uint64_t id = 1000;
    while (r && !over(p->ch)) {
        int64_t us = ping_once(p, r, ++id);
        if (us < 0) {
            p->lost++;
            raw_close(r); /* start over on a fresh connection */
            r = raw_connect(p->ch->o->endpoint);
            continue;
        }
        p->pings++;
        if ((uint64_t)us > p->max_us)
            p->max_us = (uint64_t)us;
        uint64_t b = (uint64_t)us / HIST_STEP_US;
        p->hist[b < HIST_BUCKETS - 1 ? b : HIST_BUCKETS - 1]++;
    }
    if (!r)
        p->lost++;
    raw_close(r);
    return NULL;
}

static double percentile(const uint64_t *hist, uint64_t total, double pct)
{
    uint64_t rank = (uint64_t)(pct / 100.0 * (double)total + 0.999999), seen = 0;
    for (size_t b = 0; b < HIST_BUCKETS; b++)
        if ((seen += hist[b]) >= rank && rank)
            return (double)(b * HIST_STEP_US + HIST_STEP_US / 2);
    return 0;
}

int churn_run(const struct churn_opts *o, struct churn_result *ret)
{
    memset(ret, 0, sizeof *ret);
    struct churn ch = {.o = o};
    snprintf(ch.shm_name, sizeof ch.shm_name, "/dashd-churn-%d", (int)getpid());
    int fd = shm_open(ch.shm_name, O_CREAT | O_RDWR | O_TRUNC, 0600);
    if (fd < 0)
        return -1;
    int ok = ftruncate(fd, BUF_SIZE) == 0;
    float *mem = ok ? mmap(NULL, BUF_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (mem == MAP_FAILED) {
        shm_unlink(ch.shm_name);
        return -1;
    }
    for (size_t i = 0; i < OFF_OUT / 4; i++)
        mem[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    munmap(mem, BUF_SIZE);
    /* the first connection makes the process's ZeroMQ context, before any thread does */
    if (raw_ping_endpoint(o->endpoint, 5000) != 0) {
        shm_unlink(ch.shm_name);
        return -1;
    }

    double t0 = now_s();
    ch.t_end = t0 + o->seconds;
    int nq = o->quitter_threads, np = o->pinger_threads;
    pthread_t *qt = calloc((size_t)nq, sizeof *qt);
    struct pinger *pg = calloc((size_t)np, sizeof *pg);
    uint64_t *hist = calloc(HIST_BUCKETS, sizeof *hist);
    int started_q = 0, started_p = 0;
    for (int i = 0; pg && i < np; i++) {
        pg[i].ch = &ch;
        pg[i].hist = calloc(HIST_BUCKETS, sizeof *pg[i].hist);
        if (pg[i].hist && pthread_create(&pg[i].th, NULL, pinger_main, &pg[i]) == 0)
            started_p++;
        else
            break;
    }
    for (int i = 0; qt && i < nq; i++, started_q++)
        if (pthread_create(&qt[i], NULL, quitter_main, &ch) != 0)
            break;
    for (int i = 0; i < started_q; i++)
        pthread_join(qt[i], NULL);
    atomic_store(&ch.stop, 1); /* the quitters are done: so are the pingers */
    for (int i = 0; i < started_p; i++)
        pthread_join(pg[i].th, NULL);
    ret->seconds = now_s() - t0;
    ret->quitters = atomic_load(&ch.quitters) - atomic_load(&ch.quitter_errors);
    ret->quitter_errors = atomic_load(&ch.quitter_errors);
    for (int i = 0; hist && i < started_p; i++) {
        ret->pings += pg[i].pings;
        ret->late += pg[i].late;
        ret->lost += pg[i].lost;
        if ((double)pg[i].max_us > ret->max_us)
            ret->max_us = (double)pg[i].max_us;
        for (size_t b = 0; b < HIST_BUCKETS; b++)
            hist[b] += pg[i].hist[b];
    }
    if (hist) {
        ret->p50_us = percentile(hist, ret->pings, 50);
        ret->p99_us = percentile(hist, ret->pings, 99);
    }
    for (int i = 0; pg && i < np; i++)
        free(pg[i].hist);
    int rc = started_q == nq && started_p == np && hist ? 0 : -1;
    free(hist);
    free(pg);
    free(qt);
    shm_unlink(ch.shm_name);
    return rc;
}
