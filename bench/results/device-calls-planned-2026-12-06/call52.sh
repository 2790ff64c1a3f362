#!/usr/bin/env bash
# call 52 (second session of 2026-12-07; starts scarce again after calls 48 and 49): calls 50
# and 51 in one start. In lanes: trial fwdtail's checks (its record's suites, sanitizers and
# the forward's own sanitizer targets) and unitlap's gpu_audit N times beside main's (the
# audit logs kept, `dashctl audit diff` for each failure). Then the A/Bs, one at a time:
# unitlap at 128, lap64 at 64, fwdtail's forward. Bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-unitlap .gpu/trial-lap64 .gpu/trial-fwdtail
L=${LIMIT:-560}
. "$(dirname "$0")/common.sh"
N=${N:-6}
LT=$(( L * 40 / 100 < 220 ? L * 40 / 100 : 220 ))
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
      echo "$x $t: $(DASH_GPU_SUITE=gpu_attn_fwd DASH_GPU_TEST=$x timeout 60 $cs --tool $t ./test_dash_gpu 2>&1 | grep -E "SUMMARY|^ +tests" | tr -s ' ' | tr '\n' ' ')"
    done
  done > $W/fwdsan.txt 2>&1; T "fwd sanitizers done" ) &
audit_once() { # BUILD_DIR TAG
  local k=$W/keep-$2; mkdir -p $k
  ( while :; do for d in /tmp/dash-gpu-audit-*; do [ -d "$d" ] && cp -a "$d"/. $k/ 2>/dev/null; done; sleep 0.05; done ) &
  local cp=$!
  (cd $1 && DASH_GPU_SUITE=gpu_audit timeout 60 ./test_dash_gpu > $k/test.log 2>&1); local rc=$?
  kill $cp; wait $cp 2>/dev/null
  echo "$2 rc $rc: $(grep -E 'agreed|differed|FAILED' $k/test.log | tr -s ' ' | head -2 | tr '\n' ' ')" >> $W/audit.txt
  if [ $rc != 0 ]; then
    for p in "a.log b.log" "a.log flip.log"; do
      set -- $p; echo "-- diff $1 $2:" >> $W/audit.txt
      (cd .gpu/trial-unitlap && ./dashctl audit diff $k/$1 $k/$2 2>&1 | head -30) >> $W/audit.txt
    done
  fi
}
( for i in $(seq 1 $N); do
    before $LT || break
    audit_once .gpu/trial-unitlap unitlap-$i
    [ $((i % 2)) = 1 ] && audit_once .gpu/bin main-$i
  done; T "audit loop done" ) &
wait; T "checks done"
{ for d in f1 f2 f3 f4; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done
  echo "== forward sanitizer targets"; cat $W/fwdsan.txt; echo "== gpu_audit loop"; cat $W/audit.txt; } > $OUT/summary.txt
left() { echo $(( L - 10 - $(( $(date +%s) - t0 )) )); }
ab() { # NAME BOUND SHAPES BUILDS...
  local n=$1 b=$2 sh=$3; shift 3
  mkdir -p $W/$n
  OUT=$W/$n REPS=5 timeout $b bash scripts/gpu_ab.sh "$sh" "$@" > $W/$n/log.txt 2>&1; T "ab $n rc $?"
  { echo "== $n"; grep "^|\|exit" $W/$n/ab.md; } >> $OUT/summary.txt
}
ab ab128 $(( $(left) * 35 / 100 )) \
  "128,1024,causal,shift 128,2048,causal,shift 128,4096,full,shift 128,16384,causal,shift 128,1024,causal,atomic 128,1024,causal,ascending" \
  main=.gpu/bin/bench_gpu unitlap=.gpu/trial-unitlap/bench_gpu
ab ab64 $(( $(left) * 55 / 100 )) \
  "64,1024,full,shift 64,1024,causal,shift 64,2048,causal,shift 64,4096,full,shift 64,4096,causal,shift 64,16384,causal,shift 64,1024,causal,atomic 64,2048,causal,ascending" \
  main=.gpu/bin/bench_gpu lap64=.gpu/trial-lap64/bench_gpu
ab abf $(left) \
  "64,1024,full,shift 64,2048,full,shift 64,4096,full,shift 64,16384,full,shift 64,1024,causal,shift 128,1024,full,shift 128,4096,full,shift" \
  main=.gpu/bin/bench_gpu fwdtail=.gpu/trial-fwdtail/bench_gpu
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call52.tgz -C $W .
cat $OUT/summary.txt
