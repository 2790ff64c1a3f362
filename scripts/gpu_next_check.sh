#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_next_check.sh - on the GPU machine (device tool, carrying .gpu): every GPU suite one
# by one and the Python binding's GPU tests, each under its own time limit, logs to files
# (no pipes a daemon could hold open), a summary line per step. For a tree whose kernels
# have not run on a GPU yet (new forward, B5 backward, varlen/window/softcap kernels,
# poisoned outputs): the first call of a session on it. Logs: $OUT/next-*.log.
#   bash scripts/gpu_next_check.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
bin=$root/.gpu/bin
for f in "$bin"/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
status=0
step() { # name seconds command...
  local name=$1 secs=$2
  shift 2
  local t0=$SECONDS
  (cd "$bin" && timeout -k 5 "$secs" "$@") > "$out/next-$name.log" 2>&1
  local rc=$?
  [ $rc = 0 ] || status=1
  printf '%-22s rc %-3s %4ss  %s\n' "$name" $rc $((SECONDS - t0)) \
    "$(grep -E 'tests +[0-9]|passed|failed' "$out/next-$name.log" | tail -1 | tr -s ' ')"
  grep -E "Test: .*FAILED|^    [0-9]+\. " "$out/next-$name.log" | head -8
}
for s in gpu_sched gpu_attn_fwd gpu_attn gpu_attn_vl gpu_dashd_varlen gpu_dashd gpu_share \
         gpu_digest gpu_audit; do
  step "$s" 240 env DASH_GPU_SUITE=$s ./test_dash_gpu
done
step python 240 env DASHD="$bin/dashd" DASH_LIBRARY="$root/.gpu/lib/libdash.so" \
  DASH_TEST_BACKEND=cuda PYTHONPATH="$root/client/python" python3 "$root/client/python/tests/test_gpu.py"
# the device tool brings back at most 8 files: the logs go into one archive, the failures'
# lines into next-summary.txt beside it
grep -hE "Test: .*FAILED|^    [0-9]+\. |FAILED:" "$out"/next-*.log > "$out/next-summary.txt" 2>/dev/null
(cd "$out" && tar czf next-logs.tgz next-*.log && rm -f next-*.log)
exit $status
