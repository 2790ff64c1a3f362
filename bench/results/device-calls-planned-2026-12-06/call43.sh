#!/usr/bin/env bash
# call 43 (ninth session of 2026-12-06): main's bundle with tma256 and auditall adopted
# together (never run as one build before). First, alone on a quiet GPU: the peers run of
# record at head dims 64/96/128/256 (bench_gpu, PyTorch's SDPA, cuDNN's frontend with the
# wheel in .gpu/wheels), so the README's ratios at 256 against cuDNN are current. Then in
# lanes: gpu_attn, gpu_attn_vl and the sanitizers (backward_lanes), gpu_audit + gpu_digest.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/wheels
L=${LIMIT:-560}
. "$(dirname "$0")/common.sh"
mkdir -p $W/bench
LB=$(( L - 230 < 300 ? L - 230 : 300 ))
OUT=$W/bench timeout $LB bash scripts/gpu_bench.sh $bundle_commit > $W/bench/log.txt 2>&1; T "bench rc $?"
{ grep -B2 -A8 "fwd / FE fwd" $W/bench/gpu-report.md | head -90; cat $W/times.txt; } > $OUT/summary.txt
LT=$(( L - 20 - $(( $(date +%s) - t0 )) ))
export SUITE_TIMEOUT=$((LT - 10))
backward_lanes $LT
lane audit MAIN_CHECKS="gpu_audit gpu_digest" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/audit timeout $LT bash scripts/gpu_trials.sh
wait; T "lanes done"
{ for d in mattn mvl audit; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done
  echo "== san"; tail -20 $W/lane-san.out; cat $W/times.txt; } >> $OUT/summary.txt
cp -r $W/bench $OUT/bench
tar czf $OUT/call43.tgz -C $W .
head -c 11500 $OUT/summary.txt
