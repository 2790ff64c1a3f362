#!/usr/bin/env bash
# call 76 (2026-12-07's sixth session, when machines came rarely: one call for what calls
# 72-75 planned, the peers run left out): trials d256b (0067fa8: head dim 256's dK/dV by TMA
# stores under deterministic schedules only), vlpre (51c1cd7: the VL backward's
# pre/postprocess look each row's sequence up once) and vlfold (23099db: the VL backward's
# dQ conversion folded into each tile's last addition) and vlboth (dad7dbe: the two together,
# what would be adopted if both win), and main's never-run cases (the
# persistent forward's race case in gpu_attn_fwd, the dense window case with key-less q-tiles
# in gpu_attn_vl). First, alone on the GPU, one after the other: d256b's A/B with main's
# bundle (gpu_ab.sh, det and atomic rows, REPS 5); then main, vlpre, vlfold and vlboth taking turns,
# ROUNDS (2) rounds of bench_gpu --only 128,16384,causal,auto with a 1k window, a 4k window
# and the packed batch, and the packed batch under spt (vlfold's worst case). Then lanes:
# d256b's gpu_attn; racecheck of the backward's sanitizer shapes on d256b; main's
# gpu_attn_fwd and gpu_attn_vl; vlboth's, vlfold's and vlpre's gpu_attn_vl; racecheck of the `_vl_`
# targets on vlboth (both changes). Adoption rules: d256-trial-2026-12-07.md's last section,
# vlpre-trial-2026-12-07.md, vlfold-trial-2026-12-07.md.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-d256b .gpu/trial-vlpre .gpu/trial-vlfold .gpu/trial-vlboth
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
REPS=5 OUT=$W/ab timeout 150 bash scripts/gpu_ab.sh "256,1024,causal 256,1024,full 256,4096,causal 256,4096,full 256,16384,causal 256,4096,causal,atomic 256,16384,causal,atomic" \
  main=.gpu/bin/bench_gpu d256b=.gpu/trial-d256b/bench_gpu > $W/ab.log 2>&1; T "d256b A/B rc $?"
vl_ab ${ROUNDS:-2} spt bin trial-vlpre trial-vlfold trial-vlboth
left=$(( L - 15 - $(( $(date +%s) - t0 )) ))
lane t CHECKS="gpu_attn" TRIALS=d256b MAIN_CHECKS=none AB_TRIALS=none SUITE_TIMEOUT=$left OUT=$W/t bash scripts/gpu_trials.sh
lane race SANITIZE_ONLY='^racecheck test_attn_gpu_small' SANITIZER_TIMEOUT=$left BIN=.gpu/trial-d256b OUT=$W/san bash scripts/gpu_sanitize.sh
lane m MAIN_CHECKS="gpu_attn_fwd gpu_attn_vl" CHECKS=none TRIALS=none AB_TRIALS=none SUITE_TIMEOUT=$(( left / 2 )) OUT=$W/m bash scripts/gpu_trials.sh
lane tvl CHECKS="gpu_attn_vl" TRIALS="vlboth vlfold vlpre" MAIN_CHECKS=none AB_TRIALS=none SUITE_TIMEOUT=$(( left / 2 )) OUT=$W/tvl bash scripts/gpu_trials.sh
lane sanvl SANITIZE_ONLY='^racecheck .*_vl_' SANITIZER_TIMEOUT=$(( left / 2 )) BIN=.gpu/trial-vlboth OUT=$W/sanvl bash scripts/gpu_sanitize.sh
wait; T "lanes done"
vl_ab_tables vlpre vlfold vlboth
{ echo "== d256b A/B"; grep -E "^\|" $W/ab/ab.md
  for t in vlpre vlfold vlboth; do echo "== $t A/B (auto)"; cat $W/ab-$t.txt; echo "== $t A/B (packed, spt)"; cat $W/ab-spt-$t.txt; done
  echo "== suites"; cat $W/t/trials.log $W/m/trials.log $W/tvl/trials.log 2>/dev/null
  echo "== sanitizers"; cat $W/lane-race.out $W/lane-sanvl.out 2>/dev/null; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call76.tgz -C $W .
cat $OUT/summary.txt
