#!/usr/bin/env bash
# call 56: gpu_attn_fwd alone with a long bound (call 53's ran past 95 s beside three lanes),
# then unitlap's window/packed A/B (gpu_vl_kernels.sh at head dim 128, old then new).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-old
L=${LIMIT:-400}
. "$(dirname "$0")/common.sh"
(cd .gpu/bin && DASH_GPU_SUITE=gpu_attn_fwd timeout 200 ./test_dash_gpu > $W/fwd.log 2>&1)
echo "gpu_attn_fwd rc $?: $(grep -E '^ +(tests|asserts)|FAILED' $W/fwd.log | tr -s ' ' | tr '\n' ' ')" > $OUT/summary.txt; T "fwd done"
tail -5 $W/fwd.log >> $OUT/summary.txt
for b in old new; do
  d=.gpu/bin; n=1; [ $b = old ] && d=.gpu/trial-old && n=2
  mkdir -p $W/vl-$b
  left=$(( (L - 10 - $(( $(date +%s) - t0 ))) / n ))
  DIMS=128 BIN=$d OUT=$W/vl-$b timeout $left bash scripts/gpu_vl_kernels.sh > $W/vl-$b/log.txt 2>&1; T "vl $b rc $?"
  cp $W/vl-$b/vl-kernels.json $OUT/vl-$b.json 2>/dev/null
done
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call56.tgz -C $W .
cat $OUT/summary.txt
