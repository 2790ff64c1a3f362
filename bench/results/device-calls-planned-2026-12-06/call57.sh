#!/usr/bin/env bash
# call 57: issue 17's peers run on the new bundle (gpu_bench.sh --varlen: cuDNN ragged/band,
# PyTorch's flash, dashd), then bench_audit x3 at 4k head dim 128 (issue 16's audit cost).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/wheels
L=${LIMIT:-500}
. "$(dirname "$0")/common.sh"
mkdir -p $W/vl
OUT=$W/vl timeout $((L - 100)) bash scripts/gpu_bench.sh $bundle_commit --varlen > $W/vl/log.txt 2>&1; T "varlen rc $?"
cp -r $W/vl $OUT/vl
for i in 1 2 3; do before $((L - 30)) && timeout 28 .gpu/bin/bench_audit --seqlen 4096 --hdim 128 > $W/audit$i.txt 2>&1; T "audit $i rc $?"; cp $W/audit$i.txt $OUT/ 2>/dev/null; done
{ cat $W/vl/varlen-report.md 2>/dev/null | head -60; tail -8 $W/audit*.txt; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call57.tgz -C $W .
head -c 11000 $OUT/summary.txt
