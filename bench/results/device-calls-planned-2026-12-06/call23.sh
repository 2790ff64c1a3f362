#!/usr/bin/env bash
# call 23 (planned 2026-12-06, fourth session, for the next one): trial treefold (7637dec:
# the digests' tree above the leaves in one launch; treefold-trial-2026-12-06.md) - its
# gpu_digest and gpu_audit suites and memcheck on gpu_digest, then bench_audit at 4k head dim
# 128, main and the trial taking turns, three runs each. Build it first:
# bash scripts/build_trial.sh treefold 7637dec -DTREEFOLD=1
L=${LIMIT:-400}
. "$(dirname "$0")/common.sh"
MAIN_CHECKS= CHECKS="gpu_digest gpu_audit" TRIALS=treefold AB_TRIALS=none SUITE_TIMEOUT=120 OUT=$W/chk \
  timeout 250 bash scripts/gpu_trials.sh > /dev/null 2>&1; T "checks rc $?"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd .gpu/trial-treefold && DASH_GPU_SUITE=gpu_digest timeout 100 $cs --tool memcheck ./test_dash_gpu > $W/memcheck.log 2>&1); T "memcheck rc $?"
{ cat $W/chk/trials.log; grep SUMMARY $W/memcheck.log; } > $OUT/summary.txt
for r in 1 2 3; do
  for b in main=.gpu/bin trial=.gpu/trial-treefold; do
    before $((L - 40)) || break 2
    echo "== ${b%%=*} run $r" >> $W/audit.txt
    timeout 60 ${b#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)" >> $W/audit.txt
  done
done
T "audit done"
{ cat $W/audit.txt; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call23.tgz -C $W .
cat $OUT/summary.txt
