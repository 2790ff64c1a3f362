#!/usr/bin/env bash
# call 77 (2026-12-07's sixth session, what was left after nine refused starts): call76.sh
# without trial d256b - main, vlpre (51c1cd7), vlfold (23099db) and vlboth (dad7dbe: the two
# together) taking turns, ROUNDS (2)
# rounds of bench_gpu --only 128,16384,causal,auto with a 1k window, a 4k window and the packed
# batch, and the packed batch under spt; then lanes: vlboth's, vlfold's and vlpre's gpu_attn_vl, main's
# gpu_attn_vl (its dense window case with key-less q-tiles: never run), racecheck of the
# `_vl_` targets on vlboth (cut where time is short).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-vlpre .gpu/trial-vlfold .gpu/trial-vlboth
L=${LIMIT:-300}
. "$(dirname "$0")/common.sh"
vl_ab ${ROUNDS:-2} spt bin trial-vlpre trial-vlfold trial-vlboth
left=$(( L - 15 - $(( $(date +%s) - t0 )) ))
lane tvl CHECKS="gpu_attn_vl" TRIALS="vlboth vlfold vlpre" MAIN_CHECKS=none AB_TRIALS=none SUITE_TIMEOUT=$(( left / 2 )) OUT=$W/tvl bash scripts/gpu_trials.sh
lane m MAIN_CHECKS="gpu_attn_vl" CHECKS=none TRIALS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/m bash scripts/gpu_trials.sh
lane sanvl SANITIZE_ONLY='^racecheck .*_vl_' SANITIZER_TIMEOUT=$(( left / 2 )) BIN=.gpu/trial-vlboth OUT=$W/sanvl bash scripts/gpu_sanitize.sh
wait; T "lanes done"
vl_ab_tables vlpre vlfold vlboth
{ for t in vlpre vlfold vlboth; do echo "== $t A/B (auto)"; cat $W/ab-$t.txt; echo "== $t A/B (packed, spt)"; cat $W/ab-spt-$t.txt; done
  echo "== suites"; cat $W/m/trials.log $W/tvl/trials.log 2>/dev/null
  echo "== sanitizers"; cat $W/lane-sanvl.out 2>/dev/null; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call77.tgz -C $W .
cat $OUT/summary.txt
