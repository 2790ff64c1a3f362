// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_bwd.cu - the backward kernels, run in the order the schedule (kernels/sched/sched.h)
 * prescribes.
 *
 *   attn_bwd_preprocess_kernel   Dsum_i = rowsum(dO o O) (fp32, from the stored O); the
 *                                fp32 dQ accumulator is zeroed by a memset before it.
 *   attn_bwd_persistent_kernel   the units (kv-tile n of one (batch, q-head)). For each
 *                                q-tile m the unit visits, in the schedule's order:
 *                                    S = Q K^T, P = exp(scale S - LSE) (0 where masked)
 *                                    dV += P^T dO,  dP = dO V^T,  dS = P o (dP - Dsum)
 *                                    dK += dS^T Q,  dQp = dS K
 *                                and adds dQp into dQacc[m] when counter[m] == rank. At the
 *                                end of a unit dK (times scale) and dV are stored, or kept
 *                                in fp32 per q-head for GQA.
 *   attn_bwd_interleaved_kernel  the same units and steps, in the interleaved mode below.
 *   attn_bwd_postprocess_kernel  dQ = scale dQacc, rounded to the input dtype.
 *   attn_bwd_dkv_sum_kernel      GQA: dK, dV of a kv head = sum over its q-heads, ascending
 *                                (bwd_rows.cuh, shared with v2 and v3).
 *
 * Determinism. Each dQ tile's additions happen in rank order: thread 0 waits (acquire)
 * until the tile's counter equals the rank, the CTA adds its partial (the turn is
 * exclusive, so a plain read-add-write at L2 is enough), every thread fences, the CTA
 * meets at a barrier, and only then thread 0 fences again and release-stores rank + 1.
 * So addition k+1 into a tile reads the accumulator only after addition k has landed.
 * dK/dV of a unit accumulate inside the unit in its visit order, i ascending within a
 * step; every other sum is a fixed loop or shuffle tree. Nothing depends on which CTA
 * runs what, so the bits do not depend on the grid.
 *
 * Two modes, one step function (bwd_step: same loops, same FMAs):
 *   persistent   CTAs take jobs in dispatch order from a job counter and run each job's
 *                stages and steps, blocking on each turn; dK/dV stay in registers. Any
 *                grid works for the fixed-order schedules (a unit waits only on units
 *                earlier in dispatch order, all taken by running CTAs); shift needs
 *                min(W, jobs per chunk) CTAs running at once - the host checks.
 *   interleaved  shift on a small grid (or any schedule, forced by a test): min(W, jobs)
 *                virtual SMs, virtual SM v runs jobs v, v+W, ... (the CPU engine's model).
 *                CTA c steps virtual SMs c, c+grid, ... in turn; one whose turn has not
 *                come keeps its dK/dV and pending dQ partial (in registers while it is the
 *                CTA's only live one, else in global scratch) and the CTA moves on, so no
 *                wait can block a CTA.
 * In both, all `grid` CTAs must be able to be resident at once; the host caps grid.
 */
#include "kernels/cuda/attn_cuda_int.h"
#include "kernels/cuda/bwd_rows.cuh"

#include <math.h>

template <int D>
struct bwd_smem {
    uint16_t k_smem[ATTN_BN * attn_ld<D>::v];    /* (64, D + 2) K tile of the unit */
    uint16_t v_smem[ATTN_BN * attn_ld<D>::v];    /* (64, D + 2) V tile of the unit */
    uint16_t q_smem[ATTN_BM * attn_ld<D>::v];    /* (64, D + 2) Q tile of the step */
    uint16_t dout_smem[ATTN_BM * attn_ld<D>::v]; /* (64, D + 2) dO tile of the step */
    float p_smem[ATTN_BM * ATTN_PS];             /* (64, 65) P */
    float ds_smem[ATTN_BM * ATTN_PS];            /* (64, 65) dS */
    float lse_smem[ATTN_BM];                     /* (64) LSE rows of the step, +inf past Sq */
    float dsum_smem[ATTN_BM];                    /* (64) Dsum rows of the step, 0 past Sq */
    int32_t flag_smem;                           /* broadcast from thread 0 */
};

/* Registers of one unit: the thread's share of dK, dV and of the pending dQ partial. */
template <int D>
struct bwd_regs {
    float dk_reg[4][D / 16];
    float dv_reg[4][D / 16];
    float dq_reg[4][D / 16];
};

/* Load the unit's K and V tiles. */
template <int D>
static __device__ void bwd_load_kv(const struct attn_bwd_params &p, bwd_smem<D> &sm, int32_t bh,
                                   int32_t n)
{
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * ATTN_BN, rn = p.seqlen_k - j0 < ATTN_BN ? p.seqlen_k - j0 : ATTN_BN;
    attn_load_tile<D>(sm.k_smem, static_cast<const uint16_t *>(p.k),
                      b * p.k_stride[0] + j0 * p.k_stride[1] + hk * p.k_stride[2], p.k_stride[1], rn);
    attn_load_tile<D>(sm.v_smem, static_cast<const uint16_t *>(p.v),
                      b * p.v_stride[0] + j0 * p.v_stride[1] + hk * p.v_stride[2], p.v_stride[1], rn);
    __syncthreads(); /* K and V are complete before the unit's first step reads them */
}

template <int D>
static __device__ __forceinline__ void bwd_zero_kv(bwd_regs<D> &x)
{
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int e = 0; e < D / 16; e++) {
            x.dk_reg[r][e] = 0.0f;
            x.dv_reg[r][e] = 0.0f;
        }
}

/*
 * One step: unit (bh, n) against q-tile m. Updates x.dk_reg, x.dv_reg and leaves the dQ partial
 * in x.dq_reg. K/V of the unit must be in shared memory. Both modes run exactly this code.
 */
template <typename DT, int D>
static __device__ void bwd_step(const struct attn_bwd_params &p, bwd_smem<D> &sm, bwd_regs<D> &x,
                                int32_t bh, int32_t n, int32_t m)
{
    const int32_t LD = attn_ld<D>::v;
    const int32_t DC = D / 32;
    const int32_t tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
    const int32_t i0 = m * ATTN_BM, rm = p.seqlen_q - i0 < ATTN_BM ? p.seqlen_q - i0 : ATTN_BM;
    const int32_t j0 = n * ATTN_BN, rn = p.seqlen_k - j0 < ATTN_BN ? p.seqlen_k - j0 : ATTN_BN;
    const int64_t offset = (int64_t)p.seqlen_k - p.seqlen_q;
    const int causal = p.s.mask == SCHED_MASK_CAUSAL;

    attn_load_tile<D>(sm.q_smem, static_cast<const uint16_t *>(p.q),
                      b * p.q_stride[0] + i0 * p.q_stride[1] + h * p.q_stride[2], p.q_stride[1], rm);
    attn_load_tile<D>(sm.dout_smem, static_cast<const uint16_t *>(p.dout),
                      b * p.dout_stride[0] + i0 * p.dout_stride[1] + h * p.dout_stride[2],
                      p.dout_stride[1], rm);
    if (tid < ATTN_BM) {
        const int64_t row = (int64_t)bh * p.seqlen_q + i0 + tid;
        sm.lse_smem[tid] = tid < rm ? p.lse[row] : INFINITY;
        sm.dsum_smem[tid] = tid < rm ? p.dsum[row] : 0.0f;
    }
    __syncthreads(); /* Q, dO, LSE and Dsum of the step are complete before anyone reads them */

    /* S = Q K^T and dP = dO V^T, d ascending */
    float s_reg[4][4], dp_reg[4][4];
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            s_reg[r][c] = 0.0f;
            dp_reg[r][c] = 0.0f;
        }
#pragma unroll 2
    for (int32_t d = 0; d < D; d += 2) {
        float2 qv[4], ov[4], kv[4], vv[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            qv[r] = attn_pair<DT>(sm.q_smem + (ty + 16 * r) * LD, d);
            ov[r] = attn_pair<DT>(sm.dout_smem + (ty + 16 * r) * LD, d);
        }
#pragma unroll
        for (int c = 0; c < 4; c++) {
            kv[c] = attn_pair<DT>(sm.k_smem + (tx + 16 * c) * LD, d);
            vv[c] = attn_pair<DT>(sm.v_smem + (tx + 16 * c) * LD, d);
        }
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                s_reg[r][c] = fmaf(qv[r].x, kv[c].x, s_reg[r][c]);
                s_reg[r][c] = fmaf(qv[r].y, kv[c].y, s_reg[r][c]);
                dp_reg[r][c] = fmaf(ov[r].x, vv[c].x, dp_reg[r][c]);
                dp_reg[r][c] = fmaf(ov[r].y, vv[c].y, dp_reg[r][c]);
            }
    }

    /* P = exp(scale S - LSE), 0 where masked; dS = P (dP - Dsum) */
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int32_t i = ty + 16 * r;
        const float lse = sm.lse_smem[i], dsum = sm.dsum_smem[i];
        const int64_t last = (int64_t)i0 + i + offset - j0; /* last visible j in the tile */
#pragma unroll
        for (int c = 0; c < 4; c++) {
            const int32_t j = tx + 16 * c;
            const bool vis = i < rm && j < rn && (!causal || j <= last);
            const float pr = vis ? expf(__fsub_rn(__fmul_rn(s_reg[r][c], p.scale), lse)) : 0.0f;
            sm.p_smem[i * ATTN_PS + j] = pr;
            sm.ds_smem[i * ATTN_PS + j] = vis ? __fmul_rn(pr, __fsub_rn(dp_reg[r][c], dsum)) : 0.0f;
        }
    }
    __syncthreads(); /* P and dS are complete before the products below read other rows */

    /* dV += P^T dO and dK += dS^T Q, i ascending */
#pragma unroll 2
    for (int32_t i = 0; i < ATTN_BM; i++) {
        float pj[4], dsj[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            pj[r] = sm.p_smem[i * ATTN_PS + ty + 16 * r];
            dsj[r] = sm.ds_smem[i * ATTN_PS + ty + 16 * r];
        }
#pragma unroll
        for (int c = 0; c < DC; c++) {
            const float2 ov = attn_pair<DT>(sm.dout_smem + i * LD, 2 * tx + 32 * c);
            const float2 qv = attn_pair<DT>(sm.q_smem + i * LD, 2 * tx + 32 * c);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                x.dv_reg[r][2 * c] = fmaf(pj[r], ov.x, x.dv_reg[r][2 * c]);
                x.dv_reg[r][2 * c + 1] = fmaf(pj[r], ov.y, x.dv_reg[r][2 * c + 1]);
                x.dk_reg[r][2 * c] = fmaf(dsj[r], qv.x, x.dk_reg[r][2 * c]);
                x.dk_reg[r][2 * c + 1] = fmaf(dsj[r], qv.y, x.dk_reg[r][2 * c + 1]);
            }
        }
    }

    /* dQp = dS K, j ascending */
#pragma unroll
    for (int r = 0; r < 4; r++)
#pragma unroll
        for (int e = 0; e < 2 * DC; e++)
            x.dq_reg[r][e] = 0.0f;
#pragma unroll 2
    for (int32_t j = 0; j < ATTN_BN; j++) {
        float dsi[4];
#pragma unroll
        for (int r = 0; r < 4; r++)
            dsi[r] = sm.ds_smem[(ty + 16 * r) * ATTN_PS + j];
#pragma unroll
        for (int c = 0; c < DC; c++) {
            const float2 kv = attn_pair<DT>(sm.k_smem + j * LD, 2 * tx + 32 * c);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                x.dq_reg[r][2 * c] = fmaf(dsi[r], kv.x, x.dq_reg[r][2 * c]);
                x.dq_reg[r][2 * c + 1] = fmaf(dsi[r], kv.y, x.dq_reg[r][2 * c + 1]);
            }
        }
    }
    __syncthreads(); /* every read of Q, dO, P, dS (and K) is done before they are overwritten */
}

/* Add the dQ partial into dQacc[m]. The caller holds the tile's turn (or the schedule is
 * atomic, where additions race on purpose). */
template <int D>
static __device__ __forceinline__ void bwd_add_dq(const struct attn_bwd_params &p,
                                                  const bwd_regs<D> &x, int32_t bh, int32_t m)
{
    const int32_t tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int32_t i0 = m * ATTN_BM, rm = p.seqlen_q - i0 < ATTN_BM ? p.seqlen_q - i0 : ATTN_BM;
    float *acc = p.dq_acc + ((int64_t)bh * p.seqlen_q + i0) * D; /* (rm, D) rows of the tile */
    const bool atomic = p.s.kind == SCHED_ATOMIC;
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int32_t i = ty + 16 * r;
        if (i >= rm)
            continue;
#pragma unroll
        for (int c = 0; c < D / 32; c++) {
            float *at = acc + i * D + 2 * tx + 32 * c;
            if (atomic) {
                atomicAdd(at, x.dq_reg[r][2 * c]);
                atomicAdd(at + 1, x.dq_reg[r][2 * c + 1]);
            } else {
                /* .cg: read and write at L2, the point of coherence; never a stale L1 line */
                float2 a = __ldcg(reinterpret_cast<const float2 *>(at));
                a.x = __fadd_rn(a.x, x.dq_reg[r][2 * c]);
                a.y = __fadd_rn(a.y, x.dq_reg[r][2 * c + 1]);
                __stcg(reinterpret_cast<float2 *>(at), a);
            }
        }
    }
}

/* The tail of an addition: make it visible at GPU scope, then pass the tile on. */
static __device__ __forceinline__ void bwd_release(int32_t *ctr, int32_t rank)
{
    __threadfence(); /* this thread's part of the addition is visible GPU-wide ... */
    __syncthreads(); /* ... and so is every other thread's before thread 0 goes on */
    if (threadIdx.x == 0 && rank >= 0) {
        __threadfence(); /* cumulative: orders the whole CTA's addition before the store */
        attn_st_release(ctr, rank + 1);
    }
}

/* Store the unit's dK (times scale) and dV: straight to the outputs, or per q-head fp32
 * for GQA (summed by attn_bwd_dkv_sum_kernel). */
template <typename DT, int D>
static __device__ void bwd_store_unit(const struct attn_bwd_params &p, const bwd_regs<D> &x,
                                      int32_t bh, int32_t n)
{
    const int32_t tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * ATTN_BN, rn = p.seqlen_k - j0 < ATTN_BN ? p.seqlen_k - j0 : ATTN_BN;
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
#pragma unroll
    for (int r = 0; r < 4; r++) {
        const int32_t j = ty + 16 * r;
        if (j >= rn)
            continue;
#pragma unroll
        for (int e = 0; e < D / 16; e++) {
            const int32_t d = 2 * tx + 32 * (e >> 1) + (e & 1);
            const float dk = __fmul_rn(x.dk_reg[r][e], p.scale), dv = x.dv_reg[r][e];
            if (p.group == 1) {
                dk_g[b * p.dk_stride[0] + (int64_t)(j0 + j) * p.dk_stride[1] + hk * p.dk_stride[2] + d] =
                    DT::from_f(dk);
                dv_g[b * p.dv_stride[0] + (int64_t)(j0 + j) * p.dv_stride[1] + hk * p.dv_stride[2] + d] =
                    DT::from_f(dv);
            } else {
                const int64_t at = ((int64_t)bh * p.seqlen_k + j0 + j) * D + d;
                p.dk_acc[at] = dk;
                p.dv_acc[at] = dv;
            }
        }
    }
}

/* Interleaved mode: a virtual SM's registers in global scratch, (3, D/4, 256) floats,
 * thread-minor so that the CTA's accesses coalesce. */
template <int D>
static __device__ __forceinline__ float *bwd_vsm_data(const struct attn_bwd_params &p, int32_t v)
{
    return p.vsm_data + (int64_t)v * 3 * (D / 4) * ATTN_THREADS + threadIdx.x;
}

template <int D>
static __device__ void bwd_vsm_save(const struct attn_bwd_params &p, int32_t v, const int32_t *st,
                                    const bwd_regs<D> &x)
{
    float *data = bwd_vsm_data<D>(p, v);
    if (threadIdx.x == 0)
        for (int i = 0; i < VSM_USED; i++)
            p.vsm_state[(int64_t)v * VSM_SLOTS + i] = st[i];
    if (st[VSM_LOADED])
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int e = 0; e < D / 16; e++) {
                data[((0 * (D / 4)) + r * (D / 16) + e) * ATTN_THREADS] = x.dk_reg[r][e];
                data[((1 * (D / 4)) + r * (D / 16) + e) * ATTN_THREADS] = x.dv_reg[r][e];
            }
    if (st[VSM_PENDING])
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int e = 0; e < D / 16; e++)
                data[((2 * (D / 4)) + r * (D / 16) + e) * ATTN_THREADS] = x.dq_reg[r][e];
}

template <int D>
static __device__ void bwd_vsm_restore(const struct attn_bwd_params &p, int32_t v, const int32_t *st,
                                       bwd_regs<D> &x)
{
    const float *data = bwd_vsm_data<D>(p, v);
    if (st[VSM_LOADED])
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int e = 0; e < D / 16; e++) {
                x.dk_reg[r][e] = data[((0 * (D / 4)) + r * (D / 16) + e) * ATTN_THREADS];
                x.dv_reg[r][e] = data[((1 * (D / 4)) + r * (D / 16) + e) * ATTN_THREADS];
            }
    if (st[VSM_PENDING])
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int e = 0; e < D / 16; e++)
                x.dq_reg[r][e] = data[((2 * (D / 4)) + r * (D / 16) + e) * ATTN_THREADS];
}

/* Persistent mode: take jobs in dispatch order; block on each turn. */
template <typename DT, int D>
static __device__ void bwd_persistent(const struct attn_bwd_params &p, bwd_smem<D> &sm)
{
    const struct sched *s = &p.s;
    bwd_regs<D> x;
    for (;;) {
        if (threadIdx.x == 0)
            sm.flag_smem = atomicAdd(p.job_next, 1);
        __syncthreads(); /* the job index is visible to every thread */
        const int32_t job = sm.flag_smem;
        __syncthreads(); /* everyone has read it before thread 0 may write the next one */
        if (job >= s->jobs)
            return;
        const struct sched_job J = sched_job_at(s, job);
        for (int32_t stage = 0; stage < sched_job_stages(s, J.k); stage++) {
            const int32_t n = sched_job_unit(s, J.k, stage);
            bwd_load_kv<D>(p, sm, J.bh, n);
            bwd_zero_kv<D>(x);
            const int32_t steps = sched_unit_steps(s, n);
            for (int32_t step = 0; step < steps; step++) {
                const int32_t m = sched_visit(s, &J, stage, step);
                /* the rank before the step, so that its arithmetic is not live beside the
                 * dQ partial (head dim 256 has no registers to spare there) */
                const int32_t rank =
                    threadIdx.x == 0 && s->kind != SCHED_ATOMIC ? sched_rank(s, &J, stage, m) : -1;
                bwd_step<DT, D>(p, sm, x, J.bh, n, m);
                int32_t *ctr = p.counter + (int64_t)J.bh * s->m_tiles + m;
                if (threadIdx.x == 0 && s->kind != SCHED_ATOMIC) {
                    /* The unit whose addition we wait for was taken earlier by a running
                     * CTA (or, for shift, by one of the >= W resident CTAs), so it comes. */
                    uint32_t ns = 32;
                    while (attn_ld_acquire(ctr) != rank) {
                        __nanosleep(ns);
                        ns = ns < 1024 ? ns * 2 : ns;
                    }
                    __threadfence();
                }
                __syncthreads(); /* our turn has come, for the whole CTA */
                bwd_add_dq<D>(p, x, J.bh, m);
                bwd_release(ctr, rank);
            }
            bwd_store_unit<DT, D>(p, x, J.bh, n);
        }
    }
}

/* Interleaved mode: virtual SMs blockIdx.x, blockIdx.x + gridDim.x, ... in turn. */
template <typename DT, int D>
static __device__ void bwd_interleaved(const struct attn_bwd_params &p, bwd_smem<D> &sm)
{
    const struct sched *s = &p.s;
    bwd_regs<D> x;
    int32_t st[VSM_USED]; /* the held virtual SM's state; VSM_RANK is valid in thread 0 only */
    int32_t held = -1;     /* the virtual SM whose registers and K/V are on chip */

    if (threadIdx.x == 0)
        for (int32_t v = blockIdx.x; v < p.nvsm; v += gridDim.x)
            for (int i = 0; i < VSM_USED; i++)
                p.vsm_state[(int64_t)v * VSM_SLOTS + i] = i == VSM_JOB ? v : 0;
    for (int i = 0; i < VSM_USED; i++)
        st[i] = 0;
    __syncthreads(); /* the states are initialised before anyone reads them */

    uint32_t ns = 32;
    for (;;) {
        int active = 0, progress = 0;
        for (int32_t v = blockIdx.x; v < p.nvsm; v += gridDim.x) {
            if (v != held) {
                /* (written by thread 0, then a barrier.) The rest of v's state is read
                 * once the held one's is saved: it is not live beside the registers saved */
                const int32_t *state = p.vsm_state + (int64_t)v * VSM_SLOTS;
                if (__ldcg(state + VSM_JOB) >= s->jobs)
                    continue;
                if (held >= 0)
                    bwd_vsm_save<D>(p, held, st, x);
                held = v;
                for (int i = 0; i < VSM_USED; i++)
                    st[i] = __ldcg(state + i);
                bwd_vsm_restore<D>(p, v, st, x);
                if (st[VSM_LOADED]) {
                    const struct sched_job J = sched_job_at(s, st[VSM_JOB]);
                    bwd_load_kv<D>(p, sm, J.bh, sched_job_unit(s, J.k, st[VSM_STAGE]));
                }
            } else if (st[VSM_JOB] >= s->jobs) {
                continue;
            }
            active = 1;
            /* Run this virtual SM until it must wait or is done. */
            while (st[VSM_JOB] < s->jobs) {
                const struct sched_job J = sched_job_at(s, st[VSM_JOB]);
                const int32_t n = sched_job_unit(s, J.k, st[VSM_STAGE]);
                if (!st[VSM_PENDING]) {
                    if (!st[VSM_LOADED]) {
                        bwd_load_kv<D>(p, sm, J.bh, n);
                        bwd_zero_kv<D>(x);
                        st[VSM_LOADED] = 1;
                    }
                    st[VSM_M] = sched_visit(s, &J, st[VSM_STAGE], st[VSM_STEP]);
                    if (threadIdx.x == 0) /* (before the step, as in bwd_persistent) */
                        st[VSM_RANK] = sched_rank(s, &J, st[VSM_STAGE], st[VSM_M]);
                    bwd_step<DT, D>(p, sm, x, J.bh, n, st[VSM_M]);
                    st[VSM_PENDING] = 1;
                    progress = 1;
                }
                int32_t *ctr = p.counter + (int64_t)J.bh * s->m_tiles + st[VSM_M];
                if (threadIdx.x == 0) {
                    const int go = st[VSM_RANK] < 0 || attn_ld_acquire(ctr) == st[VSM_RANK];
                    if (go)
                        __threadfence();
                    sm.flag_smem = go;
                }
                __syncthreads(); /* thread 0's verdict on the turn is visible to all */
                const int go = sm.flag_smem;
                __syncthreads(); /* everyone has read it before thread 0 may write it again */
                if (!go)
                    break; /* not our turn: keep the partial, try the next virtual SM */
                bwd_add_dq<D>(p, x, J.bh, st[VSM_M]);
                bwd_release(ctr, threadIdx.x == 0 ? st[VSM_RANK] : -1);
                st[VSM_PENDING] = 0;
                progress = 1;
                if (++st[VSM_STEP] < sched_unit_steps(s, n))
                    continue;
                bwd_store_unit<DT, D>(p, x, J.bh, n);
                st[VSM_LOADED] = 0;
                st[VSM_STEP] = 0;
                if (++st[VSM_STAGE] < sched_job_stages(s, J.k))
                    continue;
                st[VSM_STAGE] = 0;
                st[VSM_JOB] += p.nvsm;
            }
        }
        if (!active)
            return;
        if (progress) {
            ns = 32;
        } else {
            __nanosleep(ns); /* every virtual SM waits on another CTA: back off */
            ns = ns < 1024 ? ns * 2 : ns;
        }
    }
}

/* A kernel per mode: apart, each fits its registers at head dim 256 (dK, dV and the dQ
 * partial take 192 a thread); together they spilled. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_bwd_persistent_kernel(const struct attn_bwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bwd_persistent<DT, D>(p, *reinterpret_cast<bwd_smem<D> *>(smem_raw));
}

template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_bwd_interleaved_kernel(const struct attn_bwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    bwd_interleaved<DT, D>(p, *reinterpret_cast<bwd_smem<D> *>(smem_raw));
}

/* One thread per row (bh, i): Dsum = sum_d dO O as one fmaf chain, d ascending - the same
 * chain bwd_step forms for dP = dO V^T. So where a row's softmax puts all its weight on
 * one key (O = V exactly), dP - Dsum is exactly 0, as it is in exact arithmetic. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_preprocess_kernel(const struct attn_bwd_params p)
{
    const int64_t rows = (int64_t)p.s.bh * p.seqlen_q;
    const uint16_t *o_g = static_cast<const uint16_t *>(p.out);
    const uint16_t *do_g = static_cast<const uint16_t *>(p.dout);
    for (int64_t row = (int64_t)blockIdx.x * ATTN_THREADS + threadIdx.x; row < rows;
         row += (int64_t)gridDim.x * ATTN_THREADS) {
        const int32_t bh = (int32_t)(row / p.seqlen_q), i = (int32_t)(row - (int64_t)bh * p.seqlen_q);
        const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
        const int64_t oa = b * p.out_stride[0] + (int64_t)i * p.out_stride[1] + h * p.out_stride[2];
        const int64_t da = b * p.dout_stride[0] + (int64_t)i * p.dout_stride[1] + h * p.dout_stride[2];
        float sum = 0.0f;
#pragma unroll 8
        for (int32_t d = 0; d < D; d++)
            sum = fmaf(DT::to_f(do_g[da + d]), DT::to_f(o_g[oa + d]), sum);
        p.dsum[row] = sum;
    }
}

/* dQ = scale dQacc, one thread per element. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_postprocess_kernel(const struct attn_bwd_params p)
{
    const int64_t total = (int64_t)p.s.bh * p.seqlen_q * D;
    uint16_t *dq_g = static_cast<uint16_t *>(p.dq);
    for (int64_t e = (int64_t)blockIdx.x * ATTN_THREADS + threadIdx.x; e < total;
         e += (int64_t)gridDim.x * ATTN_THREADS) {
        const int64_t row = e / D;
        const int32_t d = (int32_t)(e - row * D);
        const int32_t bh = (int32_t)(row / p.seqlen_q), i = (int32_t)(row - (int64_t)bh * p.seqlen_q);
        const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
        dq_g[b * p.dq_stride[0] + (int64_t)i * p.dq_stride[1] + h * p.dq_stride[2] + d] =
            DT::from_f(__fmul_rn(p.dq_acc[e], p.scale));
    }
}

/* ---- host side ---------------------------------------------------------------------- */

template <typename DT, int D>
static cudaError_t bwd_launch(const struct attn_bwd_params *p, int32_t grid, int32_t sms,
                              cudaStream_t stream)
{
    cudaError_t err;
    const int64_t rows_q = (int64_t)p->s.bh * p->seqlen_q;
    if ((err = attn_bwd_zero_state(p, D, stream)) != cudaSuccess)
        return err;
    attn_bwd_preprocess_kernel<DT, D>
        <<<attn_bwd_rows_grid(rows_q, ATTN_THREADS, sms), ATTN_THREADS, 0, stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    if (p->mode == ATTN_MODE_INTERLEAVED)
        attn_bwd_interleaved_kernel<DT, D><<<(uint32_t)grid, ATTN_THREADS, sizeof(bwd_smem<D>), stream>>>(*p);
    else
        attn_bwd_persistent_kernel<DT, D><<<(uint32_t)grid, ATTN_THREADS, sizeof(bwd_smem<D>), stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    attn_bwd_postprocess_kernel<DT, D>
        <<<attn_bwd_rows_grid(rows_q * D, ATTN_THREADS, sms), ATTN_THREADS, 0, stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    return attn_bwd_dkv_sum<DT, D>(p, sms, stream);
}

/* Raise the main kernel's shared-memory limit where the device has room for its tiles. */
template <typename DT, int D>
static cudaError_t bwd_attr(size_t smem_optin)
{
    if (sizeof(bwd_smem<D>) > smem_optin)
        return cudaSuccess; /* unusable here: cuattn_backward refuses this head dim */
    const cudaError_t err = cudaFuncSetAttribute(attn_bwd_persistent_kernel<DT, D>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sizeof(bwd_smem<D>));
    if (err != cudaSuccess)
        return err;
    return cudaFuncSetAttribute(attn_bwd_interleaved_kernel<DT, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)sizeof(bwd_smem<D>));
}

/* The smaller of the two kernels' figures: the host picks the grid before the mode. */
template <typename DT, int D>
static cudaError_t bwd_occupancy(int32_t *ret)
{
    static int32_t cache[ATTN_OCC_DEVICES];
    return attn_occupancy_once(cache, [](int32_t *r) {
        int a = 0, b = 0;
        cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&a, attn_bwd_persistent_kernel<DT, D>,
                                                                        ATTN_THREADS, sizeof(bwd_smem<D>));
        if (err == cudaSuccess)
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, attn_bwd_interleaved_kernel<DT, D>,
                                                                ATTN_THREADS, sizeof(bwd_smem<D>));
        if (err == cudaSuccess)
            *r = a < b ? a : b;
        return err;
    }, ret);
}

cudaError_t cuattn__bwd_init(size_t smem_optin)
{
    cudaError_t err;
    if ((err = bwd_attr<attn_bf16, 64>(smem_optin)) != cudaSuccess ||
        (err = bwd_attr<attn_f16, 64>(smem_optin)) != cudaSuccess ||
        (err = bwd_attr<attn_bf16, 96>(smem_optin)) != cudaSuccess ||
        (err = bwd_attr<attn_f16, 96>(smem_optin)) != cudaSuccess ||
        (err = bwd_attr<attn_bf16, 128>(smem_optin)) != cudaSuccess ||
        (err = bwd_attr<attn_f16, 128>(smem_optin)) != cudaSuccess ||
        (err = bwd_attr<attn_bf16, 256>(smem_optin)) != cudaSuccess ||
        (err = bwd_attr<attn_f16, 256>(smem_optin)) != cudaSuccess)
        return err;
    return cudaSuccess;
}

size_t cuattn__bwd_smem_bytes(int32_t head_dim)
{
    switch (head_dim) {
    case 64:
        return sizeof(bwd_smem<64>);
    case 96:
        return sizeof(bwd_smem<96>);
    case 128:
        return sizeof(bwd_smem<128>);
    case 256:
        return sizeof(bwd_smem<256>);
    default:
        return 0;
    }
}

cudaError_t cuattn__bwd_blocks_per_sm(enum dtype_kind dt, int32_t head_dim, int32_t *ret)
{
#define BWD_OCC(T, D) bwd_occupancy<T, D>(ret)
    ATTN_V1_DISPATCH(dt, head_dim, BWD_OCC);
#undef BWD_OCC
}

cudaError_t cuattn__bwd_launch(const struct attn_bwd_params *p, enum dtype_kind dt,
                               int32_t grid, int32_t sms, cudaStream_t stream)
{
#define BWD_RUN(T, D) bwd_launch<T, D>(p, grid, sms, stream)
    ATTN_V1_DISPATCH(dt, p->head_dim, BWD_RUN);
#undef BWD_RUN
}
