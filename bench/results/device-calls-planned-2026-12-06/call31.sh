#!/usr/bin/env bash
# call 31 (2026-12-06, sixth session): issue 20's one open figure - the small model's step
# under MPS with dash-compile beside dash and strict SDPA (call 26's percall run spent its
# time before the MPS pass's steps): steps only, MPS only, three rounds.
L=${LIMIT:-420}
. "$(dirname "$0")/common.sh"
mkdir -p $W/pc
OUT=$W/pc STEPS_ONLY=1 MPS_ONLY=1 MODELS=small ATTNS="sdpa-strict dash dash-compile sdpa" REPS=3 \
  timeout $((L - 15)) bash scripts/gpu_percall.sh 30 > $W/pc/log.txt 2>&1; T "steps rc $?"
{ cat $W/pc/steps.md 2>/dev/null; tail -5 $W/pc/log.txt; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call31.tgz -C $W .
cat $OUT/summary.txt
