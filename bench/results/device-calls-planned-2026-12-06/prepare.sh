#!/usr/bin/env bash
# prepare.sh - here, before call1-3.sh: rebuild what they carry in .gpu when a new checkout
# has lost it (untracked, so a session's machine may start without it): main's bundle
# (.gpu/bin, .gpu/lib, .gpu/bin.what), then each trial of the plan's table on HEAD
# (scripts/build_trial.sh; bench_gpu and test_dash_gpu kept, p0 and trace bench_gpu only,
# as the calls use them). About 3 minutes for main and 5 for each trial on two cores; main's
# bundle comes first, so call1.sh's main lanes can run while the trials build.
#   bash bench/results/device-calls-planned-2026-12-06/prepare.sh [main] [TRIAL ...]
# (no argument: main and every trial). Checks the carry size (64 MiB with the tree) at the end.
set -euo pipefail
cd "$(dirname "$0")/../../.."
# name, commit (- for HEAD as it is), knobs
trials=(
  "pairdrain 306bc5f -DPAIRDRAIN=1"
  "vlpersist 70e884f -DVLPERSIST=1"
  "narrow96 77715ac -DFWD_WG_NARROW=1 -DBWD_WG_NARROW=1"
  "onedrain a1acdaa -DONEDRAIN=1"
  "p0 - -DBWD_WG_PAIR64=0"
  "trace - -DBWD_WG_TRACE=1"
  "halfturn 4f9e577 -DHALFTURN=1"
  "nc2causal 95d18c6 -DNC2CAUSAL=1"
  "nc3c - -DFWD_WG_NC2_CAUSAL_MAX=0"
  "nc2 - -DFWD_WG_NC64=2"
)
want=("$@")
# (2026-12-06: every trial above was settled - narrow96, pairdrain, onedrain adopted, halfturn
# and vlpersist rejected; nc2causal adopted in the second session: their commits no longer
# apply to main. Main by default; name trace or p0 to build those tools on HEAD, nc3c and
# nc2 for call22.sh's A/B of the consumers' rule at 64 now that the turns are gone.)
[ ${#want[@]} -gt 0 ] || want=(main)
wanted() { local w; for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
if wanted main; then
  make -j"$(nproc)" >/dev/null
  rm -rf .gpu/bin .gpu/lib
  bash ../shared/gpu/bundle.sh .gpu build/dashd build/dashctl build/test_dash_gpu build/bench_gpu \
    build/bench_audit build/libdash.so
  strip .gpu/bin/*
  xz -T2 -3 -f .gpu/bin/*
  echo "main's bundle at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- kernels || echo ' (kernels changed, uncommitted)'), $(date -u +%F)" > .gpu/bin.what
  cat .gpu/bin.what
fi
for t in "${trials[@]}"; do
  read -r name commit knobs <<< "$t"
  wanted "$name" || continue
  # shellcheck disable=SC2086 # the knobs are words
  bash scripts/build_trial.sh "$name" "$commit" $knobs
  case $name in
    p0 | trace) rm -f .gpu/trial-"$name"/{test_dash_gpu,bench_audit,dashd,dashctl}.xz ;;
    *) rm -f .gpu/trial-"$name"/{bench_audit,dashd,dashctl}.xz ;;
  esac
done
tree=$(git ls-files -z | du -c --files0-from=- 2>/dev/null | tail -1 | cut -f1)
gpu=$(du -s .gpu | cut -f1)
echo "carry: .gpu $((gpu / 1024)) MiB + tree $((tree / 1024)) MiB (limit 64)"
