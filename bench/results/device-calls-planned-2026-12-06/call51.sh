#!/usr/bin/env bash
# call 51 (second session of 2026-12-07): trial fwdtail (3cebda6; fwdtail-trial-2026-12-07.md)
# - the suites of its record (gpu_attn_fwd, gpu_attn_vl, gpu_attn) and the sanitizers in
# lanes, the forward's own sanitizer targets, then the A/B at head dim 64 (forward only
# changes: one schedule a shape). Bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-fwdtail (one HEAD)
L=${LIMIT:-590}
. "$(dirname "$0")/common.sh"
LT=$(( L * 45 / 100 < 260 ? L * 45 / 100 : 260 ))
export SUITE_TIMEOUT=$((LT - 10))
chk() { lane $1 MAIN_CHECKS= CHECKS="$3" TRIALS=$2 AB_TRIALS=none OUT=$W/$1 timeout $LT bash scripts/gpu_trials.sh; }
chk f1 fwdtail gpu_attn_fwd
chk f2 fwdtail gpu_attn_vl
chk f3 fwdtail gpu_attn
chk f4 fwdtail "racecheck synccheck"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
( cd .gpu/trial-fwdtail
  for x in test_attn_gpu_v3_forward_small_shapes_for_sanitizers test_attn_gpu_v3_forward_persistent_ctas_give_the_same_bits; do
    for t in memcheck "racecheck --racecheck-report all" synccheck; do
      echo "$x $t: $(DASH_GPU_SUITE=gpu_attn_fwd DASH_GPU_TEST=$x timeout 100 $cs --tool $t ./test_dash_gpu 2>&1 | grep -E "SUMMARY|^ +tests" | tr -s ' ' | tr '\n' ' ')"
    done
  done > $W/fwdsan.txt 2>&1; T "fwd sanitizers done" ) &
wait; T "checks done"
{ for d in f1 f2 f3 f4; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; echo "== forward sanitizer targets"; cat $W/fwdsan.txt; } > $OUT/summary.txt
left() { echo $(( L - 10 - $(( $(date +%s) - t0 )) )); }
mkdir -p $W/abf
OUT=$W/abf REPS=5 timeout $(left) bash scripts/gpu_ab.sh \
  "64,1024,full,shift 64,2048,full,shift 64,4096,full,shift 64,8192,full,shift 64,16384,full,shift 64,1024,causal,shift 64,4096,causal,shift 128,1024,full,shift 128,4096,full,shift" \
  main=.gpu/bin/bench_gpu fwdtail=.gpu/trial-fwdtail/bench_gpu > $W/abf/log.txt 2>&1; T "abf rc $?"
{ echo "== abf"; grep "^|\|exit" $W/abf/ab.md; } >> $OUT/summary.txt
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call51.tgz -C $W .
cat $OUT/summary.txt
