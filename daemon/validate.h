// SPDX-License-Identifier: BSD-3-Clause
/*
 * validate.h - checking a Forward or Backward request before any memory is touched.
 *
 * Pure functions of the request, the backend's limits and the sizes of the session's
 * buffers (looked up through a callback, so the checks can be tested without sessions or
 * shared memory). A request that passes yields a plan: the engine problem and config, and
 * for every tensor its buffer, byte offset, shape, element strides and byte extent, all
 * proven to lie inside the registered size. Every rejection names the field and the
 * numbers involved ("k.shape[2]=3 does not divide q heads 8") and never anything about
 * other sessions. The codes follow the table in docs/protocol.md:
 *
 *   DASH_ENOBUF     buffer id not registered in this session
 *   DASH_ESHAPE     dims or strides count, a dim < 1 or > INT32_MAX, disagreeing shapes,
 *                   heads_q % heads_kv != 0, negative strides, last stride != 1, lse not
 *                   dense, an output whose elements overlap
 *   DASH_EBOUNDS    offset + extent past the buffer's size (64-bit overflow included)
 *   DASH_EBADDTYPE  dtype unknown or not served
 *   DASH_EHEADDIM   head dim outside the backend's range
 *   DASH_ESCHED     unknown schedule, wave outside 1..4096, block size outside 1..max
 *   DASH_EINVAL     unknown mask, scale not finite or <= 0, a window side below -1, a
 *                   softcap not finite or < 0 (attn_explain_problem's words)
 * A packed batch (Varlen) adds: DASH_ESHAPE for offsets that are not a dense int32 vector
 * of batch + 1 >= 2 entries (the same count on both sides, at most
 * ATTN_VARLEN_MAX_BATCH sequences), max_seqlen below 1; the offsets' buffers follow the
 * tensors' rules (DASH_ENOBUF, DASH_EBOUNDS). Their values are checked once read.
 *   DASH_EMALFORMED a required sub-message is missing
 */
#ifndef DASHD_VALIDATE_H
#define DASHD_VALIDATE_H

#include "kernels/cpu/engine.h"
#include "proto/wire.h"

#include <stddef.h>
#include <stdint.h>

enum val_slot { VAL_Q, VAL_K, VAL_V, VAL_OUT, VAL_LSE, VAL_DOUT, VAL_DQ, VAL_DK, VAL_DV, VAL_SLOTS };

/* What the backend can serve. */
struct val_limits {
    int32_t head_dim_min, head_dim_max;
    int32_t block_max;  /* largest block_m / block_n */
    unsigned dtypes;    /* bit (1u << enum dtype_kind) for each dtype served */
};

/* One tensor of a plan. The elements are at byte
 * offset + elem_size * sum(i * stride) for i < shape, all within [offset, offset + extent). */
struct val_tensor {
    uint64_t buffer_id;
    uint64_t offset;   /* bytes from the start of the buffer */
    uint64_t extent;   /* bytes from offset to the end of the farthest element */
    int64_t stride[4]; /* elements, >= 0, last one 1; lse: dense */
    int32_t shape[4];  /* (batch, seqlen, heads, head_dim); lse: (batch, heads_q, seqlen_q) */
    int32_t ndim;      /* 4, or 3 for lse */
    int32_t elem_size; /* bytes */
    int32_t output;    /* the op writes it */
    /* The memory the buffer maps (struct val_buffer): outputs are compared by object
     * and base + offset, so two registrations of one object are one memory. */
    uint64_t object[2];
    uint64_t base;
};

/* A packed batch's offsets: cu[0] for q, cu[1] for k, each (batch + 1) int32, dense. */
enum { VAL_CU_Q, VAL_CU_K };

struct val_plan {
    int32_t backward; /* 0: forward (slots q..lse), 1: backward (all slots) */
    int32_t slots;    /* VAL_LSE + 1 or VAL_SLOTS */
    /* Packed batch: the tensors are (total, heads, head_dim) - kept as (1, total, heads,
     * head_dim), lse (heads_q, total_q) as (1, heads_q, total_q) - and the offsets are in
     * cu[]. prob then has batch, seqlen_q/k (the max_seqlen bounds) and total_q/k set, but
     * not yet its cu_seqlens pointers: whoever reads the offsets (dispatch) sets them and
     * checks their values with attn_explain_problem. */
    int32_t varlen;
    struct val_tensor cu[2];
    /* Or the offsets sent by value (cu[] then has buffer_id 0 and only the shape): they
     * point into the request, valid until dispatch has copied them (read_offsets). */
    const int32_t *cu_values[2];
    /* max_seqlen_q / max_seqlen_k as the request sent them (the audit records them): a
     * bound, which prob's seqlen_q / seqlen_k tighten to the longest sequences once the
     * offsets are read (read_offsets) */
    int32_t max_seqlen[2];
    struct attn_problem prob;
    struct attn_config cfg; /* as requested: sched may be SCHED_AUTO, 0 = the default */
    struct val_tensor t[VAL_SLOTS];
};

/* A registered buffer as validation sees it: its size, and the memory it maps - an object
 * (two words that name it: a shm object's device and inode, or {VAL_OBJECT_DEVICE, 0} for
 * the daemon's GPU address space) and where the buffer starts in it. A client may register
 * one object under several ids; outputs that overlap through two of them are refused like
 * outputs that overlap in one. */
#define VAL_OBJECT_DEVICE UINT64_MAX
struct val_buffer {
    uint64_t size;
    uint64_t object[2];
    uint64_t base;
};

/* Buffer `buffer_id` if the requesting session registered it: 0 and *ret, or
 * DASH_ENOBUF. */
typedef int (*val_lookup_fn)(void *ctx, uint64_t buffer_id, struct val_buffer *ret);

/* Check a request. Returns 0 and fills *ret_plan, or a DASH_* code (table above) with a
 * readable reason in msg (always NUL-terminated when msglen > 0); *ret_plan is untouched
 * on failure. */
int val_forward(const Dash__Forward *m, const struct val_limits *lim, val_lookup_fn lookup,
                void *ctx, char *msg, size_t msglen, struct val_plan *ret_plan);
int val_backward(const Dash__Backward *m, const struct val_limits *lim, val_lookup_fn lookup,
                 void *ctx, char *msg, size_t msglen, struct val_plan *ret_plan);

/* The name of a slot ("q", ..., "dv"). */
const char *val_slot_name(enum val_slot slot);

/* Bytes a dense copy of the tensor takes (product of shape times elem_size), or
 * UINT64_MAX if that does not fit in 64 bits. */
uint64_t val_dense_bytes(const struct val_tensor *t);

#endif
