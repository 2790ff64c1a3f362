#!/usr/bin/env bash
# call 50 (second session of 2026-12-07): after call 48 and 49 ran their checks. Trials
# unitlap and lap64 failed only their own new test's leaves check on grid 1 - a shift grid
# below a chunk runs interleaved, whose dK/dV arm_leaves leaves to the digests from memory
# (-1: no leaves), as designed - so their A/Bs (skipped by the failure) run here. unitlap's
# gpu_audit failed once (the flipped run's first divergence neither step 1's forward nor
# step 0's atomic): it runs N times, unitlap and main taking turns, the audit logs kept
# while the test runs and `dashctl audit diff` shown for every failure.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-unitlap .gpu/trial-lap64 (one HEAD)
L=${LIMIT:-590}
. "$(dirname "$0")/common.sh"
N=${N:-8}
audit_once() { # BUILD_DIR TAG
  local k=$W/keep-$2; mkdir -p $k
  ( while :; do for d in /tmp/dash-gpu-audit-*; do [ -d "$d" ] && cp -a "$d"/. $k/ 2>/dev/null; done; sleep 0.05; done ) &
  local cp=$!
  (cd $1 && DASH_GPU_SUITE=gpu_audit timeout 60 ./test_dash_gpu > $k/test.log 2>&1); local rc=$?
  kill $cp; wait $cp 2>/dev/null
  echo "$2 rc $rc: $(grep -E 'agreed|differed|FAILED' $k/test.log | tr -s ' ' | head -2 | tr '\n' ' ')" >> $W/audit.txt
  if [ $rc != 0 ]; then
    for p in "a.log b.log" "a.log flip.log"; do
      set -- $p; echo "-- $2 diff $1 $2:" >> $W/audit.txt
      (cd .gpu/trial-unitlap && ./dashctl audit diff $k/$1 $k/$2 2>&1 | head -30) >> $W/audit.txt
    done
  fi
}
for i in $(seq 1 $N); do
  before 120 || break
  audit_once .gpu/trial-unitlap unitlap-$i
  [ $((i % 2)) = 1 ] && audit_once .gpu/bin main-$i
done
T "audit loop done"
{ echo "== gpu_audit loop"; cat $W/audit.txt; } > $OUT/summary.txt
left() { echo $(( L - 10 - $(( $(date +%s) - t0 )) )); }
ab() { # NAME BOUND SHAPES BUILDS...
  local n=$1 b=$2 sh=$3; shift 3
  mkdir -p $W/$n
  OUT=$W/$n REPS=5 timeout $b bash scripts/gpu_ab.sh "$sh" "$@" > $W/$n/log.txt 2>&1; T "ab $n rc $?"
  { echo "== $n"; grep "^|\|exit" $W/$n/ab.md; } >> $OUT/summary.txt
}
ab ab128 $(( $(left) * 35 / 100 )) \
  "128,1024,causal,shift 128,2048,causal,shift 128,4096,full,shift 128,16384,causal,shift 64,1024,causal,shift 128,1024,causal,atomic 128,1024,causal,ascending" \
  main=.gpu/bin/bench_gpu unitlap=.gpu/trial-unitlap/bench_gpu
ab ab64 $(( $(left) * 55 / 100 )) \
  "64,1024,full,shift 64,1024,causal,shift 64,2048,causal,shift 64,4096,full,shift 64,4096,causal,shift 64,16384,causal,shift 64,1024,causal,atomic 64,2048,causal,ascending 128,4096,full,shift" \
  main=.gpu/bin/bench_gpu lap64=.gpu/trial-lap64/bench_gpu
for b in main=.gpu/bin unitlap=.gpu/trial-unitlap; do
  before $((L - 30)) || break
  DIMS=128 BIN=${b#*=} OUT=$W/vl-${b%%=*} timeout $(( $(left) / 2 )) bash scripts/gpu_vl_kernels.sh > $W/vl-${b%%=*}.txt 2>&1
  T "vl ${b%%=*} rc $?"; { echo "== vl kernels ${b%%=*}"; grep "^D " $W/vl-${b%%=*}.txt; } >> $OUT/summary.txt
done
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call50.tgz -C $W .
cat $OUT/summary.txt
