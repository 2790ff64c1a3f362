#!/usr/bin/env bash
# call 49 (planned 2026-12-07 for the next session): trial lap64 (cf3b15b: head dim 64's
# unit end no longer serial; its record lap64-trial-2026-12-07.md) and trial treepost
# (6c8c735: the audit's digest tree folded by v3's dQ postprocess; call46.sh's checks and
# bench_audit) in one start. Checks in lanes, then lap64's A/B (digests "same"), then
# bench_audit with main and treepost taking turns (three runs). Bounds follow LIMIT.
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-lap64 .gpu/trial-treepost (one HEAD)
L=${LIMIT:-580}
. "$(dirname "$0")/common.sh"
LT=$(( L * 45 / 100 < 260 ? L * 45 / 100 : 260 ))
export SUITE_TIMEOUT=$((LT - 10))
chk() { lane $1 MAIN_CHECKS= CHECKS="$3" TRIALS=$2 AB_TRIALS=none OUT=$W/$1 timeout $LT bash scripts/gpu_trials.sh; }
chk l1 lap64 gpu_attn
chk l2 lap64 gpu_audit
chk l3 lap64 "racecheck synccheck"
chk t1 treepost gpu_attn
chk t2 treepost "gpu_digest gpu_audit"
chk t3 treepost "racecheck synccheck"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in lap64 treepost; do
  (cd .gpu/trial-$t && DASH_GPU_SUITE=gpu_attn DASH_GPU_TEST=test_attn_gpu_small_shapes_for_sanitizers \
     timeout $LT $cs --tool memcheck ./test_dash_gpu > $W/memcheck-$t.log 2>&1; T "memcheck $t rc $?") &
done
wait; T "checks done"
{ for d in l1 l2 l3 t1 t2 t3; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done
  for t in lap64 treepost; do echo "memcheck $t: $(grep -h SUMMARY $W/memcheck-$t.log)"; done; } > $OUT/summary.txt
bad() { grep -q "$1.* rc [1-9]\|FAILED" $W/$2*/trials.log 2>/dev/null; }
left() { echo $(( L - 10 - $(( $(date +%s) - t0 )) )); }
if ! bad lap64 l && before $((L - 120)); then
  mkdir -p $W/ab64
  OUT=$W/ab64 REPS=5 timeout $(( $(left) * 55 / 100 )) bash scripts/gpu_ab.sh \
    "64,1024,full,shift 64,1024,causal,shift 64,2048,causal,shift 64,4096,full,shift 64,4096,causal,shift 64,16384,causal,shift 64,1024,causal,atomic 64,2048,causal,ascending 128,4096,full,shift" \
    main=.gpu/bin/bench_gpu lap64=.gpu/trial-lap64/bench_gpu > $W/ab64/log.txt 2>&1; T "ab64 rc $?"
  grep "^|" $W/ab64/ab.md >> $OUT/summary.txt
fi
if ! bad treepost t; then
  for r in 1 2 3; do
    for b in main=.gpu/bin treepost=.gpu/trial-treepost; do
      before $((L - 40)) || break 2
      echo "== ${b%%=*} run $r" >> $W/audit.txt
      timeout 40 ${b#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)|same digests" >> $W/audit.txt
    done
  done
  T "audit done"; cat $W/audit.txt >> $OUT/summary.txt
fi
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call49.tgz -C $W .
cat $OUT/summary.txt
