#!/usr/bin/env bash
# call 45 (planned in the ninth session of 2026-12-06; its device time ran out before it):
# trial hand256 (746a78b on main, a2fea84 on ba46799: head dim 256's
# dQ hand-off in two parts - the ticket's header at the step's start, the partial staged
# before the wait for the last one's read). Its smoke runs first (a hang skips the rest),
# then gpu_attn and racecheck/synccheck in lanes, then the A/B at 256 against main's bundle
# (which must be the trial's base: prepare.sh main and build_trial.sh from the same HEAD). Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-hand256
L=${LIMIT:-300}
. "$(dirname "$0")/common.sh"
ok=1
for sh in 256,1024,full,shift 256,1000,causal,shift 256,4096,causal,ascending 256,4096,full,atomic; do
  timeout 20 .gpu/trial-hand256/bench_gpu --reps 2 --only $sh >> $W/smoke.txt 2>&1 || { ok=0; echo "smoke $sh: exit $?" >> $W/smoke.txt; }
done
T "smoke ok=$ok"
{ echo "== hand256 smoke (ok=$ok)"; grep -E "tflops|exit|rror" $W/smoke.txt | cut -c1-200; } > $OUT/summary.txt
if [ $ok = 1 ]; then
  LT=$(( L * 45 / 100 < 200 ? L * 45 / 100 : 200 ))
  export SUITE_TIMEOUT=$((LT - 10))
  lane h1 MAIN_CHECKS= CHECKS="gpu_attn" TRIALS=hand256 AB_TRIALS=none OUT=$W/h1 timeout $LT bash scripts/gpu_trials.sh
  lane h2 MAIN_CHECKS= CHECKS="racecheck synccheck" TRIALS=hand256 AB_TRIALS=none OUT=$W/h2 timeout $LT bash scripts/gpu_trials.sh
  wait; T "checks done"
  { for d in h1 h2; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; } >> $OUT/summary.txt
  if before $((L - 50)); then
    mkdir -p $W/ab
    OUT=$W/ab REPS=5 timeout $(( L - 10 - $(( $(date +%s) - t0 )) )) bash scripts/gpu_ab.sh \
      "256,4096,full,shift 256,4096,causal,shift 256,16384,causal,shift 256,4096,full,atomic 256,4096,causal,descending" \
      main=.gpu/bin/bench_gpu hand256=.gpu/trial-hand256/bench_gpu > $W/ab/log.txt 2>&1; T "ab rc $?"
    grep "^|" $W/ab/ab.md >> $OUT/summary.txt
  fi
fi
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call45.tgz -C $W .
cat $OUT/summary.txt
