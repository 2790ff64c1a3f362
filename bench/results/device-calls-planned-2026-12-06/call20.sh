#!/usr/bin/env bash
# call 20 (2026-12-06, fourth session): trial nopp - the forward's consumer warpgroups
# without ping-pong turns (-DFWD_WG_PINGPONG=0, a knob on main: the same bits by
# construction); call 16's ncu at head dim 64 put barrier stalls at 1.04 per issue. An A/B of
# the forward against main (builds taking turns per shape, the backward atomic only), then
# the trial's gpu_attn_fwd suite (float64 references, bit repeats) if time is left
L=${LIMIT:-270}
. "$(dirname "$0")/common.sh"
mkdir -p $W/ab
OUT=$W/ab REPS=5 timeout $((L - 110)) bash scripts/gpu_ab.sh \
  "64,4096,full,atomic 64,16384,causal,atomic 64,1024,causal,atomic 128,4096,full,atomic 128,16384,causal,atomic" \
  main=.gpu/bin/bench_gpu nopp=.gpu/trial-nopp/bench_gpu > $W/ab/log.txt 2>&1; T "ab rc $?"
cp $W/ab/ab.md $OUT/ab.md 2>/dev/null
{ cat $W/times.txt; grep "^|" $W/ab/ab.md; } > $OUT/summary.txt
before $((L - 100)) && MAIN_CHECKS= CHECKS="gpu_attn_fwd" TRIALS=nopp AB_TRIALS=none SUITE_TIMEOUT=90 OUT=$W/chk \
  timeout 95 bash scripts/gpu_trials.sh > /dev/null 2>&1; T "checks rc $?"
{ cat $W/chk/trials.log 2>/dev/null; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call20.tgz -C $W .
cat $OUT/summary.txt
