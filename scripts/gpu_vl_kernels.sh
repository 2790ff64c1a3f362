#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_vl_kernels.sh - on the GPU machine (device tool, carrying .gpu): the kernels of
# issue 17's cases timed without dashd in between (bench_gpu --window / --lengths), so a
# call's kernel time can be told apart from what dashd adds (bench/varlen_peers.py times
# them through dashd). The cases are varlen_peers.py's: the 19-document packed batch
# (lengths from its --plan) and sliding windows of 1k and 4k at 16k tokens, head dim 128
# (and 64 with DIMS=64,128), every schedule; then the causal 16k row they are judged
# against. With NCU=1, Nsight Compute's launch, occupancy, throughput and warp-state
# sections for the first launches of the VL kernels (forwards, then the backward's) on
# the packed batch and on window-1k (shift), as text. Output: $OUT/vl-kernels.json (one bench_gpu document a line) and
# $OUT/vl-ncu.txt.
#   bash scripts/gpu_vl_kernels.sh [COMMIT]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
mkdir -p "$out"
bin=${BIN:-$( [ -x "$root/.gpu/bin/bench_gpu" ] || [ -f "$root/.gpu/bin/bench_gpu.xz" ] && echo "$root/.gpu/bin" || echo "$root/build" )}
[ -e "$bin/bench_gpu" ] || xz -dk "$bin/bench_gpu.xz"
[ -d "$root/.gpu/lib" ] && export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dims=${DIMS:-128}
lengths=$(python3 "$root/bench/varlen_peers.py" --packed-lengths)
echo "packed batch: $lengths" >&2
json=$out/vl-kernels.json
: > "$json"
status=0
run() { # bench_gpu arguments; one JSON document a line
  timeout -k 5 300 "$bin/bench_gpu" "$@" | tr -d '\n' >> "$json" || status=1
  echo >> "$json"
}
for d in ${dims//,/ }; do
  run --reps 5 --only "$d,16384,causal" --lengths "$lengths"
  run --reps 5 --only "$d,16384,causal" --window 1024
  run --reps 5 --only "$d,16384,causal" --window 4096
  run --reps 5 --only "$d,16384,causal"
done
python3 - "$json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if not line.strip():
        continue
    doc = json.loads(line)
    for r in doc["rows"]:
        case = ("packed %d docs" % len(r["lengths"]) if "lengths" in r
                else "window %d" % r["window"] if "window" in r else "causal")
        bwd = ", ".join("%s %.1f" % (b["schedule"], b["tflops"]) for b in r["bwd"])
        print("D %d %-16s fwd %6.1f TFLOPS (%.3f ms) | bwd %s" % (r["D"], case, r["fwd_tflops"], r["fwd_ms"], bwd))
PY
if [ "${NCU:-0}" = 1 ]; then
  sections="--section LaunchStats --section Occupancy --section SpeedOfLight --section WarpStateStats --section SchedulerStats"
  {
    for args in "--lengths $lengths" "--window 1024"; do
      echo "=== bench_gpu --only 128,16384,causal,shift $args"
      # the first launches of the VL kernels (ncu flushes the caches before each anyway)
      timeout -k 5 300 ncu $sections -k regex:'attn_(fwd|bwd)_vl' --launch-count 6 \
        "$bin/bench_gpu" --reps 1 --only 128,16384,causal,shift $args 2>&1 | grep -v '^{\|^ *{"\|^\]'
    done
  } > "$out/vl-ncu.txt" 2>&1 || status=1
fi
exit $status
