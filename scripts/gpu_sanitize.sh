#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_sanitize.sh - compute-sanitizer on the GPU suites' sanitizer targets: memcheck,
# racecheck and synccheck on test_attn_gpu_small_shapes_for_sanitizers (every kernel
# implementation, head dims 64/96/128/256, every schedule, persistent and interleaved
# CTAs, checked against float64), the same three on v3's forward
# (test_attn_gpu_v3_forward_small_shapes_for_sanitizers: its K/V rings wrap) and on its
# persistent CTAs (test_attn_gpu_v3_forward_persistent_ctas_give_the_same_bits), the same three
# on the window/packed-batch kernels (test_attn_vl_gpu_rows_without_keys_give_zeros_not_nan:
# a small packed batch, forward and both backward kernels, v3's wgmma one on sm_90; and
# test_attn_vl_gpu_small_shapes_for_sanitizers: head dims 64 and 128, softcap on and off,
# packed and dense batches, TMA and cp.async loads), and memcheck on the digest kernels. Logs under $OUT
# (default /tmp); prints each tool's summary line. Exit 0 when every run passed with no
# error or hazard reported. SANITIZER_TIMEOUT (seconds, default 300) bounds each run;
# SANITIZE_ONLY (an extended regex on "TOOL TEST") runs only the matching ones.
#   BIN=build bash scripts/gpu_sanitize.sh
#   SANITIZE_ONLY='^racecheck test_attn_gpu_small' SANITIZER_TIMEOUT=420 bash scripts/gpu_sanitize.sh
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/build}
out=${OUT:-/tmp}
mkdir -p "$out"
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
status=0

one() { # tool suite test log
  local tool=$1 suite=$2 test=$3 log=$out/sanitize-$1-$3.log
  [ -z "${SANITIZE_ONLY:-}" ] || echo "$tool $test" | grep -qE "$SANITIZE_ONLY" || return 0
  (cd "$bin" && DASH_GPU_SUITE=$suite DASH_GPU_TEST=$test timeout "${SANITIZER_TIMEOUT:-300}" \
     "$cs" --tool "$tool" ${4:-} ./test_dash_gpu) > "$log" 2>&1
  local rc=$?
  local summary
  summary=$(grep -E "(ERROR|RACECHECK) SUMMARY" "$log" | tail -1)
  local passed
  # the Run Summary's "tests" row (Total Ran Passed ...): a tool's report can split the
  # "Test: ... passed" line of the test it interrupts
  passed=$(awk '$1 == "tests" && NF >= 5 { p = $4 } END { print p + 0 }' "$log")
  echo "$tool $test: exit $rc, tests passed $passed, ${summary:-no summary}"
  if [ $rc -ne 0 ] || [ "$passed" -lt 1 ] || ! echo "$summary" | grep -qE ": 0 (errors|hazards)"; then
    status=1
  fi
}

one memcheck gpu_attn test_attn_gpu_small_shapes_for_sanitizers
one racecheck gpu_attn test_attn_gpu_small_shapes_for_sanitizers "--racecheck-report all"
one synccheck gpu_attn test_attn_gpu_small_shapes_for_sanitizers
# v3's forward (sm_90): its K/V rings wrap here; elsewhere the test passes with nothing run
one memcheck gpu_attn_fwd test_attn_gpu_v3_forward_small_shapes_for_sanitizers
one racecheck gpu_attn_fwd test_attn_gpu_v3_forward_small_shapes_for_sanitizers "--racecheck-report all"
one synccheck gpu_attn_fwd test_attn_gpu_v3_forward_small_shapes_for_sanitizers
# the persistent forward: CTAs taking many q-tiles (Q reloaded behind q_empty, the rings
# running on across tiles)
one memcheck gpu_attn_fwd test_attn_gpu_v3_forward_persistent_ctas_give_the_same_bits
one racecheck gpu_attn_fwd test_attn_gpu_v3_forward_persistent_ctas_give_the_same_bits "--racecheck-report all"
one synccheck gpu_attn_fwd test_attn_gpu_v3_forward_persistent_ctas_give_the_same_bits
# windows and packed batches: v2's kernels, and v3's backward (on sm_90)
one memcheck gpu_attn_vl test_attn_vl_gpu_rows_without_keys_give_zeros_not_nan
one racecheck gpu_attn_vl test_attn_vl_gpu_rows_without_keys_give_zeros_not_nan "--racecheck-report all"
one synccheck gpu_attn_vl test_attn_vl_gpu_rows_without_keys_give_zeros_not_nan
# and at head dim 64, with and without a softcap (the backward's two instances), dense
# batches with a window through TMA and cp.async
one memcheck gpu_attn_vl test_attn_vl_gpu_small_shapes_for_sanitizers
one racecheck gpu_attn_vl test_attn_vl_gpu_small_shapes_for_sanitizers "--racecheck-report all"
one synccheck gpu_attn_vl test_attn_vl_gpu_small_shapes_for_sanitizers
one memcheck gpu_digest test_digest_gpu_strided_views_equal_cpu
one memcheck gpu_digest test_digest_gpu_equals_cpu_on_odd_sizes_and_offsets
exit $status
