#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_trials.sh - on the GPU machine (device tool, carrying .gpu): every trial build under
# .gpu/trial-*/ (scripts/build_trial.sh) against main's bundle in .gpu/bin: per trial the
# gpu_attn suite (float64 references, 20-repeat bits, grids, leaves), racecheck and
# synccheck on the sanitizer shapes, bench_audit at 4k; then one A/B of main and every
# trial, builds taking turns per shape (scripts/gpu_ab.sh). Output under $OUT: trials.log
# (the summary, also printed), ab.md, trials.tgz (the logs).
#   bash scripts/gpu_trials.sh ["SHAPES"]       (default: 128 and 64 at 4k, 128 at 16k causal)
# A device call lasts at most 10 minutes, so the parts can be chosen: CHECKS (default
# "gpu_attn racecheck synccheck audit") names the per-trial checks (any gpu_* word is a
# test_dash_gpu suite: gpu_attn_fwd, gpu_attn_vl, ...; vlracecheck and vlsynccheck run the
# tool on the window/packed kernels' sanitizer target, for trials that change attn_vl.cu),
# AB_TRIALS (default: every
# trial) the trials in the A/B ("none" for no A/B), TRIALS (default: every trial) the trials,
# SUITE_TIMEOUT (seconds; default 300 on main, 200 on trials: raise it where several runs
# share the GPU) bounds each suite, SANITIZER_TIMEOUT (default 420) each racecheck or
# synccheck run (racecheck of the sanitizer shapes took about 230 s of wall time on main in
# call 55 beside other lanes - CUnit's "317 s" there is CPU time - and trial digest3's ran
# past 200 s alone in call 65; a cut run says nothing), and MAIN_CHECKS (default
# none) test_dash_gpu suites to run on main's bundle first (say, tests new on main:
# "gpu_attn gpu_attn_fwd gpu_audit gpu_dashd").
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in "$root"/.gpu/bin/*.xz "$root"/.gpu/trial-*/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
mkdir -p "$out/trials"
log=$out/trials.log
: > "$log"
say() { echo "$*" | tee -a "$log"; }
# suite NAME DIR SUITE SECONDS: test_dash_gpu's SUITE from DIR (dashd and dashctl beside it),
# its counts and first failures into the summary
suite() {
  (cd "$2" && DASH_GPU_SUITE=$3 timeout "$4" ./test_dash_gpu > "$out/trials/$1-$3.log" 2>&1)
  say "$1 $3 rc $?: $(grep -E '^ +(tests|asserts)' "$out/trials/$1-$3.log" | tr -s ' ' | tr '\n' ' ')"
  grep -E "FAILED|^    [0-9]+\. " "$out/trials/$1-$3.log" | head -6 | tee -a "$log"
}
builds=("main=$root/.gpu/bin/bench_gpu")
for s in ${MAIN_CHECKS:-}; do
  suite main "$root/.gpu/bin" "$s" "${SUITE_TIMEOUT:-300}"
done
for d in "$root"/.gpu/trial-*/; do
  [ -x "$d/test_dash_gpu" ] || continue
  t=$(basename "$d")
  t=${t#trial-}
  case " ${TRIALS:-$t} " in *" $t "*) ;; *) continue ;; esac
  say "== $t: $(cat "$d/what" 2>/dev/null)"
  checks=" ${CHECKS:-gpu_attn racecheck synccheck audit} " san_timeout=${SANITIZER_TIMEOUT:-420}
  for s in $checks; do # every gpu_* word: that test_dash_gpu suite
    [[ $s == gpu_* ]] || continue
    suite "$t" "$d" "$s" "${SUITE_TIMEOUT:-200}"
  done
  for tool in racecheck synccheck; do
    [[ $checks == *" $tool "* ]] || continue
    (cd "$d" && DASH_GPU_SUITE=gpu_attn DASH_GPU_TEST=test_attn_gpu_small_shapes_for_sanitizers timeout "$san_timeout" \
       "$cs" --tool $tool ./test_dash_gpu > "$out/trials/$t-$tool.log" 2>&1)
    say "$t $tool rc $?: $(grep -E 'SUMMARY' "$out/trials/$t-$tool.log" | tail -1)"
  done
  for tool in racecheck synccheck; do # vl<tool>: the window/packed kernels (older builds: their first target)
    [[ $checks == *" vl$tool "* ]] || continue
    for vt in test_attn_vl_gpu_small_shapes_for_sanitizers test_attn_vl_gpu_rows_without_keys_give_zeros_not_nan; do
      (cd "$d" && DASH_GPU_SUITE=gpu_attn_vl DASH_GPU_TEST=$vt timeout "$san_timeout" \
         "$cs" --tool $tool ./test_dash_gpu > "$out/trials/$t-vl$tool.log" 2>&1)
      rc=$?
      grep -q "has no test named" "$out/trials/$t-vl$tool.log" || break
    done
    say "$t vl$tool ($vt) rc $rc: $(grep -E 'SUMMARY' "$out/trials/$t-vl$tool.log" | tail -1)"
  done
  [[ $checks == *" audit "* ]] &&
    say "$t bench_audit (4k): $(timeout 120 "$d/bench_audit" --seqlen 4096 2>&1 | grep -E '^\| (full|causal)' | tr -s ' ' | tr '\n' ' ')"
  case " ${AB_TRIALS:-$t} " in *" $t "*) builds+=("$t=$d/bench_gpu") ;; esac
done
[[ " ${CHECKS:-audit} " == *" audit "* ]] && say "main bench_audit (4k): $(timeout 120 "$root/.gpu/bin/bench_audit" --seqlen 4096 2>&1 | grep -E '^\| (full|causal)' | tr -s ' ' | tr '\n' ' ')"
if [ ${#builds[@]} -gt 1 ]; then
  OUT=$out REPS=${REPS:-5} timeout 400 bash "$root/scripts/gpu_ab.sh" \
    "${1:-128,4096,full 128,4096,causal 128,16384,causal 64,4096,full 64,4096,causal}" "${builds[@]}" | grep "^|" | tee -a "$log"
fi
(cd "$out" && tar czf trials.tgz trials && rm -rf trials)
