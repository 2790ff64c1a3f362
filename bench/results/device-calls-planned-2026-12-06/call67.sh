#!/usr/bin/env bash
# call 67 (planned at the end of 2026-12-07's fourth session, after call 66): the rest of
# main's checks on the digest-version-3 bundle - the other sanitizer targets (forward,
# window/packed, digest kernels; gpu_sanitize.sh without the backward's three, which call
# 66 ran), gpu_dashd, bench_audit at 4k (128 and 64), then the Python GPU tests.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
for d in 128 64; do timeout 25 .gpu/bin/bench_audit --seqlen 4096 --hdim $d > $W/audit-$d.txt 2>&1; T "audit $d rc $?"; done
left=$(( L - 100 - $(( $(date +%s) - t0 )) ))
lane san SANITIZE_ONLY='forward|_vl_|digest' SANITIZER_TIMEOUT=$(( left / 3 )) BIN=.gpu/bin OUT=$W/san bash scripts/gpu_sanitize.sh
lane m1 MAIN_CHECKS="gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none SUITE_TIMEOUT=$(( left / 2 )) OUT=$W/m1 bash scripts/gpu_trials.sh
wait; T "lanes done"
left=$(( L - 8 - $(( $(date +%s) - t0 )) ))
if [ $left -gt 30 ]; then
  DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
    timeout $left python3 client/python/tests/test_gpu.py > $W/py.log 2>&1
  echo "python test_gpu.py rc $?: $(tail -3 $W/py.log | tr '\n' ' ')" > $W/py.txt
else echo "python test_gpu.py: not run ($left s left)" > $W/py.txt; fi; T "py"
{ for d in 128 64; do echo "== bench_audit $d"; grep -E "^\| (full|causal)" $W/audit-$d.txt; done
  echo "== sanitizers"; cat $W/lane-san.out; echo "== suites"; cat $W/m1/trials.log 2>/dev/null
  cat $W/py.txt; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call67.tgz -C $W .
cat $OUT/summary.txt
