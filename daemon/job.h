// SPDX-License-Identifier: BSD-3-Clause
/*
 * job.h - one Forward or Backward on its way through the worker.
 *
 * The engine never touches client memory. The worker copies every input tensor from the
 * client's mapping into dense daemon-owned scratch, runs the backend on the scratch, and
 * copies the outputs back element row by element row - each copy inside a SIGBUS guard
 * (guard.h), so a client that shrinks its shared memory gets DASH_EBUFGONE instead of
 * killing the daemon. Copying outputs row by row writes exactly the output's own
 * elements, never the gaps between them, so tensors interleaved in one buffer (a packed
 * qkv, a packed dkv) stay intact. All inputs are read before any output is written, so an
 * output may alias an input; outputs are written in the order out, lse / dq, dk, dv.
 *
 * Tensors in CUDA memory (the CUDA backend) are not copied: the backend gets device
 * pointers into the client's allocation, with the request's strides (backend.h).
 *
 * Ownership: the loop thread fills a job (plan, buffer references, reply address), pushes
 * it on the queue, and gets it back in the done callback, where it sends the reply, drops
 * the buffer references and frees the job. In between only the worker touches it.
 */
#ifndef DASHD_JOB_H
#define DASHD_JOB_H

#include "backend.h"
#include "evring.h"
#include "limits.h"
#include "queue.h"
#include "shmbuf.h"
#include "validate.h"

#include <stddef.h>
#include <stdint.h>

#define JOB_RID_MAX 256 /* ZeroMQ routing ids are at most 255 bytes */
#define JOB_MSG_MAX 256

struct job {
    struct queue_item item; /* first: the queue hands back this pointer */
    struct queue *queue;    /* the queue it is on (a device completion hands it back) */
    struct val_plan plan;
    /* A packed batch's offsets, q's then k's (2 * (batch + 1), malloc'd, freed with the
     * job): copied out of the client's memory at validation, so the values checked are
     * the values used; plan.prob's cu_seqlens point here. NULL: a dense batch. */
    int32_t *cu_seqlens;
    struct shmbuf *buf[VAL_SLOTS]; /* one reference per used slot (the same buffer may repeat) */
    /* Where the reply goes. */
    unsigned char rid[JOB_RID_MAX];
    size_t rid_len;
    uint64_t request_id;
    uint64_t session_id;
    struct lim_client *client; /* one reference: counted in its in_flight until done */
    /* EventSync (device ops): the events to wait for and to record (NULL: none), from
     * `events`, which the job holds a reference on; reply when queued. */
    struct evring *events;
    void *wait_event, *record_event;
    int reply_when_queued;
    int replied; /* loop thread: the reply went out when the op was queued */
    /* EventSync's semaphores (device ops; NULL: none): words in signal_buf, which the job
     * holds a reference on. signal_fail: written instead of signal_done when the op fails
     * (the client poisons the outputs, then writes the done word); NULL: the done word is
     * written either way. */
    struct shmbuf *signal_buf;
    uint64_t *signal_ready, *signal_done, *signal_fail;
    uint64_t signal_seq;
    /* Audit: the slots to digest (bit 1 << VAL_*; 0: no audit) and their digests, set by
     * the time the job is done (digest_ok: which ones were computed). */
    unsigned digest_mask, digest_ok;
    uint64_t digest[VAL_SLOTS];
    /* A device op's digests arrive per view (the set bits of digest_mask in slot order)
     * when it completes; job_device_digests() files them by slot. */
    int device_op;
    uint64_t view_digest[VAL_SLOTS];
    /* uv_hrtime() stamps: request received, run started, run finished (for an op that
     * completes later: queued); run_ns: the time it ran, when the backend measured it. */
    uint64_t received_ns, started_ns, finished_ns, run_ns;
    /* For the debug log of an early reply: validated (pushed on the queue), and queued on
     * the device by the worker. */
    uint64_t pushed_ns, launched_ns;
    uint64_t arrived_ns; /* the request's message parsed off the connection (server_msg) */
    /* Audit: who asked, and what they said about it (copied: the session may be gone by
     * the time the record is written). */
    uint64_t wall_unix_ns;
    uint32_t pid;
    int64_t uid;
    /* The client's process in dashd's pid namespace (the connection's credentials; -1:
     * unknown). A job whose client is gone when its turn comes is not run (DASH_ECANCELED):
     * a client killed with requests queued would otherwise hold the worker for nothing. */
    int64_t peer_pid;
    char client_name[128], run_tag[128], label[128];
    uint32_t rank, world_size; /* world_size 0: the client gave none */
    int has_step;
    uint64_t step;
    /* Result, set by the worker. */
    int rc;
    char msg[JOB_MSG_MAX];
    struct attn_config used; /* what the backend ran with (rc == 0) */
};

struct job_runner;

/* Worker-side state: the backend and the scratch arena. `scratch_max` caps one job's
 * scratch (job_scratch_bytes). NULL on failure. */
struct job_runner *job_runner_new(struct backend *b, uint64_t scratch_max);

/* Accepts NULL. Does not free the backend. */
void job_runner_free(struct job_runner *r);

/* Scratch bytes a plan needs: the dense size of every tensor, aligned; UINT64_MAX if it
 * does not fit. */
uint64_t job_scratch_bytes(const struct val_plan *plan);

/* Worker thread: copy in, compute, copy out (shared memory) or compute in place (CUDA
 * memory); sets j->rc, j->msg, j->used and the times. Returns 0 when the job is finished,
 * or BACKEND_QUEUED when the backend queued it on the device (j->used is set): done(ctx,
 * rc, run_ns) is then called once, from another thread, when it completes. */
int job_run(struct job_runner *r, struct job *j, backend_done_fn done, void *done_ctx);

/* Loop thread, once a device op has completed without error: file view_digest[] by
 * slot into digest[] and mark them in digest_ok. */
void job_device_digests(struct job *j);

#endif
