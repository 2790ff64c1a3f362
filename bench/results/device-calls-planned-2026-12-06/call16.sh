#!/usr/bin/env bash
# call 16 (2026-12-06, fourth session): what the third session left unrun - the Python GPU
# tests (the eager varlen backward sends its forward's request: 0f6ec7a) and trial
# digestsafter's checks (gpu_audit, gpu_dashd) in lanes; then, on a quiet GPU, the large
# model's step with the audit at `outputs` through main's dashd and the trial's, taking
# turns, with main without the audit as the floor; then ncu of the forward at head dims 64
# and 128, 4k full (the plan's "Not built yet": the shared-memory pipe beside the tensor
# pipe before 192- or 176-key tiles)
L=${LIMIT:-480}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=200
lane tad MAIN_CHECKS= CHECKS="gpu_audit gpu_dashd" TRIALS=digestsafter AB_TRIALS=none OUT=$W/tad timeout 230 bash scripts/gpu_trials.sh
lane py DASHD=$PWD/.gpu/bin/dashd DASH_LIBRARY=$PWD/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda PYTHONPATH=$PWD/client/python timeout 230 python3 client/python/tests/test_gpu.py
wait; T "lanes done"
{ cat $W/times.txt; echo "== tad"; cat $W/tad/trials.log 2>/dev/null; echo "== py"; tail -15 $W/lane-py.out; } > $OUT/summary.txt
# the step with the audit: three dashds, one endpoint each, runs taking turns
export PYTHONPATH=$PWD/client/python DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONUNBUFFERED=1
mkdir -p $W/steps
start() { # NAME BIN ARGS...
  local n=$1 b=$2; shift 2
  "$b" --endpoint ipc://$W/steps/$n.sock "$@" 2> $W/steps/dashd-$n.log & echo $! > $W/steps/$n.pid
}
start floor .gpu/bin/dashd
start main .gpu/bin/dashd --audit $W/steps/main.audit --audit-level outputs
start trial .gpu/trial-digestsafter/dashd --audit $W/steps/trial.audit --audit-level outputs
sleep 2
for r in 1 2 3 4; do
  for n in floor main trial; do
    before $((L - 120)) || break 2
    timeout 60 python3 examples/train_tiny_gpt.py --steps 20 --layers 8 --dim 2048 --heads 16 --seqlen 4096 --batch 2 \
      --attn dash --quiet --endpoint ipc://$W/steps/$n.sock --out $W/steps/$n-$r.json > $W/steps/$n-$r.log 2>&1
    python3 -c "import json; print('$n\t$r\t%.3f' % json.load(open('$W/steps/$n-$r.json'))['median_step_ms'])" >> $W/steps/runs.txt 2>&1
  done
done
T "steps done"
for n in floor main trial; do kill -TERM $(cat $W/steps/$n.pid); done; wait
for n in main trial; do .gpu/bin/dashctl audit summary $W/steps/$n.audit > $W/steps/$n.summary 2>&1; done
{ echo "== steps (model large, ms median step per run)"; cat $W/steps/runs.txt; for n in main trial; do echo "== $n audit"; head -20 $W/steps/$n.summary; done; } >> $OUT/summary.txt
mkdir -p $W/ncu
before $((L - 100)) && OUT=$W/ncu timeout 90 bash scripts/gpu_ncu_fwd.sh "64,4096,full 128,4096,full" > $W/ncu/log.txt 2>&1; T "ncu rc $?"
{ echo "== ncu"; grep -E "tensor_op|wavefronts|issue_active|stalled_(wait|barrier|long|short|mio|gmma|math|not_sel)|Registers|Duration|gpu__time" $W/ncu/*.txt $W/ncu/log.txt 2>/dev/null | head -60; } >> $OUT/summary.txt
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call16.tgz -C $W --exclude='*.audit' .
head -c 11000 $OUT/summary.txt
