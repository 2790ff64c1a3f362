#!/usr/bin/env bash
# call 4 (2026-12-06, after calls 1-3 on an H100): the Python tests the runner's skip cut off,
# the peers run on main with narrow96 adopted (cuDNN's wheel in .gpu/wheels), onedrain's packed
# batch (its ragged win is in call 3), pairdrain per schedule at 64 (call 2's A/B gave best det
# only, which is spt)
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
mkdir -p $W/py $W/bench $W/pd
T start
DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
  timeout 100 python3 client/python/tests/test_gpu.py > $W/py/test_gpu.out 2>&1; T "py rc $?"
OUT=$W/bench timeout $((L - 230)) bash scripts/gpu_bench.sh $bundle_commit > $W/bench/log.txt 2>&1; T "bench rc $?"
for b in bin trial-onedrain; do before $((L - 50)) && DIMS=128 BIN=.gpu/$b OUT=$W/vl-$b timeout 40 bash scripts/gpu_vl_kernels.sh > $W/vl-$b.txt 2>&1; T vl-$b; done
for s in 2048 4096; do for sc in ascending descending; do for b in bin trial-p0 trial-pairdrain; do
  before $((L - 15)) && timeout 15 .gpu/$b/bench_gpu --only 64,$s,causal,$sc --reps 5 > $W/pd/$b-$s-$sc.json 2>> $W/pd/err.txt
done; done; done; T pd
{ cat $W/times.txt; echo "== py"; grep -v "^$" $W/py/test_gpu.out | grep -v Warning | tail -30; echo "== bench"; tail -5 $W/bench/log.txt; ls $W/bench;
  for f in $W/vl-*.txt; do echo "== $f"; cat $f; done; echo "== pd";
  for f in $W/pd/*.json; do echo "$(basename $f .json) $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["rows"][0]["bwd"][0]; print(r["schedule"], r["tflops"], r["bitwise_repeat"])' $f 2>&1 | tail -1)"; done; } > $OUT/summary.txt
tar czf $OUT/call4.tgz -C $W .
cat $OUT/summary.txt; ls $W/bench/*.md 2>/dev/null && head -c 6000 $W/bench/*.md
