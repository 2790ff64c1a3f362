#!/usr/bin/env bash
# device call 2 (2026-12-04 s2): A/B of trial tmastore64 (dK/dV TMA stores at 64 and 128) against main, dense and VL kernels
set -u
for f in .gpu/bin/*.xz .gpu/trial-*/*.xz; do xz -d -f "$f"; done
export LD_LIBRARY_PATH=$PWD/.gpu/lib
W=$OUT/w; mkdir -p $W
SECONDS=0
REPS=5 OUT=$W timeout 300 bash scripts/gpu_ab.sh "64,1024,causal 64,4096,full 64,4096,causal 64,16384,causal 128,1024,causal 128,4096,full 128,4096,causal 128,16384,causal" main=.gpu/bin/bench_gpu tmastore64=.gpu/trial-tmastore64/bench_gpu 2>&1 | grep "^|"
echo "t=$SECONDS"
for b in main tmastore64; do
  bin=.gpu/bin; [ $b = tmastore64 ] && bin=.gpu/trial-tmastore64
  DIMS=64,128 BIN=$bin OUT=$W timeout 110 bash scripts/gpu_vl_kernels.sh 2>/dev/null | grep -v causal | sed "s/^/$b: /" | tee -a $W/vl-ab.txt
  mv $W/vl-kernels.json $W/vl-kernels-$b.json 2>/dev/null
done
echo "t=$SECONDS"
cd $OUT && tar czf w.tgz w && rm -rf w
