#!/usr/bin/env bash
# call 33 (planned 2026-12-06, sixth session; hashlate added in the seventh): the audit's
# two trials - dqidx (71d3a65: the hashed dQ postprocess finds its rows with one 64-bit
# division a batch) and hashlate (1a0aa81: the dK/dV TMA epilogue hashes its rows after
# issuing the stores, not before). gpu_attn (the kernels' leaves against XXH64 of the rows
# read back) and gpu_audit on each trial; memcheck of gpu_audit on each; the postprocess's
# and the persistent kernel's durations under ncu (main, each trial); bench_audit at 4k
# head dim 128, main and the trials taking turns, three runs each.
L=${LIMIT:-420}
. "$(dirname "$0")/common.sh"
TR=${TR:-"dqidx hashlate"}
CHECKS="gpu_attn gpu_audit" TRIALS="$TR" AB_TRIALS=none SUITE_TIMEOUT=150 OUT=$W/chk \
  timeout 240 bash scripts/gpu_trials.sh > /dev/null 2>&1; T "checks rc $?"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in $TR; do
  (cd .gpu/trial-$t && DASH_GPU_SUITE=gpu_audit timeout 80 $cs --tool memcheck ./test_dash_gpu > $W/memcheck-$t.log 2>&1); T "memcheck $t rc $?"
done
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for b in main=.gpu/bin $(for t in $TR; do echo $t=.gpu/trial-$t; done); do
  timeout 60 $ncu --metrics gpu__time_duration.sum --csv ${b#*=}/bench_audit --once --seqlen 4096 --hdim 128 2> /dev/null |
    grep -E "postprocess|persistent" | awk -F'","' -v n=${b%%=*} '{print n, $5, $NF}' | cut -c1-140 >> $W/ncu.txt
done
T "ncu done"
{ cat $W/chk/trials.log; for t in $TR; do echo "memcheck $t: $(grep -h SUMMARY $W/memcheck-$t.log)"; done; cat $W/ncu.txt; } > $OUT/summary.txt
for r in 1 2 3; do
  for b in main=.gpu/bin $(for t in $TR; do echo $t=.gpu/trial-$t; done); do
    before $((L - 40)) || break 2
    echo "== ${b%%=*} run $r" >> $W/audit.txt
    timeout 60 ${b#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)" >> $W/audit.txt
  done
done
T "audit done"
{ cat $W/audit.txt; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call33.tgz -C $W .
cat $OUT/summary.txt
