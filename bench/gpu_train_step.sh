#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_train_step.sh - a training step of examples/train_tiny_gpt.py with its attention
# through dashd (dash_attn, stream-ordered) against the same model with PyTorch SDPA in
# process, on the GPU, in one run; then the two-trainings reproducibility script. Writes a
# Markdown report to $OUT/train-step.md (OUT default /tmp).
#   bash bench/gpu_train_step.sh COMMIT [STEPS [SEQLEN [REPRO_SEQLEN]]]
# REPRO_SEQLEN (default 4096): the reproducibility script's sequence length. At 1024 the
# tiny model's backward is one wave of 128 kv-tile jobs whose dQ additions arrive in the
# same order every time, so even `atomic` repeats its bits there; at 4096 it does not.
# Under MPS (CUDA_MPS_PIPE_DIRECTORY set, a control daemon running) the report says so.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
commit=$1
steps=${2:-30}
seqlen=${3:-2048}
repro_seqlen=${4:-4096}
out=${OUT:-/tmp}
bin=${BIN:-$root/build}
py=${PYTHON:-python3}
model="--seqlen $seqlen --dim 512 --layers 4 --heads 4 --batch 4"
work=$(mktemp -d /tmp/dash-train-XXXXXX)
"$bin/dashd" --endpoint "ipc://$work/d.sock" 2>"$work/dashd.log" &
dpid=$!
for _ in $(seq 200); do [ -S "$work/d.sock" ] && break; sleep 0.05; done
# dashd has initialised CUDA by now: under MPS the control daemon lists a server for it
mps_state="one per process (no MPS)"
if command -v nvidia-cuda-mps-control >/dev/null &&
   [ -n "$(echo get_server_list | timeout 5 nvidia-cuda-mps-control 2>/dev/null)" ]; then
  mps_state="shared through MPS (the MPS control daemon lists a server)"
fi
$py "$root/examples/train_tiny_gpt.py" --steps "$steps" $model --attn sdpa --quiet \
  --out "$work/sdpa.json" > "$work/sdpa.log" 2>&1
$py "$root/examples/train_tiny_gpt.py" --steps "$steps" $model --attn dash --quiet \
  --endpoint "ipc://$work/d.sock" --out "$work/dash.json" > "$work/dash.log" 2>&1
kill -TERM $dpid; wait $dpid || true
{
  echo "# Training step: attention through dashd vs PyTorch SDPA in process"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); torch $($py -c 'import torch; print(torch.__version__)')"
  echo "- commit: $commit"
  echo "- command: \`bash bench/gpu_train_step.sh $commit $steps $seqlen $repro_seqlen\`"
  echo "- GPU contexts: $mps_state"
  echo "- model: examples/train_tiny_gpt.py $model (bf16, AdamW), $steps steps; median step time (host wall clock around forward, backward and optimizer step, synchronised by loss.item())"
  echo
  echo "| attention | median step ms | final loss |"
  echo "| --- | ---: | ---: |"
  for a in sdpa dash; do
    $py -c "import json; s=json.load(open('$work/$a.json')); print('| %s | %.3f | %.6f |' % ('$a' if '$a'=='dash' else 'PyTorch SDPA (default backend)', s['median_step_ms'], s['final_loss']))"
  done
  echo
  echo "## Two trainings sharing the GPU, run twice (examples/repro_two_trainings.sh 8 $repro_seqlen)"
  echo
  echo '```'
  BIN=$bin PYTHON=$py bash "$root/examples/repro_two_trainings.sh" 8 "$repro_seqlen" 2>&1 | sed "s#$work##" || true
  echo '```'
} > "$out/train-step.md"
cat "$out/train-step.md"
