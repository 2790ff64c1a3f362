#!/usr/bin/env bash
# call 14 (2026-12-06, third session): issue 20 - the small model's step (host-bound) with
# autograd's multithreading on and off (train_tiny_gpt.py --autograd-threads), for SDPA,
# strict SDPA and dash, without and with MPS
L=${LIMIT:-300}
. "$(dirname "$0")/common.sh"
mkdir -p $W/pc
MODELS=small ATTNS="sdpa sdpa-strict dash sdpa-1thread sdpa-strict-1thread dash-1thread" OUT=$W/pc \
  timeout $((L - 20)) bash scripts/gpu_percall.sh 30 > $W/pc/log.txt 2>&1; T "percall rc $?"
pkill -f nvidia-cuda-mps; { cat $W/times.txt; cat $W/pc/steps.md; } > $OUT/summary.txt; tar czf $OUT/call14.tgz -C $W .
cat $OUT/summary.txt
