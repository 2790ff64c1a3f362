// SPDX-License-Identifier: BSD-3-Clause
/*
 * churn.h - clients that quit mid-request while others ping: the load under which a lost
 * wake-up would leave a request unanswered (issue 14, item 1). Used by the server suite
 * (seconds, thousands of quitters) and by bench/bench_churn.c (minutes).
 *
 * A quitter connects (a libzmq DEALER), says Hello, registers one shared-memory buffer,
 * sends a small forward and a burst of pings, and closes without reading a reply - so the
 * daemon answers into connections that are gone, while its op may still be queued. A pinger
 * keeps one connection and sends ping after ping, each waited for: any ping not answered
 * within bound_ms is late, and one not answered at all within 30 s is lost.
 */
#ifndef DASH_TEST_CHURN_H
#define DASH_TEST_CHURN_H

#include <stdint.h>

struct churn_opts {
    const char *endpoint;
    double seconds;      /* stop after this long... */
    uint64_t quitters;   /* ...or this many quitters, whichever comes first (0: no limit) */
    int quitter_threads;
    int pinger_threads;
    int bound_ms;
};

struct churn_result {
    uint64_t quitters;     /* quit mid-request */
    uint64_t quitter_errors; /* could not connect, say Hello or register */
    uint64_t pings;        /* answered */
    uint64_t late;         /* answered after bound_ms */
    uint64_t lost;         /* never answered */
    double seconds;
    double p50_us, p99_us, max_us; /* ping round trips */
};

/* Run it. 0, or -1 if it could not start (no shared memory, no daemon). */
int churn_run(const struct churn_opts *o, struct churn_result *ret);

#endif
