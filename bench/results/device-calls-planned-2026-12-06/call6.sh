#!/usr/bin/env bash
# call 6 (planned 2026-12-06 for the next session): main's backward after 254bdf8 (the drain
# rule without onedrain's flag, the window/packed loads without narrow96's column count) -
# gpu_attn, gpu_attn_vl and the sanitizers in lanes - then, alone, issue 20's questions:
# bench/bwd_parts.py (where ~450 us of a backward's host time go), and the training steps
# of the two models, separate contexts and MPS (scripts/gpu_percall.sh)
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=250
backward_lanes 280
[ -d .gpu/trial-nc2causal ] && lane nc CHECKS="gpu_attn_fwd racecheck synccheck" TRIALS=nc2causal AB_TRIALS=none OUT=$W/nc timeout 280 bash scripts/gpu_trials.sh
wait; T "lanes done"
[ -d .gpu/trial-nc2causal ] && REPS=5 OUT=$W/nc timeout 60 bash scripts/gpu_ab.sh "64,1024,causal 64,2048,causal 64,4096,causal 64,1024,full" \
  main=.gpu/bin/bench_gpu nc2causal=.gpu/trial-nc2causal/bench_gpu > /dev/null 2>&1; T "nc2causal ab"
DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONPATH=$PWD/client/python timeout 90 python3 bench/bwd_parts.py \
  --dashd .gpu/bin/dashd > $W/bwd_parts.md 2>&1; T "bwd_parts rc $?"
mkdir -p $W/pc; before $((L - 120)) && OUT=$W/pc ATTNS="sdpa sdpa-strict dash" timeout $((L - 30 - $(( $(date +%s) - t0 )))) \
  bash scripts/gpu_percall.sh 30 > $W/pc/log.txt 2>&1; T "percall rc $?"
{ cat $W/times.txt; for d in mattn mvl nc; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; echo "== san"; cat $W/lane-san.out;
  echo "== nc2causal"; cat $W/nc/ab.md 2>/dev/null; echo "== bwd_parts"; cat $W/bwd_parts.md; echo "== steps"; cat $W/pc/steps.md 2>/dev/null; } > $OUT/summary.txt
tar czf $OUT/call6.tgz -C $W .
head -c 11000 $OUT/summary.txt
