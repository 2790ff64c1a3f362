#!/usr/bin/env bash
# call 19 (2026-12-06, fourth session): the large model's step with the native op, two rounds
# taking turns (dash, dash-ctypes, SDPA, strict SDPA), without and with MPS
L=${LIMIT:-480}
. "$(dirname "$0")/common.sh"
mkdir -p $W/pc
MODELS=large REPS=2 ATTNS="sdpa sdpa-strict dash dash-ctypes" OUT=$W/pc \
  timeout $((L - 20)) bash scripts/gpu_percall.sh 20 > $W/pc/log.txt 2>&1; T "percall rc $?"
pkill -f nvidia-cuda-mps
{ for f in $W/pc/percall-*.md; do echo "== $f"; head -14 $f; done; echo "== steps"; cat $W/pc/steps.md; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call19.tgz -C $W .
cat $OUT/summary.txt
