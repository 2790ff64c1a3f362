// SPDX-License-Identifier: BSD-3-Clause
/*
 * validate.c - see validate.h.
 *
 * The checks run in a fixed order: dtype and mask, then each tensor on its own (buffer,
 * dims, strides), then agreement between tensors, head dim, bounds, self-overlap of the
 * outputs, the schedule parameters, and the scale. All byte arithmetic is unsigned 64-bit
 * with explicit overflow checks, so no offset or stride, however large, can wrap around
 * into acceptance.
 */
#include "validate.h"

#include "proto/errors.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const slot_names[VAL_SLOTS] = {"q",   "k",    "v",  "out", "lse",
                                                   "dout", "dq", "dk", "dv"};

const char *val_slot_name(enum val_slot slot)
{
    return (int)slot >= 0 && slot < VAL_SLOTS ? slot_names[slot] : "?";
}

/* Write the reason and return the code, so a check reads `return fail(...)`. */
__attribute__((format(printf, 4, 5))) static int fail(char *msg, size_t msglen, int code,
                                                      const char *fmt, ...)
{
    if (msglen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, msglen, fmt, ap);
        va_end(ap);
    }
    return code;
}

uint64_t val_dense_bytes(const struct val_tensor *t)
{
    uint64_t n = (uint64_t)t->elem_size;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(n, (uint64_t)t->shape[i], &n))
            return UINT64_MAX;
    return n;
}

/* The request's tensors and params, the same for both ops. */
struct refs {
    const Dash__AttnParams *params;
    const Dash__TensorRef *t[VAL_SLOTS];
    int32_t slots;
    const Dash__Varlen *varlen; /* NULL: a dense batch */
};

static int map_dtype(Dash__DType d, enum dtype_kind *ret)
{
    switch (d) {
    case DASH__DTYPE__F32:
        *ret = DTYPE_F32;
        return 0;
    case DASH__DTYPE__F16:
        *ret = DTYPE_F16;
        return 0;
    case DASH__DTYPE__BF16:
        *ret = DTYPE_BF16;
        return 0;
    case DASH__DTYPE__F64:
        *ret = DTYPE_F64;
        return 0;
    default:
        return -1;
    }
}

static int map_mask(Dash__Mask m, enum sched_mask *ret)
{
    switch (m) {
    case DASH__MASK__FULL:
        *ret = SCHED_MASK_FULL;
        return 0;
    case DASH__MASK__CAUSAL:
        *ret = SCHED_MASK_CAUSAL;
        return 0;
    default:
        return -1;
    }
}

_Static_assert((int)SCHED_AUTO == (int)DASH__SCHEDULE__AUTO &&
                   (int)SCHED_ATOMIC == (int)DASH__SCHEDULE__ATOMIC &&
                   (int)SCHED_ASCENDING == (int)DASH__SCHEDULE__ASCENDING &&
                   (int)SCHED_DESCENDING == (int)DASH__SCHEDULE__DESCENDING &&
                   (int)SCHED_SPT == (int)DASH__SCHEDULE__SPT &&
                   (int)SCHED_SHIFT == (int)DASH__SCHEDULE__SHIFT &&
                   SCHED_KIND_COUNT == DASH__SCHEDULE__SHIFT + 1,
               "enum sched_kind is the wire's Schedule");

/* The wire's Schedule is numbered as sched.h's kinds: a range check and a cast. */
static int map_schedule(Dash__Schedule s, enum sched_kind *ret)
{
    if ((int)s < 0 || (int)s >= SCHED_KIND_COUNT)
        return -1;
    *ret = (enum sched_kind)s;
    return 0;
}

/* One tensor on its own: buffer, dims, strides. Fills *t except extent. */
static int check_one(const Dash__TensorRef *r, enum val_slot slot, int32_t elem_size,
                     int varlen, val_lookup_fn lookup, void *ctx, uint64_t *ret_size, char *msg,
                     size_t msglen, struct val_tensor *t)
{
    const char *name = slot_names[slot];
    const int lse = slot == VAL_LSE;
    const size_t ndim = (lse ? 3 : 4) - (varlen ? 1 : 0);
    struct val_buffer vb;
    if (lookup(ctx, r->buffer_id, &vb) != 0)
        return fail(msg, msglen, DASH_ENOBUF, "%s: buffer %llu is not registered in this session",
                    name, (unsigned long long)r->buffer_id);
    if (r->n_shape != ndim)
        return fail(msg, msglen, DASH_ESHAPE, "%s: shape has %zu dims, expected %zu%s", name,
                    r->n_shape, ndim,
                    varlen ? (lse ? " (heads_q, total_q) in a packed batch"
                                  : " (total, heads, head_dim) in a packed batch")
                    : lse ? " (batch, heads_q, seqlen_q)" : " (batch, seqlen, heads, head_dim)");
    for (size_t i = 0; i < ndim; i++) {
        if (r->shape[i] < 1)
            return fail(msg, msglen, DASH_ESHAPE, "%s.shape[%zu]=%lld is < 1", name, i,
                        (long long)r->shape[i]);
        if (r->shape[i] > INT32_MAX)
            return fail(msg, msglen, DASH_ESHAPE, "%s.shape[%zu]=%lld exceeds %d", name, i,
                        (long long)r->shape[i], INT32_MAX);
        t->shape[i] = (int32_t)r->shape[i];
    }
    /* Dense strides, which is also what absent strides mean. */
    int64_t dense[4];
    dense[ndim - 1] = 1;
    for (size_t i = ndim - 1; i > 0; i--)
        if (__builtin_mul_overflow(dense[i], (int64_t)t->shape[i], &dense[i - 1]))
            dense[i - 1] = INT64_MAX; /* absurd shapes only; the bounds check refuses them */
    if (r->n_strides != 0 && r->n_strides != ndim)
        return fail(msg, msglen, DASH_ESHAPE, "%s: %zu strides for %zu dims", name, r->n_strides,
                    ndim);
    for (size_t i = 0; i < ndim; i++)
        t->stride[i] = r->n_strides ? r->strides[i] : dense[i];
    for (size_t i = 0; i < ndim; i++)
        if (t->stride[i] < 0)
            return fail(msg, msglen, DASH_ESHAPE, "%s.strides[%zu]=%lld is negative", name, i,
                        (long long)t->stride[i]);
    if (t->stride[ndim - 1] != 1)
        return fail(msg, msglen, DASH_ESHAPE, "%s.strides[%zu]=%lld, the last stride must be 1",
                    name, ndim - 1, (long long)t->stride[ndim - 1]);
    if (lse)
        for (size_t i = 0; i < ndim; i++)
            if (t->stride[i] != dense[i])
                return fail(msg, msglen, DASH_ESHAPE,
                            "lse.strides[%zu]=%lld, lse must be dense (expected %lld)", i,
                            (long long)t->stride[i], (long long)dense[i]);
    t->buffer_id = r->buffer_id;
    t->offset = r->offset;
    t->object[0] = vb.object[0];
    t->object[1] = vb.object[1];
    t->base = vb.base;
    *ret_size = vb.size;
    t->ndim = (int32_t)ndim;
    t->elem_size = elem_size;
    t->output = 0;
    if (varlen) { /* a batch of one in front: the view every implementation indexes */
        for (int i = (int)ndim; i > 0; i--) {
            t->shape[i] = t->shape[i - 1];
            t->stride[i] = t->stride[i - 1];
        }
        t->shape[0] = 1;
        t->stride[0] = 0;
        t->ndim++;
    }
    return 0;
}

/* A packed batch's offsets: a dense int32 vector of batch + 1 >= 2 entries inside its
 * buffer. */
static int check_offsets(const Dash__TensorRef *r, const char *name, val_lookup_fn lookup,
                         void *ctx, char *msg, size_t msglen, struct val_tensor *t)
{
    struct val_buffer vb;
    uint64_t size, end;
    if (!r)
        return fail(msg, msglen, DASH_EMALFORMED, "varlen.%s is missing", name);
    if (lookup(ctx, r->buffer_id, &vb) != 0)
        return fail(msg, msglen, DASH_ENOBUF, "%s: buffer %llu is not registered in this session",
                    name, (unsigned long long)r->buffer_id);
    if (r->n_shape != 1)
        return fail(msg, msglen, DASH_ESHAPE, "%s: shape has %zu dims, expected 1 (batch + 1)",
                    name, r->n_shape);
    if (r->shape[0] < 2 || r->shape[0] > (int64_t)ATTN_VARLEN_MAX_BATCH + 1)
        return fail(msg, msglen, DASH_ESHAPE, "%s.shape[0]=%lld, expected batch + 1 with 1 <= "
                    "batch <= %d", name, (long long)r->shape[0], ATTN_VARLEN_MAX_BATCH);
    if (r->n_strides > 1 || (r->n_strides == 1 && r->strides[0] != 1))
        return fail(msg, msglen, DASH_ESHAPE, "%s must be dense (stride 1)", name);
    size = vb.size;
    memset(t, 0, sizeof *t);
    t->buffer_id = r->buffer_id;
    t->offset = r->offset;
    t->object[0] = vb.object[0];
    t->object[1] = vb.object[1];
    t->base = vb.base;
    t->ndim = 1;
    t->shape[0] = (int32_t)r->shape[0];
    t->stride[0] = 1;
    t->elem_size = (int32_t)sizeof(int32_t);
    t->extent = (uint64_t)t->shape[0] * sizeof(int32_t);
    if (t->offset >= size || __builtin_add_overflow(t->offset, t->extent, &end) || end > size)
        return fail(msg, msglen, DASH_EBOUNDS, "%s: offset %llu + %llu bytes > buffer size %llu",
                    name, (unsigned long long)t->offset, (unsigned long long)t->extent,
                    (unsigned long long)size);
    if (t->offset % sizeof(int32_t))
        return fail(msg, msglen, DASH_ESHAPE, "%s: offset %llu is not a multiple of 4", name,
                    (unsigned long long)t->offset);
    return 0;
}

/* A packed batch's offsets sent by value: batch + 1 >= 2 of them. */
static int check_offset_values(size_t n, const char *name, char *msg, size_t msglen,
                               struct val_tensor *t)
{
    if (n < 2 || n > (size_t)ATTN_VARLEN_MAX_BATCH + 1)
        return fail(msg, msglen, DASH_ESHAPE, "%s: %zu values, expected batch + 1 with 1 <= "
                    "batch <= %d", name, n, ATTN_VARLEN_MAX_BATCH);
    memset(t, 0, sizeof *t);
    t->ndim = 1;
    t->shape[0] = (int32_t)n;
    t->stride[0] = 1;
    t->elem_size = (int32_t)sizeof(int32_t);
    t->extent = (uint64_t)n * sizeof(int32_t);
    return 0;
}

/* offset + extent <= size, computed without wrapping. Sets t->extent. */
static int check_bounds(struct val_tensor *t, enum val_slot slot, uint64_t size, char *msg,
                        size_t msglen)
{
    const char *name = slot_names[slot];
    uint64_t last = 0, step, extent, end;
    for (int i = 0; i < t->ndim; i++) {
        if (__builtin_mul_overflow((uint64_t)(t->shape[i] - 1), (uint64_t)t->stride[i], &step) ||
            __builtin_add_overflow(last, step, &last))
            return fail(msg, msglen, DASH_EBOUNDS, "%s: the strided view spans more than 2^64 elements",
                        name);
    }
    if (__builtin_add_overflow(last, 1, &extent) ||
        __builtin_mul_overflow(extent, (uint64_t)t->elem_size, &extent))
        return fail(msg, msglen, DASH_EBOUNDS, "%s: the strided view spans more than 2^64 bytes",
                    name);
    if (t->offset >= size)
        return fail(msg, msglen, DASH_EBOUNDS, "%s: offset %llu >= buffer size %llu", name,
                    (unsigned long long)t->offset, (unsigned long long)size);
    if (__builtin_add_overflow(t->offset, extent, &end))
        return fail(msg, msglen, DASH_EBOUNDS, "%s: offset %llu + extent %llu overflows 64 bits",
                    name, (unsigned long long)t->offset, (unsigned long long)extent);
    if (end > size)
        return fail(msg, msglen, DASH_EBOUNDS, "%s: offset+extent %llu > buffer size %llu", name,
                    (unsigned long long)end, (unsigned long long)size);
    t->extent = extent;
    return 0;
}

struct dim {
    int64_t size, stride;
};

static int cmp_dim(const void *a, const void *b)
{
    const struct dim *x = a, *y = b;
    return (x->stride > y->stride) - (x->stride < y->stride);
}

/* No two elements of an output may share an address. With its dims sorted by stride,
 * each stride must step over the whole span of the dims below it - the engine's own rule,
 * so nothing accepted here is refused there. Sufficient, not necessary: a few exotic
 * interleavings that do not overlap are refused too. */
static int check_no_overlap(const struct val_tensor *t, enum val_slot slot, char *msg,
                            size_t msglen)
{
    struct dim d[4];
    for (int i = 0; i < t->ndim; i++)
        d[i] = (struct dim){t->shape[i], t->stride[i]};
    qsort(d, (size_t)t->ndim, sizeof d[0], cmp_dim);
    int64_t span = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (d[i].size == 1)
            continue;
        if (d[i].stride < span)
            return fail(msg, msglen, DASH_ESHAPE,
                        "%s: output elements overlap (a stride of %lld inside a span of %lld)",
                        slot_names[slot], (long long)d[i].stride, (long long)span);
        if (__builtin_mul_overflow(d[i].stride, d[i].size, &span))
            span = INT64_MAX;
    }
    return 0;
}

/* Can delta (bytes) be written as sum d_k stride_k with |d_k| <= size_k - 1 over dims
 * 0..k, sorted by ascending stride, each stride at least the span of the dims before it
 * (what check_no_overlap admits)? Only the quotient toward zero and the next one away from
 * zero can leave a remainder the smaller dims reach, so two branches per dim. */
static int reachable(const struct dim *d, int k, int64_t delta)
{
    if (k < 0)
        return delta == 0;
    int64_t q = delta / d[k].stride;
    int64_t c[2] = {q, delta < 0 ? q - 1 : q + 1};
    for (int i = 0; i < 2; i++) {
        if (c[i] > d[k].size - 1 || c[i] < -(d[k].size - 1))
            continue;
        if (reachable(d, k - 1, delta - c[i] * d[k].stride))
            return 1;
    }
    return 0;
}

/* Two outputs must not share a byte either. Apart (other buffers, disjoint byte ranges):
 * fine. Interleaved in one range - dq, dk, dv unbound from one packed (b, s, 3, h, d)
 * tensor - only as the same shape and strides, and then exactly: no element of one may
 * start inside an element of the other (the layout in bytes, the last dim a run of bytes,
 * shifted by the offsets' difference). Anything else that shares a range is refused. */
static int check_outputs_apart(const struct val_tensor *a, enum val_slot sa,
                               const struct val_tensor *b, enum val_slot sb, char *msg,
                               size_t msglen)
{
    /* Where they lie in the memory object (bounds are checked: no overflow within one). */
    const uint64_t ao = a->base + a->offset, bo = b->base + b->offset;
    if (a->object[0] != b->object[0] || a->object[1] != b->object[1] ||
        ao + a->extent <= bo || bo + b->extent <= ao)
        return 0;
    int same = a->ndim == b->ndim && a->elem_size == b->elem_size;
    for (int i = 0; same && i < a->ndim; i++)
        same = a->shape[i] == b->shape[i] && a->stride[i] == b->stride[i];
    if (same) {
        struct dim d[4];
        int n = 0;
        for (int i = 0; i < a->ndim; i++)
            if (a->shape[i] > 1 || i == a->ndim - 1)
                d[n++] = i == a->ndim - 1 ? (struct dim){(int64_t)a->shape[i] * a->elem_size, 1}
                                          : (struct dim){a->shape[i], a->stride[i] * a->elem_size};
        qsort(d, (size_t)n, sizeof d[0], cmp_dim);
        if (!reachable(d, n - 1, (int64_t)(bo - ao)))
            return 0;
    }
    if (a->buffer_id != b->buffer_id)
        return fail(msg, msglen, DASH_ESHAPE,
                    "%s and %s overlap: buffers %llu and %llu map the same memory (outputs may "
                    "share a byte range only as same-shaped interleavings whose elements stay "
                    "apart)", slot_names[sa], slot_names[sb], (unsigned long long)a->buffer_id,
                    (unsigned long long)b->buffer_id);
    return fail(msg, msglen, DASH_ESHAPE,
                "%s and %s overlap in buffer %llu (outputs may share a byte range only as "
                "same-shaped interleavings whose elements stay apart)", slot_names[sa],
                slot_names[sb], (unsigned long long)a->buffer_id);
}

/* lead: the dims the plan put in front of the wire's (1 in a packed batch), so messages
 * name dims as the client sent them. */
static int same_dim(const struct val_tensor *t, enum val_slot slot, int dim, int lead,
                    int32_t want, const char *what, char *msg, size_t msglen)
{
    if (t->shape[dim] == want)
        return 0;
    return fail(msg, msglen, DASH_ESHAPE, "%s.shape[%d]=%d does not match %s %d", slot_names[slot],
                dim - lead, t->shape[dim], what, want);
}

static int validate(const struct refs *r, const struct val_limits *lim, val_lookup_fn lookup,
                    void *ctx, char *msg, size_t msglen, struct val_plan *ret_plan)
{
    struct val_plan p;
    uint64_t sizes[VAL_SLOTS];
    int rc;
    if (msglen > 0)
        msg[0] = '\0';
    memset(&p, 0, sizeof p);
    p.slots = r->slots;
    p.backward = r->slots == VAL_SLOTS;
    if (!r->params)
        return fail(msg, msglen, DASH_EMALFORMED, "params is missing");
    for (int s = 0; s < r->slots; s++)
        if (!r->t[s])
            return fail(msg, msglen, DASH_EMALFORMED, "%s is missing", slot_names[s]);

    const Dash__AttnParams *par = r->params;
    enum dtype_kind dtype;
    if (map_dtype(par->dtype, &dtype) != 0)
        return fail(msg, msglen, DASH_EBADDTYPE, "dtype %d is unknown", (int)par->dtype);
    if (!(lim->dtypes & (1u << dtype))) {
        char served[64] = "";
        for (int t = 0; t < DTYPE_COUNT; t++)
            if (lim->dtypes & (1u << t))
                snprintf(served + strlen(served), sizeof served - strlen(served), "%s%s",
                         served[0] ? ", " : "", dtype_name((enum dtype_kind)t));
        return fail(msg, msglen, DASH_EBADDTYPE,
                    "dtype %s is not served by this backend (it serves %s)%s", dtype_name(dtype),
                    served[0] ? served : "none",
                    dtype == DTYPE_F64 ? "; f64 runs on the CPU engine (dashd --backend cpu)" : "");
    }
    enum sched_mask mask;
    if (map_mask(par->mask, &mask) != 0)
        return fail(msg, msglen, DASH_EINVAL, "mask %d is unknown", (int)par->mask);

    const int varlen = r->varlen != NULL;
    for (int s = 0; s < r->slots; s++) {
        int32_t es = s == VAL_LSE ? (int32_t)sizeof(float) : dtype_size(dtype);
        if ((rc = check_one(r->t[s], (enum val_slot)s, es, varlen, lookup, ctx, &sizes[s], msg,
                            msglen, &p.t[s])))
            return rc;
    }
    if (varlen) {
        const Dash__Varlen *vl = r->varlen;
        if (vl->n_cu_seqlens_q_values || vl->n_cu_seqlens_k_values) { /* by value */
            if (vl->cu_seqlens_q || vl->cu_seqlens_k)
                return fail(msg, msglen, DASH_EMALFORMED, "varlen: the offsets are given both "
                            "in buffers and by value; give them one way");
            if ((rc = check_offset_values(vl->n_cu_seqlens_q_values, "cu_seqlens_q", msg,
                                          msglen, &p.cu[VAL_CU_Q])) ||
                (rc = check_offset_values(vl->n_cu_seqlens_k_values, "cu_seqlens_k", msg,
                                          msglen, &p.cu[VAL_CU_K])))
                return rc;
            p.cu_values[VAL_CU_Q] = vl->cu_seqlens_q_values;
            p.cu_values[VAL_CU_K] = vl->cu_seqlens_k_values;
        } else if ((rc = check_offsets(vl->cu_seqlens_q, "cu_seqlens_q", lookup, ctx, msg,
                                       msglen, &p.cu[VAL_CU_Q])) ||
                   (rc = check_offsets(vl->cu_seqlens_k, "cu_seqlens_k", lookup, ctx, msg,
                                       msglen, &p.cu[VAL_CU_K]))) {
            return rc;
        }
        if (p.cu[VAL_CU_Q].shape[0] != p.cu[VAL_CU_K].shape[0])
            return fail(msg, msglen, DASH_ESHAPE, "cu_seqlens_q has %d entries, cu_seqlens_k %d: "
                        "both are batch + 1", p.cu[VAL_CU_Q].shape[0], p.cu[VAL_CU_K].shape[0]);
        if (r->varlen->max_seqlen_q < 1 || r->varlen->max_seqlen_k < 1)
            return fail(msg, msglen, DASH_ESHAPE, "max_seqlen_q %d and max_seqlen_k %d must be >= 1",
                        r->varlen->max_seqlen_q, r->varlen->max_seqlen_k);
        p.varlen = 1;
    }
    p.t[VAL_OUT].output = p.t[VAL_LSE].output = !p.backward;
    if (p.backward)
        p.t[VAL_DQ].output = p.t[VAL_DK].output = p.t[VAL_DV].output = 1;

    /* Agreement: q fixes (B, Sq, Hq, D), k fixes (Sk, Hkv). */
    const struct val_tensor *q = &p.t[VAL_Q], *k = &p.t[VAL_K];
    const int32_t B = q->shape[0], Sq = q->shape[1], Hq = q->shape[2], D = q->shape[3];
    const int32_t Sk = k->shape[1], Hkv = k->shape[2];
    if ((rc = same_dim(k, VAL_K, 0, varlen, B, "q batch", msg, msglen)) ||
        (rc = same_dim(k, VAL_K, 3, varlen, D, "q head dim", msg, msglen)))
        return rc;
    if (Hq % Hkv != 0)
        return fail(msg, msglen, DASH_ESHAPE, "k.shape[%d]=%d does not divide q heads %d",
                    2 - varlen, Hkv, Hq);
    for (int s = 0; s < r->slots; s++) {
        const struct val_tensor *t = &p.t[s];
        if (s == VAL_Q || s == VAL_K)
            continue;
        if (s == VAL_LSE) {
            if ((rc = same_dim(t, VAL_LSE, 0, varlen, B, "q batch", msg, msglen)) ||
                (rc = same_dim(t, VAL_LSE, 1, varlen, Hq, "q heads", msg, msglen)) ||
                (rc = same_dim(t, VAL_LSE, 2, varlen, Sq, varlen ? "q tokens" : "q seqlen", msg,
                               msglen)))
                return rc;
            continue;
        }
        const struct val_tensor *like = (s == VAL_V || s == VAL_DK || s == VAL_DV) ? k : q;
        const char *src = like == k ? "k" : "q";
        for (int i = 0; i < 4; i++)
            if (t->shape[i] != like->shape[i])
                return fail(msg, msglen, DASH_ESHAPE, "%s.shape[%d]=%d does not match %s.shape[%d]=%d",
                            slot_names[s], i - varlen, t->shape[i], src, i - varlen, like->shape[i]);
    }

    if (D < lim->head_dim_min || D > lim->head_dim_max)
        return fail(msg, msglen, DASH_EHEADDIM, "head dim %d is outside %d..%d", D,
                    lim->head_dim_min, lim->head_dim_max);

    for (int s = 0; s < r->slots; s++)
        if ((rc = check_bounds(&p.t[s], (enum val_slot)s, sizes[s], msg, msglen)))
            return rc;
    for (int s = 0; s < r->slots; s++)
        if (p.t[s].output && (rc = check_no_overlap(&p.t[s], (enum val_slot)s, msg, msglen)))
            return rc;
    for (int s = 0; s < r->slots; s++)
        for (int u = s + 1; u < r->slots; u++)
            if (p.t[s].output && p.t[u].output &&
                (rc = check_outputs_apart(&p.t[s], (enum val_slot)s, &p.t[u], (enum val_slot)u,
                                          msg, msglen)))
                return rc;

    enum sched_kind kind = SCHED_AUTO;
    if (par->has_schedule && map_schedule(par->schedule, &kind) != 0)
        return fail(msg, msglen, DASH_ESCHED, "schedule %d is unknown", (int)par->schedule);
    int32_t wave = par->has_wave ? par->wave : 0;
    if (wave < 0 || wave > SCHED_W_MAX)
        return fail(msg, msglen, DASH_ESCHED, "wave %d is outside 1..%d (0: the default)", wave,
                    SCHED_W_MAX);
    int32_t bm = par->has_block_m ? par->block_m : 0, bn = par->has_block_n ? par->block_n : 0;
    if (bm < 0 || bm > lim->block_max)
        return fail(msg, msglen, DASH_ESCHED, "block_m %d is outside 1..%d (0: the default)", bm,
                    lim->block_max);
    if (bn < 0 || bn > lim->block_max)
        return fail(msg, msglen, DASH_ESCHED, "block_n %d is outside 1..%d (0: the default)", bn,
                    lim->block_max);

    /* 1/sqrt(D) rounded once, from double, as flash-attn's and PyTorch's default scale is
     * (1.0f / sqrtf(D) is one ulp off at D = 96, and the bits would differ from theirs) */
    float scale = (float)(1.0 / sqrt((double)D));
    if (par->has_scale) {
        if (!isfinite(par->scale) || !(par->scale > 0))
            return fail(msg, msglen, DASH_EINVAL, "scale %g must be finite and > 0",
                        (double)par->scale);
        scale = par->scale;
    }

    p.prob = (struct attn_problem){.batch = B, .seqlen_q = Sq, .seqlen_k = Sk, .heads_q = Hq,
                                  .heads_kv = Hkv, .head_dim = D, .dtype = dtype, .mask = mask,
                                  .scale = scale};
    if (par->has_window_left || par->has_window_right) {
        p.prob.window = 1;
        p.prob.window_left = par->has_window_left ? par->window_left : -1;
        p.prob.window_right = par->has_window_right ? par->window_right : -1;
    }
    p.prob.softcap = par->has_softcap ? par->softcap : 0.0f;
    if (p.varlen) { /* the tensors' seqlen is the token count; sequences come later */
        p.prob.batch = p.cu[VAL_CU_Q].shape[0] - 1;
        p.prob.total_q = Sq;
        p.prob.total_k = Sk;
        p.prob.seqlen_q = p.max_seqlen[VAL_CU_Q] = r->varlen->max_seqlen_q;
        p.prob.seqlen_k = p.max_seqlen[VAL_CU_K] = r->varlen->max_seqlen_k;
    }
    /* the rules every implementation shares (window, softcap), in their own words */
    char why[200];
    if (attn_explain_problem(&p.prob, why, sizeof why) != 0)
        return fail(msg, msglen, DASH_EINVAL, "%s", why);
    p.cfg = (struct attn_config){.sched = kind, .w = wave, .block_m = bm, .block_n = bn,
                                 .batch_invariant = par->has_batch_invariant && par->batch_invariant};
    *ret_plan = p;
    return 0;
}

int val_forward(const Dash__Forward *m, const struct val_limits *lim, val_lookup_fn lookup,
                void *ctx, char *msg, size_t msglen, struct val_plan *ret_plan)
{
    if (!m)
        return fail(msg, msglen, DASH_EMALFORMED, "forward is missing");
    struct refs r = {m->params, {m->q, m->k, m->v, m->out, m->lse}, VAL_LSE + 1, m->varlen};
    return validate(&r, lim, lookup, ctx, msg, msglen, ret_plan);
}

int val_backward(const Dash__Backward *m, const struct val_limits *lim, val_lookup_fn lookup,
                 void *ctx, char *msg, size_t msglen, struct val_plan *ret_plan)
{
    if (!m)
        return fail(msg, msglen, DASH_EMALFORMED, "backward is missing");
    struct refs r = {m->params,
                     {m->q, m->k, m->v, m->out, m->lse, m->dout, m->dq, m->dk, m->dv},
                     VAL_SLOTS, m->varlen};
    return validate(&r, lim, lookup, ctx, msg, msglen, ret_plan);
}
