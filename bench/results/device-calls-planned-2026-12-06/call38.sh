#!/usr/bin/env bash
# call 38 (seventh session of 2026-12-06): call 34 with its checks in concurrent lanes: trial narrowall (fefd9ea:
# every widened head dim's dense forward on the caller's tensors through TMA, and the MHA
# backward of those widened to 128; Dsum's loads stop at 8-column halves) - gpu_attn (its
# widened-dims tests: the bytes of the copies, the gaps untouched, at 96, 72, 80, 88, 120,
# 40, 136, 200) and gpu_attn_fwd on the trial, then the A/B against main at 4k (72, 80, 112
# backward and forward, 40 and 200 forward: what the copies cost), builds taking turns.
L=${LIMIT:-440}
. "$(dirname "$0")/common.sh"
lane attn MAIN_CHECKS= CHECKS="gpu_attn" TRIALS=narrowall AB_TRIALS=none SUITE_TIMEOUT=200 OUT=$W/chk1 timeout 220 bash scripts/gpu_trials.sh
lane fwd MAIN_CHECKS= CHECKS="gpu_attn_fwd" TRIALS=narrowall AB_TRIALS=none SUITE_TIMEOUT=200 OUT=$W/chk2 timeout 220 bash scripts/gpu_trials.sh
wait; T "checks done"
{ cat $W/times.txt; cat $W/chk1/trials.log $W/chk2/trials.log 2>/dev/null; } > $OUT/summary.txt
mkdir -p $W/ab
before $((L - 200)) && OUT=$W/ab REPS=5 timeout $((L - 20 - $(( $(date +%s) - t0 )))) bash scripts/gpu_ab.sh \
  "80,4096,full,shift 80,4096,causal,shift 72,4096,causal,shift 112,4096,full,shift 40,4096,full,shift 200,4096,causal,shift 80,1024,causal,shift" \
  main=.gpu/bin/bench_gpu narrowall=.gpu/trial-narrowall/bench_gpu > $W/ab/log.txt 2>&1; T "ab rc $?"
{ grep "^|" $W/ab/ab.md; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call38.tgz -C $W .
cat $OUT/summary.txt
