#!/usr/bin/env bash
# call 37 (seventh session of 2026-12-06; calls 33-35 folded into two after the device time
# was short): every check in concurrent lanes - main after a8f249e (gpu_attn, gpu_attn_vl,
# gpu_dashd, the Python GPU tests: call 35), the audit trials dqidx (71d3a65) and hashlate
# (1a0aa81) (gpu_attn, gpu_audit; memcheck of gpu_audit: call 33), narrowall (fefd9ea;
# gpu_attn, gpu_attn_fwd: call 34's checks), treefast (415b93b: the audit's tree kernel with
# its loads in flight; gpu_digest, gpu_audit, memcheck of gpu_digest) - then, alone on the GPU, the postprocess's and
# the persistent kernel's durations under ncu and bench_audit at 4k head dim 128 with main
# and the audit trials taking turns (three runs). call38.sh is narrowall's A/B.
L=${LIMIT:-400}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=220
for s in gpu_attn gpu_attn_vl gpu_dashd; do
  lane m-$s MAIN_CHECKS="$s" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m-$s timeout 240 bash scripts/gpu_trials.sh
done
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda \
  PYTHONPATH=$PWD/client/python timeout 200 python3 client/python/tests/test_gpu.py
for t in dqidx hashlate; do
  lane t-$t MAIN_CHECKS= CHECKS="gpu_attn gpu_audit" TRIALS=$t AB_TRIALS=none OUT=$W/t-$t timeout 240 bash scripts/gpu_trials.sh
done
lane t-treefast MAIN_CHECKS= CHECKS="gpu_digest gpu_audit" TRIALS=treefast AB_TRIALS=none OUT=$W/t-treefast timeout 240 bash scripts/gpu_trials.sh
lane t-narrowall MAIN_CHECKS= CHECKS="gpu_attn gpu_attn_fwd" TRIALS=narrowall AB_TRIALS=none OUT=$W/t-narrowall timeout 240 bash scripts/gpu_trials.sh
wait; T "lanes done"
cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in dqidx hashlate treefast; do
  s=gpu_audit; [ $t = treefast ] && s=gpu_digest
  (cd .gpu/trial-$t && DASH_GPU_SUITE=$s timeout 80 $cs --tool memcheck ./test_dash_gpu > $W/memcheck-$t.log 2>&1; T "memcheck $t rc $?") &
done
wait
{ cat $W/times.txt; for d in $W/m-* $W/t-*; do echo "== ${d##*/}"; cat $d/trials.log 2>/dev/null; done
  echo "== py"; grep -E "FAILED|seed" $W/lane-py.out
  for t in dqidx hashlate treefast; do echo "memcheck $t: $(grep -h SUMMARY $W/memcheck-$t.log)"; done; } > $OUT/summary.txt
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
builds="main=.gpu/bin dqidx=.gpu/trial-dqidx hashlate=.gpu/trial-hashlate treefast=.gpu/trial-treefast"
for b in $builds; do
  before $((L - 130)) || break
  timeout 40 $ncu --metrics gpu__time_duration.sum --csv ${b#*=}/bench_audit --once --seqlen 4096 --hdim 128 2> /dev/null |
    grep -E "postprocess|persistent|tree_kernel" | awk -F'","' -v n=${b%%=*} '{print n, $5, $NF}' | cut -c1-140 >> $W/ncu.txt
done
T "ncu done"
cat $W/ncu.txt >> $OUT/summary.txt
for r in 1 2 3; do
  for b in $builds; do
    before $((L - 25)) || break 2
    echo "== ${b%%=*} run $r" >> $W/audit.txt
    timeout 40 ${b#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)" >> $W/audit.txt
  done
done
T "audit done"
{ cat $W/audit.txt; tail -4 $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call37.tgz -C $W .
cat $OUT/summary.txt
