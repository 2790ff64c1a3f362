#!/usr/bin/env bash
# call 66 (planned at the end of 2026-12-07's fourth session): main's bundle after digest
# version 3 was adopted (.gpu/bin, see bin.what: XXH3-64 leaves, head dim 128's unit-end
# leaves one row a lane, head dim 64's read back from the staged tiles, GQA's hashed sum a
# kernel of its own). Call 64 ran the trial's suites but its racecheck was cut twice by a
# 200 s bound. Here, first and alone: racecheck of the backward's sanitizer shapes (leaves
# on every other schedule), bounded at LIMIT - 150; then synccheck and memcheck of them
# beside main's gpu_attn (the strided views' new leaves test), gpu_audit and gpu_digest.
# Each run has one bound (no nested timeouts: an outer one would leave the inner running).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
SANITIZE_ONLY='^racecheck test_attn_gpu_small' SANITIZER_TIMEOUT=$(( L - 150 )) BIN=.gpu/bin OUT=$W/san \
  bash scripts/gpu_sanitize.sh > $W/race.out 2>&1; T "racecheck rc $?"
left=$(( L - 15 - $(( $(date +%s) - t0 )) ))
lane sync SANITIZE_ONLY='^(synccheck|memcheck) test_attn_gpu_small' SANITIZER_TIMEOUT=$(( left / 2 )) BIN=.gpu/bin OUT=$W/san bash scripts/gpu_sanitize.sh
lane m1 MAIN_CHECKS="gpu_attn gpu_audit gpu_digest" CHECKS=none TRIALS=none AB_TRIALS=none SUITE_TIMEOUT=$(( left / 3 )) OUT=$W/m1 bash scripts/gpu_trials.sh
wait; T "lanes done"
{ echo "== racecheck"; cat $W/race.out; echo "== synccheck, memcheck"; cat $W/lane-sync.out
  echo "== suites"; cat $W/m1/trials.log 2>/dev/null; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call66.tgz -C $W .
cat $OUT/summary.txt
