#!/usr/bin/env bash
# call 12 (2026-12-06, third session): issue 20 - where a signal-ordered op's time goes on
# its way to the GPU (2d62a7b: dashd's debug line per launch; percall.py's breakdown matches
# it to its calls), without and with MPS
L=${LIMIT:-300}
. "$(dirname "$0")/common.sh"
export DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
sum() { { cat $W/times.txt; for f in percall-contexts percall-mps; do echo "== $f"; cat $W/$f.md 2>/dev/null; tail -5 $W/$f.log 2>/dev/null; done
  } > $OUT/summary.txt; tar czf $OUT/call12.tgz -C $W .; }
timeout 90 python3 bench/percall.py --dashd .gpu/bin/dashd --out $W/percall-contexts.md > $W/percall-contexts.log 2>&1; T "percall rc $?"; sum
t=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$t/p CUDA_MPS_LOG_DIRECTORY=$t/l; mkdir -p $t/p $t/l
if before $((L - 100)) && nvidia-cuda-mps-control -d; then sleep 1
  timeout 90 python3 bench/percall.py --dashd .gpu/bin/dashd --out $W/percall-mps.md > $W/percall-mps.log 2>&1; T "percall mps rc $?"
  echo quit | timeout 10 nvidia-cuda-mps-control; T "mps quit rc $?"; pkill -f nvidia-cuda-mps; sleep 1
fi
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
sum; head -c 11500 $OUT/summary.txt
