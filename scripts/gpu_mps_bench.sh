#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_mps_bench.sh - on a GPU machine: what handing work between processes costs with and
# without NVIDIA MPS (docs/mps.md). Runs bench_gpu_handoff (two plain processes, no dashd)
# and bench_gpu_daemon (dashd vs the kernels in process, without and with auditing) first
# with separate contexts, then under an MPS control daemon this script starts in a private
# pipe directory and stops at the end. Writes $OUT/gpu-mps.md (OUT default /tmp).
#   BIN=build bash scripts/gpu_mps_bench.sh COMMIT [SEQLEN]
set -uo pipefail
commit=${1:?usage: gpu_mps_bench.sh COMMIT [SEQLEN]}
seqlen=${2:-4096}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/build}
out=${OUT:-/tmp}
mps=$(command -v nvidia-cuda-mps-control || true)
report=$out/gpu-mps.md

runs() {
  for w in 1000 4000; do timeout 120 "$bin/bench_gpu_handoff" --ops 50 --work-us $w; echo; done
  for a in "" "--audit $(mktemp -u /tmp/dash-mps-audit-XXXXXX)"; do
    timeout 180 "$bin/bench_gpu_daemon" --reps 10 --seqlen "$seqlen" $a; echo
  done
}

{
  echo "# Handing GPU work between processes: separate contexts vs MPS"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
  echo "- commit: $commit"
  echo "- command: \`BIN=$bin bash scripts/gpu_mps_bench.sh $commit $seqlen\`"
  echo
  echo "## Separate GPU contexts (no MPS)"
  echo
  runs
  echo "## Under MPS"
  echo
  if [ -z "$mps" ]; then
    echo "nvidia-cuda-mps-control not found: not measured."
  else
    export CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/dash-mps-pipe-XXXXXX)
    export CUDA_MPS_LOG_DIRECTORY=$(mktemp -d /tmp/dash-mps-log-XXXXXX)
    "$mps" -d && sleep 1
    runs
    echo quit | "$mps"
    sleep 1
  fi
} > "$report" 2>&1
cat "$report"
