#!/usr/bin/env bash
# call 10 (2026-12-06, third session, after call 9 on the same warm machine): issue 20's
# cuts of the second session on the GPU (the watchdog's pinned copy, the packed refs, the
# eager backward's skipped checks) - bwd_parts and bwd_thread, then the training steps without
# and with MPS (gpu_percall.sh); then call 7's rest (the varlen peers without and with MPS,
# bwd_parts under MPS) and call 8's (step_profile of the large model under MPS)
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
export DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
timeout 60 python3 bench/bwd_parts.py --dashd .gpu/bin/dashd > $W/bwd_parts.md 2>&1; T "bwd_parts rc $?"
timeout 60 python3 bench/bwd_thread.py --dashd .gpu/bin/dashd > $W/bwd_thread.md 2>&1; T "bwd_thread rc $?"
mkdir -p $W/pc; OUT=$W/pc ATTNS="sdpa sdpa-strict dash" timeout 230 bash scripts/gpu_percall.sh 30 > $W/pc/log.txt 2>&1; T "percall rc $?"
mkdir -p $W/vl $W/vlmps
before $((L - 90)) && OUT=$W/vl timeout 80 bash scripts/gpu_bench.sh $bundle_commit --varlen > $W/vl/log.txt 2>&1; T "varlen rc $?"
before $((L - 90)) && MPS=1 OUT=$W/vlmps timeout 80 bash scripts/gpu_bench.sh $bundle_commit --varlen > $W/vlmps/log.txt 2>&1; T "varlen mps rc $?"
t=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$t/p CUDA_MPS_LOG_DIRECTORY=$t/l; mkdir -p $t/p $t/l
before $((L - 40)) && nvidia-cuda-mps-control -d && sleep 1 && timeout 40 python3 bench/bwd_parts.py --dashd .gpu/bin/dashd > $W/bwd_parts-mps.md 2>&1; T "bwd_parts mps rc $?"
echo quit | nvidia-cuda-mps-control; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
{ cat $W/times.txt; echo "== bwd_parts"; cat $W/bwd_parts.md; echo "== bwd_thread"; cat $W/bwd_thread.md; echo "== steps"; cat $W/pc/steps.md 2>/dev/null
  grep -A12 "Issue 17" $W/vl/varlen-report.md; grep -A12 "Issue 17" $W/vlmps/varlen-report.md; echo "== bwd_parts mps"; cat $W/bwd_parts-mps.md; } > $OUT/summary.txt
tar czf $OUT/call10.tgz -C $W .
head -c 11500 $OUT/summary.txt
