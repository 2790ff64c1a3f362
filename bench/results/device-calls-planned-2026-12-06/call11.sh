#!/usr/bin/env bash
# call 11 (2026-12-06, third session): call 10's bwd_parts and percall tables, which failed on
# two bench bugs of 642a436 (fixed: bwd_parts marks _backward_checked, what the eager backward
# calls since 5561971; percall closed a log that had moved to dashd_proc), without and with
# MPS; then bench_audit twice more (issue 16's <= 1%: call 9 had +1.19% full, +0.79% causal)
L=${LIMIT:-400}
. "$(dirname "$0")/common.sh"
export DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
sum() { { cat $W/times.txt; for f in bwd_parts percall-contexts bwd_parts-mps percall-mps; do echo "== $f"; cat $W/$f.md 2>/dev/null; done
  echo "== audit"; cat $W/audit*.txt 2>/dev/null; } > $OUT/summary.txt; tar czf $OUT/call11.tgz -C $W .; }
timeout 60 python3 bench/bwd_parts.py --dashd .gpu/bin/dashd > $W/bwd_parts.md 2>&1; T "bwd_parts rc $?"
timeout 90 python3 bench/percall.py --dashd .gpu/bin/dashd --out $W/percall-contexts.md > $W/percall-contexts.log 2>&1; T "percall rc $?"; sum
t=$(mktemp -d); export CUDA_MPS_PIPE_DIRECTORY=$t/p CUDA_MPS_LOG_DIRECTORY=$t/l; mkdir -p $t/p $t/l
if before $((L - 150)) && nvidia-cuda-mps-control -d; then sleep 1
  timeout 60 python3 bench/bwd_parts.py --dashd .gpu/bin/dashd > $W/bwd_parts-mps.md 2>&1; T "bwd_parts mps rc $?"
  before $((L - 100)) && timeout 90 python3 bench/percall.py --dashd .gpu/bin/dashd --out $W/percall-mps.md > $W/percall-mps.log 2>&1; T "percall mps rc $?"
  echo quit | timeout 10 nvidia-cuda-mps-control; T "mps quit rc $?"; pkill -f nvidia-cuda-mps; sleep 1
fi
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; sum
for i in 1 2; do before $((L - 25)) && timeout 25 .gpu/bin/bench_audit --seqlen 4096 --hdim 128 > $W/audit$i.txt 2>&1; T "audit $i rc $?"; done
sum; head -c 11500 $OUT/summary.txt
