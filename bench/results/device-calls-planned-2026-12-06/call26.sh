#!/usr/bin/env bash
# call 26 (planned 2026-12-06, fifth session, for the next one): main's bundle at 43125b3 or
# later with the native op for torch 2.11.0+cu130 (prepare.sh main; scripts/gpu_torch_op.sh):
# the custom ops' native requests (dash_torch::fwd / bwd, issue 20's compiled path) - the
# Python GPU tests (the ops' native and ctypes bits, torch.compile's eager bits, opcheck),
# then percall.py's host times (the ops' rows beside the eager ones) and the two models'
# steps with dash-compile beside the others (no MPS and MPS).
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
  timeout 150 python3 client/python/tests/test_gpu.py > $W/py.out 2>&1; T "py rc $?"
{ cat $W/times.txt; grep -E "native|custom_ops|compile|opcheck|FAILED|seed" $W/py.out; } > $OUT/summary.txt
mkdir -p $W/pc
before $((L - 150)) && OUT=$W/pc ATTNS="sdpa sdpa-strict dash dash-compile sdpa-compile" REPS=2 \
  timeout $((L - 20 - $(( $(date +%s) - t0 )))) bash scripts/gpu_percall.sh 30 > $W/pc/log.txt 2>&1; T "percall rc $?"
{ cat $W/pc/percall-*.md 2>/dev/null | grep -E "^\| (dash_attn|torch.ops|SDPA)"; cat $W/pc/steps.md 2>/dev/null; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call26.tgz -C $W .
head -c 11000 $OUT/summary.txt
