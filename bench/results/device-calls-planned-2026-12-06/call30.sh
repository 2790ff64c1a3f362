#!/usr/bin/env bash
# call 30 (2026-12-06, sixth session): main with head dims 32..256 (91a0d96, the trial
# headdims adopted with its stale refusal test mended) - gpu_attn, gpu_attn_vl + gpu_dashd
# and the Python GPU tests (the refused example now head dim 84) in lanes; then the peers
# run at widened head dims (bench_gpu, SDPA and cuDNN's frontend under --only) at 4k: 32,
# 80, 192 full and causal, what a user of such a model gets against cuDNN.
L=${LIMIT:-500}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=200
lane attn MAIN_CHECKS="gpu_attn" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/attn timeout 220 bash scripts/gpu_trials.sh
lane vl MAIN_CHECKS="gpu_attn_vl gpu_dashd" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/vl timeout 220 bash scripts/gpu_trials.sh
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda \
  PYTHONPATH=$PWD/client/python timeout 200 python3 client/python/tests/test_gpu.py
wait; T "lanes done"
{ cat $W/times.txt; for d in attn vl; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done
  echo "== py"; grep -E "refus|FAILED|seed" $W/lane-py.out; } > $OUT/summary.txt
for s in 80,4096,full 80,4096,causal 192,4096,full 192,4096,causal 32,4096,full 32,4096,causal; do
  before $((L - 60)) || break
  mkdir -p $W/b-$s
  OUT=$W/b-$s timeout 90 bash scripts/gpu_bench.sh $bundle_commit --only $s > $W/b-$s/log.txt 2>&1; T "bench $s rc $?"
  grep -A2 "| seqlen | fwd |" $W/b-$s/gpu-report.md | tail -1 | sed "s/^/$s ours: /" >> $OUT/summary.txt
  grep -A2 "| seqlen | FE fwd |" $W/b-$s/gpu-report.md | tail -1 | sed "s/^/$s FE: /" >> $OUT/summary.txt
done
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call30.tgz -C $W .
cat $OUT/summary.txt
