#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_check_tc.sh - the GPU attention suite under each kernel implementation: v1 (CUDA
# cores, DASH_GPU_IMPL=v1), v2 (tensor cores, DASH_GPU_IMPL=v2) and on sm_90 v3 (wgmma,
# DASH_GPU_IMPL=v3; set IMPLS="1 2 3"), one seed for all.
#
#   bash scripts/gpu_check_tc.sh bundle       here (nvcc, no GPU): make the GPU runner and
#                                             dashd, bundle them into .gpu/ (bin/, lib/)
#   bash scripts/gpu_check_tc.sh [run] [--all] on the GPU machine (the device tool's `run`,
#                                             carrying .gpu): suite gpu_attn, v1 then v2;
#                                             --all runs every suite (gpu_sched, gpu_attn,
#                                             gpu_dashd) under each
#
# Environment: DASH_TEST_SEED (default: drawn once, printed, used for both runs), IMPLS
# (default "0 1"; "1" runs v2 only), OUT (logs are copied there when set), T (seconds per
# run, default 280). Exit status 0 only when every run passes. Timing is not measured
# here: the benchmark does that.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cmd=${1:-run}
[ $# -gt 0 ] && shift

if [ "$cmd" = bundle ]; then
  set -e
  make -s build/test_dash_gpu build/dashd
  bash "${DASH_SHARED:-$root/../shared}/gpu/bundle.sh" .gpu build/test_dash_gpu build/dashd
  exit 0
fi
[ "$cmd" = run ] || { echo "usage: $0 [bundle | run [--all]]" >&2; exit 2; }

suite=gpu_attn
[ "${1:-}" = --all ] && suite=
bin=.gpu/bin/test_dash_gpu
[ -x "$bin" ] || { echo "gpu_check_tc: $bin missing: run '$0 bundle' first" >&2; exit 2; }
# A runner built before v2's test cannot tell the implementations apart.
if ! grep -q test_attn_gpu_both_impls_match_reference_and_v2_bits_repeat "$bin"; then
  echo "gpu_check_tc: $bin predates the v2 kernels' test: run '$0 bundle' first" >&2
  exit 2
fi
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export DASH_TEST_SEED=${DASH_TEST_SEED:-$(( (RANDOM << 30) ^ (RANDOM << 15) ^ RANDOM ^ $(date +%s) ))}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
echo "seed $DASH_TEST_SEED, suite ${suite:-all}"

logs=$(mktemp -d)
status=0
for impl in ${IMPLS:-1 2}; do
  name=$(case $impl in 1) echo "v1 (CUDA cores)";; 2) echo "v2 (tensor cores)";; *) echo "v3 (wgmma)";; esac)
  echo "== DASH_GPU_IMPL=v$impl: $name"
  start=$(date +%s)
  DASH_GPU_IMPL=v$impl DASH_GPU_SUITE=$suite timeout "${T:-280}" "$bin" >"$logs/impl$impl.log" 2>&1
  rc=$?
  # the verbose CUnit lines of interest: each test's verdict, failures, and the summary
  grep -E "Test: |FAILED|passed|failed|case [0-9]|differs|rel error|Run Summary|suites|tests  |asserts|seed|device 0" \
    "$logs/impl$impl.log" | grep -v "^ *$"
  if grep -q "skipped: no usable GPU" "$logs/impl$impl.log"; then
    cat "$logs/impl$impl.log"
    rc=3 # nothing ran: not a pass
  fi
  echo "-- impl $impl: exit $rc in $(( $(date +%s) - start )) s$([ $rc = 124 ] && echo ' (timed out)')"
  [ $rc = 0 ] || status=1
done
if [ -n "${OUT:-}" ]; then
  cp "$logs"/impl*.log "$OUT"/ 2>/dev/null || true
fi
echo "== gpu_check_tc: $([ $status = 0 ] && echo PASS || echo FAIL) (full logs: $logs${OUT:+, copied to \$OUT})"
exit $status
