#!/usr/bin/env bash
# call 37 (seventh session of 2026-12-06; calls 33 and 35 folded into one after the device
# time was short): checks in concurrent lanes - main after a8f249e (gpu_attn, gpu_attn_vl,
# gpu_dashd, the Python GPU tests: call 35) and trial auditall (4ed657d = dqidx 71d3a65 +
# hashlate's second form b06d051 + treefast 415b93b: gpu_attn, gpu_audit, gpu_digest;
# memcheck of gpu_audit and gpu_digest, last) - then, alone on the GPU, bench_audit at 4k
# head dim 128 with main and auditall taking turns (three runs) and each audit trial once,
# and the postprocess's, the persistent kernel's and the tree's durations under ncu (main,
# auditall). Cut to 330 s after the session's device time went on machines that did not start.
# Narrowall's checks and A/B: call38.sh.
L=${LIMIT:-330}
. "$(dirname "$0")/common.sh"
LT=$(( L - 80 < 170 ? L - 80 : 170 )) # the lanes' bound: what leaves bench_audit a minute
export SUITE_TIMEOUT=$((LT - 10))
for s in gpu_attn gpu_attn_vl gpu_dashd; do
  lane m-$s MAIN_CHECKS="$s" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m-$s timeout $LT bash scripts/gpu_trials.sh
done
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda \
  PYTHONPATH=$PWD/client/python timeout $LT python3 client/python/tests/test_gpu.py
lane t-auditall1 MAIN_CHECKS= CHECKS="gpu_attn" TRIALS=auditall AB_TRIALS=none OUT=$W/t-auditall1 timeout $LT bash scripts/gpu_trials.sh
lane t-auditall2 MAIN_CHECKS= CHECKS="gpu_audit gpu_digest" TRIALS=auditall AB_TRIALS=none OUT=$W/t-auditall2 timeout $LT bash scripts/gpu_trials.sh
wait; T "lanes done"
{ cat $W/times.txt; for d in $W/m-* $W/t-*; do echo "== ${d##*/}"; cat $d/trials.log 2>/dev/null; done
  echo "== py"; grep -E "FAILED|seed" $W/lane-py.out; } > $OUT/summary.txt
# bench_audit: main and auditall taking turns (three runs), then each trial alone (as time allows)
audit_run() { # NAME=DIR RUN: one bench_audit of that build into audit.txt
  echo "== ${1%%=*} run $2" >> $W/audit.txt
  timeout 40 ${1#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)" >> $W/audit.txt
}
for r in 1 2 3; do
  for b in main=.gpu/bin auditall=.gpu/trial-auditall; do
    before $((L - 60)) || break 2
    audit_run $b $r
  done
done
for b in dqidx=.gpu/trial-dqidx hashlate=.gpu/trial-hashlate treefast=.gpu/trial-treefast main=.gpu/bin; do
  before $((L - 60)) || break
  audit_run $b 4
done
T "audit done"
cat $W/audit.txt >> $OUT/summary.txt
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for b in main=.gpu/bin auditall=.gpu/trial-auditall; do
  before $((L - 50)) || break
  timeout 30 $ncu --metrics gpu__time_duration.sum --csv ${b#*=}/bench_audit --once --seqlen 4096 --hdim 128 2> /dev/null |
    grep -E "postprocess|persistent|tree_kernel" | awk -F'","' -v n=${b%%=*} '{print n, $5, $NF}' | cut -c1-140 >> $W/ncu.txt
done
T "ncu done"
cat $W/ncu.txt >> $OUT/summary.txt 2>/dev/null
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if before $((L - 45)); then
  for s in gpu_audit gpu_digest; do
    (cd .gpu/trial-auditall && DASH_GPU_SUITE=$s timeout 40 $cs --tool memcheck ./test_dash_gpu > $W/memcheck-$s.log 2>&1; T "memcheck $s rc $?") &
  done
  wait
fi
for s in gpu_audit gpu_digest; do echo "memcheck auditall $s: $(grep -h SUMMARY $W/memcheck-$s.log 2>/dev/null)"; done >> $OUT/summary.txt
tail -6 $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call37.tgz -C $W .
cat $OUT/summary.txt
