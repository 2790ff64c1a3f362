#!/usr/bin/env bash
# call 44 (ninth session of 2026-12-06): call 42 (trials narrowall fefd9ea and spill64
# e40a51e, rebuilt on ba46799) and trial nospill256i (05af658: the interleaved head-dim-256
# backward without spills; gpu_attn forces the interleaved mode at 256 and the sanitizer
# shapes run it) in one start. Checks in lanes, then the A/Bs; bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-narrowall .gpu/trial-spill64 .gpu/trial-nospill256i
L=${LIMIT:-560}
. "$(dirname "$0")/common.sh"
LT=$(( L * 45 / 100 < 240 ? L * 45 / 100 : 240 ))
export SUITE_TIMEOUT=$((LT - 10))
chk() { # NAME TRIAL CHECKS
  lane $1 MAIN_CHECKS= CHECKS="$3" TRIALS=$2 AB_TRIALS=none OUT=$W/$1 timeout $LT bash scripts/gpu_trials.sh
}
chk n1 narrowall gpu_attn
chk n2 narrowall gpu_attn_fwd
chk s1 spill64 gpu_attn
chk s2 spill64 "racecheck synccheck"
chk i1 nospill256i gpu_attn
chk i2 nospill256i "racecheck synccheck"
wait; T "checks done"
{ for d in n1 n2 s1 s2 i1 i2; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; cat $W/times.txt; } > $OUT/summary.txt
ab() { # NAME BOUND SHAPES BUILDS...: one A/B into $W/NAME
  local n=$1 b=$2 sh=$3; shift 3
  mkdir -p $W/$n
  OUT=$W/$n REPS=5 timeout $b bash scripts/gpu_ab.sh "$sh" "$@" > $W/$n/log.txt 2>&1; T "ab $n rc $?"
  grep "^|" $W/$n/ab.md >> $OUT/summary.txt
}
left() { echo $(( L - 10 - $(( $(date +%s) - t0 )) )); }
before $((L - 60)) && ab ab64 $(( $(left) / 2 )) \
  "64,4096,full,shift 64,4096,causal,shift 64,16384,full,shift 64,16384,causal,shift" \
  main=.gpu/bin/bench_gpu spill64=.gpu/trial-spill64/bench_gpu
before $((L - 40)) && ab abn $(left) \
  "80,4096,full,shift 80,4096,causal,shift 72,4096,causal,shift 112,4096,full,shift 40,4096,full,shift 200,4096,causal,shift" \
  main=.gpu/bin/bench_gpu narrowall=.gpu/trial-narrowall/bench_gpu
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call44.tgz -C $W .
cat $OUT/summary.txt
