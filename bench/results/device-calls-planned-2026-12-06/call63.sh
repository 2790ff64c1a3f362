#!/usr/bin/env bash
# call 63 (2026-12-07, fourth session): trial varlen-native (ccbc182: a packed batch on CUDA
# tensors through the native op). The trial changes only the Python binding and the op's
# library, so it runs as a copy of the tree with the trial's files (.gpu/trial-vn/tree) and
# a lib folder with the trial's libdash_torch, against main's bundle (.gpu/bin) for dashd.
# Quiet first: percall.py (the trial's: native and ctypes varlen rows in one loop), then
# gpu_bench.sh --varlen main / trial (varlen case), without and with MPS. Then the trial's
# test_gpu.py (the whole file). Bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/wheels .gpu/trial-vn
L=${LIMIT:-420}
. "$(dirname "$0")/common.sh"
R=$PWD
VN=/tmp/vn; rm -rf $VN; mkdir -p $VN/.gpu
cp -a bench scripts client $VN/
cp -a .gpu/trial-vn/tree/. $VN/
ln -s $R/.gpu/bin $R/.gpu/wheels $VN/.gpu/
cp -a .gpu/lib $VN/.gpu/lib; cp .gpu/trial-vn/libdash_torch_*.so $VN/.gpu/lib/
export DASH_TEST_BACKEND=cuda
( cd $VN && DASH_LIBRARY=$VN/.gpu/lib/libdash.so PYTHONPATH=client/python python3 -c '
import torch, dash_attn; from dash_attn import _native as n
print("native load:", n.load(), "varlen op:", n._varlen_op, "why_not:", n.why_not)' ) > $W/op.txt 2>&1
T "op check"
( cd $VN && DASH_LIBRARY=$VN/.gpu/lib/libdash.so PYTHONPATH=client/python timeout 90 python3 bench/percall.py --dashd $R/.gpu/bin/dashd ) > $W/percall.txt 2>&1; T "percall rc $?"
for m in "" 1; do
  for t in main trial; do
    d=$R; [ $t = trial ] && d=$VN
    mkdir -p $W/vl-$t-mps$m
    ( cd $d && MPS=$m OUT=$W/vl-$t-mps$m timeout 100 bash scripts/gpu_bench.sh $bundle_commit-$t --varlen --cases varlen ) > $W/vl-$t-mps$m.log 2>&1
    T "varlen $t mps=$m rc $?"
  done
done
left=$(( L - 10 - $(( $(date +%s) - t0 )) ))
( cd $VN && DASHD=$R/.gpu/bin/dashd DASH_LIBRARY=$VN/.gpu/lib/libdash.so PYTHONPATH=client/python \
  timeout $left python3 client/python/tests/test_gpu.py ) > $W/py.log 2>&1
echo "trial test_gpu.py rc $?: $(tail -3 $W/py.log | tr '\n' ' ')" > $W/py.txt; T "py"
{ cat $W/op.txt; echo "== percall"; cat $W/percall.txt
  for f in $W/vl-*-mps*/varlen-report.md; do echo "== $f"; grep -E "^\| (dashd|cudnn-fe) " $f; done
  cat $W/py.txt; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call63.tgz -C $W .
cat $OUT/summary.txt
