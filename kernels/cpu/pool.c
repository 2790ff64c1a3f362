// SPDX-License-Identifier: BSD-3-Clause
/*
 * pool.c - worker threads parked on a condition variable. Each region has a generation
 * number; a worker runs the region whose generation it has not seen yet, then counts
 * itself done. The caller runs worker 0's share itself and waits for the rest.
 */
#include "kernels/cpu/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

struct pool {
    int32_t threads;
    pthread_t *tids;
    pthread_mutex_t mu;
    pthread_cond_t start; /* a new generation was posted, or stop */
    pthread_cond_t done;  /* `running` dropped to zero */
    uint64_t generation;
    int32_t running; /* workers (other than the caller) still in the current region */
    int stop;
    pool_fn fn;
    void *ctx;
};

struct worker_arg {
    struct pool *p;
    int32_t id;
};

static void *worker_main(void *arg)
{
    struct worker_arg wa = *(struct worker_arg *)arg;
    struct pool *p = wa.p;
    free(arg);
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->generation == seen)
            pthread_cond_wait(&p->start, &p->mu);
        if (p->stop)
            break;
        seen = p->generation;
        pool_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, wa.id, p->threads);
        pthread_mutex_lock(&p->mu);
        if (--p->running == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

struct pool *pool_new(int32_t threads)
{
    if (threads < 1 || threads > POOL_THREADS_MAX)
        return NULL;
    struct pool *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->threads = threads;
    p->tids = calloc((size_t)threads, sizeof(pthread_t));
    if (!p->tids)
        goto fail_tids;
    if (pthread_mutex_init(&p->mu, NULL))
        goto fail_mu;
    if (pthread_cond_init(&p->start, NULL))
        goto fail_start;
    if (pthread_cond_init(&p->done, NULL))
        goto fail_done;
    for (int32_t i = 1; i < threads; i++) {
        struct worker_arg *wa = malloc(sizeof(*wa));
        if (!wa) {
            p->threads = i;
            pool_free(p);
            return NULL;
        }
        wa->p = p;
        wa->id = i;
        if (pthread_create(&p->tids[i], NULL, worker_main, wa)) {
            free(wa);
            p->threads = i; /* join only those that started */
            pool_free(p);
            return NULL;
        }
    }
    return p;

fail_done:
    pthread_cond_destroy(&p->start);
fail_start:
    pthread_mutex_destroy(&p->mu);
fail_mu:
    free(p->tids);
fail_tids:
    free(p);
    return NULL;
}

void pool_free(struct pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);
    for (int32_t i = 1; i < p->threads; i++)
        pthread_join(p->tids[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->start);
    pthread_mutex_destroy(&p->mu);
    free(p->tids);
    free(p);
}

int32_t pool_threads(const struct pool *p)
{
    return p->threads;
}

void pool_run(struct pool *p, pool_fn fn, void *ctx)
{
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->running = p->threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->mu);

    fn(ctx, 0, p->threads);

    pthread_mutex_lock(&p->mu);
    while (p->running > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
