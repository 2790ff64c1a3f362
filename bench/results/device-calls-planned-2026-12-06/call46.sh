#!/usr/bin/env bash
# call 46 (planned in the ninth session of 2026-12-06 for the next): trial treepost
# (6c8c735 on main: the audit's digest tree folded by v3's dQ postprocess; its record
# treepost-trial-2026-12-06.md). Checks in lanes on the trial's build - gpu_attn,
# gpu_digest + gpu_audit, racecheck + synccheck on the sanitizer shapes, memcheck of
# those and of gpu_audit - then bench_audit at 4k head dim 128 with main and the trial
# taking turns (three runs), then ncu of both (128, and 64 once).
# Carry: .gpu/bin .gpu/bin.what .gpu/lib .gpu/trial-treepost (both from the same HEAD)
L=${LIMIT:-480}
. "$(dirname "$0")/common.sh"
LT=$(( L * 40 / 100 < 200 ? L * 40 / 100 : 200 ))
export SUITE_TIMEOUT=$((LT - 10))
chk() { lane $1 MAIN_CHECKS= CHECKS="$3" TRIALS=$2 AB_TRIALS=none OUT=$W/$1 timeout $LT bash scripts/gpu_trials.sh; }
chk t1 treepost gpu_attn
chk t2 treepost "gpu_digest gpu_audit"
chk t3 treepost "racecheck synccheck"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd .gpu/trial-treepost && DASH_GPU_SUITE=gpu_attn DASH_GPU_TEST=test_attn_gpu_small_shapes_for_sanitizers \
   timeout $LT $cs --tool memcheck ./test_dash_gpu > $W/memcheck-shapes.log 2>&1; T "memcheck shapes rc $?") &
(cd .gpu/trial-treepost && DASH_GPU_SUITE=gpu_audit timeout $LT $cs --tool memcheck ./test_dash_gpu \
   > $W/memcheck-audit.log 2>&1; T "memcheck audit rc $?") &
wait; T "checks done"
{ for d in t1 t2 t3; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done
  for f in shapes audit; do echo "memcheck $f: $(grep -h SUMMARY $W/memcheck-$f.log)"; done; } > $OUT/summary.txt
for r in 1 2 3; do
  for b in main=.gpu/bin treepost=.gpu/trial-treepost; do
    before $((L - 80)) || break 2
    echo "== ${b%%=*} run $r" >> $W/audit.txt
    timeout 40 ${b#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)|same digests" >> $W/audit.txt
  done
done
T "audit done"
cat $W/audit.txt >> $OUT/summary.txt
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for b in main=.gpu/bin treepost=.gpu/trial-treepost; do
  for d in 128 64; do
    before $((L - 40)) || break 2
    timeout 30 $ncu --metrics gpu__time_duration.sum --csv ${b#*=}/bench_audit --once --seqlen 4096 --hdim $d 2> /dev/null |
      grep -E "postprocess|persistent|tree_kernel|fold" | awk -F'","' -v n="${b%%=*} $d" '{print n, $5, $NF}' | cut -c1-140 >> $W/ncu.txt
  done
done
T "ncu done"
{ cat $W/ncu.txt 2>/dev/null; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call46.tgz -C $W .
cat $OUT/summary.txt
