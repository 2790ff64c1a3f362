#!/usr/bin/env bash
# call 28 (planned 2026-12-06, fifth session, for the next one): trial treestage
# (treestage-trial-2026-12-06.md: the digests' tree with its loads staged in shared memory)
# - gpu_digest on main (its new views) and on the trial, gpu_audit on the trial, memcheck
# and racecheck on the trial's gpu_digest, then bench_audit at 4k head dim 128, main and
# the trial taking turns, three runs each.
L=${LIMIT:-400}
. "$(dirname "$0")/common.sh"
MAIN_CHECKS="gpu_digest" CHECKS="gpu_digest gpu_audit" TRIALS=treestage AB_TRIALS=none SUITE_TIMEOUT=120 OUT=$W/chk \
  timeout 250 bash scripts/gpu_trials.sh > /dev/null 2>&1; T "checks rc $?"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  (cd .gpu/trial-treestage && DASH_GPU_SUITE=gpu_digest timeout 100 $cs --tool $tool ./test_dash_gpu > $W/$tool.log 2>&1); T "$tool rc $?"
done
{ cat $W/chk/trials.log; grep -h SUMMARY $W/memcheck.log $W/racecheck.log; } > $OUT/summary.txt
for r in 1 2 3; do
  for b in main=.gpu/bin trial=.gpu/trial-treestage; do
    before $((L - 40)) || break 2
    echo "== ${b%%=*} run $r" >> $W/audit.txt
    timeout 60 ${b#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)" >> $W/audit.txt
  done
done
T "audit done"
{ cat $W/audit.txt; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call28.tgz -C $W .
cat $OUT/summary.txt
