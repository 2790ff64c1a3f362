#!/usr/bin/env bash
# call 55 (session of 2026-12-07, third): main's bundle with treepost, unitlap, lap64 and
# fwdtail adopted. First, alone on a quiet GPU: the peers run of record (bench_gpu, PyTorch's
# SDPA, cuDNN's frontend with the wheel in .gpu/wheels) - issue 16's table and the README's
# figures. Then in lanes: gpu_dashd, gpu_digest + gpu_share, the sanitizers in full (the
# forward's persistent-CTA racecheck with a longer bound than call 52's 60 s).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/wheels
L=${LIMIT:-580}
. "$(dirname "$0")/common.sh"
mkdir -p $W/bench
LB=$(( L - 250 < 320 ? L - 250 : 320 ))
OUT=$W/bench timeout $LB bash scripts/gpu_bench.sh $bundle_commit > $W/bench/log.txt 2>&1; T "bench rc $?"
{ grep -B2 -A8 "fwd / FE fwd" $W/bench/gpu-report.md | head -90; cat $W/times.txt; } > $OUT/summary.txt
cp -r $W/bench $OUT/bench
LT=$(( L - 15 - $(( $(date +%s) - t0 )) ))
export SUITE_TIMEOUT=$((LT - 10))
lane d MAIN_CHECKS="gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/d timeout $LT bash scripts/gpu_trials.sh
lane g MAIN_CHECKS="gpu_digest gpu_share" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/g timeout $LT bash scripts/gpu_trials.sh
lane san BIN=.gpu/bin OUT=$W/san timeout $LT bash scripts/gpu_sanitize.sh
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
( cd .gpu/bin; x=test_attn_gpu_v3_forward_persistent_ctas_give_the_same_bits
  echo "$x racecheck all: $(DASH_GPU_SUITE=gpu_attn_fwd DASH_GPU_TEST=$x timeout $((LT - 5)) $cs --tool racecheck --racecheck-report all ./test_dash_gpu 2>&1 | grep -E "SUMMARY|^ +tests" | tr -s ' ' | tr '\n' ' ') rc ${PIPESTATUS[0]}" > $W/fwdrace.txt; T "fwd racecheck done" ) &
wait; T "lanes done"
{ for d in d g; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done
  echo "== san"; tail -20 $W/lane-san.out; echo "== fwd persistent racecheck"; cat $W/fwdrace.txt
  cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call55.tgz -C $W .
head -c 11500 $OUT/summary.txt
