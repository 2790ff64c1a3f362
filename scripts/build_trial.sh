#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# build_trial.sh - here (not on the GPU machine): build a kernel trial that lives in git
# history as a commit reverted on main (a default-off -D knob), for scripts/gpu_trials.sh.
# A worktree of HEAD gets the commit cherry-picked, then test_dash_gpu, bench_gpu,
# bench_audit, dashd and dashctl (the gpu_audit and dashd suites start them from beside
# test_dash_gpu) are built with the knob and copied, stripped and xz'd, to .gpu/trial-NAME/
# (with the knob and the commit in .gpu/trial-NAME/what). Several trials build one after
# another; each full kernel build takes about five minutes on two cores.
#   bash scripts/build_trial.sh NAME COMMIT KNOB [KNOB ...]
#   bash scripts/build_trial.sh mbar 6ff0349 -DBWD_WG_MBAR=1
# COMMIT - builds HEAD as it is with the knobs (an instrument that lives on main, default
# off: bash scripts/build_trial.sh trace - -DBWD_WG_TRACE=1).
set -euo pipefail
[ $# -ge 3 ] || { sed -n '3,10p' "$0" >&2; exit 2; }
name=$1 commit=$2
shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
wt=$(mktemp -d /tmp/trial-"$name".XXXXXX)
trap 'git -C "$root" worktree remove --force "$wt" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add -f --detach "$wt" HEAD >/dev/null
# the commit's change without its bench/results/ files: main keeps a reverted trial's record
# there, which a cherry-pick would meet as a conflict (and the build does not read it)
[ "$commit" = - ] ||
  git -C "$root" diff "$commit^" "$commit" -- . ':(exclude)bench/results' | git -C "$wt" apply --3way --index
bins="test_dash_gpu bench_gpu bench_audit dashd dashctl"
make -C "$wt" -j"$(nproc)" NVCC="$(command -v nvcc) $*" $(printf 'build/%s ' $bins) >/dev/null
out=$root/.gpu/trial-$name
rm -rf "$out"
mkdir -p "$out"
for b in $bins; do cp "$wt/build/$b" "$out/"; strip "$out/$b"; done
(cd "$out" && xz -T2 -3 -f $bins)
echo "trial $name: commit $([ "$commit" = - ] && echo none || git -C "$root" rev-parse --short "$commit") on $(git -C "$root" rev-parse --short HEAD), knobs $*" > "$out"/what
cat "$out"/what
du -sh "$out"
