#!/usr/bin/env bash
# call 42 (eighth session of 2026-12-06): call 38 (trial narrowall: its gpu_attn and
# gpu_attn_fwd suites, the A/B at widened head dims) and trial spill64 (e40a51e: head dim
# 64's pair kernels 40/52 -> 24/36 spill bytes; gpu_attn, racecheck, synccheck, the A/B at
# 64) in one start; bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-narrowall .gpu/trial-spill64
L=${LIMIT:-560}
. "$(dirname "$0")/common.sh"
LT=$(( L * 45 / 100 < 220 ? L * 45 / 100 : 220 ))
export SUITE_TIMEOUT=$((LT - 10))
lane n1 MAIN_CHECKS= CHECKS="gpu_attn" TRIALS=narrowall AB_TRIALS=none OUT=$W/n1 timeout $LT bash scripts/gpu_trials.sh
lane n2 MAIN_CHECKS= CHECKS="gpu_attn_fwd" TRIALS=narrowall AB_TRIALS=none OUT=$W/n2 timeout $LT bash scripts/gpu_trials.sh
lane s1 MAIN_CHECKS= CHECKS="gpu_attn" TRIALS=spill64 AB_TRIALS=none OUT=$W/s1 timeout $LT bash scripts/gpu_trials.sh
lane s2 MAIN_CHECKS= CHECKS="racecheck synccheck" TRIALS=spill64 AB_TRIALS=none OUT=$W/s2 timeout $LT bash scripts/gpu_trials.sh
wait; T "checks done"
{ for d in $W/n1 $W/n2 $W/s1 $W/s2; do echo "== ${d##*/}"; cat $d/trials.log 2>/dev/null; done; cat $W/times.txt; } > $OUT/summary.txt
ab() { # NAME BOUND SHAPES BUILDS...: one A/B into $W/NAME
  local n=$1 b=$2 sh=$3; shift 3
  mkdir -p $W/$n
  OUT=$W/$n REPS=5 timeout $b bash scripts/gpu_ab.sh "$sh" "$@" > $W/$n/log.txt 2>&1; T "ab $n rc $?"
  grep "^|" $W/$n/ab.md >> $OUT/summary.txt
}
left() { echo $(( L - 10 - $(( $(date +%s) - t0 )) )); }
before $((L - 60)) && ab ab64 $(( $(left) / 2 )) \
  "64,4096,full,shift 64,4096,causal,shift 64,16384,full,shift 64,16384,causal,shift" \
  main=.gpu/bin/bench_gpu spill64=.gpu/trial-spill64/bench_gpu
before $((L - 40)) && ab abn $(left) \
  "80,4096,full,shift 80,4096,causal,shift 72,4096,causal,shift 112,4096,full,shift 40,4096,full,shift 200,4096,causal,shift" \
  main=.gpu/bin/bench_gpu narrowall=.gpu/trial-narrowall/bench_gpu
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call42.tgz -C $W .
cat $OUT/summary.txt
