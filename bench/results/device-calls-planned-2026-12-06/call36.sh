#!/usr/bin/env bash
# call 36 (planned 2026-12-06, sixth session, for the next one, if time is left): issue 20's
# small model on a host whose host-bound steps varied 28-55 ms between rounds (calls 26, 31):
# the steps with the daemon and the trainers on disjoint CPUs (PIN=1), no MPS and MPS, three
# rounds each taking turns: whether pinning steadies them enough to measure.
L=${LIMIT:-500}
. "$(dirname "$0")/common.sh"
mkdir -p $W/pc
OUT=$W/pc STEPS_ONLY=1 PIN=1 MODELS=small ATTNS="sdpa-strict dash sdpa" REPS=3 \
  timeout $((L - 15)) bash scripts/gpu_percall.sh 30 > $W/pc/log.txt 2>&1; T "steps rc $?"
{ cat $W/pc/steps.md 2>/dev/null; tail -5 $W/pc/log.txt; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call36.tgz -C $W .
cat $OUT/summary.txt
