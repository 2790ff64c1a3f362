#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_next_check.sh - on the GPU machine (device tool, carrying .gpu): every GPU suite one
# by one and the Python binding's GPU tests, each under its own time limit, logs to files
# (no pipes a daemon could hold open), a summary line per step. For a tree whose kernels
# have not run on a GPU yet (new forward, B5 backward, varlen/window/softcap kernels,
# poisoned outputs): the first call of a session on it. Logs: $OUT/next-*.log. A step that
# outlives its limit is not just killed: first the stacks of every test_dash_gpu and dashd
# process (cuda-gdb, host and GPU threads) go to $OUT/next-NAME.stacks, so a hang says
# where it waits.
#   bash scripts/gpu_next_check.sh
#   SUITES="gpu_dashd" REPEAT=30 STEP_SECS=60 bash scripts/gpu_next_check.sh
#       one suite 30 times, each given 60 s (a rare hang: the first run that hangs stops
#       the loop, with its stacks; the Python step is left out)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
bin=$root/.gpu/bin
for f in "$bin"/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONUNBUFFERED=1
status=0
gdb=$(command -v cuda-gdb || echo /usr/local/cuda/bin/cuda-gdb)
stacks() { # file: every test_dash_gpu and dashd process's threads, host and GPU
  local p
  ps -eo pid,ppid,stat,etime,args | grep -E "test_dash_gpu|dashd" | grep -v grep > "$1"
  for p in $(pgrep -f "test_dash_gpu|/dashd( |$)"); do
    echo "=== $p $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)" >> "$1"
    timeout 60 "$gdb" -batch -p "$p" -ex "info threads" -ex "thread apply all bt" \
      -ex "info cuda kernels" >> "$1" 2>&1
  done
}
step() { # name seconds command...
  local name=$1 secs=$2
  shift 2
  local t0=$SECONDS
  # in the background, stdin kept (as a foreground run has it), watched until its limit
  (cd "$bin" && exec "$@") 0<&0 > "$out/next-$name.log" 2>&1 &
  local pid=$! rc
  while kill -0 $pid 2>/dev/null && [ $((SECONDS - t0)) -lt "$secs" ]; do sleep 1; done
  if kill -0 $pid 2>/dev/null; then
    stacks "$out/next-$name.stacks"
    echo "$name: still running after ${secs}s; stacks in next-$name.stacks" >> "$out/next-$name.log"
    pkill -9 -f test_dash_gpu; pkill -9 -f "/dashd( |$)"
  fi
  wait $pid
  rc=$?
  [ $rc = 0 ] || status=1
  printf '%-22s rc %-3s %4ss  %s\n' "$name" $rc $((SECONDS - t0)) \
    "$(grep -E 'tests +[0-9]|passed|failed' "$out/next-$name.log" | tail -1 | tr -s ' ')"
  grep -E "Test: .*FAILED|^    [0-9]+\. " "$out/next-$name.log" | head -8
}
suites=${SUITES:-gpu_sched gpu_attn_fwd gpu_attn gpu_attn_vl gpu_dashd_varlen gpu_dashd gpu_share gpu_digest gpu_audit}
for i in $(seq 1 "${REPEAT:-1}"); do
  for s in $suites; do
    name=$s; [ "${REPEAT:-1}" = 1 ] || name=$s-$i
    step "$name" "${STEP_SECS:-240}" env DASH_GPU_SUITE=$s ./test_dash_gpu
    [ -e "$out/next-$name.stacks" ] && break 2
  done
done
[ -n "${SUITES:-}" ] || step python 240 env DASHD="$bin/dashd" DASH_LIBRARY="$root/.gpu/lib/libdash.so" \
  DASH_TEST_BACKEND=cuda PYTHONPATH="$root/client/python" python3 "$root/client/python/tests/test_gpu.py"
# the device tool brings back at most 8 files: the logs go into one archive, the failures'
# lines into next-summary.txt beside it
grep -hE "Test: .*FAILED|^    [0-9]+\. |FAILED:" "$out"/next-*.log > "$out/next-summary.txt" 2>/dev/null
(cd "$out" && tar czf next-logs.tgz next-*.log $(ls next-*.stacks 2>/dev/null) && rm -f next-*.log)
exit $status
