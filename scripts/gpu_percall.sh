#!/usr/bin/env bash
# gpu_percall.sh - on the GPU machine (device tool, carrying .gpu): what a call costs the
# caller (bench/percall.py: dash_attn beside PyTorch SDPA in process, host-bound loop) and
# a training step of examples/train_tiny_gpt.py at the two models of issue 20, attention
# through dashd against SDPA. Logs and reports under $OUT (default /tmp).
#   bash scripts/gpu_percall.sh [STEPS]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
steps=${1:-20}
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DASH_LIBRARY=$root/.gpu/lib/libdash.so PYTHONPATH=$root/client/python PYTHONUNBUFFERED=1
status=0
python3 "$root/bench/percall.py" --dashd "$root/.gpu/bin/dashd" --out "$out/percall.md" \
  > "$out/percall.log" 2>&1 || status=1
cat "$out/percall.log"
work=$(mktemp -d /tmp/dash-step-XXXXXX)
"$root/.gpu/bin/dashd" --endpoint "ipc://$work/d.sock" 2>"$work/dashd.log" &
dpid=$!
for _ in $(seq 200); do [ -S "$work/d.sock" ] && break; sleep 0.05; done
for model in "--layers 12 --dim 768 --heads 12 --seqlen 1024 --batch 8" \
             "--layers 8 --dim 2048 --heads 16 --seqlen 4096 --batch 2"; do
  for a in sdpa dash; do
    python3 "$root/examples/train_tiny_gpt.py" --steps "$steps" $model --attn $a --quiet \
      --endpoint "ipc://$work/d.sock" --out "$work/$a.json" > "$work/$a.log" 2>&1 || status=1
    python3 -c "import json,sys; s=json.load(open('$work/$a.json')); print('| %s | %s | %.2f |' % ('$model', '$a', s['median_step_ms']))" \
      || tail -5 "$work/$a.log"
  done
done | tee "$out/steps.md"
"$root/.gpu/bin/dashctl" stats --endpoint "ipc://$work/d.sock" > "$out/stats.txt" 2>&1
kill -TERM $dpid; wait $dpid
cp "$work/dashd.log" "$out/dashd-steps.log"
grep -c "warn\|error" "$out/dashd-steps.log"
exit $status
