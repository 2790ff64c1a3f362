#!/usr/bin/env bash
# call 75 (planned 2026-12-07, a helper's session without device time): trial vlfold (the
# window/packed v3 backward converts each dQ tile in its folder warps once the tile's last
# addition is performed, no dQ postprocess; vlfold-trial-2026-12-07.md).
# First, alone on the GPU: main's bundle and the trial's taking turns, ROUNDS (3) rounds of
# bench_gpu --only 128,16384,causal,auto with --window 1024, --window 4096 and the packed
# batch (the backward's TFLOPS and its digest: the same digests are the bit check at 16k),
# and the packed batch under spt (its kv-tile 0 of each sequence makes every last addition
# of the sequence's tiles, a fold each step: the folders' throughput against the steps);
# then one ncu pass each over the VL backward's kernels at window 1k (the main kernel's
# duration with and without the fold, and main's postprocess); then the trial's gpu_attn_vl
# (its new test: the fold's bytes against the postprocess's, every deterministic schedule,
# grids 0, 1, 3) and the `_vl_` sanitizer targets (both run the fold).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-vlfold
L=${LIMIT:-420}
. "$(dirname "$0")/common.sh"
vl_ab ${ROUNDS:-3} spt bin trial-vlfold
for b in bin trial-vlfold; do
  timeout 60 ncu --section SpeedOfLight -k regex:'attn_bwd_vl' --launch-count 3 \
    .gpu/$b/bench_gpu --reps 1 --only 128,16384,causal,spt --window 1024 > $W/ncu-$b.txt 2>&1; T "ncu $b rc $?"
done
left=$(( L - 15 - $(( $(date +%s) - t0 )) ))
lane t CHECKS="gpu_attn_vl" TRIALS=vlfold MAIN_CHECKS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/t bash scripts/gpu_trials.sh
lane san SANITIZE_ONLY='_vl_' SANITIZER_TIMEOUT=$(( left / 3 )) BIN=.gpu/trial-vlfold OUT=$W/san bash scripts/gpu_sanitize.sh
wait; T "lanes done"
vl_ab_tables vlfold
{ echo "== A/B (auto)"; cat $W/ab-vlfold.txt; echo "== A/B (packed, spt)"; cat $W/ab-spt-vlfold.txt
  for b in bin trial-vlfold; do echo "== ncu $b"; grep -E "attn_bwd_vl|Duration|Memory Throughput" $W/ncu-$b.txt | head -12; done
  echo "== suites"; cat $W/t/trials.log 2>/dev/null; echo "== sanitizers"; cat $W/lane-san.out; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call75.tgz -C $W .
cat $OUT/summary.txt
