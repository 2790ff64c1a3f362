// SPDX-License-Identifier: BSD-3-Clause
/*
 * backend.h - what the daemon needs from whatever computes attention.
 *
 * A backend is a set of functions over an opaque implementation, in the style of Redis's
 * ae event-loop backends: the CPU one (backend_cpu.c) wraps the kernels/ engine; a CUDA
 * one is added by supplying the same functions. The worker thread calls forward and
 * backward, one at a time; check and the plain fields are read from the loop thread at
 * any time, so check must not touch state that forward/backward use.
 *
 * The tensors a backend receives depend on the kind of buffer (shmbuf.h) they live in:
 *   - shared memory: daemon-owned memory (dense scratch copies of the client's tensors,
 *     see job.c), never client memory, so a backend cannot fault on a buffer the client
 *     shrank;
 *   - CUDA memory: the client's device memory in place (the IPC mapping + alloc_offset +
 *     the tensor's offset, with the request's strides), every element proven to lie
 *     inside the registered size. The mapping pins the memory, so a client that frees
 *     it or dies cannot pull it away while a request runs.
 * A backend serves the kinds in buffer_kinds; dispatch refuses the others at
 * RegisterBuffer, and one op never mixes kinds. The CUDA backend serves shared memory too,
 * by staging the dense host copies through device memory (backend_op.host).
 */
#ifndef DASHD_BACKEND_H
#define DASHD_BACKEND_H

#include "shmbuf.h"
#include "validate.h"

#include "kernels/digest/digest_cuda.h"
#include "kernels/cpu/engine.h"

#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

/* Called once, from a thread of the backend's, when an op that forward/backward returned
 * BACKEND_QUEUED has completed on the device: rc 0 or a DASH_* code (the device failed
 * after the op was queued), run_ns the time it ran (from when it could start). */
typedef void (*backend_done_fn)(void *ctx, int rc, uint64_t run_ns);

/* dashd's exit status when its device was lost (backend.lost): EX_TEMPFAIL of sysexits.h,
 * "try again", which a service manager's Restart=on-failure acts on. */
#define DASHD_EXIT_DEVICE_LOST 75

/* forward/backward: the op is queued on the device; op->done will be called. */
#define BACKEND_QUEUED 1

/* One op's arguments. Forward uses q, k, v (in) and out, lse (out); backward uses
 * q, k, v, out, lse, dout (in) and dq, dk, dv (out). Shapes as in kernels/cpu/engine.h. */
struct backend_op {
    int host; /* 1: the tensors are the daemon's dense host copies (shared memory), 0: in
               * place in the client's device memory */
    const struct attn_problem *prob;
    const struct attn_config *cfg; /* as requested; zeros and SCHED_AUTO mean defaults */
    struct attn_tensor q, k, v, out, dout, dq, dk, dv;
    float *lse; /* (batch, heads_q, seqlen_q), dense */
    /* Device ops only (host == 0) on a backend with events_open; NULL otherwise. */
    void *wait_event;   /* the device waits for it before reading the inputs */
    void *record_event; /* recorded on the device once the outputs are written */
    /* Device ops on a backend with signal_release: semaphore words in client memory
     * (NULL: none). The device waits until *signal_ready >= signal_seq before reading the
     * inputs, and writes signal_seq to *signal_done once the outputs are written. When the
     * op fails after this call began, it writes signal_seq to *signal_fail instead (the
     * client poisons the outputs, then writes the done word itself), or to *signal_done
     * when signal_fail is NULL - so the client's stream never hangs. Either way nothing
     * of the op runs on the device any more once that word is written. */
    uint64_t *signal_ready, *signal_done, *signal_fail;
    uint64_t signal_seq;
    /* Device ops: the client's process (SO_PEERCRED; -1 unknown). A process that dies
     * before its stream writes *signal_ready never writes it: the backend then writes it
     * itself, so the device goes on to everyone else's ops. */
    int64_t peer_pid;
    backend_done_fn done; /* non-NULL: the backend may return BACKEND_QUEUED */
    void *done_ctx;
    /* Host ops: polled while the op runs (a backend that can stop midway does, and then
     * returns DASH_ECANCELED); nonzero: nobody wants the result any more. NULL: never. */
    int (*stop)(void *ctx);
    void *stop_ctx;
    /* Host ops: the most host working memory the backend may take for the op beyond its
     * tensors (the CPU engine's accumulators; dashd's cap on one op's host memory less the
     * tensors' dense copies), or DASH_ENOMEM before it computes anything. 0: no bound. */
    uint64_t work_max;
    /* Audit, device ops only: digest views[i] (kernels/digest/digest.h) into digests[i] - the
     * inputs (is_output 0) before the op runs, the outputs after - so that they are in
     * digests[] when the op has completed. n_digests 0: none. */
    int32_t n_digests;
    struct digest_view digest_views[9];
    int digest_is_output[9];
    uint64_t *digests;
};

/* A RegisterBuffer naming CUDA memory, as the CUDA backend imports it. */
#define BACKEND_IPC_HANDLE_BYTES 64 /* sizeof(cudaIpcMemHandle_t) */

struct backend_cuda_buffer {
    const unsigned char *handle; /* handle_len bytes: a cudaIpcMemHandle_t */
    size_t handle_len;
    const char *device_uuid;     /* NULL if absent */
    uint64_t alloc_offset;       /* where the buffer starts in the allocation */
    uint64_t size;               /* bytes */
};

struct backend {
    const char *name;   /* "cpu", "cuda": what OpResult.backend and HelloReply.backend say */
    char device[256];   /* a readable description for HelloReply.device and the log */
    /* GPU backends: "mps" or "contexts" (StatsReply.gpu_sharing, docs/mps.md); NULL on
     * the CPU. Not in `device`: it changes speed, never bits, and `device` is audited. */
    const char *gpu_sharing;
    /* Device ops whose ready word the backend wrote itself, their client process having
     * died before its stream did (backend_op.peer_pid); dispatch logs what it adds. */
    _Atomic uint64_t rescued;
    /* The device can serve nothing more: a CUDA error that leaves this process's context
     * unusable (an illegal address, a kernel's trap, an uncorrectable memory error...),
     * after which every later op would fail as well until the process exits. A backend
     * thread sets it once (1 while lost_why is written, then 2); the daemon's
     * loop polls it and stops with DASHD_EXIT_DEVICE_LOST, so that its service manager
     * starts a fresh dashd, which clients find by themselves. 0 on the CPU. */
    _Atomic int lost;
    char lost_why[256];
    struct val_limits limits;
    unsigned buffer_kinds; /* bit (1u << enum shmbuf_kind) for each kind computed on */
    void *impl;
    /* Worker threads the backend computes with (Stats.threads). */
    int32_t (*threads)(void *impl);
    /* Anything the backend refuses that validation cannot know (index widths, tile
     * geometry): 0 or a DASH_* code with a reason in msg. Pure, thread-safe. */
    int (*check)(void *impl, const struct val_plan *plan, char *msg, size_t msglen);
    /* Run an op. Returns 0 and the configuration actually used in *ret_cfg (never
     * SCHED_AUTO, no zero fields), or a DASH_* code with a reason in msg; or, for a device
     * op with op->done set, BACKEND_QUEUED (and *ret_cfg): the op is queued behind every
     * op queued before it, and done() says when it has completed. */
    int (*forward)(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                   struct attn_config *ret_cfg);
    int (*backward)(void *impl, const struct backend_op *op, char *msg, size_t msglen,
                    struct attn_config *ret_cfg);
    /* CUDA memory (NULL on a backend without it): open (or share the cached mapping of)
     * the IPC handle and check the buffer lies inside the allocation. Loop thread only.
     * 0 and *ret_buf (kind SHMBUF_CUDA, one reference), or a DASH_* code with a reason in
     * msg: DASH_EINVAL (handle length, no uuid, size 0), DASH_ENOTSUP (another GPU),
     * DASH_EBOUNDS (past the allocation), or the open's failure. */
    int (*cuda_import)(void *impl, const struct backend_cuda_buffer *req, char *msg,
                       size_t msglen, struct shmbuf **ret_buf);
    /* Interprocess events (NULL on a backend without them): open n event handles of
     * BACKEND_IPC_HANDLE_BYTES bytes each, made on the GPU named by device_uuid, into
     * ret_ev[0..n); all or none. Loop thread. 0, or DASH_EINVAL (a handle's length, no
     * uuid, a handle that does not open), DASH_ENOTSUP (another GPU) with a reason. */
    int (*events_open)(void *impl, const unsigned char *const *handles, const size_t *lens,
                       size_t n, const char *device_uuid, void **ret_ev, char *msg,
                       size_t msglen);
    /* Close one opened event; ops queued before that used it are not disturbed. */
    void (*event_close)(void *impl, void *ev);
    /* Semaphores (NULL on a backend without them): write seq to *word (device memory of a
     * client: its done word, or its fail word) from the device, behind nothing of ours -
     * for an op that will not run (refused, cancelled), so that the client's stream
     * waiting for it goes on (after the client's poison, for a fail word). Any thread.
     * 0 or DASH_EIO. */
    int (*signal_release)(void *impl, uint64_t *done, uint64_t seq);
    void (*free)(void *impl);
};

/* The CPU engine with `threads` workers (1..POOL_THREADS_MAX), or NULL. */
struct backend *backend_cpu_new(int32_t threads);

/* The CUDA kernels (kernels/cuda/attn_cuda.h) on device `device` as a dashd backend, or NULL
 * with the reason in why (no driver, no such device, a GPU older than sm_80, kernels this
 * GPU cannot run...). kernels: a CUATTN_IMPL_* or BACKEND_KERNELS_AUTO; the choice is part
 * of the device description (and so of every audit record). Sets the calling thread's
 * current device, so call it on the loop thread: buffers are opened and closed there.
 * Only in builds with CUDA (DASH_HAVE_CUDA). */
#define BACKEND_KERNELS_AUTO (-1) /* the implementation the GPU runs best (attn_cuda.h) */
struct backend *backend_cuda_new(int device, int32_t kernels, char *why, size_t whylen);

/* Accepts NULL. */
static inline void backend_free(struct backend *b)
{
    if (b)
        b->free(b->impl);
}

#endif
