#!/usr/bin/env bash
# call 1 (2026-12-05 fourth session): every correctness check in parallel lanes (no timings here)
# LIMIT: the call's seconds (default 570); the lanes get 190 fewer. Under 500: no onedrain
# lane; under 400: main's lanes, the sanitizers and Python only
L=${LIMIT:-570}; LT=$((L - 190))
. "$(dirname "$0")/common.sh"
nvidia-smi > $W/nvidia-smi.txt 2>&1
export SUITE_TIMEOUT=$((LT - 20))
backward_lanes $LT
lane mfwd MAIN_CHECKS="gpu_attn_fwd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mfwd timeout $LT bash scripts/gpu_trials.sh
lane mad MAIN_CHECKS="gpu_audit gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mad timeout $LT bash scripts/gpu_trials.sh
[ "$L" -ge 400 ] && lane pd CHECKS="gpu_attn racecheck synccheck" TRIALS="pairdrain halfturn" AB_TRIALS=none OUT=$W/pd timeout $LT bash scripts/gpu_trials.sh
[ "$L" -ge 400 ] && lane vp CHECKS="gpu_attn_vl gpu_attn_fwd vlracecheck vlsynccheck" TRIALS=vlpersist AB_TRIALS=none OUT=$W/vp timeout $LT bash scripts/gpu_trials.sh
[ "$L" -ge 400 ] && lane nw CHECKS="gpu_attn gpu_attn_fwd" TRIALS=narrow96 AB_TRIALS=none OUT=$W/nw timeout $LT bash scripts/gpu_trials.sh
[ "$L" -ge 500 ] && lane od CHECKS="gpu_attn gpu_attn_vl racecheck synccheck vlracecheck vlsynccheck" TRIALS=onedrain AB_TRIALS=none OUT=$W/od timeout $LT bash scripts/gpu_trials.sh
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python timeout $LT python3 client/python/tests/test_gpu.py
wait
T "lanes done"
# gpu_share holds SMs on purpose: alone, after the rest
MAIN_CHECKS="gpu_share" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/share timeout 80 bash scripts/gpu_trials.sh > $W/lane-share.out 2>&1
T "share done"
# what time is left: the timings of call2.sh, in its order, each only if it fits
for b in bin trial-vlpersist; do before $((L - 90)) || break; DIMS=128 BIN=.gpu/$b OUT=$W/vl-$b timeout 80 bash scripts/gpu_vl_kernels.sh > $W/vl-$b.txt 2>&1; T vl-$b; done
before $((L - 100)) && REPS=5 OUT=$W/nw timeout 100 bash scripts/gpu_ab.sh "96,1024,causal 96,4096,causal 96,16384,causal 96,4096,full 128,4096,full" \
  main=.gpu/bin/bench_gpu narrow96=.gpu/trial-narrow96/bench_gpu > /dev/null 2>&1 && T nw-ab
before $((L - 70)) && REPS=5 OUT=$W/ht timeout 70 bash scripts/gpu_ab.sh "256,4096,full 256,16384,full 256,4096,causal 128,4096,full" \
  main=.gpu/bin/bench_gpu halfturn=.gpu/trial-halfturn/bench_gpu > /dev/null 2>&1 && T ht-ab
{ cat $W/times.txt; for d in mattn mfwd mvl mad pd vp nw od share; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; echo "== san"; cat $W/lane-san.out; echo "== py"; tail -30 $W/lane-py.out; for f in $W/vl-*.txt $W/nw/ab.md $W/ht/ab.md; do [ -e $f ] && { echo "== $f"; cat $f; }; done; } > $OUT/summary.txt
tar czf $OUT/call1.tgz -C $W .
cat $OUT/summary.txt
