// SPDX-License-Identifier: BSD-3-Clause
/*
 * backend_cuda_int.h - what backend_cuda.c (the backend: mappings, interprocess events,
 * ops, start and end) and backend_cuda_pending.c (the ops queued on the device: the
 * completer, the pool, the semaphores and the rescuer) share: the backend's state, an op
 * in flight, and the functions each calls of the other. Private to the two.
 */
#ifndef DASHD_BACKEND_CUDA_INT_H
#define DASHD_BACKEND_CUDA_INT_H

#include "backend.h"

#include "proto/wire.h"

#include <cuda.h> /* types only (CUresult, CUdeviceptr): nothing here links libcuda */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef CUresult (*mem_range_fn)(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
typedef CUresult (*pointer_attr_fn)(void *data, CUpointer_attribute attr, CUdeviceptr ptr);
typedef CUresult (*wait_value_fn)(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                  unsigned int flags);
typedef CUresult (*write_value_fn)(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                                   unsigned int flags);

struct cuda_map; /* backend_cuda.c's: one opened IPC handle */

/* An op queued on the device, waiting for its completion event. */
struct pending {
    struct pending *next;
    cudaEvent_t ev;   /* recorded behind the op */
    uint64_t *pinned; /* 9 digests, written by the device (audit) */
    uint64_t *dst;    /* where they go before done() (the job's), or NULL */
    int32_t n_digests;
    backend_done_fn done;
    void *ctx;
    uint64_t queued_ns; /* CLOCK_MONOTONIC when the worker queued it */
    /* the op's ready word (NULL: none), its sequence number and the client's process, for
     * the rescuer; rescued: it wrote the word */
    uint64_t *ready;
    uint64_t seq;
    int64_t pid;
    int rescued;
};

struct cuda {
    struct backend base; /* first, so free() can find the whole */
    struct cuattn *ca;
    int device;
    int32_t sms;
    char uuid[WIRE_UUID_MAX];
    mem_range_fn mem_range;
    pointer_attr_fn pointer_attr; /* NULL if the driver lacks it: a second opinion only */
    struct cuda_map *maps; /* loop thread only */
    void *stage;           /* device scratch for ops on shared memory (worker thread only) */
    size_t stage_cap;
    /* The completer: pending ops in queue order, the event pool, under mu. The rescuer
     * (backend_cuda__rescuer_main) looks at the same list. */
    pthread_t completer, rescuer;
    int completer_started, rescuer_started;
    pthread_mutex_t mu;
    pthread_cond_t cv, rescue_cv;
    struct pending *head, *tail;
    /* The op run_device is queueing (NULL: none): its ready word may already be waited on
     * while the worker itself waits for the stream (a scratch that grows, a failure), so
     * the rescuer looks at it too. */
    struct pending *queuing;
    struct pending *free_list; /* spent entries, their events kept for reuse */
    int stop;
    /* Tests (DASHD_TEST_DEVICE_FAULT=N in dashd's environment): the Nth op on device memory
     * is preceded by a kernel that faults (cuattn__fault), as a failing GPU would. Worker
     * thread. 0: never. */
    uint64_t fault_at, device_ops;
    void *dig_scratch; /* device scratch of the digests (worker thread, stream-ordered) */
    size_t dig_cap;
    /* Semaphores (stream memory operations; NULL when the driver or GPU lacks 64-bit
     * ones): waits and writes on cuattn's stream, releases on a stream of their own. */
    wait_value_fn wait_value;
    write_value_fn write_value;
    cudaStream_t release_stream;
};

/* backend_cuda.c: the op's error message's addition ("" or why dashd restarts), marking
 * base.lost if err lost the device. Any thread. */
const char *backend_cuda__note_device_error(struct cuda *c, cudaError_t err, const char *where);

/* backend_cuda_pending.c. */
/* CLOCK_MONOTONIC in ns. */
uint64_t backend_cuda__mono_ns(void);
/* The completer and rescuer threads' bodies (arg: the struct cuda); both run until stop is
 * set and the pending list is empty. */
void *backend_cuda__completer_main(void *arg);
void *backend_cuda__rescuer_main(void *arg);
/* Queue on st: *word = seq (write_value must be set). 0 or DASH_EIO. */
int backend_cuda__signal_write(struct cuda *c, cudaStream_t st, uint64_t *word, uint64_t seq);
/* An entry from the pool, or a new one; NULL when out of memory. */
struct pending *backend_cuda__pending_get(struct cuda *c);
/* Show p to the rescuer as the op being queued (NULL: none). */
void backend_cuda__set_queuing(struct cuda *c, struct pending *p);
/* Give p back to the pool (it is not in the pending list). */
void backend_cuda__pending_put(struct cuda *c, struct pending *p);
/* Free p and its event and pinned digests (cuda_free, for the pool's entries). */
void backend_cuda__pending_destroy(struct pending *p);
/* Worker thread: record p's completion event behind the op and hand p to the completer.
 * 0, or DASH_EIO (the caller still owns p). */
int backend_cuda__track(struct cuda *c, struct pending *p, backend_done_fn done, void *ctx);
/* The backend's signal_release (backend.h): write a done word on release_stream. */
int backend_cuda__signal_release(void *impl, uint64_t *done, uint64_t seq);
/* Set wait_value, write_value and release_stream where the driver and the GPU have 64-bit
 * stream memory operations; else leave them NULL. */
void backend_cuda__find_stream_memops(struct cuda *c);

#endif
