#!/usr/bin/env bash
# call 33 (planned 2026-12-06, sixth session, for the next one): trial dqidx (71d3a65: the
# hashed dQ postprocess finds its rows with one 64-bit division a batch) - gpu_attn (the
# kernels' leaves against XXH64 of the rows read back) and gpu_audit on the trial, memcheck
# of gpu_digest + gpu_audit; the hashed postprocess's duration under ncu (main 135 us, plain
# 83, call 32); bench_audit at 4k head dim 128, main and the trial taking turns, three runs.
L=${LIMIT:-420}
. "$(dirname "$0")/common.sh"
CHECKS="gpu_attn gpu_audit" TRIALS=dqidx AB_TRIALS=none SUITE_TIMEOUT=150 OUT=$W/chk \
  timeout 200 bash scripts/gpu_trials.sh > /dev/null 2>&1; T "checks rc $?"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
(cd .gpu/trial-dqidx && DASH_GPU_SUITE=gpu_audit timeout 80 $cs --tool memcheck ./test_dash_gpu > $W/memcheck.log 2>&1); T "memcheck rc $?"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for b in main=.gpu/bin trial=.gpu/trial-dqidx; do
  timeout 60 $ncu --metrics gpu__time_duration.sum --csv ${b#*=}/bench_audit --once --seqlen 4096 --hdim 128 2> /dev/null |
    grep -E "postprocess|persistent" | awk -F'","' -v n=${b%%=*} '{print n, $5, $NF}' | cut -c1-140 >> $W/ncu.txt
done
T "ncu done"
{ cat $W/chk/trials.log; grep -h SUMMARY $W/memcheck.log; cat $W/ncu.txt; } > $OUT/summary.txt
for r in 1 2 3; do
  for b in main=.gpu/bin trial=.gpu/trial-dqidx; do
    before $((L - 40)) || break 2
    echo "== ${b%%=*} run $r" >> $W/audit.txt
    timeout 60 ${b#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)" >> $W/audit.txt
  done
done
T "audit done"
{ cat $W/audit.txt; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call33.tgz -C $W .
cat $OUT/summary.txt
