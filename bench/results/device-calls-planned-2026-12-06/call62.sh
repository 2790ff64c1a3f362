#!/usr/bin/env bash
# call 62 (planned at the end of 2026-12-07's third session): main's bundle at the session's
# last code commit (leafaddr and libdash's restore fix in; .gpu/bin, see bin.what) and trial
# leaves (.gpu/trial-leaves: e856228, one row a lane). First, quiet: bench_audit main / trial
# in turns, twice (paired rounds, 4k head dim 128). Then in lanes: main's gpu_attn,
# gpu_attn_vl and gpu_dashd; the trial's gpu_attn, gpu_audit and its racecheck/synccheck on
# the sanitizer shapes; then main's Python GPU tests. Bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-leaves
L=${LIMIT:-400}
. "$(dirname "$0")/common.sh"
for i in 1 2; do for b in bin trial-leaves; do
  timeout 30 .gpu/$b/bench_audit --seqlen 4096 --hdim 128 > $W/audit-$b-$i.txt 2>&1; T "audit $b $i rc $?"
  echo "== bench_audit $b run $i"; grep -E "^\| (full|causal)" $W/audit-$b-$i.txt; done; done > $OUT/summary.txt
LT=$(( (L - 20 - $(( $(date +%s) - t0 ))) * 75 / 100 ))
export SUITE_TIMEOUT=$((LT - 10))
lane m1 MAIN_CHECKS="gpu_attn gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m1 timeout $LT bash scripts/gpu_trials.sh
lane m2 MAIN_CHECKS="gpu_attn_vl gpu_audit" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m2 timeout $LT bash scripts/gpu_trials.sh
lane t1 MAIN_CHECKS= CHECKS="gpu_attn gpu_audit" TRIALS=leaves AB_TRIALS=none OUT=$W/t1 timeout $LT bash scripts/gpu_trials.sh
lane t2 MAIN_CHECKS= CHECKS="racecheck synccheck" TRIALS=leaves AB_TRIALS=none OUT=$W/t2 timeout $LT bash scripts/gpu_trials.sh
wait; T "lanes done"
left=$(( L - 8 - $(( $(date +%s) - t0 )) ))
DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
  timeout $left python3 client/python/tests/test_gpu.py > $W/py.log 2>&1
echo "python test_gpu.py rc $?: $(tail -3 $W/py.log | tr '\n' ' ')" >> $W/py.txt; T "py"
{ for d in m1 m2 t1 t2; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; cat $W/py.txt; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call62.tgz -C $W .
cat $OUT/summary.txt
