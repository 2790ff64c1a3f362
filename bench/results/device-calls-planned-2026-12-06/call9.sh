#!/usr/bin/env bash
# call 9 (planned 2026-12-06, second session, for the next one): what that session changed
# without a GPU - the watchdog's pinned copy (2286472: gpu_dashd's stream-ordered tests,
# the Python GPU tests), the bool/number checks on the CUDA path (test_gpu.py), nc2causal as
# main's rule (gpu_attn_fwd) - in lanes; then the figures of record at HEAD: the peers run
# (gpu_bench.sh: nc2causal's forward at 64 beside cuDNN's), bench_audit at 4k head dim 128
# (issue 16's <= 1%), and bwd_thread.py under MPS if time is left
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=200
lane mad MAIN_CHECKS="gpu_audit gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mad timeout 220 bash scripts/gpu_trials.sh
lane mfwd MAIN_CHECKS="gpu_attn_fwd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mfwd timeout 220 bash scripts/gpu_trials.sh
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python timeout 220 python3 client/python/tests/test_gpu.py
wait; T "lanes done"
mkdir -p $W/bench
before $((L - 210)) && OUT=$W/bench timeout 200 bash scripts/gpu_bench.sh $bundle_commit > $W/bench/log.txt 2>&1; T "bench rc $?"
before $((L - 70)) && timeout 60 .gpu/bin/bench_audit --seqlen 4096 --hdim 128 > $W/audit.txt 2>&1; T "audit rc $?"
{ cat $W/times.txt; for d in mad mfwd; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; echo "== py"; tail -30 $W/lane-py.out
  grep -A20 "## hdim 64, causal" $W/bench/gpu-report.md 2>/dev/null; echo "== audit"; cat $W/audit.txt 2>/dev/null; } > $OUT/summary.txt
tar czf $OUT/call9.tgz -C $W .
head -c 11000 $OUT/summary.txt
