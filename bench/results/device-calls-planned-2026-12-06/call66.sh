#!/usr/bin/env bash
# call 66 (planned at the end of 2026-12-07's fourth session): main's bundle after digest
# version 3 was adopted (.gpu/bin, see bin.what: XXH3-64 leaves, head dim 128's unit-end
# leaves one row a lane, GQA's hashed sum a kernel of its own). Call 64 ran the trial's
# suites but its racecheck was cut twice by a 200 s bound. Here: every sanitizer target
# (scripts/gpu_sanitize.sh: memcheck, racecheck, synccheck) in one lane, main's gpu_attn,
# gpu_audit, gpu_digest and gpu_dashd in another, then bench_audit at 4k (128 and 64) once
# each and test_gpu.py. Bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
LT=$(( L - 90 ))
lane san BIN=.gpu/bin OUT=$W/san timeout $LT bash scripts/gpu_sanitize.sh
lane m1 MAIN_CHECKS="gpu_attn gpu_audit gpu_digest gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none SUITE_TIMEOUT=$((LT / 2)) OUT=$W/m1 timeout $LT bash scripts/gpu_trials.sh
wait; T "lanes done"
for d in 128 64; do
  before $(( L - 40 )) && { timeout 25 .gpu/bin/bench_audit --seqlen 4096 --hdim $d > $W/audit-$d.txt 2>&1; T "audit $d rc $?"; }
done
left=$(( L - 8 - $(( $(date +%s) - t0 )) ))
[ $left -gt 20 ] && DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
  timeout $left python3 client/python/tests/test_gpu.py > $W/py.log 2>&1
echo "python test_gpu.py rc $?: $(tail -3 $W/py.log 2>/dev/null | tr '\n' ' ')" > $W/py.txt; T "py"
{ echo "== sanitizers"; cat $W/lane-san.out; echo "== suites"; cat $W/m1/trials.log 2>/dev/null
  for d in 128 64; do echo "== bench_audit $d"; grep -E "^\| (full|causal)" $W/audit-$d.txt 2>/dev/null; done
  cat $W/py.txt; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call66.tgz -C $W .
cat $OUT/summary.txt
