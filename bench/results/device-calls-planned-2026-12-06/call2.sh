#!/usr/bin/env bash
# call 2 (2026-12-05 fourth session): timings, one thing at a time, most wanted first
. "$(dirname "$0")/common.sh"
mkdir -p $W/pd $W/nw $W/ht $W/pc
T start
# vlpersist: the window/packed forward persistent (main, trial, main again for drift)
for b in bin trial-vlpersist bin2; do d=${b%2}; DIMS=128 BIN=.gpu/$d OUT=$W/vl-$b timeout 90 bash scripts/gpu_vl_kernels.sh > $W/vl-$b.txt 2>&1; T vl-$b; done
# narrow96
before 300 && REPS=5 OUT=$W/nw timeout 110 bash scripts/gpu_ab.sh "96,1024,causal 96,4096,causal 96,16384,causal 96,4096,full 128,4096,full" \
  main=.gpu/bin/bench_gpu narrow96=.gpu/trial-narrow96/bench_gpu > /dev/null 2>&1
T nw-ab
# halfturn at 256
before 380 && REPS=5 OUT=$W/ht timeout 90 bash scripts/gpu_ab.sh "256,4096,full 256,16384,full 256,4096,causal 128,4096,full" \
  main=.gpu/bin/bench_gpu halfturn=.gpu/trial-halfturn/bench_gpu > /dev/null 2>&1
T ht-ab
# pairdrain and the one-tile step (p0) against main at head dim 64
before 440 && REPS=5 OUT=$W/pd timeout 80 bash scripts/gpu_ab.sh "64,2048,causal 64,4096,causal 64,4096,full" \
  main=.gpu/bin/bench_gpu p0=.gpu/trial-p0/bench_gpu pairdrain=.gpu/trial-pairdrain/bench_gpu > /dev/null 2>&1
T pd-ab
before 500 && (export DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
  timeout 60 python3 bench/percall.py --dashd .gpu/bin/dashd --iters 100 --out $W/pc/percall.md > $W/pc/percall.log 2>&1)
T percall
{ cat $W/times.txt; for d in nw ht pd; do echo "== $d"; cat $W/$d/ab.md; done; for f in $W/vl*.txt; do echo "== $f"; cat $f; done; echo "== percall"; cat $W/pc/percall.log | tail -30; } > $OUT/summary.txt
tar czf $OUT/call2.tgz -C $W .
head -c 11500 $OUT/summary.txt
