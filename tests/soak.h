// SPDX-License-Identifier: BSD-3-Clause
/*
 * soak.h - many clients, many mixed requests, against one dashd: the daemon must end with
 * no crash, every good answer right to the bit, every bad request refused with its code,
 * and no more file descriptors, memory mappings, shared-memory objects or resident memory
 * than it settled at. Used by the soak suite (a short run in `make test`) and by
 * bench/bench_soak.c (8 clients x 10,000 requests).
 *
 * Each client is a process with its own libdash client. It keeps a few small problems
 * (bf16, causal or full, GQA) with inputs drawn from its seed and the outputs the CPU
 * engine computes for them in its own process, and then sends requests drawn at random:
 *
 *   forward / backward  outputs poisoned first, then compared with the engine's bytes
 *   ping, stats         answered
 *   bad request         a head dim the engine refuses (DASH_EHEADDIM), a tensor reaching
 *                       past its buffer (DASH_EBOUNDS), shapes that disagree (DASH_ESHAPE)
 *   buffer churn        a second buffer registered and freed
 *   vanish              a forked process connects, registers, submits a forward and exits
 *                       without reading (its shared memory is dashd's to unlink)
 *   reconnect           submit a forward, close at once, connect again, set up again
 *
 * The daemon's fds, maps and RSS are sampled before the clients start, once they have done
 * a tenth of their requests (the warm baseline), and after all have finished and their
 * sessions are gone; the /dev/shm objects libdash made for the clients and the processes
 * that vanished are counted at the end (all must be gone).
 */
#ifndef DASH_TEST_SOAK_H
#define DASH_TEST_SOAK_H

#include <stdint.h>
#include <sys/types.h>

struct soak_opts {
    const char *endpoint; /* a running dashd (CPU backend) */
    pid_t daemon_pid;     /* whose resources are sampled */
    int clients;
    int requests; /* per client */
    uint64_t seed;
};

enum soak_kind { SOAK_FORWARD, SOAK_BACKWARD, SOAK_PING, SOAK_STATS, SOAK_BAD, SOAK_BUFFER,
                 SOAK_VANISH, SOAK_RECONNECT, SOAK_KINDS };

struct soak_usage {
    long fds, maps, shm_objects, rss_kib;
};

struct soak_result {
    uint64_t sent[SOAK_KINDS];
    uint64_t good;        /* answered as expected (bits or code) */
    uint64_t wrong_bits;  /* an op answered 0 whose outputs differ from the engine's */
    uint64_t wrong_code;  /* an unexpected code (printed to stderr) */
    int clients_failed;   /* processes that did not finish cleanly */
    struct soak_usage idle;   /* before the clients start */
    struct soak_usage before; /* when they have done a tenth of their requests */
    struct soak_usage after;  /* when they are gone, and their sessions and objects too */
    double seconds;
};

/* Run it (forks the clients). 0, or -1 if it could not start. */
int soak_run(const struct soak_opts *o, struct soak_result *ret);

/* The daemon's usage now (fields -1 where unreadable). */
void soak_usage_of(pid_t pid, struct soak_usage *ret);

/* Names of the kinds, for reports. */
const char *soak_kind_name(enum soak_kind k);

#endif
