#!/usr/bin/env bash
# call 41 (eighth session of 2026-12-06): calls 37 and 40 in one start, for a session whose
# machines kept failing to start (each refusal 15-270 s of device time). First, alone:
# trial tma256's smoke runs (a hang skips its other runs) and main's head-dim-256 trace
# (q.empty). Then lanes: main's GPU tests since a8f249e (gpu_attn, gpu_attn_vl, gpu_dashd,
# the Python GPU tests), trial auditall (gpu_attn, gpu_audit, gpu_digest), tma256's
# gpu_attn. Alone again: bench_audit main/auditall taking turns (three rounds), the A/B
# main/tma256 at head dim 256, ncu of auditing's kernels; last, in lanes, memcheck of
# auditall's audit suites and racecheck/synccheck of tma256.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-auditall .gpu/trial-tma256 .gpu/trial-trace
L=${LIMIT:-560}
LANES=${LANES:-1} # LANES=0: no lanes, no bench_audit (the smoke, the trace, the A/B, ncu, the sanitizers)
. "$(dirname "$0")/common.sh"
ok=1
for sh in 256,1024,full,shift 256,1000,causal,shift 256,4096,causal,atomic; do
  timeout 20 .gpu/trial-tma256/bench_gpu --reps 2 --only $sh >> $W/smoke.txt 2>&1 || { ok=0; echo "smoke $sh: exit $?" >> $W/smoke.txt; }
done
T "smoke ok=$ok"
for sh in 256,4096,full,shift 256,4096,full,atomic 256,4096,causal,shift; do
  echo "== $sh" >> $W/trace.txt
  timeout 40 .gpu/trial-trace/bench_gpu --only $sh > /dev/null 2>> $W/trace.txt
done
T "trace done"
{ echo "== tma256 smoke (ok=$ok)"; grep -E "tflops|exit|rror" $W/smoke.txt | cut -c1-200; echo "== main trace"; cat $W/trace.txt; } > $OUT/summary.txt
[ "$LANES" = 1 ] && {
LT=$(( L * 35 / 100 < 170 ? L * 35 / 100 : 170 )) # the lanes' bound
export SUITE_TIMEOUT=$((LT - 10))
for s in gpu_attn gpu_attn_vl gpu_dashd; do
  lane m-$s MAIN_CHECKS="$s" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m-$s timeout $LT bash scripts/gpu_trials.sh
done
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda \
  PYTHONPATH=$PWD/client/python timeout $LT python3 client/python/tests/test_gpu.py
lane t-auditall1 MAIN_CHECKS= CHECKS="gpu_attn" TRIALS=auditall AB_TRIALS=none OUT=$W/t-auditall1 timeout $LT bash scripts/gpu_trials.sh
lane t-auditall2 MAIN_CHECKS= CHECKS="gpu_audit gpu_digest" TRIALS=auditall AB_TRIALS=none OUT=$W/t-auditall2 timeout $LT bash scripts/gpu_trials.sh
[ $ok = 1 ] && lane t-tma256 MAIN_CHECKS= CHECKS="gpu_attn" TRIALS=tma256 AB_TRIALS=none OUT=$W/t-tma256 timeout $LT bash scripts/gpu_trials.sh
wait; T "lanes done"
}
{ for d in $W/m-* $W/t-*; do echo "== ${d##*/}"; cat $d/trials.log 2>/dev/null; done
  echo "== py"; grep -E "FAILED|seed|passed|failed|Ran|OK" $W/lane-py.out | tail -5; cat $W/times.txt; } >> $OUT/summary.txt
audit_run() { # NAME=DIR RUN: one bench_audit of that build into audit.txt
  echo "== ${1%%=*} run $2" >> $W/audit.txt
  timeout 40 ${1#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)" >> $W/audit.txt
}
for r in 1 2 3; do
  [ "$LANES" = 1 ] || break
  for b in main=.gpu/bin auditall=.gpu/trial-auditall; do
    before $((L - 170)) || break 2
    audit_run $b $r
  done
done
T "audit done"
cat $W/audit.txt >> $OUT/summary.txt
if [ $ok = 1 ] && before $((L - 120)); then
  mkdir -p $W/ab
  REPS=5 OUT=$W/ab timeout $((L - 60 - $(( $(date +%s) - t0 )))) bash scripts/gpu_ab.sh \
    "256,4096,full,shift 256,4096,causal,shift 256,16384,full,shift 256,16384,causal,shift 256,4096,full,atomic 256,2048,causal,shift" \
    main=.gpu/bin/bench_gpu tma256=.gpu/trial-tma256/bench_gpu > $W/ab/log.txt 2>&1; T "ab rc $?"
  cat $W/ab/ab.md >> $OUT/summary.txt
fi
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for b in main=.gpu/bin auditall=.gpu/trial-auditall; do
  before $((L - 50)) || break
  timeout 30 $ncu --metrics gpu__time_duration.sum --csv ${b#*=}/bench_audit --once --seqlen 4096 --hdim 128 2> /dev/null |
    grep -E "postprocess|persistent|tree_kernel" | awk -F'","' -v n=${b%%=*} '{print n, $5, $NF}' | cut -c1-140 >> $W/ncu.txt
done
T "ncu done"
cat $W/ncu.txt >> $OUT/summary.txt 2>/dev/null
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
LS=$(( L - 15 - $(( $(date +%s) - t0 )) ))
if [ $LS -gt 30 ]; then
  for s in gpu_audit gpu_digest; do
    (cd .gpu/trial-auditall && DASH_GPU_SUITE=$s timeout $LS $cs --tool memcheck ./test_dash_gpu > $W/memcheck-$s.log 2>&1; T "memcheck $s rc $?") &
  done
  [ $ok = 1 ] && lane t-tma256san MAIN_CHECKS= CHECKS="racecheck synccheck" TRIALS=tma256 AB_TRIALS=none OUT=$W/t-tma256san timeout $LS bash scripts/gpu_trials.sh
  wait
fi
{ for s in gpu_audit gpu_digest; do echo "memcheck auditall $s: $(grep -h SUMMARY $W/memcheck-$s.log 2>/dev/null)"; done
  cat $W/t-tma256san/trials.log 2>/dev/null; tail -8 $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call41.tgz -C $W .
cat $OUT/summary.txt
