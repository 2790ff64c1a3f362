#!/usr/bin/env bash
# call 15 (planned 2026-12-06, third session, for the next one): issue 20's step figures with
# the host's noise taken out - the small model, five rounds taking turns (REPS=5), autograd's
# multithreading on and off, without and with MPS (call 14 had one run each: inconclusive)
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
mkdir -p $W/pc
MODELS=small REPS=5 ATTNS="sdpa sdpa-strict dash sdpa-1thread sdpa-strict-1thread dash-1thread" OUT=$W/pc \
  timeout $((L - 20)) bash scripts/gpu_percall.sh 20 > $W/pc/log.txt 2>&1; T "percall rc $?"
pkill -f nvidia-cuda-mps; { cat $W/times.txt; cat $W/pc/steps.md; } > $OUT/summary.txt; tar czf $OUT/call15.tgz -C $W .
cat $OUT/summary.txt
