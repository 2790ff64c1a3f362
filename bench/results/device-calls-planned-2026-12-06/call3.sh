#!/usr/bin/env bash
# call 3 (2026-12-05 fourth session): head dim 256's writer (trace, halfturn), onedrain's ragged lengths, a call's host time, ncu of 128's backward
. "$(dirname "$0")/common.sh"
mkdir -p $W/ht $W/pc $W/ncu
T start
for sc in shift atomic; do timeout 40 .gpu/trial-trace/bench_gpu --only 256,4096,full,$sc > /dev/null 2>> $W/trace-256.txt; done
for sc in shift atomic; do timeout 40 .gpu/trial-trace/bench_gpu --only 128,4096,full,$sc > /dev/null 2>> $W/trace-128.txt; done
T traces
REPS=5 OUT=$W/ht timeout 150 bash scripts/gpu_ab.sh "256,4096,full 256,16384,full 256,4096,causal 256,16384,causal 128,4096,full" \
  main=.gpu/bin/bench_gpu halfturn=.gpu/trial-halfturn/bench_gpu > /dev/null 2>&1
T ht-ab
for b in bin trial-onedrain; do for sc in ascending descending shift; do
  timeout 30 .gpu/$b/bench_gpu --only 128,2112,causal,$sc --reps 5 >> $W/ragged-$b.json 2>> $W/ragged.err; done; done
T ragged
before 330 && (export DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
  timeout 120 python3 bench/percall.py --dashd .gpu/bin/dashd --profile --out $W/pc/percall.md > $W/pc/percall.log 2>&1)
T percall
before 460 && OUT=$W/ncu KERNEL=attn_bwd_tc_persistent SCHED=shift timeout 120 bash scripts/gpu_ncu_fwd.sh "128,4096,full" > $W/ncu/ncu.out 2>&1
T ncu
{ cat $W/times.txt; echo "== ht"; cat $W/ht/ab.md; echo "== ragged"; cat $W/ragged-*.json | head -c 3000; echo "== percall"; head -60 $W/pc/percall.log; echo "== ncu"; cat $W/ncu/ncu.out | head -60; echo "== traces"; cat $W/trace-256.txt $W/trace-128.txt | head -c 4000; } > $OUT/summary.txt
tar czf $OUT/call3.tgz -C $W .
head -c 11000 $OUT/summary.txt
