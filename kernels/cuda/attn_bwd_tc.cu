// SPDX-License-Identifier: BSD-3-Clause
/*
 * attn_bwd_tc.cu - v2 and v3 of the backward kernels. v3 (sm_90 only; its own section
 * below) keeps everything of v2's described here but the products and the dQ hand-off of
 * the persistent mode. v2: the five products of a step on tensor cores
 * (mma.sync m16n8k16, fp16/bf16 inputs, fp32 accumulators), with the bookkeeping of
 * attn_bwd.cu (v1): the same schedules and ranks (kernels/sched/sched.h), dQ tile counters and
 * release sequence, the same persistent and interleaved modes sharing one step function,
 * the same scratch layout, GQA handling and outputs. q-tiles are 64 rows; kv-tiles are
 * BN = 128 rows by default (the schedule's block_n), or 64 when asked: each Q/dO tile
 * loaded then serves 128 keys, the warps' products are twice as wide, and a step's one dQ
 * turn covers twice the work (H200, hdim 128, 4k: about 1.9x the 64 x 64 kernel;
 * bench/results/gpu-v2-128-2026-11-29.md).
 *
 *   attn_bwd_tc_preprocess_kernel   Dsum_i = rowsum(dO o O), formed by the very mma.sync
 *                                   chain that forms dP = dO V^T (see below).
 *   attn_bwd_tc_{persistent,interleaved}_kernel
 *                                   the units, in the schedule's order. Per step (unit
 *                                   (bh, n) against q-tile m):
 *                                       S = Q K^T, dP = dO V^T                (fp32)
 *                                       P = 2^(log2(e) (scale S - LSE)), 0 where masked
 *                                       dS = P o (dP - Dsum)                  (fp32)
 *                                       P, dS rounded to the input dtype -> shared memory
 *                                       dV += P^T dO,  dK += dS^T Q,  dQp = dS K
 *                                   and dQp is added into dQacc[m] when counter[m] == rank.
 *   attn_bwd_tc_postprocess_kernel  dQ = scale dQacc, rounded to the input dtype (a warp a
 *                                   row); its _hashed twin also hashes the rows for the
 *                                   audit (leaf_dq), its _folded one (bwd_fold.cuh) the
 *                                   audit's digests of dQ, dK and dV too.
 *   attn_bwd_dkv_sum_kernel         GQA: dK, dV of a kv head = sum over its q-heads, ascending
 *                                   (bwd_rows.cuh, shared with v1); its _hashed_kernel the
 *                                   same with the audit's leaves of the rows.
 *
 * Rounding P and dS to fp16/bf16 before the three products that take them is what
 * FlashAttention 2 and 3 do; it is the one place v2 rounds an intermediate that v1 keeps
 * in fp32. The sums themselves accumulate in fp32 (dS is formed from the fp32 P and dP).
 *
 * Warps, fragments and shared memory of v2: bwd_mma.cuh; v3's: bwd_wgmma.cuh.
 *
 * Waiting less for turns (persistent mode; neither changes an order of additions, so
 * neither changes a bit):
 *   - shift jobs are taken in descending slot order within their (chunk, head) group:
 *     most dQ tiles take shift's additions in descending slot order, so each addition
 *     waits on a job that started earlier;
 *   - for shift and causal spt (params.defer) a turn is passed on during the unit's next
 *     step, after its S and dP products: the reductions complete under those products
 *     instead of stalling the fence, and in these schedules the next adder of the tile is
 *     a step or more behind anyway. Chains of lock-step adders (ascending, descending,
 *     full spt) pass on at once, since every link would lengthen the chain;
 *   - the q-tiles and ranks of a unit's steps are formed once, by all threads at the
 *     unit's start, into a shared table (bwd_tc_fill_visits), not by thread 0 in front of
 *     every turn; the spin on the counter backs off to 256 ns at most.
 * atomic has no turns: its additions are neither fenced nor followed by a barrier.
 *
 * Determinism. Every element of every product is one chain of mma.sync over its k in
 * ascending k16 steps, each mma a fixed function of its fragments and accumulator; dK and
 * dV chain across the unit's steps in visit order; P, dS and the row terms are elementwise.
 * dQ tiles are summed in rank order exactly as in v1: thread 0 waits (acquire) for the
 * counter to equal the rank, the CTA adds its partial with fp32 additions at L2 (the turn
 * is exclusive, so the additions into each element happen one after another, in rank
 * order), and the tile is passed on (release-store of rank + 1) only once the addition has
 * been performed: on sm_90 every thread stages its partial in shared memory and thread 0
 * adds the tile with one bulk reduction (cp.reduce.async.bulk .add.f32), waits for its
 * completion (cp.async.bulk.wait_group, not .read) and stores (the thread that added is
 * the one that acquires and releases, so its acquire load and release store order the
 * reduction without a fence); on sm_80 every thread adds by red, fences, the CTA meets at
 * a barrier, thread 0 fences and stores. Either at once, or deferred into the next step
 * as above: the same sequence, later. Nothing depends on which CTA runs what or when, so
 * the bits do not depend on the grid or the mode.
 *
 * Dsum and exact zeros. Where a row's softmax puts all its weight on one key j, O_i = V_j
 * exactly, and dP_ij - Dsum_i must be exactly 0 (dQ and dK are then exactly 0; the tests
 * compare such cases against a zero reference). v1 gets this by forming Dsum with dP's
 * fmaf chain; here the preprocess forms Dsum_i as the element (i, i) of dO O^T with the
 * same mma.sync chain (k16 steps of d ascending, accumulator from 0), so O_i = V_j gives
 * Dsum_i = dP_ij bit for bit - provided an mma element depends on its A row, B column and
 * accumulator only, not on its position in the fragment.
 */
#include "kernels/cuda/attn_cuda_int.h"
#include "kernels/cuda/attn_wgmma.h"

#include <math.h>
#include <stddef.h>

#include "kernels/cuda/bwd_fold.cuh"
#include "kernels/cuda/bwd_mma.cuh"
#include "kernels/cuda/bwd_rows.cuh"
#include "kernels/cuda/bwd_wgmma.cuh"

/* Persistent mode: take jobs in dispatch order; block on each turn. While thread 0 waits,
 * the next step's Q/dO are already on their way. v3 with the writer warp (W) hands each
 * step's dQ partial to the writer instead and waits for no turn. */
template <typename DT, int D, int BN, typename SM, typename REGS>
static __device__ __forceinline__ void bwd_tc_persistent(const struct attn_bwd_params &p, SM &sm,
                                                        const bwd_wg_qmaps *qm)
{
    const struct sched *s = &p.s;
    constexpr bool W = SM::writer;
    [[maybe_unused]] bwd_wg_ring hb = {0, 0u}; /* W: the staging buffer of the next ticket */
    [[maybe_unused]] int32_t wait_end = 0; /* W: sched_wait_end of the last job taken, INT32_MAX
                                               when its last unit had one step (drain first) */
    [[maybe_unused]] uint32_t qph = 0; /* W, BWD_WG_STAGE_BARS: the stages' next parities */
    [[maybe_unused]] int32_t dsb = 0;  /* ... and the dS tile of the next step */
    /* W, head dim 256: Q and dO by the loader lane where the maps encode (bwd_wg256_lq) */
    [[maybe_unused]] bwd_wg256_lq lq = {W && D == 256 && qm->ok, 0u, 0u};
    REGS x;
    for (;;) {
        if constexpr (W) {
            /* The writer may still hold tickets of the last job whose turns wait on a job
             * nobody has taken yet (shift: the jobs of a chunk wait on each other). Taking
             * that job now would deadlock: its tiles would wait for a staging buffer, the
             * buffers for those turns, the turns for its tiles. So unless every job they
             * may wait on is taken, let the writer take every turn first. */
            /* And after a job whose last unit had one step (wait_end is then INT32_MAX, see
             * below): nothing of its own waited for that ticket's turn, which may be far off
             * (ascending, descending), and the next job's first hand-off would stall on it
             * while that job's head waits (H100, 128 causal at 2112, a last kv-tile of one
             * q-tile: ascending 41 -> 201 TFLOPS, descending 269 -> 295;
             * bench/results/onedrain-trial-2026-12-06.md) */
            if (threadIdx.x == 0 && wait_end > attn_ld_acquire(p.job_next)) {
                BWD_WG_T0();
                bwd_wg_drain(sm, hb);
                BWD_WG_TADD(BT_DRAIN);
            }
        }
        BWD_WG_T0();
        const int32_t job = bwd_tc_take_job<W>(p, sm.flag_smem);
        if (threadIdx.x == 0)
            BWD_WG_TADD(BT_JOB);
        if (job >= s->jobs) {
            if constexpr (W) { /* tell the writer (and at 256 the loader) */
                if ((threadIdx.x & 127) == 0) /* the last unit's dK, dV stores */
                    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
                if constexpr (D == 256)
                    if (lq.tma && threadIdx.x == 0)
                        bwd_wg256_loader_end(sm, lq);
                bwd_wg_hand_end(sm, hb);
                return;
            }
#if BWD_TC_BULK
            if (threadIdx.x == 0) /* atomic leaves its last reduction in flight: finish it */
                asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
            return;
        }
        const struct sched_job J = sched_job_taken(s, job);
        if constexpr (W) /* (one more live register than wait_end spilled in attn_vl.cu) */
            wait_end = sched_job_last_steps(s, J.k) == 1 ? INT32_MAX : sched_wait_end(s, job);
        for (int32_t stage = 0; stage < sched_job_stages(s, J.k); stage++) {
            const int32_t n = sched_job_unit(s, J.k, stage);
            const int32_t steps = sched_unit_steps(s, n);
            /* the previous unit read the table last before its last turn's barrier */
            BWD_WG_T0();
            if constexpr (W && BWD_WG_STAGE_BARS(D)) /* no barrier after each step: one here,
                                                         before the table, K and V are rewritten */
                bwd_cta_sync<W>();
            bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, 0, steps);
            int kvq = 0; /* BWD_WG_STAGE_BARS: the first step's stage, under K and V's load */
            if constexpr (W && BWD_WG_STAGE_BARS(D)) {
                kvq = steps > 0;
                if (kvq)
                    bwd_wg_load_q_mb<D, BN>(p, sm, 0, J.bh, sched_visit(s, &J, stage, 0), qm);
            }
            bwd_tc_load_kv<D, BN>(p, sm, J.bh, n); /* its barrier publishes the table too */
            if (threadIdx.x == 0)
                BWD_WG_TADD(BT_UNIT);
            bwd_tc_zero_kv<D, BN>(x);
            int32_t m = sm.visit_smem[0], buf = 0, base = 0; /* the table holds steps base .. */
            int loaded = kvq;
            int32_t *pend_ctr = NULL, pend_rank = -1; /* a turn still to pass on */
            for (int32_t step = 0; step < steps; step++) {
                if (step + 1 - base > BWD_TC_TAB) { /* the successor's entry is past the table */
                    if constexpr (W && BWD_WG_STAGE_BARS(D))
                        bwd_cta_sync<W>(); /* everyone has read the old table */
                    base = step;
                    bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, base, steps);
                    bwd_cta_sync<W>(); /* the refill is complete before anyone reads it (every
                                          read of the old table came before the last turn) */
                }
                const int32_t next_m = step + 1 < steps ? sm.visit_smem[step + 1 - base] : -1;
                const int32_t rank = threadIdx.x == 0 ? sm.rank_smem[step - base] : -1;
                int32_t *ctr = p.counter + (int64_t)J.bh * s->m_tiles + m;
                /* The unit whose addition we wait for was taken earlier by a running CTA
                 * (or, for shift, by one of the >= W resident CTAs), so it comes. With the
                 * writer warp (W) the writer waits for turns, not thread 0. */
                const int take = threadIdx.x == 0 && s->kind != SCHED_ATOMIC && !W;
#if BWD_WG_TRACE
                long long bs0_ = clock64();
#endif
                if constexpr (W && BWD_WG_TRANSPOSED(D)) {
                    bwd_wg_step_mb<DT, D, BN>(p, sm, x, J.bh, n, m, buf, loaded, next_m, qph, dsb, qm);
                    dsb ^= 1;
                } else if constexpr (W && D == 256) /* its loads wait for the writer's reads (bwd_wg_smem<256>) */
                    bwd_tc_step<DT, D, BN>(p, sm, x, J.bh, n, m, buf, loaded, next_m, pend_ctr, pend_rank, &hb,
                                           &lq);
                else
                    bwd_tc_step<DT, D, BN>(p, sm, x, J.bh, n, m, buf, loaded, next_m, pend_ctr, pend_rank);
#if BWD_WG_TRACE
                if (W && threadIdx.x == 0) {
                    const long long bs1_ = clock64();
                    BWD_WG_TSLOT(BT_STEP) += (unsigned long long)(bs1_ - bs0_);
                    BWD_WG_TSLOT(BT_STEPS) += 1;
                    bs0_ = bs1_;
                }
#endif
                pend_ctr = NULL;
                if (take)
                    bwd_tc_take_turn(ctr, rank);
                /* Passing the tile on during the next step lets the reductions complete
                 * under S and dP instead of stalling the fence; the next step waits on
                 * nothing before it passes the tile on, so no wait can form a cycle.
                 * atomic passes nothing on: its additions need no fence. */
                if constexpr (W) {
                    /* the writer warp waits for the turn, adds and passes the tile on */
                    if constexpr (!BWD_WG_STAGE_BARS(D)) {
                        if (D != 256 || !lq.tma) /* (256's loader: the next step waits for q_full) */
                            attn_cp_async_wait<0>(); /* the prefetch for the next step has landed ... */
                        bwd_tc_async_visible<true>();
                        bwd_cta_sync<W>(); /* ... and is visible to all; every warp is done with
                                              the step's buffer, P, dS and K */
                    }
#if BWD_WG_TRACE
                    if (threadIdx.x == 0)
                        BWD_WG_TSLOT(BT_SYNC) += (unsigned long long)(clock64() - bs0_);
#endif
                    /* thread 0's rank, read at the top of the step: the table may be
                     * refilled as soon as the compute warps have handed the tile over
                     * (nothing makes them wait for each other there) */
                    if constexpr (D == 256)
                        bwd_wg256_hand(sm, x, hb, buf, J.bh, m, s->kind != SCHED_ATOMIC ? rank : -1, lq);
                    else
                        bwd_wg_hand(sm, x, hb, J.bh, m, s->kind != SCHED_ATOMIC ? rank : -1);
                    m = next_m;
                    buf ^= 1;
                    loaded = 1;
                    continue;
                }
                const int defer = s->kind != SCHED_ATOMIC && p.defer && next_m >= 0;
#if BWD_TC_BULK
                if (threadIdx.x == 0)
                    bwd_tc_bulk_wait_read(); /* the last reduction has read the staging buffer */
#endif
                attn_cp_async_wait<0>(); /* the prefetch for the next step has landed ... */
                bwd_tc_async_visible<SM::swizzled>();
                __syncthreads(); /* ... and is visible to all; our turn has come, for the whole
                                    CTA; every warp is done with the step's buffer, P, dS and
                                    K before the next step or unit overwrites them, and thread
                                    0 with the staging buffer */
#if BWD_TC_BULK
                bwd_tc_stage_dq<D, BN>(sm.dq_smem, x);
                __syncthreads(); /* the staged tile is complete before thread 0 hands it on */
                if (threadIdx.x == 0) {
                    bwd_tc_bulk_add<D>(p, sm.dq_smem, J.bh, m);
                    if (s->kind != SCHED_ATOMIC && !defer)
                        bwd_tc_pass_on(ctr, rank);
                }
#else
                bwd_tc_add_dq<D, BN>(p, x, J.bh, m);
                if (s->kind != SCHED_ATOMIC && !defer)
                    bwd_tc_release(ctr, rank);
#endif
                if (defer) {
                    pend_ctr = ctr;
                    pend_rank = rank;
                }
                m = next_m;
                buf ^= 1;
                loaded = 1;
            }
            {
                BWD_WG_T0();
                if constexpr (W)
                    bwd_wg_store_dkv<DT, D, BN, true>(p, sm, x, J.bh, n, qm);
                else
                    bwd_tc_store_unit<DT, D, BN, true>(p, x, J.bh, n);
                if (threadIdx.x == 0)
                    BWD_WG_TADD(BT_STORE);
            }
        }
    }
}

#if BWD_TC_BULK
/* Trial unitlap (BWD_WG_DKV_LAP, bwd_wgmma.cuh): bwd_tc_persistent for the writer kernel
 * whose stages have mbarriers (head dim 128), one unit an iteration, so that a unit's end
 * and the next unit's start are one piece of code:
 *   1. where the unit was its job's last, thread 0 takes the next job - after its last
 *      hand-off, and after a drain where bwd_tc_persistent's rule asks for one
 *      (bwd_wg_must_drain; the drain then comes after 2) - its L2 round trip under the other
 *      warps' last hand-offs and staging (ptxas makes the atomic a warp-aggregated one, whose
 *      shuffle holds warp 0 until the index is back; an atom in inline PTX got the same);
 *   2. dK and dV stored (bwd_wg_store_dkv): a barrier (every product of the unit's last
 *      step has completed in both warpgroups: K, V, both stages, P and dS are free), dK and
 *      dV staged in stage 1, P and dS, their stores issued; or GQA's and the other pair
 *      stores, then the barrier;
 *   3. the job index shared (a barrier);
 *   4. the next unit's first stage (stage 0) and K/V load issued, its visit table filled;
 *   5. the leaves and the wait for the stores' read (bwd_wg_store_dkv_done), under the load;
 *   6. the load's barrier (bwd_tc_load_kv_wait), which also publishes the table and the read.
 * The job is taken after the last ticket is handed over, after a drain where the rule asks
 * for one, as before: the drain rule holds as it did (the other compute threads may still
 * be finishing their part of the last hand-off; nothing they wait for there depends on the
 * job taken). The steps, hand-offs and turns are bwd_tc_persistent's; the hand-off forms
 * its staging addresses afresh (FRESH: kept from the kernel's start, one of them spilled, 4
 * bytes). (With the next unit's loads at the end of bwd_tc_persistent's loops instead, ptxas
 * kept more values across the steps and spilled 200 bytes and more; with the barrier of 2
 * before the call, on every path, the window/packed kernel spilled 24-28.) */
template <typename DT, int D, int BN, typename SM, typename REGS>
static __device__ __forceinline__ void bwd_wg_persistent_lap(const struct attn_bwd_params &p, SM &sm,
                                                            const bwd_wg_qmaps *qm)
{
    const struct sched *s = &p.s;
    bwd_wg_ring hb = {0, 0u}; /* the staging buffer of the next ticket */
    int32_t wait_end = 0;     /* as bwd_tc_persistent's */
    uint32_t qph = 0;         /* the stages' next parities */
    int32_t dsb = 0;          /* ... and the dS tile of the next step */
    REGS x;
    int32_t stage = 0, n = -1; /* the unit: stage `stage` of job J, kv-tile n (-1: none yet) */
    struct sched_job J;
    {
        BWD_WG_T0();
        const int32_t job = bwd_tc_take_job<true>(p, sm.flag_smem); /* the CTA's first: nothing to drain */
        if (threadIdx.x == 0)
            BWD_WG_TADD(BT_JOB);
        if (job >= s->jobs) {
            bwd_wg_hand_end(sm, hb); /* tell the writer */
            return;
        }
        J = sched_job_taken(s, job);
        wait_end = sched_job_last_steps(s, J.k) == 1 ? INT32_MAX : sched_wait_end(s, job);
    }
    for (;;) {
        const int32_t pbh = J.bh, pn = n; /* the last unit (pn -1: none) */
        if (pn >= 0) {
            BWD_WG_T0();
            const int take = stage + 1 == sched_job_stages(s, J.k);
            int32_t next = -1; /* 1. thread 0: the next job (flag_smem holds the last one's index) */
            if (take && threadIdx.x == 0 && !bwd_wg_must_drain(p, wait_end, sm.flag_smem))
                next = atomicAdd(p.job_next, 1);
            bwd_wg_store_dkv<DT, D, BN, true>(p, sm, x, pbh, pn, qm); /* 2. */
            stage++;
            if (take) {
                if (threadIdx.x == 0) {
                    if (next < 0) { /* the rule asks the writer to take its turns first */
                        BWD_WG_T0();
                        bwd_wg_drain(sm, hb);
                        BWD_WG_TADD(BT_DRAIN);
                        next = atomicAdd(p.job_next, 1);
                    }
                    sm.flag_smem = next;
                }
                bwd_cta_sync<true>(); /* 3. the job index is visible to every thread (thread 0
                                         writes the next one after the next unit's barrier 6) */
                const int32_t job = sm.flag_smem;
                if (job >= s->jobs) { /* tell the writer */
                    bwd_wg_store_dkv_done<DT, D, BN, true>(p, sm, pbh, pn, qm);
                    if ((threadIdx.x & 127) == 0) /* the last unit's dK, dV stores */
                        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
                    bwd_wg_hand_end(sm, hb);
                    return;
                }
                J = sched_job_taken(s, job);
                wait_end = sched_job_last_steps(s, J.k) == 1 ? INT32_MAX : sched_wait_end(s, job);
                stage = 0;
            }
            if (threadIdx.x == 0)
                BWD_WG_TADD(BT_STORE);
        }
        BWD_WG_T0();
        n = sched_job_unit(s, J.k, stage);
        const int32_t steps = sched_unit_steps(s, n);
        /* 4. the unit's loads: its first stage before K and V, so the two latencies overlap
         * (trial kvq); every read of the last unit's table, K, V and stage 0 came before 2's
         * barrier. */
        if (steps > 0)
            bwd_wg_load_q_mb<D, BN>(p, sm, 0, J.bh, sched_visit(s, &J, stage, 0), qm);
        bwd_tc_load_kv_start<D, BN>(p, sm, J.bh, n);
        bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, 0, steps);
        if (pn >= 0) /* 5. */
            bwd_wg_store_dkv_done<DT, D, BN, true>(p, sm, pbh, pn, qm);
        bwd_tc_load_kv_wait<SM>(); /* 6. its barrier publishes the table and the stores' read too */
        if (threadIdx.x == 0)
            BWD_WG_TADD(BT_UNIT);
        bwd_tc_zero_kv<D, BN>(x);
        int32_t m = sm.visit_smem[0], buf = 0, base = 0; /* the table holds steps base .. */
        int loaded = steps > 0;
        for (int32_t step = 0; step < steps; step++) { /* bwd_tc_persistent's, W and transposed */
            if (step + 1 - base > BWD_TC_TAB) { /* the successor's entry is past the table */
                bwd_cta_sync<true>();           /* everyone has read the old table */
                base = step;
                bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, base, steps);
                bwd_cta_sync<true>(); /* the refill is complete before anyone reads it */
            }
            const int32_t next_m = step + 1 < steps ? sm.visit_smem[step + 1 - base] : -1;
            const int32_t rank = threadIdx.x == 0 ? sm.rank_smem[step - base] : -1;
#if BWD_WG_TRACE
            const long long bs0_ = clock64();
#endif
            bwd_wg_step_mb<DT, D, BN>(p, sm, x, J.bh, n, m, buf, loaded, next_m, qph, dsb, qm);
            dsb ^= 1;
#if BWD_WG_TRACE
            if (threadIdx.x == 0) {
                BWD_WG_TSLOT(BT_STEP) += (unsigned long long)(clock64() - bs0_);
                BWD_WG_TSLOT(BT_STEPS) += 1;
            }
#endif
            /* thread 0's rank, read at the top of the step (bwd_tc_persistent) */
            bwd_wg_hand<D, true>(sm, x, hb, J.bh, m, s->kind != SCHED_ATOMIC ? rank : -1);
            m = next_m;
            buf ^= 1;
            loaded = 1;
        }
    }
}
#endif

#if BWD_WG_PAIR64 && BWD_TC_BULK
/* BWD_WG_PAIR64 (bwd_wgmma.cuh): the persistent mode at head dim 64 with the pair
 * step - bwd_tc_persistent's jobs, units, visit table, drain rule and writer hand-off,
 * the unit's steps taken two at a time; warpgroup w hands tile w of each pair.
 *
 * A unit's end and the next unit's start overlap their latencies (trial lap64,
 * bench/results/lap64-trial-2026-12-07.md). They were serial: dK and dV staged in K's and
 * V's tiles and the wait for the TMA stores' read of them; the drain rule and the job's
 * L2 round trips; the visit table; the K/V load, waited for; only then the first pair's Q,
 * dO, LSE and Dsum, waited for in the pair step - at head dim 64 about 7 us a unit against
 * ~3 us a pair (the H100 peers run of ba46799, fitted over 1k-16k: a quarter of a 1k
 * sequence's backward). Now:
 *   1. the unit's end (bwd_wg_pair_store): a barrier behind every product of the last pair,
 *      dK and dV staged in the dS^T set that pair used (dst_smem[hph ^ 1]; the next unit's
 *      first pair writes the other), their stores issued; nobody waits for their read;
 *   2. where the unit was its job's last: the drain rule and the next job, as before (the
 *      stores read meanwhile);
 *   3. the next unit's start, behind a barrier: the threads that issued 1's stores wait for
 *      their read - before any copy of their own is in flight (in SASS a bulk group's wait
 *      and cp.async's are both DEPBAR.LE SB0: after the copies it could wait for them too);
 *      the staging set is written again by the next unit's second pair at the earliest;
 *   4. K and V issued (cp.async) and not waited for; where plain stores wrote part of them
 *      (zeros past Sk, a view of unaligned rows) their writers' proxy fence; the table;
 *   5. a barrier: the table, those zeros and 3's read are published;
 *   6. the first pair issues its Q, dO, LSE and Dsum (bwd_wg_pair_load, as before) and waits
 *      for stage 0's barrier q_full[0], which now also tracks K and V: every thread's
 *      cp.async.mbarrier.arrive there fires once all its earlier copies have landed, so
 *      the K/V load and the Q/dO load are in flight together and waited for once.
 * The pairs, hand-offs, turns and writer are as before; the same loads, stores, products and
 * additions: the same bits. A unit without steps waits for its K/V copies itself (5). The
 * job is taken at the same point as before (after the unit's stores are issued, their read
 * no longer waited for first), so the drain rule holds as it did. */
template <typename DT>
static __device__ __forceinline__ void bwd_wg_pair_persistent(const struct attn_bwd_params &p, bwd_wg_smem_pair &sm,
                                                             const bwd_wg_qmaps *qm)
{
    const struct sched *s = &p.s;
    const int32_t w = threadIdx.x >> 7;
    uint32_t hph = 0, qph = 0; /* the hand-off's phase (a pair a phase); the stages' parities */
    if (threadIdx.x == 0)
        sm.wait_end_smem = 0;
    bwd_wg_regs<64> x;
    float dq[32];
    for (;;) {
        /* bwd_tc_persistent's drain rule: the writer may hold turns that wait on a job
         * nobody has taken yet. Otherwise the rule the one-tile kernel keeps by its hand-off
         * alone: a job is taken only once the writer has taken the turn of every ticket but
         * the last (the last pair's tile a is read). Without it a unit of one pair (the last
         * kv-tile of a head under a causal mask) hands both tiles at once and its CTA takes
         * the next job at once, then stalls in that job's first hand-off until those turns
         * come - for ascending, when every other unit of the head has ended - while the rest
         * of the taken job's head waits on it (H200, 64 causal: ascending 0.25-0.31 of the
         * one-tile kernel at 2k-4k). Waiting here depends only on jobs already taken and on
         * additions before tile a's in the schedule's order, as the hand-off's waits do. */
        if (threadIdx.x == 0) { /* 2 */
            BWD_WG_T0();
            if (sm.wait_end_smem > attn_ld_acquire(p.job_next))
                bwd_wg_pair_drain(sm, hph);
            else
                attn_mbar_wait(&sm.empty_bar[0], hph ^ 1u); /* (at once before the first pair) */
            BWD_WG_TADD(BT_DRAIN);
        }
        BWD_WG_T0();
        const int32_t job = bwd_tc_take_job<true>(p, sm.flag_smem);
        if (threadIdx.x == 0)
            BWD_WG_TADD(BT_JOB);
        if (job >= s->jobs) {
            if ((threadIdx.x & 127) == 0) /* the last unit's dK, dV stores */
                asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
            bwd_wg_pair_hand(sm, dq, hph, 0, 0, 0, 1);
            return;
        }
        const int32_t stages = sched_job_stages(s, sched_job_taken(s, job).k);
        if (threadIdx.x == 0) {
            sm.job_smem = sched_job_taken(s, job);
            sm.wait_end_smem = sched_wait_end(s, job);
        }
        for (int32_t stage = 0; stage < stages; stage++) {
            BWD_WG_T0();
            bwd_cta_sync<true>(); /* the job's fields are visible to every thread; every
                                     product of the last unit is done (K, V, stage 0, the
                                     table and the other dS^T set are free) */
            const struct sched_job &J = sm.job_smem;
            const int32_t n = sched_job_unit(s, J.k, stage), bh = J.bh;
            const int32_t steps = sched_unit_steps(s, n);
            /* 3, before any copy (at once where no stores are in flight) */
            if ((threadIdx.x & 127) == 0)
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            /* 4: every read of K, V, stage 0 and the table came before the barrier above (the
             * last pair prefetched nothing: no copy is in flight into either stage) */
            if (bwd_tc_load_kv_start<64, CUATTN_TC_BLOCK_N>(p, sm, bh, n))
                /* the writers' fence only where plain stores wrote part of K or V: a fence
                 * (SASS: MEMBAR.ALL.CTA) may hold the thread until its copies in flight land,
                 * which nothing before the first pair's q_full should */
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, 0, steps);
            if (steps == 0) /* no first pair's q_full waits for the copies */
                attn_cp_async_wait<0>();
            bwd_cta_sync<true>(); /* 5: the table, K/V's plain stores and 3's read are published */
            bwd_tc_zero_kv<64, CUATTN_TC_BLOCK_N>(x);
            if (threadIdx.x == 0)
                BWD_WG_TADD(BT_UNIT);
            int32_t buf = 0, base = 0; /* the table holds steps base .. */
            for (int32_t step = 0; step < steps; step += 2) {
                if (step + 3 - base > BWD_TC_TAB) { /* the next pair's entries are past the table */
                    bwd_cta_sync<true>();           /* everyone has read the old table */
                    base = step;
                    bwd_tc_fill_visits(s, sm.visit_smem, sm.rank_smem, &J, stage, base, steps);
                    bwd_cta_sync<true>(); /* the refill is complete before anyone reads it */
                }
#if BWD_WG_TRACE
                long long bs0_ = clock64();
#endif
                bwd_wg_pair_step<DT>(p, sm, x, dq, bh, n, step - base, steps - step, step == 0, buf, qph, hph, qm);
#if BWD_WG_TRACE
                if (threadIdx.x == 0) {
                    const long long bs1_ = clock64();
                    BWD_WG_TSLOT(BT_STEP) += (unsigned long long)(bs1_ - bs0_);
                    BWD_WG_TSLOT(BT_STEPS) += 1;
                    bs0_ = bs1_;
                }
#endif
                /* this warpgroup's tile and its rank, read after the pair: the table is
                 * refilled only behind a barrier that follows both hand-offs */
                const int32_t at = step + w - base, mw = step + w < steps ? sm.visit_smem[at] : -1;
                const int32_t rank = (threadIdx.x & 127) == 0 && mw >= 0 && s->kind != SCHED_ATOMIC ? sm.rank_smem[at] : -1;
                bwd_wg_pair_hand(sm, dq, hph, bh, mw, rank, 0);
#if BWD_WG_TRACE
                if (threadIdx.x == 0)
                    BWD_WG_TSLOT(BT_HAND) += (unsigned long long)(clock64() - bs0_);
#endif
                hph ^= 1u; /* (also the dS^T tiles' turn: both flip once a pair) */
                buf ^= 1;
            }
            {
                BWD_WG_T0();
                bwd_wg_pair_store<DT>(p, sm, x, bh, n, qm, (int32_t)(hph ^ 1u)); /* 1: the last pair's set */
                if (threadIdx.x == 0)
                    BWD_WG_TADD(BT_STORE);
            }
        }
    }
}
#endif

/* Interleaved mode: virtual SMs blockIdx.x, blockIdx.x + gridDim.x, ... in turn (v1's
 * bookkeeping, v2's step; no prefetch, since the next step may belong to another one). */
template <typename DT, int D, int BN, typename SM, typename REGS>
static __device__ __forceinline__ void bwd_tc_interleaved(const struct attn_bwd_params &p, SM &sm)
{
    const struct sched *s = &p.s;
    REGS x;
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
                    bwd_tc_vsm_save<D, BN>(p, held, st, x);
                held = v;
                for (int i = 0; i < VSM_USED; i++)
                    st[i] = __ldcg(state + i);
                bwd_tc_vsm_restore<D, BN>(p, v, st, x);
                if (st[VSM_LOADED]) {
                    const struct sched_job J = sched_job_at(s, st[VSM_JOB]);
                    bwd_tc_load_kv<D, BN>(p, sm, J.bh, sched_job_unit(s, J.k, st[VSM_STAGE]));
                    /* (1 already. Set again at head dim 256, a constant here, so that the
                     * flag read before the restore is not kept across its loads: it spilled,
                     * 4 bytes) */
                    if constexpr (D == 256)
                        st[VSM_LOADED] = 1;
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
                        bwd_tc_load_kv<D, BN>(p, sm, J.bh, n);
                        bwd_tc_zero_kv<D, BN>(x);
                        st[VSM_LOADED] = 1;
                    }
                    st[VSM_M] = sched_visit(s, &J, st[VSM_STAGE], st[VSM_STEP]);
                    if (threadIdx.x == 0) /* (before the step: not live beside the dQ partial) */
                        st[VSM_RANK] = sched_rank(s, &J, st[VSM_STAGE], st[VSM_M]);
                    /* untransposed (v3 at 128 too): no registers left for its A fragments */
                    bwd_tc_step<DT, D, BN, false>(p, sm, x, J.bh, n, st[VSM_M], 0, 0, -1, NULL, -1);
                    st[VSM_PENDING] = 1;
                    progress = 1;
                }
                int32_t *ctr = p.counter + (int64_t)J.bh * s->m_tiles + st[VSM_M];
                if (threadIdx.x == 0) {
                    const int go = st[VSM_RANK] < 0 || attn_ld_acquire(ctr) == st[VSM_RANK];
#if !BWD_TC_BULK /* (sm_90: thread 0 adds the tile itself; see bwd_tc_take_turn) */
                    if (go)
                        __threadfence();
#endif
                    sm.flag_smem = go;
                }
                __syncthreads(); /* thread 0's verdict on the turn is visible to all */
                const int go = sm.flag_smem;
                __syncthreads(); /* everyone has read it before thread 0 may write it again */
                if (!go)
                    break; /* not our turn: keep the partial, try the next virtual SM */
                bwd_tc_add_release<D, BN>(p, sm, x, J.bh, st[VSM_M], ctr, threadIdx.x == 0 ? st[VSM_RANK] : -1);
                st[VSM_PENDING] = 0;
                progress = 1;
                if (++st[VSM_STEP] < sched_unit_steps(s, n))
                    continue;
                bwd_tc_store_unit<DT, D, BN, false>(p, x, J.bh, n);
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

/* v3's shared memory starts on a BWD_WG_ALIGN boundary: the kernel asks for that much more
 * and rounds the dynamic block's address up. */
template <int D, int BN, int V>
struct bwd_kern {
    typedef bwd_tc_smem<D, BN> smem;
    typedef bwd_tc_regs<D, BN> regs;
    static constexpr size_t bytes = sizeof(smem);
    static constexpr int persistent_threads = ATTN_THREADS;
};
template <int D, int BN>
struct bwd_kern<D, BN, 3> {
    typedef bwd_wg_smem<D> smem;
    typedef bwd_wg_regs<D> regs;
#if BWD_WG_PAIR64 /* the persistent kernel's pair layout at 64 is the larger */
    static constexpr size_t bytes = (D == 64 ? sizeof(bwd_wg_smem_pair) : sizeof(smem)) + BWD_WG_ALIGN;
#else
    static constexpr size_t bytes = sizeof(smem) + BWD_WG_ALIGN;
#endif
    /* with the writer: a third warpgroup, so that registers can move between the groups */
    static constexpr int persistent_threads = ATTN_THREADS + 128;
};

template <int D, int BN, int V>
static __device__ __forceinline__ typename bwd_kern<D, BN, V>::smem &bwd_kern_smem(unsigned char *raw)
{
    if (V == 3) {
        const uint32_t at = attn_smem_u32(raw);
        raw += ((at + BWD_WG_ALIGN - 1) & ~(uint32_t)(BWD_WG_ALIGN - 1)) - at;
    }
    return *reinterpret_cast<typename bwd_kern<D, BN, V>::smem *>(raw);
}

/* V: 2 runs v2's step (mma.sync), 3 v3's (wgmma; sm_90a only, the sm_80 build traps; so
 * does v2's where its shared memory exceeds what 8.x GPUs have, ATTN_FITS_ARCH). */
#if ATTN_WGMMA
#define BWD_KERN_RUNS(V) 1
#else
#define BWD_KERN_RUNS(V) ((V) != 3)
#endif

/* The two modes are two kernels around the same inlined bwd_tc_step, so that each gets
 * its own register allocation: one kernel holding both needs more than 255 registers at
 * D = 128 and spills. Which kernel runs changes nothing but the bookkeeping around the
 * steps. */
template <typename DT, int D, int BN, int V>
__global__ void __launch_bounds__(bwd_kern<D, BN, V>::persistent_threads, 1)
    attn_bwd_tc_persistent_kernel(const struct attn_bwd_params p, const __grid_constant__ bwd_wg_qmaps maps)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    typedef bwd_kern<D, BN, V> K;
    if constexpr (BWD_KERN_RUNS(V) && ATTN_FITS_ARCH(K::bytes)) {
#if BWD_WG_PAIR64 && BWD_TC_BULK
        if constexpr (V == 3 && D == 64) { /* the pair step (bwd_wg_pair_persistent) */
            bwd_wg_smem_pair &ps = reinterpret_cast<bwd_wg_smem_pair &>(bwd_kern_smem<D, BN, V>(smem_raw));
#if BWD_WG_TRACE
            const long long bk0_ = clock64();
            if (threadIdx.x < BT_N)
                BWD_WG_TSLOT(threadIdx.x) = 0;
#endif
            if (threadIdx.x == 0)
                bwd_wg_pair_init(ps);
            __syncthreads(); /* the barriers are set up before anyone uses them */
            if (threadIdx.x >= ATTN_THREADS) {
                asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory");
                if (threadIdx.x == ATTN_THREADS)
                    bwd_wg_pair_writer(p, ps);
                return;
            }
            asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory");
            bwd_wg_pair_persistent<DT>(p, ps, &maps);
#if BWD_WG_TRACE
            if (threadIdx.x == 0)
                BWD_WG_TSLOT(BT_KERNEL) = (unsigned long long)(clock64() - bk0_);
#endif
            return;
        }
#endif
        typename K::smem &sm = bwd_kern_smem<D, BN, V>(smem_raw);
#if BWD_WG_TRACE
        const long long bk0_ = clock64();
#endif
#if BWD_TC_BULK
        if constexpr (K::smem::writer) {
            /* Registers go where the products are: the third warpgroup (the writer, one
             * thread, and the idle rest) gives up all but 24 a thread, the two computing ones
             * take 240 (one writer and two compute warps per SM quarter: 24 + 2 x 240
             * registers a lane, within the 512 there are). */
            if (threadIdx.x == 0)
                bwd_wg_init<D>(sm);
#if BWD_WG_TRACE
            if (threadIdx.x < BT_N)
                BWD_WG_TSLOT(threadIdx.x) = 0;
#endif
            __syncthreads(); /* the hand-off's barriers are set up before anyone uses them */
            if (threadIdx.x >= ATTN_THREADS) {
                asm volatile("setmaxnreg.dec.sync.aligned.u32 24;" ::: "memory");
                if (threadIdx.x == ATTN_THREADS) {
                    bwd_wg_writer<D>(p, sm);
                } else if constexpr (D == 256) { /* warp 9, lane 0: Q and dO by TMA (bwd_wg256_lq) */
                    if (threadIdx.x == ATTN_THREADS + 32 && maps.ok)
                        bwd_wg256_loader(sm, &maps);
                }
                return;
            }
            asm volatile("setmaxnreg.inc.sync.aligned.u32 240;" ::: "memory");
        }
#endif
#if BWD_TC_BULK
        if constexpr (K::smem::writer && BWD_WG_DKV_LAP(D))
            bwd_wg_persistent_lap<DT, D, BN, typename K::smem, typename K::regs>(p, sm, &maps);
        else
#endif
            bwd_tc_persistent<DT, D, BN, typename K::smem, typename K::regs>(p, sm, &maps);
#if BWD_WG_TRACE
        if (K::smem::writer && threadIdx.x == 0)
            BWD_WG_TSLOT(BT_KERNEL) = (unsigned long long)(clock64() - bk0_);
#endif
    } else {
        __trap();
    }
}

template <typename DT, int D, int BN, int V>
__global__ void __launch_bounds__(ATTN_THREADS, 1) attn_bwd_tc_interleaved_kernel(const struct attn_bwd_params p)
{
    extern __shared__ __align__(16) unsigned char smem_raw[];
    typedef bwd_kern<D, BN, V> K;
    if constexpr (BWD_KERN_RUNS(V) && ATTN_FITS_ARCH(K::bytes))
        bwd_tc_interleaved<DT, D, BN, typename K::smem, typename K::regs>(p, bwd_kern_smem<D, BN, V>(smem_raw));
    else
        __trap();
}

/* Dsum_i = sum_d dO_id O_id, as the diagonal of dO O^T on tensor cores: one warp per 16
 * rows, A = those 16 rows of dO, B = 8 rows of O (rows 0-7, then 8-15), k16 steps of d
 * ascending from a zero accumulator - the chain bwd_tc_step runs for dP = dO V^T. Row r0+c
 * of the first product is element (c, c), held by lane 4c + c/2 as c[c % 2]; row r0+8+c of
 * the second is element (8+c, c), held by the same lane as c[2 + c % 2] (bwd_tc_dsum_chain,
 * which the VL preprocess runs too). Rows are (bh, i) flattened; rows past the end read
 * zeros and are not stored. */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_tc_preprocess_kernel(const struct attn_bwd_params p)
{
    const int64_t rows = (int64_t)p.s.bh * p.seqlen_q;
    const int64_t groups = (rows + 15) / 16;
    const int32_t lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int32_t warps = ATTN_THREADS / 32;
    const uint16_t *o_g = static_cast<const uint16_t *>(p.out);
    const uint16_t *do_g = static_cast<const uint16_t *>(p.dout);
    for (int64_t grp = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); grp < groups;
         grp += (int64_t)gridDim.x * warps) {
        const uint16_t *o_row[2], *do_row[2]; /* rows r0 + g, r0 + 8 + g; NULL past the end */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int64_t row = grp * 16 + g + 8 * r;
            o_row[r] = do_row[r] = NULL;
            if (row < rows) {
                const int32_t bh = (int32_t)(row / p.seqlen_q), i = (int32_t)(row - (int64_t)bh * p.seqlen_q);
                const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
                o_row[r] = o_g + b * p.out_stride[0] + (int64_t)i * p.out_stride[1] + h * p.out_stride[2];
                do_row[r] = do_g + b * p.dout_stride[0] + (int64_t)i * p.dout_stride[1] + h * p.dout_stride[2];
            }
        }
        float c_lo[4], c_hi[4];
        bwd_tc_dsum_chain<DT, D>(o_row, do_row, t4, c_lo, c_hi, p.d_cols ? p.d_cols : D);
        if (t4 == (g >> 1)) {
            const int64_t row = grp * 16 + g;
            if (row < rows)
                p.dsum[row] = (g & 1) ? c_lo[1] : c_lo[0];
            if (row + 8 < rows)
                p.dsum[row + 8] = (g & 1) ? c_hi[3] : c_hi[2];
        }
    }
}

/* Whether row i of head bh's dQ had no addition at all where dQacc was not zeroed
 * (attn_bwd_dq_first_stores: its tile's counter is still 0). */
static __device__ __forceinline__ bool bwd_tc_dq_untouched(const struct attn_bwd_params &p, bool first, int32_t bh,
                                                           int32_t i)
{
    return first && p.counter[(int64_t)bh * p.s.m_tiles + i / BWD_TC_BM] == 0;
}

/* dQ = scale dQacc, one warp per row (bh, i) (bwd_tc_dq_row). */
template <typename DT, int D>
__global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_tc_postprocess_kernel(const struct attn_bwd_params p)
{
    const int64_t rows = (int64_t)p.s.bh * p.seqlen_q;
    const int32_t warps = ATTN_THREADS / 32, lane = threadIdx.x & 31;
    const bool first = attn_bwd_dq_first_stores(p);
    uint16_t *dq_g = static_cast<uint16_t *>(p.dq);
    for (int64_t row = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); row < rows; row += (int64_t)gridDim.x * warps) {
        const int32_t bh = (int32_t)(row / p.seqlen_q), i = (int32_t)(row - (int64_t)bh * p.seqlen_q);
        const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
        bwd_tc_dq_row<DT, D>(dq_g + b * p.dq_stride[0] + (int64_t)i * p.dq_stride[1] + h * p.dq_stride[2],
                             bwd_tc_dq_untouched(p, first, bh, i) ? NULL : p.dq_acc + row * D, i, p.scale, lane,
                             p.d_cols ? p.d_cols : D);
    }
}

/* The same where the audit asks for dQ's digest leaves (leaf_dq, row-major (b, i, h)): a
 * warp takes eight rows at a time, stores each as above and stages its pairs in shared
 * memory, and each quad hashes one of them (digest_leaf_staged) - the previous eight,
 * while this batch's loads are in flight (two stage buffers): the hash chains are long
 * and, run after the stores, left the memory idle (95 against 64 us at 4k, hdim 128).
 * Hashing a row with the quad that loaded it (pairs 8 t + 2 t4) cost more still: eight
 * rows' 32-byte pieces per load. The same bits as the plain kernel. */
#define BWD_TC_HASHED_WARPS 4 /* a block's: two stage buffers each fit 48 KiB at head dim 256 */
/* Blocks an SM must hold (the launch bounds): those digest version 2's registers gave (56,
 * 70 and 121 at head dims 64, 128 and 256). Left to itself ptxas gave version 3's hashing
 * 80 at 128 (6 blocks); bound, 72 and no spill. (Any explicit bound moves ptxas's own
 * choice: 1 took 64 to 78 registers and 256 to 150.) */
#define BWD_TC_HASHED_BLOCKS(D) ((D) == 64 ? 9 : (D) == 128 ? 7 : 4)
template <typename DT, int D>
__global__ void __launch_bounds__(32 * BWD_TC_HASHED_WARPS, BWD_TC_HASHED_BLOCKS(D))
    attn_bwd_tc_postprocess_hashed_kernel(const struct attn_bwd_params p)
{
    __shared__ __align__(16) uint32_t stage[BWD_TC_HASHED_WARPS][2][8 * DIGEST_LEAF_PITCH(D)]; /* LDS.128 rows */
    const int64_t rows = (int64_t)p.s.bh * p.seqlen_q;
    const int32_t warps = BWD_TC_HASHED_WARPS, lane = threadIdx.x & 31;
    uint16_t *dq_g = static_cast<uint16_t *>(p.dq);
    const int64_t warp = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5), all = (int64_t)gridDim.x * warps;
    const bool first = attn_bwd_dq_first_stores(p);
    int32_t cur = 0;      /* the stage buffer this batch fills; the other holds the last one */
    int64_t last = -1;    /* the staged batch's first row, -1: none */
    int32_t lbh = 0, li = 0; /* the staged batch's row of this lane's quad: (bh, i) */
    for (int64_t r0 = 8 * warp;; r0 += 8 * all) { /* uniform across the warp */
        const bool have = r0 < rows;
        /* the batch's rows (bh, i): one division for the first, then counted on (a
         * division of 64-bit integers is a long subroutine: one per row, three places, cost
         * more than the hash) */
        const int32_t bh0 = have ? (int32_t)(r0 / p.seqlen_q) : 0;
        const int32_t i0 = have ? (int32_t)(r0 - (int64_t)bh0 * p.seqlen_q) : 0;
        float2 a[8][D / 64];
        if (have) {
            int32_t bh = bh0, i = i0;
#pragma unroll
            for (int32_t r = 0; r < 8; r++) {
                if (r0 + r < rows) {
                    const bool zero = bwd_tc_dq_untouched(p, first, bh, i);
                    const float *acc = p.dq_acc + (r0 + r) * D;
#pragma unroll
                    for (int32_t k = 0; k < D / 64; k++)
                        a[r][k] = zero ? make_float2(0.0f, 0.0f)
                                       : bwd_tc_dq_plus0(*reinterpret_cast<const float2 *>(
                                             acc + bwd_tc_dq_at(i, 2 * lane + 64 * k)));
                }
                if (++i == p.seqlen_q) {
                    i = 0;
                    bh++;
                }
            }
        }
        if (last >= 0) {
            const uint64_t leaf = digest_leaf_staged<D>(stage[threadIdx.x >> 5][cur ^ 1], lane);
            const int64_t row = last + (lane >> 2);
            if ((lane & 3) == 0 && row < rows) {
                const int32_t b = lbh / p.heads_q, h = lbh - b * p.heads_q;
                p.leaf_dq[((int64_t)b * p.seqlen_q + li) * p.heads_q + h] = leaf;
            }
        }
        if (!have)
            break;
        uint32_t *st = stage[threadIdx.x >> 5][cur];
        int32_t bh = bh0, i = i0;
#pragma unroll
        for (int32_t r = 0; r < 8; r++) {
            if (r == (lane >> 2)) { /* the row this lane's quad hashes next iteration */
                lbh = bh;
                li = i;
            }
            if (r0 + r < rows) {
                const int32_t b = bh / p.heads_q, h = bh - b * p.heads_q;
                uint16_t *dq_row = dq_g + b * p.dq_stride[0] + (int64_t)i * p.dq_stride[1] + h * p.dq_stride[2];
#pragma unroll
                for (int32_t k = 0; k < D / 64; k++) {
                    const int32_t d = 2 * lane + 64 * k;
                    const uint32_t pr = DT::pack2(__fmul_rn(a[r][k].x, p.scale), __fmul_rn(a[r][k].y, p.scale));
                    attn_st_pair(dq_row + d, pr);
                    st[r * DIGEST_LEAF_PITCH(D) + d / 2] = pr;
                }
            }
            if (++i == p.seqlen_q) {
                i = 0;
                bh++;
            }
        }
        __syncwarp(); /* staged before the next iteration's quads read them */
        last = r0;
        cur ^= 1;
    }
}

/* ---- host side ---------------------------------------------------------------------- */

#if BWD_WG_TRACE
static void bwd_wg_trace_dump(void) { bwd_wg_trace_print("persistent"); }
#endif

bool cuattn__bwd_wg_narrow_ok(const struct attn_bwd_params *p, int32_t head_dim)
{
    if (head_dim != 128 || !p->d_cols) /* the kernel with stage barriers and TMA stores */
        return false;
    bwd_wg_qmaps maps;
    memset(&maps, 0, sizeof maps);
    const int32_t batch = p->s.bh / p->heads_q;
    bwd_wg_qmaps_encode(&maps, p, p->d_cols, batch, p->seqlen_q);
    bwd_wg_dkvmaps_encode(&maps, p, p->d_cols, batch, p->seqlen_k);
    return maps.ok && maps.ok_dkv;
}

template <typename DT, int D, int BN, int V>
static cudaError_t bwd_tc_launch(const struct attn_bwd_params *p, const struct attn_bwd_fold *fold, int32_t grid,
                                 int32_t sms, cudaStream_t stream)
{
    cudaError_t err;
    const int64_t rows_q = (int64_t)p->s.bh * p->seqlen_q;
    if ((err = attn_bwd_zero_state(p, D, stream)) != cudaSuccess)
        return err;
#if BWD_WG_TRACE
    static int traced;
    if (!traced++)
        atexit(bwd_wg_trace_dump);
#endif
    /* 16 rows per warp, 8 warps per block */
    attn_bwd_tc_preprocess_kernel<DT, D>
        <<<attn_bwd_rows_grid(rows_q, 16 * (ATTN_THREADS / 32), sms), ATTN_THREADS, 0, stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    if (p->mode == ATTN_MODE_INTERLEAVED)
        attn_bwd_tc_interleaved_kernel<DT, D, BN, V>
            <<<(uint32_t)grid, ATTN_THREADS, bwd_kern<D, BN, V>::bytes, stream>>>(*p);
    else {
        bwd_wg_qmaps maps; /* Q and dO by TMA where the step has stage barriers, and at 256 */
        memset(&maps, 0, sizeof maps);
        const int32_t cols = p->d_cols ? p->d_cols : D; /* the maps' width: zeros past it */
        if (V == 3 && (BWD_WG_STAGE_BARS(D) || (BWD_WG_PAIR64 && D == 64) || D == 256)) {
            const int32_t batch = p->s.bh / p->heads_q;
            bwd_wg_qmaps_encode(&maps, p, cols, batch, p->seqlen_q);
        }
        if (V == 3 && BWD_WG_DKV_TMA(D))
            bwd_wg_dkvmaps_encode(&maps, p, cols, p->s.bh / p->heads_q, p->seqlen_k);
        attn_bwd_tc_persistent_kernel<DT, D, BN, V>
            <<<(uint32_t)grid, bwd_kern<D, BN, V>::persistent_threads, bwd_kern<D, BN, V>::bytes, stream>>>(*p, maps);
    }
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    if (fold) { /* the digests too (bwd_fold.cuh): a block a group of rows, or a kv supergroup */
        if constexpr (D == 256) {
            return cudaErrorInvalidValue; /* dK and dV unhashed there: the host never folds */
        } else {
            const int64_t groups = (rows_q + DIGEST_FANOUT - 1) / DIGEST_FANOUT;
            const int64_t rows_k = (int64_t)p->s.bh * p->seqlen_k;
            const int64_t kv_supers = 2 * ((rows_k + BWD_FOLD_SUPER - 1) / BWD_FOLD_SUPER);
            attn_bwd_tc_postprocess_folded_kernel<DT, D>
                <<<attn_bwd_rows_grid(groups > kv_supers ? groups : kv_supers, 1, sms), 32 * BWD_FOLD_WARPS, 0,
                   stream>>>(*p, *fold);
        }
    } else if (p->leaf_dq)
        attn_bwd_tc_postprocess_hashed_kernel<DT, D>
            <<<attn_bwd_rows_grid(rows_q, 8 * BWD_TC_HASHED_WARPS, sms), 32 * BWD_TC_HASHED_WARPS, 0, stream>>>(*p);
    else
        attn_bwd_tc_postprocess_kernel<DT, D>
            <<<attn_bwd_rows_grid(rows_q, ATTN_THREADS / 32, sms), ATTN_THREADS, 0, stream>>>(*p);
    if ((err = cudaGetLastError()) != cudaSuccess)
        return err;
    return attn_bwd_dkv_sum<DT, D>(p, sms, stream);
}

template <typename DT, int D, int BN, int V>
static cudaError_t bwd_tc_attr(size_t smem_optin)
{
    const size_t bytes = bwd_kern<D, BN, V>::bytes;
    if (bytes > smem_optin)
        return cudaSuccess; /* unusable here: cuattn_impl_for sends this dim elsewhere */
    cudaError_t err = cudaFuncSetAttribute(attn_bwd_tc_persistent_kernel<DT, D, BN, V>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (err != cudaSuccess)
        return err;
    return cudaFuncSetAttribute(attn_bwd_tc_interleaved_kernel<DT, D, BN, V>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
}

/* The smaller of the two kernels' figures: the host picks the grid before the mode. */
template <typename DT, int D, int BN, int V>
static cudaError_t bwd_tc_occupancy(int32_t *ret)
{
    static int32_t cache[ATTN_OCC_DEVICES];
    return attn_occupancy_once(cache, [](int32_t *r) {
        const size_t bytes = bwd_kern<D, BN, V>::bytes;
        int a = 0, b = 0;
        cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &a, attn_bwd_tc_persistent_kernel<DT, D, BN, V>, bwd_kern<D, BN, V>::persistent_threads, bytes);
        if (err == cudaSuccess)
            err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, attn_bwd_tc_interleaved_kernel<DT, D, BN, V>,
                                                                ATTN_THREADS, bytes);
        if (err == cudaSuccess)
            *r = a < b ? a : b;
        return err;
    }, ret);
}

/* v2 at both tile widths; v3 (64 x 128; 64 x 64 at head dim 256, its only kernel) where
 * the device is sm_90 (wg). */
template <typename DT, int D>
static cudaError_t bwd_tc_attr_all(size_t smem_optin, int wg)
{
    if constexpr (D == 256) {
        return wg ? bwd_tc_attr<DT, D, BWD_WG256_BN, 3>(smem_optin) : cudaSuccess;
    } else {
        cudaError_t err = bwd_tc_attr<DT, D, 64, 2>(smem_optin);
        if constexpr (BWD_TC_WIDE(D))
            if (err == cudaSuccess)
                err = bwd_tc_attr<DT, D, CUATTN_TC_BLOCK_N, 2>(smem_optin);
        if (err == cudaSuccess && wg)
            err = bwd_tc_attr<DT, D, CUATTN_TC_BLOCK_N, 3>(smem_optin);
        return err;
    }
}

cudaError_t cuattn__bwd_tc_init(size_t smem_optin, int wg)
{
    cudaError_t err;
    if ((err = bwd_tc_attr_all<attn_bf16, 64>(smem_optin, wg)) != cudaSuccess ||
        (err = bwd_tc_attr_all<attn_bf16, 128>(smem_optin, wg)) != cudaSuccess ||
        (err = bwd_tc_attr_all<attn_f16, 64>(smem_optin, wg)) != cudaSuccess ||
        (err = bwd_tc_attr_all<attn_f16, 128>(smem_optin, wg)) != cudaSuccess ||
        (err = bwd_tc_attr_all<attn_bf16, 256>(smem_optin, wg)) != cudaSuccess ||
        (err = bwd_tc_attr_all<attn_f16, 256>(smem_optin, wg)) != cudaSuccess)
        return err;
    return cudaSuccess;
}

/* v2's widest kv-tile at the dim (BWD_TC_WIDE): if it fits, so does the other. */
size_t cuattn__bwd_tc_smem_bytes(int32_t head_dim)
{
    return head_dim == 64    ? bwd_kern<64, CUATTN_TC_BLOCK_N, 2>::bytes
           : head_dim == 128 ? bwd_kern<128, 64, 2>::bytes
                             : 0;
}

size_t cuattn__bwd_wg_smem_bytes(int32_t head_dim)
{
    return head_dim == 64    ? bwd_kern<64, CUATTN_TC_BLOCK_N, 3>::bytes
           : head_dim == 128 ? bwd_kern<128, CUATTN_TC_BLOCK_N, 3>::bytes
           : head_dim == 256 ? bwd_kern<256, BWD_WG256_BN, 3>::bytes
                             : 0;
}

size_t cuattn__bwd_tc_vsm_floats(int32_t head_dim, int32_t block_n)
{
    return (size_t)BWD_TC_VSM_FLOATS(head_dim, block_n); /* v3's registers: the same count */
}

/* One switch for the (dtype, head dim, kv-tile, v2/v3) kernels; anything else is refused.
 * wg asks for v3, which has 64 x 128 tiles only, but at head dim 256 64 x 64 only (and
 * there is no v2 at 256); v2 has 64 x 128 tiles at head dim 64 only (BWD_TC_WIDE). */
#define BWD_TC_DISPATCH(dt, head_dim, block_n, wg, CALL)                                        \
    do {                                                                                        \
        const int bf_ = (dt) == DTYPE_BF16, wide_ = (block_n) == CUATTN_TC_BLOCK_N;             \
        if ((head_dim) == 256) {                                                                \
            if (!(wg) || (block_n) != BWD_WG256_BN)                                             \
                return cudaErrorInvalidValue;                                                   \
            return bf_ ? CALL(attn_bf16, 256, BWD_WG256_BN, 3) : CALL(attn_f16, 256, BWD_WG256_BN, 3); \
        }                                                                                       \
        if (((block_n) != 64 && !wide_) || ((wg) && !wide_))                                    \
            return cudaErrorInvalidValue;                                                       \
        switch (head_dim) {                                                                     \
        case 64:                                                                                \
            if (wg)                                                                             \
                return bf_ ? CALL(attn_bf16, 64, CUATTN_TC_BLOCK_N, 3)                          \
                           : CALL(attn_f16, 64, CUATTN_TC_BLOCK_N, 3);                          \
            return bf_ ? (wide_ ? CALL(attn_bf16, 64, CUATTN_TC_BLOCK_N, 2) : CALL(attn_bf16, 64, 64, 2)) \
                       : (wide_ ? CALL(attn_f16, 64, CUATTN_TC_BLOCK_N, 2) : CALL(attn_f16, 64, 64, 2));  \
        case 128:                                                                               \
            if (wg)                                                                             \
                return bf_ ? CALL(attn_bf16, 128, CUATTN_TC_BLOCK_N, 3)                         \
                           : CALL(attn_f16, 128, CUATTN_TC_BLOCK_N, 3);                         \
            if (wide_)                                                                          \
                return cudaErrorInvalidValue;                                                   \
            return bf_ ? CALL(attn_bf16, 128, 64, 2) : CALL(attn_f16, 128, 64, 2);              \
        default:                                                                                \
            return cudaErrorInvalidValue;                                                       \
        }                                                                                       \
    } while (0)

cudaError_t cuattn__bwd_tc_blocks_per_sm(enum dtype_kind dt, int32_t head_dim, int32_t block_n, int wg,
                                         int32_t *ret)
{
#define BWD_TC_OCC(T, D, BN, V) bwd_tc_occupancy<T, D, BN, V>(ret)
    BWD_TC_DISPATCH(dt, head_dim, block_n, wg, BWD_TC_OCC);
#undef BWD_TC_OCC
}

cudaError_t cuattn__bwd_tc_launch(const struct attn_bwd_params *p, const struct attn_bwd_fold *fold,
                                  enum dtype_kind dt, int32_t grid, int32_t sms, cudaStream_t stream)
{
#define BWD_TC_RUN(T, D, BN, V) bwd_tc_launch<T, D, BN, V>(p, fold, grid, sms, stream)
    BWD_TC_DISPATCH(dt, p->head_dim, p->s.block_n, p->wg, BWD_TC_RUN);
#undef BWD_TC_RUN
}
