// SPDX-License-Identifier: BSD-3-Clause
/*
 * bwd_wgmma.cuh - v3's step of the backward on Hopper warpgroup products (sm_90a) and its
 * dQ writer warp: overloads of bwd_mma.cuh's per-step functions for v3's registers, used by
 * the shared drivers in attn_bwd_tc.cu. Included by attn_bwd_tc.cu only, after bwd_mma.cuh.
 */
#ifndef DASH_KERNELS_CUDA_BWD_WGMMA_CUH
#define DASH_KERNELS_CUDA_BWD_WGMMA_CUH

/* ---- v3: the step on Hopper warpgroup products (sm_90a) ---------------------------------
 *
 * The same units, steps, schedules, turns and dQ hand-off as v2 (the drivers below are
 * shared), 64 x 128 tiles only; the five products are wgmma.mma_async with both operands
 * in shared memory (attn_wgmma.h), so no thread loads fragments. Two warpgroups of four
 * warps (wg = warp / 4, wi = warp % 4):
 *   S, dP (64 x 128):  warpgroup wg forms kv columns 64 wg .. +64 (m64n64, k = d);
 *   dV, dK (128 x D):  warpgroup wg owns kv rows 64 wg .. +64 (m64nD, k = i, P^T and
 *                      dS^T read MN-major from the tiles P and dS - its own columns);
 *   dQp (64 x D):      warpgroup wg forms d columns (D/2) wg .. +D/2 (m64n(D/2), k = j).
 * Every input tile (K, V, Q, dO, P, dS) is 16-bit in the 128-byte swizzled layout, so the
 * one copy serves the K-major and the MN-major reads. Each element of each product is one
 * chain of wgmma over its k in ascending k16 steps, a fixed function of the operands: the
 * bits repeat, and do not depend on the grid or the mode, as in v2 (they differ from
 * v2's: the tensor cores group their sums differently). Registers per thread: dK, dV
 * D/2 floats each, dQp D/4 (the same count as v2's, so the interleaved scratch is too).
 */
/* The dQ hand-off of the persistent mode is per warpgroup (../shared/docs/hopper.md, B5):
 * warpgroup wg forms d columns (D/2) wg .. +D/2 of the step's dQ partial, stages them in
 * its own slice dq_smem[wg] and signals the writer warp on its own pair of mbarriers, so a
 * warpgroup waits for nobody but the writer there, and the writer adds each slice with its
 * own bulk reduction. The two warpgroups meet once a step, where dS is complete (dQp reads
 * both warpgroups' columns). Before a warpgroup overwrites dS in the next step, the other
 * must be done reading it: that is the other's hand-off signal of the step (its full_bar
 * phase, issued once its dQp has landed), which it gives long before (under its dK, dV);
 * no barrier at the end of the step. (A second dS buffer, taken by the step's parity,
 * would need no wait at all, but its runtime choice cost 100 B of spills at hdim 128 in
 * ptxas 13.0: the descriptors no longer folded into constants.) */
template <int D>
struct bwd_wg_smem {
    static constexpr bool swizzled = true;
    static constexpr bool writer = true; /* persistent mode: a ninth warp adds dQ (below) */
    uint16_t k_smem[CUATTN_TC_BLOCK_N * D];     /* (128, D) K of the unit, swizzled */
    uint16_t v_smem[CUATTN_TC_BLOCK_N * D];     /* (128, D) V */
    uint16_t q_smem[2][BWD_TC_BM * D];          /* (2, 64, D) Q of the step, of the next */
    uint16_t dout_smem[2][BWD_TC_BM * D];       /* (2, 64, D) dO likewise */
    uint16_t p_smem[BWD_TC_BM * CUATTN_TC_BLOCK_N];     /* (64, 128) P, input dtype */
    uint16_t ds_smem[BWD_TC_BM * CUATTN_TC_BLOCK_N];    /* (64, 128) dS */
    float dq_smem[2][BWD_TC_BM * D / 2]; /* (2, 64, D/2) warpgroup wg's dQ columns, bwd_wg_dq_at's layout */
    float lse_smem[2][BWD_TC_BM];
    float dsum_smem[2][BWD_TC_BM];
    int32_t visit_smem[BWD_TC_TAB + 1];
    int32_t rank_smem[BWD_TC_TAB + 1];
    int32_t flag_smem;
    int32_t ticket[4];   /* warpgroup 0 -> writer: bh, m, rank (-1 atomic), 1 at the end */
    uint64_t full_bar[2];  /* mbarriers: slice wg is staged (128 arrivals; ticket with wg 0's) */
    uint64_t empty_bar[2]; /* slice wg is free again (the writer's one arrival) */
    uint64_t q_bar[2];     /* the prefetch into q_smem[b] etc. has landed (256 arrivals) */
};
#define BWD_WG_TILES_ALIGNED(D)                                                                \
    (offsetof(bwd_wg_smem<D>, k_smem) == 0 && offsetof(bwd_wg_smem<D>, v_smem) % 1024 == 0 &&    \
     offsetof(bwd_wg_smem<D>, q_smem) % 1024 == 0 && offsetof(bwd_wg_smem<D>, dout_smem) % 1024 == 0 && \
     offsetof(bwd_wg_smem<D>, p_smem) % 1024 == 0 && offsetof(bwd_wg_smem<D>, ds_smem) % 1024 == 0 && \
     sizeof(bwd_wg_smem<D>::q_smem[0]) % 1024 == 0 && sizeof(bwd_wg_smem<D>::dout_smem[0]) % 1024 == 0 && \
     offsetof(bwd_wg_smem<D>, dq_smem) % 16 == 0)
static_assert(BWD_WG_TILES_ALIGNED(64) && BWD_WG_TILES_ALIGNED(128), "v3's tiles start on 1024-byte boundaries");
/* Every tile above is a multiple of 1024 bytes and starts the struct's 1024-aligned block
 * (the tiles come first):
 * the swizzle is a function of address bits, so the kernel aligns the struct (below). */
#define BWD_WG_ALIGN 1024

template <int D>
struct bwd_wg_regs {
    float dk_reg[D / 2]; /* m64nD accumulators: kv rows 64 wg + 16 wi + g (+8) */
    float dv_reg[D / 2];
    float dq_reg[D / 4]; /* m64n(D/2): q rows 16 wi + g (+8), columns (D/2) wg + .. */

    /* Accumulator element e of a thread: row 16 wi + g + 8 (e % 4 / 2) of the
     * warpgroup's rows, column 8 (e / 4) + 2 t4 + e % 2 (attn_wgmma.h). */
    static __device__ __forceinline__ int32_t row(int32_t e)
    {
        const int32_t lane = threadIdx.x & 31, wi = (threadIdx.x >> 5) & 3;
        return 16 * wi + (lane >> 2) + 8 * ((e >> 1) & 1);
    }
    static __device__ __forceinline__ int32_t col(int32_t e) { return 8 * (e >> 2) + 2 * (threadIdx.x & 3) + (e & 1); }
};

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_zero_kv(bwd_wg_regs<D> &x)
{
#pragma unroll
    for (int e = 0; e < D / 2; e++) {
        x.dk_reg[e] = 0.0f;
        x.dv_reg[e] = 0.0f;
    }
}

/*
 * v3's dQacc layout in the persistent mode: each 64-row tile of a head's (Sq, D) block (rm rows, the last one
 * short) holds warpgroup 0's columns 0 .. D/2-1 as rm rows of D/2 floats, then warpgroup
 * 1's columns likewise, so each warpgroup's part is one contiguous block that one bulk
 * reduction adds. Within a half row the 16-byte chunks are permuted as in bwd_tc_dq_at
 * (D/2 is 8 chunks or more), which keeps the staging stores free of bank conflicts. The
 * interleaved mode keeps v2's layout (bwd_tc_add_release below). Private to this file and
 * attn_bwd_tc.cu's postprocess.
 */
template <int D>
static __device__ __forceinline__ int64_t bwd_wg_dq_at(int32_t seqlen_q, int32_t i, int32_t d)
{
    const int32_t i0 = i & ~(BWD_TC_BM - 1), rm = seqlen_q - i0 < BWD_TC_BM ? seqlen_q - i0 : BWD_TC_BM;
    const int32_t h = d / (D / 2), dd = d - h * (D / 2);
    return (int64_t)i0 * D + (int64_t)h * rm * (D / 2) + (i - i0) * (D / 2) + bwd_tc_dq_at(i - i0, dd);
}

/* The warpgroup's dQp columns into its slice (64 rows of D/2, bwd_wg_dq_at's order; rows
 * past the tile's end are staged too and never added), then the fence that lets the bulk
 * reduction read them. */
template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_stage_dq(float *slice_smem, const bwd_wg_regs<D> &x)
{
#pragma unroll
    for (int e = 0; e < D / 4; e += 2) {
        const int32_t i = bwd_wg_regs<D>::row(e), d = bwd_wg_regs<D>::col(e);
        *reinterpret_cast<float2 *>(slice_smem + i * (D / 2) + bwd_tc_dq_at(i, d)) =
            make_float2(x.dq_reg[e], x.dq_reg[e + 1]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* sm_80 never runs v3 (its kernels trap there); this only lets the shared driver compile. */
template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_add_dq(const struct attn_bwd_params &, const bwd_wg_regs<D> &,
                                                     int32_t, int32_t)
{
    __trap();
}

template <typename DT, int D, int BN>
static __device__ __forceinline__ void bwd_tc_store_unit(const struct attn_bwd_params &p, const bwd_wg_regs<D> &x,
                                                         int32_t bh, int32_t n)
{
    const int32_t b = bh / p.heads_q, hk = (bh - b * p.heads_q) / p.group;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;
    const int32_t r0 = 64 * (threadIdx.x >> 7);
    uint16_t *dk_g = static_cast<uint16_t *>(p.dk), *dv_g = static_cast<uint16_t *>(p.dv);
#pragma unroll
    for (int e = 0; e < D / 2; e += 2) {
        const int32_t j = r0 + bwd_wg_regs<D>::row(e), d = bwd_wg_regs<D>::col(e);
        if (j >= rn)
            continue;
        const float dk0 = __fmul_rn(x.dk_reg[e], p.scale), dk1 = __fmul_rn(x.dk_reg[e + 1], p.scale);
        const float dv0 = x.dv_reg[e], dv1 = x.dv_reg[e + 1];
        if (p.group == 1) {
            attn_st_pair(dk_g + b * p.dk_stride[0] + (int64_t)(j0 + j) * p.dk_stride[1] + hk * p.dk_stride[2] + d,
                         DT::pack2(dk0, dk1));
            attn_st_pair(dv_g + b * p.dv_stride[0] + (int64_t)(j0 + j) * p.dv_stride[1] + hk * p.dv_stride[2] + d,
                         DT::pack2(dv0, dv1));
        } else {
            const int64_t at = ((int64_t)bh * p.seqlen_k + j0 + j) * D + d;
            *reinterpret_cast<float2 *>(p.dk_acc + at) = make_float2(dk0, dk1);
            *reinterpret_cast<float2 *>(p.dv_acc + at) = make_float2(dv0, dv1);
        }
    }
}

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_vsm_save(const struct attn_bwd_params &p, int32_t v,
                                                       const int32_t *st, const bwd_wg_regs<D> &x)
{
    float *data = bwd_tc_vsm_data<D, BN>(p, v);
    bwd_tc_vsm_save_state(p, v, st);
    if (st[VSM_LOADED])
#pragma unroll
        for (int e = 0; e < D / 2; e++) {
            data[e * ATTN_THREADS] = x.dk_reg[e];
            data[(D / 2 + e) * ATTN_THREADS] = x.dv_reg[e];
        }
    if (st[VSM_PENDING])
#pragma unroll
        for (int e = 0; e < D / 4; e++)
            data[(D + e) * ATTN_THREADS] = x.dq_reg[e];
}

template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_vsm_restore(const struct attn_bwd_params &p, int32_t v,
                                                          const int32_t *st, bwd_wg_regs<D> &x)
{
    const float *data = bwd_tc_vsm_data<D, BN>(p, v);
    if (st[VSM_LOADED])
#pragma unroll
        for (int e = 0; e < D / 2; e++) {
            x.dk_reg[e] = data[e * ATTN_THREADS];
            x.dv_reg[e] = data[(D / 2 + e) * ATTN_THREADS];
        }
    if (st[VSM_PENDING])
#pragma unroll
        for (int e = 0; e < D / 4; e++)
            x.dq_reg[e] = data[(D + e) * ATTN_THREADS];
}


#if ATTN_WGMMA
/* P and dS of the warpgroup's 64 x 64 block from its S and dP accumulators, rounded to
 * the input dtype into the swizzled P and dS tiles; MASK as in bwd_tc_pds (the values are
 * the same either way where the caller passes false). S becomes P on the way. The caller
 * has waited for S only: dP's group is waited for here, once P is formed. */
template <typename DT, bool MASK>
static __device__ __forceinline__ void bwd_wg_pds(const struct attn_bwd_params &p, uint16_t *p_smem,
                                                  uint16_t *ds_smem, const float *lse_smem,
                                                  const float *dsum_smem, float (&s)[32], float (&dp)[32],
                                                  int32_t i0, int32_t rm, int32_t j0, int32_t rn,
                                                  uint64_t *ds_free, uint32_t ds_parity)
{
    const int32_t c0 = 64 * (threadIdx.x >> 7); /* the warpgroup's first column */
    const int64_t offset = (int64_t)p.seqlen_k - p.seqlen_q;
    const int causal = p.s.mask == SCHED_MASK_CAUSAL;
    const float scale2 = __fmul_rn(p.scale, ATTN_LOG2E);
    int32_t lim[2]; /* row r's columns c0 + c with c < lim[r] are visible (MASK only) */
    float lse2[2], dsum[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int32_t i = bwd_wg_regs<64>::row(2 * r);
        lse2[r] = __fmul_rn(lse_smem[i], ATTN_LOG2E);
        dsum[r] = dsum_smem[i];
        lim[r] = 0;
        if (MASK) {
            const int64_t diag = (int64_t)i0 + i + offset - j0 + 1; /* past the last visible j */
            const int64_t end = causal && diag < rn ? diag : rn;
            lim[r] = i < rm && end > 0 ? (int32_t)end - c0 : -c0;
        }
    }
#pragma unroll
    for (int e = 0; e < 32; e++) {
        const int r = (e >> 1) & 1;
        const float pr = attn_ex2(fmaf(s[e], scale2, -lse2[r]));
        s[e] = !MASK || bwd_wg_regs<64>::col(e) < lim[r] ? pr : 0.0f;
    }
    attn_wg_wait<0>(); /* dP has landed: nothing in flight, so a wait here costs no wgmma wait */
    attn_wg_pin<32>(dp);
#if BWD_TC_BULK
    if (ds_free) /* the other warpgroup's dQp of the step before has read dS */
        attn_mbar_wait(ds_free, ds_parity);
#endif
#pragma unroll
    for (int e = 0; e < 32; e++) {
        const int r = (e >> 1) & 1;
        dp[e] = __fmul_rn(s[e], __fsub_rn(dp[e], dsum[r])); /* 0 where P is */
    }
#pragma unroll
    for (int e = 0; e < 32; e += 2) {
        const uint32_t at = attn_sw128(bwd_wg_regs<64>::row(e), c0 + bwd_wg_regs<64>::col(e), BWD_TC_BM) / 2;
        *reinterpret_cast<uint32_t *>(p_smem + at) = DT::pack2(s[e], s[e + 1]);
        *reinterpret_cast<uint32_t *>(ds_smem + at) = DT::pack2(dp[e], dp[e + 1]);
    }
}
#endif

#if BWD_TC_BULK
/* Every compute thread, after issuing its part of a prefetch (bwd_tc_load_q): bar's phase
 * completes once all 256 have arrived and every cp.async each had issued has landed (the
 * cp.async arrival raises the pending count until then; the plain arrival releases the
 * thread's ordinary stores, the zero rows past the end). */
static __device__ __forceinline__ void bwd_wg_q_arrive(uint64_t *bar)
{
    asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(attn_smem_u32(bar)) : "memory");
    attn_mbar_arrive(bar);
}

/* Thread 0, before the warps part: the barriers; a CTA-wide barrier must follow. */
template <int D>
static __device__ __forceinline__ void bwd_wg_init(bwd_wg_smem<D> &sm)
{
    for (int32_t b = 0; b < 2; b++) {
        attn_mbar_init(&sm.full_bar[b], ATTN_THREADS / 2);
        attn_mbar_init(&sm.empty_bar[b], 1);
        attn_mbar_init(&sm.q_bar[b], ATTN_THREADS);
    }
}

/* Thread 0: add rows [0, rm) of warpgroup h's staged slice into its part of dQacc tile m
 * of head bh (bwd_wg_dq_at), as one bulk reduction in its own bulk group. */
template <int D>
static __device__ __forceinline__ void bwd_wg_bulk_add(const struct attn_bwd_params &p, const float *slice_smem,
                                                       int32_t bh, int32_t m, int32_t h)
{
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    float *acc = p.dq_acc + ((int64_t)bh * p.seqlen_q + i0) * D + (int64_t)h * rm * (D / 2); /* 16-byte aligned */
    /* the turn was acquired through the generic proxy; the reduction runs in the async one */
    asm volatile("fence.proxy.async.global;" ::: "memory");
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(
                     __cvta_generic_to_global(acc)),
                 "r"(attn_smem_u32(slice_smem)), "r"((uint32_t)(rm * (D / 2) * sizeof(float)))
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

/* Interleaved mode's add and pass-on (bwd_mma.cuh's, for v3's registers). This mode adds
 * whole tiles in v2's dQacc layout (bwd_tc_dq_at; the postprocess reads it by the mode):
 * both warpgroups stage their columns into the two slices taken as one (64, D) tile, and
 * thread 0 adds it with one bulk reduction. (Staging in the slices' layout instead spilled
 * 24 B in this kernel at hdim 128, which also holds its virtual SM's state.) */
template <int D, int BN>
static __device__ __forceinline__ void bwd_tc_add_release(const struct attn_bwd_params &p, bwd_wg_smem<D> &sm,
                                                          const bwd_wg_regs<D> &x, int32_t bh, int32_t m,
                                                          int32_t *ctr, int32_t rank)
{
    float *tile = &sm.dq_smem[0][0]; /* (64, D) */
    const int32_t d0 = (D / 2) * (threadIdx.x >> 7);
#pragma unroll
    for (int e = 0; e < D / 4; e += 2) {
        const int32_t i = bwd_wg_regs<D>::row(e), d = d0 + bwd_wg_regs<D>::col(e);
        *reinterpret_cast<float2 *>(tile + i * D + bwd_tc_dq_at(i, d)) = make_float2(x.dq_reg[e], x.dq_reg[e + 1]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads(); /* the staged tile is complete before thread 0 hands it to the copy */
    if (threadIdx.x == 0) {
        bwd_tc_bulk_add<D>(p, tile, bh, m);
        bwd_tc_pass_on(ctr, rank); /* also: the copy has read the tile before it is reused */
    }
}
#endif

/* ---- v3's dQ writer warp (persistent mode) -----------------------------------------------
 *
 * In the persistent kernel a ninth warp adds the dQ tiles: each compute warpgroup stages
 * its columns of a step's partial in its slice sm.dq_smem[wg] and signals it (warpgroup 0
 * with a ticket: head, q-tile, rank), then goes on; the writer waits for the tile's turn,
 * adds slice 0 with one bulk reduction, then slice 1 with another, frees each slice as
 * soon as its reduction has read it, and passes the tile on the moment both additions are
 * performed. The compute warps wait for no turn and not for each other: only for their own
 * slice, which the writer frees one turn behind. The additions and their order are those
 * of the other paths (each element once per step, in rank order), so the bits are too.
 *
 * The hand-off runs on two mbarriers per slice in shared memory: full_bar[wg] completes a
 * phase when the warpgroup's 128 threads have staged their part and arrived (thread 0
 * writes the ticket first), empty_bar[wg] when the writer has read the ticket and the
 * reduction has read the slice. Arrivals release and waits acquire, so the ticket's and
 * the slices' stores and loads are ordered by the barriers themselves - a protocol
 * compute-sanitizer's racecheck follows (it did not follow a named-barrier form), and
 * whose state lives in shared memory, set up afresh by each CTA. Tickets alternate the
 * phases' parity: a thread's `phase` is the parity of the next one. */
struct bwd_wg_hand {
    uint32_t phase;  /* tickets handed over so far, mod 2 */
    uint32_t qphase; /* bit b: the parity of q_bar[b]'s next phase (the prefetches into b) */
};

#if BWD_TC_BULK
/* Compute warps: wait for the warpgroup's slice, stage into it, signal it (thread 0 with
 * the ticket: end 1 means no more tickets, and nothing is staged). */
template <int D>
static __device__ __forceinline__ void bwd_wg_hand_over(bwd_wg_smem<D> &sm, const bwd_wg_regs<D> &x,
                                                        bwd_wg_hand &h, int32_t wg, int32_t bh, int32_t m,
                                                        int32_t rank, int32_t end)
{
    attn_mbar_wait(&sm.empty_bar[wg], h.phase ^ 1u); /* free (at once the first time round) */
    if (!end)
        bwd_tc_stage_dq<D, CUATTN_TC_BLOCK_N>(sm.dq_smem[wg], x); /* then fences */
    if (threadIdx.x == 0) {
        sm.ticket[0] = bh;
        sm.ticket[1] = m;
        sm.ticket[2] = rank;
        sm.ticket[3] = end;
    }
    attn_mbar_arrive(&sm.full_bar[wg]);
    h.phase ^= 1u;
}

/* Thread 0, with both warpgroups past their last hand-over (a CTA-wide barrier between):
 * wait until the writer has taken every ticket (it then needs nothing more to finish). */
template <int D>
static __device__ __forceinline__ void bwd_wg_drain(bwd_wg_smem<D> &sm, const bwd_wg_hand &h)
{
    for (int32_t b = 0; b < 2; b++)
        attn_mbar_wait(&sm.empty_bar[b], h.phase ^ 1u);
}

/* The writer (one thread): take the tickets in turn until the end. */
template <int D>
static __device__ __forceinline__ void bwd_wg_writer(const struct attn_bwd_params &p, bwd_wg_smem<D> &sm)
{
    for (uint32_t phase = 0;; phase ^= 1u) {
        attn_mbar_wait(&sm.full_bar[0], phase); /* a ticket, and slice 0 */
        const int32_t bh = sm.ticket[0], m = sm.ticket[1], rank = sm.ticket[2];
        if (sm.ticket[3])
            return;
        int32_t *ctr = p.counter + (int64_t)bh * p.s.m_tiles + m;
        if (rank >= 0)
            bwd_tc_take_turn(ctr, rank);
        bwd_wg_bulk_add<D>(p, sm.dq_smem[0], bh, m, 0);
        attn_mbar_wait(&sm.full_bar[1], phase); /* slice 1 */
        bwd_wg_bulk_add<D>(p, sm.dq_smem[1], bh, m, 1);
        asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        attn_mbar_arrive(&sm.empty_bar[0]); /* slice 0 (and the ticket) free again */
        bwd_tc_bulk_wait_read();
        attn_mbar_arrive(&sm.empty_bar[1]);
        bwd_tc_pass_on(ctr, rank); /* both performed, then passed on (atomic: performed) */
    }
}
#endif

/* Persistent mode, after a unit's last step: its dK, dV have landed (that step waited for
 * them, but the compiler cannot tell the last step from the others and would wait in the
 * store of the unit instead: ptxas C7517). */
template <int D>
static __device__ __forceinline__ void bwd_wg_unit_end(bwd_wg_regs<D> &x)
{
#if ATTN_WGMMA
    attn_wg_wait<0>();
    attn_wg_pin<D / 2>(x.dv_reg);
    attn_wg_pin<D / 2>(x.dk_reg);
#else
    (void)x;
#endif
}

/* One step of v3: the contract of v2's bwd_tc_step (loads, prefetch, registers), on
 * wgmma, in FA3's order: S, dP; P, dS; the dS barrier; dQp, then dK and dV; once dQp has
 * landed, each warpgroup hands its slice to the writer (persistent mode, hand) while dK
 * and dV run, and leaves them running past the return (`keep`) unless the step is the
 * unit's last. In the persistent mode the warpgroups meet once a step, at the dS barrier:
 * the prefetch is waited for on its mbarrier (q_bar), not at a barrier of all compute
 * warps, and a warpgroup waits for the other only before it overwrites dS (above). Every
 * wait on an mbarrier comes where no wgmma result is read before it lands, so ptxas adds
 * no wgmma wait of its own (no C7517). The interleaved mode (hand NULL) loads Q and dO at
 * the top of every step and meets the other warpgroup around each turn. */
template <typename DT, int D, int BN>
static __device__ __forceinline__ void bwd_tc_step(const struct attn_bwd_params &p, bwd_wg_smem<D> &sm,
                                                   bwd_wg_regs<D> &x, int32_t bh, int32_t n, int32_t m,
                                                   int32_t buf, int loaded, int32_t next_m, bwd_wg_hand *hand,
                                                   int32_t rank)
{
#if ATTN_WGMMA
    static_assert(BN == CUATTN_TC_BLOCK_N && BN == 128, "v3 runs 64 x 128 tiles");
    /* wg through a shuffle from lane 0: the compiler then knows it is warp-uniform and
     * forms the B descriptors below in uniform registers, as it does the A ones; from
     * threadIdx.x it kept them in ordinary registers and spilled them at hdim 128 (144 B,
     * refilled between consecutive wgmma: ../shared/docs/hopper.md, B-a). */
    const int32_t tid = threadIdx.x, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
    const int32_t i0 = m * BWD_TC_BM, rm = p.seqlen_q - i0 < BWD_TC_BM ? p.seqlen_q - i0 : BWD_TC_BM;
    const int32_t j0 = n * BN, rn = p.seqlen_k - j0 < BN ? p.seqlen_k - j0 : BN;

    /* A step with a successor in the unit leaves its dK, dV products running past its
     * return; the successor's S product, queued behind them, completes only after them,
     * so once a warpgroup has waited for S it may overwrite what its own dK, dV read (P),
     * and once both have met behind that (the dS barrier) what either's read (the
     * prefetch into buf ^ 1 - their Q and dO). */
    const int keep = next_m >= 0;
    if (!loaded) {
        bwd_tc_load_q<D, BN>(p, sm, buf, bh, m);
        attn_cp_async_wait<0>();
        bwd_tc_async_visible<true>();
        bwd_cta_sync<bwd_wg_smem<D>::writer>(); /* Q, dO, LSE and Dsum are complete before anyone reads them */
    } else {
#if BWD_TC_BULK
        attn_mbar_wait(&sm.q_bar[buf], (hand->qphase >> buf) & 1u); /* the prefetch has landed */
        hand->qphase ^= 1u << buf;
        bwd_tc_async_visible<true>(); /* cp.async wrote through the generic proxy, wgmma reads async */
#endif
    }
    const uint16_t *q_s = sm.q_smem[buf], *do_s = sm.dout_smem[buf];

    /* S = Q K^T, then dP = dO V^T, d ascending: two groups in flight */
    float s[32], dp[32];
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++)
        attn_wg_mma<DT, 64, 0, 0>(s, attn_wg_kmajor(q_s, BWD_TC_BM, 0, 16 * kk),
                                  attn_wg_kmajor(sm.k_smem, BN, 64 * wg, 16 * kk), kk > 0);
    attn_wg_commit();
#pragma unroll
    for (int32_t kk = 0; kk < D / 16; kk++)
        attn_wg_mma<DT, 64, 0, 0>(dp, attn_wg_kmajor(do_s, BWD_TC_BM, 0, 16 * kk),
                                  attn_wg_kmajor(sm.v_smem, BN, 64 * wg, 16 * kk), kk > 0);
    attn_wg_commit();
    attn_wg_wait<1>(); /* S has landed (and the previous step's dK, dV); dP may still be running */
    attn_wg_pin<32>(s);

    /* the other warpgroup's last hand-off (parity 1 passes before the first) */
    uint64_t *ds_free = NULL;
    uint32_t ds_parity = 0;
#if BWD_TC_BULK
    if (hand) {
        ds_free = &sm.full_bar[wg ^ 1];
        ds_parity = hand->phase ^ 1u;
    }
#endif
    const bool whole = rm == BWD_TC_BM && rn == BN &&
                       (p.s.mask != SCHED_MASK_CAUSAL ||
                        (int64_t)i0 + ((int64_t)p.seqlen_k - p.seqlen_q) - j0 >= BN - 1);
    if (whole)
        bwd_wg_pds<DT, false>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, i0, rm, j0, rn,
                              ds_free, ds_parity);
    else
        bwd_wg_pds<DT, true>(p, sm.p_smem, sm.ds_smem, sm.lse_smem[buf], sm.dsum_smem[buf], s, dp, i0, rm, j0, rn,
                             ds_free, ds_parity);
    bwd_tc_async_visible<true>();
    bwd_cta_sync<bwd_wg_smem<D>::writer>(); /* P and dS are complete before the products below read
                                               them; both warpgroups' products of the step before
                                               are done with buffer buf ^ 1 */
#if BWD_TC_BULK
    if (next_m >= 0) { /* persistent mode only */
        bwd_tc_load_q<D, BN>(p, sm, buf ^ 1, bh, next_m);
        bwd_wg_q_arrive(&sm.q_bar[buf ^ 1]);
    }
#endif

    /* dQp = dS K (j ascending), then dK += dS^T Q and dV += P^T dO (i ascending): two
     * groups, so the dQ hand-off needs only the first */
    attn_wg_fence();
#pragma unroll
    for (int32_t kk = 0; kk < BN / 16; kk++)
        attn_wg_mma<DT, D / 2, 0, 1>(x.dq_reg, attn_wg_kmajor(sm.ds_smem, BWD_TC_BM, 0, 16 * kk),
                                     attn_wg_mnmajor(sm.k_smem, BN, 16 * kk, (D / 2) * wg), kk > 0);
    attn_wg_commit();
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++)
        attn_wg_mma<DT, D, 1, 1>(x.dk_reg, attn_wg_mnmajor(sm.ds_smem, BWD_TC_BM, 16 * kk, 64 * wg),
                                 attn_wg_mnmajor(q_s, BWD_TC_BM, 16 * kk, 0), 1);
#pragma unroll
    for (int32_t kk = 0; kk < BWD_TC_BM / 16; kk++)
        attn_wg_mma<DT, D, 1, 1>(x.dv_reg, attn_wg_mnmajor(sm.p_smem, BWD_TC_BM, 16 * kk, 64 * wg),
                                 attn_wg_mnmajor(do_s, BWD_TC_BM, 16 * kk, 0), 1);
    attn_wg_commit();
    attn_wg_wait<1>(); /* dQp has landed */
    attn_wg_pin<D / 4>(x.dq_reg);
#if BWD_TC_BULK
    if (hand) /* under dK and dV */
        bwd_wg_hand_over(sm, x, *hand, wg, bh, m, rank, 0); /* waits for its slice: the writer */
#endif
    if (!keep) {
        attn_wg_wait<0>();
        attn_wg_pin<D / 2>(x.dv_reg);
        attn_wg_pin<D / 2>(x.dk_reg);
    }
#else
    (void)p, (void)sm, (void)x, (void)bh, (void)n, (void)m, (void)buf, (void)loaded, (void)next_m;
    (void)hand, (void)rank;
    __trap();
#endif
}

#endif
