#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_fwd_check.sh - v3's forward (kernels/cuda/attn_fwd_wg.cu) on an sm_90 GPU: its
# tests, the sanitizers, its speed beside v2's forward in the same run, and an A/B of
# two builds of it (say, main's cp.async producer against the TMA one).
#
#   bash scripts/gpu_fwd_check.sh bundle     here (nvcc, no GPU): build test_dash_gpu,
#                                            bench_gpu and dashd, bundle them into .gpu/
#   bash scripts/gpu_fwd_check.sh tests      on the GPU machine: suite gpu_attn_fwd (float64
#                                            reference at short and 4096 shapes, repeats,
#                                            strides, TMA and cp.async loads giving the
#                                            same bits), then suite gpu_attn (every other
#                                            GPU attention test; their forward is v3's)
#   bash scripts/gpu_fwd_check.sh sanitize   memcheck, racecheck, synccheck
#                                            (scripts/gpu_sanitize.sh: every implementation)
#   bash scripts/gpu_fwd_check.sh bench      forward TFLOPS, bench_gpu --impl 2 and --impl 3
#                                            taking turns per shape (hdim 64/128, seqlen
#                                            1k/4k/16k, full/causal; REPS, default 10)
#   bash scripts/gpu_fwd_check.sh ab-bundle BASE
#                                            here: this tree's bench_gpu and commit BASE's
#                                            (built in a scratch worktree) as bench_gpu and
#                                            bench_gpu_base in .gpu-ab/ (a bundle of its own:
#                                            .gpu/ and .gpu-ab/ are about 61 and 44 MiB, the
#                                            device tool carries 64)
#   bash scripts/gpu_fwd_check.sh ab         on the GPU machine (carry .gpu-ab): v3's
#                                            forward TFLOPS of the base build and this
#                                            tree's (--impl 3), taking turns per shape
#                                            (SHAPES, REPS default 10), and whether their
#                                            backward digests agree: the backward reads out
#                                            and lse, so equal digests say the two forwards
#                                            gave the same bits too
#
# Each step fits the device tool's 10 minutes; logs and the bench table go to $OUT
# (default /tmp): fwd-tests.log, fwd-bench.md, fwd-ab.md. Exit status 0 only when the step passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cmd=${1:-tests}
out=${OUT:-/tmp}

if [ "$cmd" = bundle ]; then
  set -e
  make -s build/test_dash_gpu build/bench_gpu build/dashd
  bash "${DASH_SHARED:-$root/../shared}/gpu/bundle.sh" .gpu build/test_dash_gpu build/bench_gpu build/dashd
  exit 0
fi
if [ "$cmd" = ab-bundle ]; then
  set -e
  base=${2:?usage: $0 ab-bundle BASE_COMMIT}
  make -s build/bench_gpu
  wt=$(mktemp -d)
  git worktree add -q --detach "$wt" "$base"
  make -s -C "$wt" build/bench_gpu
  cp -L "$wt/build/bench_gpu" "$wt/build/bench_gpu_base"
  rm -rf .gpu-ab
  bash "${DASH_SHARED:-$root/../shared}/gpu/bundle.sh" .gpu-ab build/bench_gpu "$wt/build/bench_gpu_base"
  git worktree remove --force "$wt"
  echo "bench_gpu_base is $(git rev-parse --short "$base"), bench_gpu this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', modified'))"
  exit 0
fi
if [ "$cmd" = ab ]; then
  bin=$root/.gpu-ab/bin
  [ -x "$bin/bench_gpu" ] && [ -x "$bin/bench_gpu_base" ] ||
    { echo "gpu_fwd_check: no $bin/bench_gpu{,_base}: run '$0 ab-bundle BASE' first" >&2; exit 2; }
  export LD_LIBRARY_PATH=$root/.gpu-ab/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
  tmp=$(mktemp -d)
  for shape in ${SHAPES:-128,4096,full 128,4096,causal 64,4096,full 64,4096,causal 128,16384,full 128,1024,full}; do
    for build in base new; do
      exe=$bin/bench_gpu$([ $build = base ] && echo _base)
      timeout 120 "$exe" --reps "${REPS:-10}" --impl 3 --only "$shape,shift" >> "$tmp/$build.json" 2>> "$tmp/err" ||
        echo "$build $shape: exit $?" >> "$tmp/err"
    done
  done
  python3 - "$tmp" "$root/bench" > "$out/fwd-ab.md" <<'EOF'
import sys
tmp = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from gpu_ab import rows_of  # bench_gpu's documents, one after another
def rows(path):
    return {(r["D"], r["S"], r["causal"]): r for r in rows_of(path)}
base, new = rows(f"{tmp}/base.json"), rows(f"{tmp}/new.json")
print("# v3 forward A/B: base build vs this tree, bench_gpu --impl 3, bf16, 16384 tokens\n")
print("| hdim | seqlen | mask | base fwd TFLOPS | new fwd TFLOPS | new / base | bwd digests (forward bits) |")
print("|---|---|---|---|---|---|---|")
for key in sorted(set(base) | set(new)):
    a, b = base.get(key), new.get(key)
    fa, fb = (a or {}).get("fwd_tflops"), (b or {}).get("fwd_tflops")
    ratio = f"{fb / fa:.3f}" if fa and fb else "-"
    da = {x["schedule"]: x["digest"] for x in (a or {}).get("bwd", [])}
    db = {x["schedule"]: x["digest"] for x in (b or {}).get("bwd", [])}
    same = "-" if not da or not db else ("same" if da == db else "DIFFER")
    mask = "causal" if key[2] else "full"
    print(f"| {key[0]} | {key[1]} | {mask} | {fa or '-'} | {fb or '-'} | {ratio} | {same} |")
EOF
  cat "$out/fwd-ab.md"
  [ -s "$tmp/err" ] && { echo "errors:"; cat "$tmp/err"; exit 1; }
  grep -q DIFFER "$out/fwd-ab.md" && exit 1
  exit 0
fi
bin=$root/.gpu/bin
[ -x "$bin/test_dash_gpu" ] && [ -x "$bin/bench_gpu" ] ||
  { echo "gpu_fwd_check: $bin lacks test_dash_gpu or bench_gpu: run '$0 bundle' first" >&2; exit 2; }
grep -q test_attn_gpu_v3_forward_tma_and_cp_async_loads_give_identical_bits "$bin/test_dash_gpu" ||
  { echo "gpu_fwd_check: $bin/test_dash_gpu predates the TMA forward: run '$0 bundle' first" >&2; exit 2; }
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true

case "$cmd" in
tests)
  export DASH_TEST_SEED=${DASH_TEST_SEED:-$(( (RANDOM << 30) ^ (RANDOM << 15) ^ RANDOM ^ $(date +%s) ))}
  status=0
  : > "$out/fwd-tests.log"
  for suite in gpu_attn_fwd gpu_attn; do
    start=$(date +%s)
    (cd "$bin" && DASH_GPU_SUITE=$suite timeout "${T:-280}" ./test_dash_gpu) >> "$out/fwd-tests.log" 2>&1
    rc=$?
    echo "-- $suite: exit $rc in $(( $(date +%s) - start )) s$([ $rc = 124 ] && echo ' (timed out)')" |
      tee -a "$out/fwd-tests.log"
    [ $rc = 0 ] || status=1
  done
  grep -E "Test: |FAILED|failed|case [0-9]|differs|rel error|not an sm_90|skipped|tests  |asserts|seed" \
    "$out/fwd-tests.log" | grep -v "^ *$"
  echo "== gpu_fwd_check tests: $([ $status = 0 ] && echo PASS || echo FAIL) (log: \$OUT/fwd-tests.log)"
  exit $status
  ;;
sanitize)
  OUT=$out BIN=$bin bash "$root/scripts/gpu_sanitize.sh"
  exit $?
  ;;
bench)
  tmp=$(mktemp -d)
  for d in 64 128; do
    for s in 1024 4096 16384; do
      for mask in full causal; do
        for impl in 2 3; do
          timeout 120 "$bin/bench_gpu" --reps "${REPS:-10}" --impl $impl --only "$d,$s,$mask,shift" \
            >> "$tmp/impl$impl.json" 2>> "$tmp/err" || echo "bench_gpu --impl $impl $d,$s,$mask: exit $?" >> "$tmp/err"
        done
      done
    done
  done
  python3 - "$tmp" "$root/bench" > "$out/fwd-bench.md" <<'EOF'
import sys
tmp = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from gpu_ab import rows_of  # bench_gpu's documents, one after another
def rows(path):
    return {(r["D"], r["S"], r["causal"]): r["fwd_tflops"] for r in rows_of(path)}
v2, v3 = rows(f"{tmp}/impl2.json"), rows(f"{tmp}/impl3.json")
print("# v3 forward (attn_fwd_wg.cu) vs v2 forward, bench_gpu --impl 2 / 3, bf16, 16384 tokens\n")
print("| hdim | seqlen | mask | v2 fwd TFLOPS | v3 fwd TFLOPS | v3 / v2 |")
print("|---|---|---|---|---|---|")
for key in sorted(set(v2) | set(v3)):
    a, b = v2.get(key), v3.get(key)
    ratio = f"{b / a:.2f}" if a and b else "-"
    mask = "causal" if key[2] else "full"
    print(f"| {key[0]} | {key[1]} | {mask} | {a if a else '-'} | {b if b else '-'} | {ratio} |")
EOF
  cat "$out/fwd-bench.md"
  [ -s "$tmp/err" ] && { echo "errors:"; cat "$tmp/err"; exit 1; }
  exit 0
  ;;
*)
  echo "usage: $0 bundle | ab-bundle BASE | tests | sanitize | bench | ab" >&2
  exit 2
  ;;
esac
