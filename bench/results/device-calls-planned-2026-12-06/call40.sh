#!/usr/bin/env bash
# call 40 (eighth session of 2026-12-06): head dim 256's backward (bwd256-plan-2026-12-06.md).
# Alone on the GPU: main's trace (1832682's q.empty slot: the compute warps' wait for the
# writer's read of the dQ partial before a Q/dO load) at 4k full and causal; a smoke run of
# trial tma256 (151dfe7: Q/dO by TMA from a loader lane) with short timeouts - a hang skips
# the rest of its runs; the A/B main/tma256 at 4k-16k (digests say whether the bits agree);
# then tma256's gpu_attn suite, racecheck and synccheck in lanes.
L=${LIMIT:-420}
. "$(dirname "$0")/common.sh"
for sh in 256,4096,full,shift 256,4096,full,atomic 256,4096,causal,shift; do
  echo "== $sh" >> $W/trace.txt
  timeout 40 .gpu/trial-trace/bench_gpu --only $sh > /dev/null 2>> $W/trace.txt
done
T "trace done"
ok=1
for sh in 256,1024,full,shift 256,1000,causal,shift 256,4096,causal,atomic; do
  timeout 20 .gpu/trial-tma256/bench_gpu --reps 2 --only $sh >> $W/smoke.txt 2>&1 || { ok=0; echo "smoke $sh: exit $?" >> $W/smoke.txt; }
done
T "smoke ok=$ok"
{ cat $W/trace.txt; cat $W/smoke.txt; } > $OUT/summary.txt
if [ $ok = 1 ] && before $((L - 220)); then
  mkdir -p $W/ab
  REPS=5 OUT=$W/ab timeout $((L - 200 - $(( $(date +%s) - t0 )))) bash scripts/gpu_ab.sh \
    "256,4096,full,shift 256,4096,causal,shift 256,16384,full,shift 256,16384,causal,shift 256,8192,causal,shift 256,4096,full,atomic 256,2048,causal,shift" \
    main=.gpu/bin/bench_gpu tma256=.gpu/trial-tma256/bench_gpu > $W/ab/log.txt 2>&1; T "ab rc $?"
  cat $W/ab/ab.md >> $OUT/summary.txt
fi
LT=$(( L - 15 - $(( $(date +%s) - t0 )) ))
if [ $ok = 1 ] && [ $LT -gt 60 ]; then
  export SUITE_TIMEOUT=$((LT - 10))
  lane t1 MAIN_CHECKS= CHECKS="gpu_attn" TRIALS=tma256 AB_TRIALS=none OUT=$W/t1 timeout $LT bash scripts/gpu_trials.sh
  lane t2 MAIN_CHECKS= CHECKS="racecheck synccheck" TRIALS=tma256 AB_TRIALS=none OUT=$W/t2 timeout $LT bash scripts/gpu_trials.sh
  wait
  cat $W/t1/trials.log $W/t2/trials.log >> $OUT/summary.txt 2>/dev/null
fi
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call40.tgz -C $W .
cat $OUT/summary.txt
