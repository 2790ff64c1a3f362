#!/usr/bin/env bash
# call 74 (planned at the end of 2026-12-07's fifth session): trial vlpre (51c1cd7: the VL
# backward's pre/postprocess look each row's sequence up once; vlpre-trial-2026-12-07.md).
# First, alone on the GPU: main's bundle and the trial's taking turns, ROUNDS (3) rounds of
# bench_gpu --only 128,16384,causal,auto with --window 1024, --window 4096 and the packed
# batch (the backward's TFLOPS and its digest); then one ncu pass each over the VL backward's
# pre/postprocess kernels (window 1k); then the trial's gpu_attn_vl and the `_vl_` sanitizer
# targets. Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-vlpre
L=${LIMIT:-420}
. "$(dirname "$0")/common.sh"
vl_ab ${ROUNDS:-3} auto bin trial-vlpre
for b in bin trial-vlpre; do
  timeout 60 ncu --section SpeedOfLight -k regex:'attn_bwd_vl_(pre|post)' --launch-count 2 \
    .gpu/$b/bench_gpu --reps 1 --only 128,16384,causal,shift --window 1024 > $W/ncu-$b.txt 2>&1; T "ncu $b rc $?"
done
left=$(( L - 15 - $(( $(date +%s) - t0 )) ))
lane t CHECKS="gpu_attn_vl" TRIALS=vlpre MAIN_CHECKS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/t bash scripts/gpu_trials.sh
lane san SANITIZE_ONLY='_vl_' SANITIZER_TIMEOUT=$(( left / 3 )) BIN=.gpu/trial-vlpre OUT=$W/san bash scripts/gpu_sanitize.sh
wait; T "lanes done"
vl_ab_tables vlpre
{ echo "== A/B"; cat $W/ab-vlpre.txt; for b in bin trial-vlpre; do echo "== ncu $b"; grep -E "attn_bwd_vl|Duration|Memory Throughput" $W/ncu-$b.txt | head -12; done
  echo "== suites"; cat $W/t/trials.log 2>/dev/null; echo "== sanitizers"; cat $W/lane-san.out; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call74.tgz -C $W .
cat $OUT/summary.txt
