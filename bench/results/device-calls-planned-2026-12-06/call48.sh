#!/usr/bin/env bash
# call 48 (first session of 2026-12-07, whose starts kept being refused): calls 45 and 47 in
# one start - trial hand256 (746a78b; call45.sh's smoke, checks and A/B at 256), trial
# unitlap (8201e2f; call47.sh's checks, A/B at 128/64 and the window/packed kernels) and
# main's gpu_attn, gpu_attn_fwd and gpu_dashd on the bundle with narrowall, spill64 and
# nospill256i together. hand256's smoke first (a hang keeps it out of the rest), then every
# check in lanes, then the A/Bs (digests must be "same"). Bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-hand256 .gpu/trial-unitlap (one HEAD)
L=${LIMIT:-590}
. "$(dirname "$0")/common.sh"
h=1
for sh in 256,1024,full,shift 256,1000,causal,shift 256,4096,causal,ascending 256,4096,full,atomic; do
  timeout 20 .gpu/trial-hand256/bench_gpu --reps 2 --only $sh >> $W/smoke.txt 2>&1 || { h=0; echo "smoke $sh: exit $?" >> $W/smoke.txt; }
done
T "hand256 smoke ok=$h"
{ echo "== hand256 smoke (ok=$h)"; grep -E "tflops|exit|rror" $W/smoke.txt | cut -c1-200; } > $OUT/summary.txt
LT=$(( L * 45 / 100 < 260 ? L * 45 / 100 : 260 ))
export SUITE_TIMEOUT=$((LT - 10))
# LANES (default all: m1 m2 u1 u2 u3 u4 u5 h1 h2) picks the checks where time is short
on() { case " ${LANES:-m1 m2 u1 u2 u3 u4 u5 h1 h2} " in *" $1 "*) ;; *) false ;; esac; }
chk() { on $1 && lane $1 MAIN_CHECKS= CHECKS="$3" TRIALS=$2 AB_TRIALS=none OUT=$W/$1 timeout $LT bash scripts/gpu_trials.sh; }
on m1 && lane m1 MAIN_CHECKS="gpu_attn" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m1 timeout $LT bash scripts/gpu_trials.sh
on m2 && lane m2 MAIN_CHECKS="gpu_attn_fwd gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m2 timeout $LT bash scripts/gpu_trials.sh
chk u1 unitlap gpu_attn
chk u2 unitlap gpu_attn_vl
chk u3 unitlap gpu_audit
chk u4 unitlap "racecheck synccheck"
chk u5 unitlap "vlracecheck vlsynccheck"
[ $h = 1 ] && { chk h1 hand256 gpu_attn; chk h2 hand256 "racecheck synccheck"; }
wait; T "checks done"
{ for d in m1 m2 u1 u2 u3 u4 u5 h1 h2; do [ -d $W/$d ] && { echo "== $d"; cat $W/$d/trials.log; }; done; } >> $OUT/summary.txt
bad() { grep -q "$1.* rc [1-9]\|FAILED" $W/$2*/trials.log 2>/dev/null; }
left() { echo $(( L - 10 - $(( $(date +%s) - t0 )) )); }
ab() { # NAME BOUND SHAPES BUILDS...: one A/B into $W/NAME
  local n=$1 b=$2 sh=$3; shift 3
  mkdir -p $W/$n
  OUT=$W/$n REPS=5 timeout $b bash scripts/gpu_ab.sh "$sh" "$@" > $W/$n/log.txt 2>&1; T "ab $n rc $?"
  grep "^|" $W/$n/ab.md >> $OUT/summary.txt
}
if [ $h = 1 ] && ! bad hand256 h && before $((L - 120)); then
  ab ab256 $(( $(left) * 35 / 100 )) \
    "256,4096,full,shift 256,4096,causal,shift 256,16384,causal,shift 256,4096,full,atomic 256,4096,causal,descending" \
    main=.gpu/bin/bench_gpu hand256=.gpu/trial-hand256/bench_gpu
fi
if ! bad unitlap u; then
  before $((L - 80)) && ab ab128 $(( $(left) * 60 / 100 )) \
    "128,1024,causal,shift 128,2048,causal,shift 128,4096,full,shift 128,16384,causal,shift 64,1024,causal,shift 128,1024,causal,atomic 128,1024,causal,ascending" \
    main=.gpu/bin/bench_gpu unitlap=.gpu/trial-unitlap/bench_gpu
  for b in main=.gpu/bin unitlap=.gpu/trial-unitlap; do
    before $((L - 30)) || break
    DIMS=128 BIN=${b#*=} OUT=$W/vl-${b%%=*} timeout $(( $(left) / 2 )) bash scripts/gpu_vl_kernels.sh > $W/vl-${b%%=*}.txt 2>&1
    T "vl ${b%%=*} rc $?"; { echo "== vl kernels ${b%%=*}"; grep "^D " $W/vl-${b%%=*}.txt; } >> $OUT/summary.txt
  done
fi
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call48.tgz -C $W .
cat $OUT/summary.txt
