#!/usr/bin/env bash
# call 73 (planned at the end of 2026-12-07's fifth session): trial d256b (0067fa8: head dim
# 256's dK/dV by TMA stores under deterministic schedules only; d256-trial-2026-12-07.md).
# First, alone on the GPU: the A/B with main's bundle (det and atomic rows); then the
# trial's gpu_attn beside the racecheck of the backward's sanitizer shapes (the trial added
# an MHA 256 case there), then synccheck if time is left.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-d256b
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
REPS=5 OUT=$W/ab timeout 150 bash scripts/gpu_ab.sh "256,1024,causal 256,1024,full 256,4096,causal 256,4096,full 256,16384,causal 256,4096,causal,atomic 256,16384,causal,atomic" \
  main=.gpu/bin/bench_gpu d256b=.gpu/trial-d256b/bench_gpu > $W/ab.log 2>&1; T "A/B rc $?"
left=$(( L - 15 - $(( $(date +%s) - t0 )) ))
lane t CHECKS="gpu_attn" TRIALS=d256b MAIN_CHECKS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/t bash scripts/gpu_trials.sh
lane race SANITIZE_ONLY='^racecheck test_attn_gpu_small' SANITIZER_TIMEOUT=$left BIN=.gpu/trial-d256b OUT=$W/san bash scripts/gpu_sanitize.sh
wait; T "lanes done"
left=$(( L - 10 - $(( $(date +%s) - t0 )) ))
[ $left -gt 60 ] && { SANITIZE_ONLY='^synccheck test_attn_gpu_small' SANITIZER_TIMEOUT=$left BIN=.gpu/trial-d256b OUT=$W/san2 \
  bash scripts/gpu_sanitize.sh > $W/sync.out 2>&1; T "synccheck rc $?"; }
{ echo "== A/B"; grep -E "^\|" $W/ab/ab.md; echo "== suites"; cat $W/t/trials.log 2>/dev/null
  echo "== sanitizers"; cat $W/lane-race.out $W/sync.out 2>/dev/null; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call73.tgz -C $W .
cat $OUT/summary.txt
