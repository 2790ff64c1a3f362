#!/usr/bin/env bash
# call 7 (planned 2026-12-06 for the next session): the figures of record after call 6 - the
# peers run (scripts/gpu_bench.sh; .gpu/wheels holds cuDNN's frontend), the varlen peers with
# and without MPS, bwd_parts.py under MPS, and the audit's cost at 4k head dim 128 (issue 16:
# <= 1%; bench_audit)
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
mkdir -p $W/bench $W/vl $W/vlmps
OUT=$W/bench timeout 200 bash scripts/gpu_bench.sh $bundle_commit > $W/bench/log.txt 2>&1; T "bench rc $?"
OUT=$W/vl timeout 80 bash scripts/gpu_bench.sh $bundle_commit --varlen > $W/vl/log.txt 2>&1; T "varlen rc $?"
MPS=1 OUT=$W/vlmps timeout 80 bash scripts/gpu_bench.sh $bundle_commit --varlen > $W/vlmps/log.txt 2>&1; T "varlen mps rc $?"
t=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$t/p CUDA_MPS_LOG_DIRECTORY=$t/l; mkdir -p $t/p $t/l
nvidia-cuda-mps-control -d && sleep 1 && DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONPATH=$PWD/client/python \
  timeout 90 python3 bench/bwd_parts.py --dashd .gpu/bin/dashd > $W/bwd_parts-mps.md 2>&1; T "bwd_parts mps rc $?"
echo quit | nvidia-cuda-mps-control; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
before $((L - 70)) && timeout 60 .gpu/bin/bench_audit --seqlen 4096 --hdim 128 > $W/audit.txt 2>&1; T "audit rc $?"
{ cat $W/times.txt; grep -A8 "## hdim 128, full" $W/bench/gpu-report.md; grep -A12 "Issue 17" $W/vl/varlen-report.md;
  echo "== bwd_parts mps"; cat $W/bwd_parts-mps.md; echo "== audit"; cat $W/audit.txt; } > $OUT/summary.txt
tar czf $OUT/call7.tgz -C $W .
head -c 11000 $OUT/summary.txt
