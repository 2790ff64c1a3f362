#!/usr/bin/env bash
# call 21 (planned 2026-12-06, fourth session, for the next one): what that session changed
# after its device time - the forward without ping-pong turns at 64 and 128 as main's rule
# (7de96ad; the trial's build passed gpu_attn_fwd, main's and the window/packed forward's
# not run), the native op's review fixes (2b52fa4), the backward's occupancy asked once per
# device - in lanes: gpu_attn_fwd, gpu_attn, gpu_attn_vl,
# the sanitizers, the Python GPU tests; then the figures of record at HEAD: the peers run
# (gpu_bench.sh) and the varlen peers (the window/packed forward without turns).
# Before it, here: prepare.sh (main's bundle), scripts/gpu_wheels.sh (cuDNN's frontend),
# scripts/gpu_torch_op.sh (the native op for the GPU's torch 2.11.0+cu130).
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=200
lane mfwd MAIN_CHECKS="gpu_attn_fwd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mfwd timeout 220 bash scripts/gpu_trials.sh
lane mattn MAIN_CHECKS="gpu_attn" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mattn timeout 220 bash scripts/gpu_trials.sh
lane mvl MAIN_CHECKS="gpu_attn_vl" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mvl timeout 220 bash scripts/gpu_trials.sh
lane san BIN=.gpu/bin OUT=$W/san timeout 220 bash scripts/gpu_sanitize.sh
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python timeout 220 python3 client/python/tests/test_gpu.py
wait; T "lanes done"
{ cat $W/times.txt; for d in mfwd mattn mvl; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; echo "== san"; tail -8 $W/lane-san.out
  echo "== py"; grep -E "native|FAILED|seed" $W/lane-py.out; } > $OUT/summary.txt
mkdir -p $W/bench $W/vl
before $((L - 220)) && OUT=$W/bench timeout 200 bash scripts/gpu_bench.sh $bundle_commit > $W/bench/log.txt 2>&1; T "bench rc $?"
before $((L - 90)) && OUT=$W/vl timeout 80 bash scripts/gpu_bench.sh $bundle_commit --varlen > $W/vl/log.txt 2>&1; T "varlen rc $?"
{ grep -B2 -A8 "fwd / FE fwd" $W/bench/gpu-report.md | head -60; grep -A12 "Issue 17" $W/vl/varlen-report.md; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call21.tgz -C $W .
head -c 11000 $OUT/summary.txt
