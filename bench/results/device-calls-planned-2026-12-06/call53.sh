#!/usr/bin/env bash
# call 53 (second session of 2026-12-07): main after this session's adoptions (treepost,
# unitlap, lap64 merged by hand onto unitlap, fwdtail), against main's bundle before them
# (ae1566c, carried as .gpu/trial-old). Checks in lanes (gpu_attn with both trials' tests,
# gpu_attn_vl, gpu_audit three times - its flip test now waits for its copies - then
# gpu_attn_fwd, and the
# sanitizers while time lasts), then the A/B old/new. Bounds follow LIMIT. LANES (default
# all: n1 n2 n3 n4 ab) picks the parts where time is short - about 3 minutes:
# `LIMIT=170 LANES="n1 n3" call53.sh` (gpu_attn, gpu_audit x3, gpu_attn_fwd; no trial-old).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-old
L=${LIMIT:-280}
. "$(dirname "$0")/common.sh"
on() { case " ${LANES:-n1 n2 n3 n4 ab} " in *" $1 "*) ;; *) false ;; esac; }
on ab && LT=$(( L * 52 / 100 )) || LT=$(( L - 15 ))
export SUITE_TIMEOUT=$((LT - 5))
mc() { on $1 && lane $1 MAIN_CHECKS="$2" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/$1 timeout $LT bash scripts/gpu_trials.sh; }
mc n1 gpu_attn
mc n2 gpu_attn_vl
on n3 && ( for i in 1 2 3; do
    (cd .gpu/bin && DASH_GPU_SUITE=gpu_audit timeout 40 ./test_dash_gpu > $W/audit-$i.log 2>&1)
    echo "gpu_audit run $i rc $?: $(grep -E 'agreed|differed|FAILED|asserts' $W/audit-$i.log | tr -s ' ' | tr '\n' ' ')" >> $W/audit.txt
  done; T "audit done"
  (cd .gpu/bin && DASH_GPU_SUITE=gpu_attn_fwd timeout $((LT - 50)) ./test_dash_gpu > $W/fwd.log 2>&1)
  echo "gpu_attn_fwd rc $?: $(grep -E '^ +(tests|asserts)|FAILED' $W/fwd.log | tr -s ' ' | tr '\n' ' ')" >> $W/audit.txt; T "fwd done" ) &
on n4 && lane n4 BIN=.gpu/bin OUT=$W/n4 timeout $LT bash scripts/gpu_sanitize.sh
wait; T "checks done"
{ for d in n1 n2; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done
  echo "== gpu_audit x3, gpu_attn_fwd"; cat $W/audit.txt
  echo "== sanitizers (bounded: $LT s)"; grep -h "SUMMARY\|rc " $W/n4/*.txt $W/n4/*.log $W/lane-n4.out 2>/dev/null | head -20; } > $OUT/summary.txt
left() { echo $(( L - 5 - $(( $(date +%s) - t0 )) )); }
if on ab; then
  mkdir -p $W/ab
  OUT=$W/ab REPS=5 timeout $(left) bash scripts/gpu_ab.sh \
    "128,1024,causal,shift 128,2048,causal,shift 64,1024,causal,shift 64,1024,full,shift 128,1024,full,shift 64,4096,full,shift" \
    old=.gpu/trial-old/bench_gpu new=.gpu/bin/bench_gpu > $W/ab/log.txt 2>&1; T "ab rc $?"
  { echo "== A/B old (ae1566c) / new"; grep "^|\|exit" $W/ab/ab.md; } >> $OUT/summary.txt
fi
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call53.tgz -C $W .
cat $OUT/summary.txt
