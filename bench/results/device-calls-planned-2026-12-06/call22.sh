#!/usr/bin/env bash
# call 22 (planned 2026-12-06, fourth session, for the next one): the head-dim-64 forward's
# consumers rule (two up to 2k causal rows, three elsewhere: tuned with the ping-pong turns,
# which are gone since 7de96ad) against three everywhere (trial nc3c) and two everywhere
# (trial nc2); the same bits by construction (a row's arithmetic does not depend on the
# tile's rows). Build the trials first: prepare.sh nc3c nc2. Then the trials' gpu_attn_fwd.
L=${LIMIT:-540}
. "$(dirname "$0")/common.sh"
mkdir -p $W/ab
OUT=$W/ab REPS=5 timeout $((L - 300)) bash scripts/gpu_ab.sh \
  "64,1024,causal,atomic 64,2048,causal,atomic 64,4096,causal,atomic 64,16384,causal,atomic 64,1024,full,atomic 64,4096,full,atomic" \
  main=.gpu/bin/bench_gpu nc3c=.gpu/trial-nc3c/bench_gpu nc2=.gpu/trial-nc2/bench_gpu > $W/ab/log.txt 2>&1; T "ab rc $?"
{ cat $W/times.txt; grep "^|" $W/ab/ab.md; } > $OUT/summary.txt
before $((L - 250)) && MAIN_CHECKS= CHECKS="gpu_attn_fwd" TRIALS="nc3c nc2" AB_TRIALS=none SUITE_TIMEOUT=120 OUT=$W/chk \
  timeout 245 bash scripts/gpu_trials.sh > /dev/null 2>&1; T "checks rc $?"
{ cat $W/chk/trials.log 2>/dev/null; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call22.tgz -C $W .
cat $OUT/summary.txt
