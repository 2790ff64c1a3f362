#!/usr/bin/env bash
# call 64 (2026-12-07, fourth session; call 62 and the digest3 trial's checks in one call,
# since machines came rarely): main's bundle (.gpu/bin, 775bc70), trial leaves
# (.gpu/trial-leaves, e856228: XXH64 leaves one row a lane) and trial digest3
# (.gpu/trial-digest3: leaves + XXH3-64 leaves, digest version 3). First, quiet:
# bench_audit at 4k head dim 128 of the three builds in turns, twice (the order rotated),
# then head dim 64 main / digest3.
# Then in lanes: main's gpu_attn + gpu_dashd, main's gpu_attn_vl, leaves' gpu_attn +
# gpu_audit, digest3's gpu_attn + gpu_audit + gpu_digest, digest3's racecheck + synccheck
# (its reads are leaves' reads); then main's Python GPU tests. Bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-leaves .gpu/trial-digest3
L=${LIMIT:-560}
. "$(dirname "$0")/common.sh"
for order in "bin trial-leaves trial-digest3" "trial-digest3 trial-leaves bin"; do
  i=$((${i:-0} + 1))
  for b in $order; do
    timeout 60 .gpu/$b/bench_audit --seqlen 4096 --hdim 128 > $W/audit-$b-$i.txt 2>&1; T "audit $b $i rc $?"
    echo "== bench_audit $b run $i"; grep -E "^\| (full|causal)" $W/audit-$b-$i.txt
  done
done > $OUT/summary.txt
for b in bin trial-digest3; do  # head dim 64 (digest3 changed its epilogue's leaves too)
  timeout 60 .gpu/$b/bench_audit --seqlen 4096 --hdim 64 > $W/audit64-$b.txt 2>&1; T "audit64 $b rc $?"
  echo "== bench_audit hdim 64 $b"; grep -E "^\| (full|causal)" $W/audit64-$b.txt
done >> $OUT/summary.txt
LT=$(( (L - 20 - $(( $(date +%s) - t0 ))) * 75 / 100 ))
export SUITE_TIMEOUT=$((LT - 10))
lane m1 MAIN_CHECKS="gpu_attn gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m1 timeout $LT bash scripts/gpu_trials.sh
lane m2 MAIN_CHECKS="gpu_attn_vl" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m2 timeout $LT bash scripts/gpu_trials.sh
lane t1 MAIN_CHECKS= CHECKS="gpu_attn gpu_audit" TRIALS=leaves AB_TRIALS=none OUT=$W/t1 timeout $LT bash scripts/gpu_trials.sh
lane d1 MAIN_CHECKS= CHECKS="gpu_attn gpu_audit gpu_digest" TRIALS=digest3 AB_TRIALS=none OUT=$W/d1 timeout $LT bash scripts/gpu_trials.sh
lane d2 MAIN_CHECKS= CHECKS="racecheck synccheck" TRIALS=digest3 AB_TRIALS=none OUT=$W/d2 timeout $LT bash scripts/gpu_trials.sh
wait; T "lanes done"
left=$(( L - 8 - $(( $(date +%s) - t0 )) ))
DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python \
  timeout $left python3 client/python/tests/test_gpu.py > $W/py.log 2>&1
echo "python test_gpu.py rc $?: $(tail -3 $W/py.log | tr '\n' ' ')" >> $W/py.txt; T "py"
{ for d in m1 m2 t1 d1 d2; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; cat $W/py.txt; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call64.tgz -C $W .
cat $OUT/summary.txt
