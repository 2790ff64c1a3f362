#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_final_check.sh - on the GPU machine (device tool, carrying .gpu): every GPU suite,
# the Python binding's GPU tests, the daemon benchmark at 4k without and with auditing,
# and compute-sanitizer (scripts/gpu_sanitize.sh). Prints a summary; the logs end up in
# one archive, $OUT/final-check.tgz (OUT default /tmp): the device tool returns at most 8
# files.
#   bash scripts/gpu_final_check.sh
set -uo pipefail
dest=${OUT:-/tmp}
out=$(mktemp -d)
trap 'tar -C "$out" -czf "$dest/final-check.tgz" . && rm -rf "$out"' EXIT
root=$(cd "$(dirname "$0")/.." && pwd)
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
status=0
date -u +%FT%TZ > "$out/when.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$out/when.txt"
(cd "$root/.gpu/bin" && timeout 300 ./test_dash_gpu) > "$out/gpu_suites.log" 2>&1 || status=1
grep -E "random seed|Test:.*FAILED|^    [0-9]|tests |suites " "$out/gpu_suites.log"
DASHD=$root/.gpu/bin/dashd DASH_LIBRARY=$root/.gpu/lib/libdash.so DASH_TEST_BACKEND=cuda \
  timeout 120 python3 "$root/client/python/tests/test_gpu.py" > "$out/python_gpu.log" 2>&1 || status=1
tail -6 "$out/python_gpu.log"
for a in "" "--audit /tmp/final-audit.log"; do
  timeout 120 "$root/.gpu/bin/bench_gpu_daemon" --reps 10 --seqlen 4096 $a
done > "$out/bench_daemon.md" 2>&1 || status=1
grep -E "^#|backward|forward" "$out/bench_daemon.md"
OUT=$out BIN=$root/.gpu/bin bash "$root/scripts/gpu_sanitize.sh" || status=1
exit $status
