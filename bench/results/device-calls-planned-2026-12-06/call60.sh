#!/usr/bin/env bash
# call 60: bench_audit with paired rounds (rotated turns, the cost as the median of each
# round's ratio, with quartiles) at 4k head dim 128, three runs, and once at 1k and 16k;
# then gpu_dashd in full with libdash's restore fix (.gpu/fix: the tests as committed),
# and the Python GPU tests on the fixed libdash (.gpu/lib/libdash.so rebuilt at HEAD).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/fix
L=${LIMIT:-260}
. "$(dirname "$0")/common.sh"
for f in .gpu/fix/bin/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
for a in "4096 1" "4096 2" "4096 3" "1024 1" "16384 1"; do set -- $a
  timeout 40 .gpu/fix/bin/bench_audit --seqlen $1 --hdim 128 > $W/audit-$1-$2.txt 2>&1; T "audit $1 $2 rc $?"
  echo "== bench_audit seqlen $1 run $2"; grep -E "^\| (full|causal)" $W/audit-$1-$2.txt; done > $OUT/summary.txt
head -12 $W/audit-4096-1.txt | grep -v "^|" >> $OUT/summary.txt
(cd .gpu/fix/bin && DASH_GPU_SUITE=gpu_dashd timeout 150 ./test_dash_gpu > $W/dashd.log 2>&1)
echo "gpu_dashd rc $?: $(grep -E '^ +(tests|asserts)|FAILED' $W/dashd.log | tr -s ' ' | tr '\n' ' ')" >> $OUT/summary.txt; T "gpu_dashd"
left=$(( L - 8 - $(( $(date +%s) - t0 )) ))
DASHD=$PWD/.gpu/fix/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
  timeout $left python3 client/python/tests/test_gpu.py > $W/py.log 2>&1
echo "python test_gpu.py rc $?: $(tail -3 $W/py.log | tr '\n' ' ')" >> $OUT/summary.txt; T "py"
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call60.tgz -C $W .
cat $OUT/summary.txt
