#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_ab.sh - on the GPU machine: several bench_gpu builds (say, one with a -D knob) in one
# run, taking turns per shape so that drift falls on all alike, then bench/gpu_ab.py's table.
# Everything goes to ONE file, $OUT/ab.md (the device tool returns at most 8 files, and a
# run killed at its limit keeps what it wrote so far); the table is printed too.
#   bash scripts/gpu_ab.sh "64,4096,full 128,4096,causal" base=.gpu/bin/bench_gpu knob=.gpu/bin/bench_gpu_knob
# A shape is bench_gpu's --only D,S,MASK[,SCHED]; REPS (default 5) sets --reps.
set -uo pipefail
shapes=${1:?usage: gpu_ab.sh "D,S,MASK ..." NAME=BENCH_GPU [NAME=BENCH_GPU ...]}
shift
[ $# -ge 1 ] || { echo "gpu_ab.sh: no builds" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
mkdir -p "$out"
tmp=$(mktemp -d)
report=$out/ab.md
{
  echo "# bench_gpu A/B"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- command: \`bash scripts/gpu_ab.sh \"$shapes\" $*\`"
  echo "- reps: ${REPS:-5}; builds take turns per shape"
  echo
} > "$report"
for shape in $shapes; do
  for b in "$@"; do
    name=${b%%=*} exe=${b#*=}
    timeout 120 "$exe" --reps "${REPS:-5}" --only "$shape" >> "$tmp/$name.json" 2>> "$tmp/$name.err" ||
      echo "- $name $shape: exit $?" >> "$report"
  done
done
args=()
for b in "$@"; do args+=("${b%%=*}=$tmp/${b%%=*}.json"); done
python3 "$root/bench/gpu_ab.py" "${args[@]}" >> "$report"
cat "$report"
rm -rf "$tmp"
