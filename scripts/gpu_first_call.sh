#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_first_call.sh - a session's first device call in one command (the device machine
# goes back 30 s after a call, and a fresh start costs a minute or more of the session's
# device time): the checks of a tree that has not run on a GPU, then the A/B of its kernel
# changes, the audit's cost (bench_audit, where bundled), then a hunt for rare hangs, each
# step under its own limit so one slow step cannot eat the others, everything under one
# overall limit.
#   bash scripts/gpu_first_call.sh [SECONDS]        (default 560)
# Carries .gpu (bundle.sh's programs and libraries; .xz unpacked here). Optional builds
# beside it, each a bench_gpu (or bench_gpu.xz): .gpu/old/ (the tree before the changes,
# built from a worktree) and .gpu/knob/ (a -D experiment); the A/B runs whichever exist.
# Env: SHAPES (the A/B's bench_gpu --only shapes), HUNT (gpu_dashd repeats, default 10).
# Output under $OUT, at most 8 files (the device tool's limit): first.log (the summary,
# also printed), next-logs.tgz and next-summary.txt (gpu_next_check.sh), sanitize.tgz,
# node.tgz (gpu_node_check.py's journals, where the bundle has build/unit_seccomp and
# build/demo_client), ab.md, vl.txt, hunt.tgz, and any stacks of a hang (inside the .tgz
# files).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
limit=${1:-560}
start=$SECONDS
export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in "$root"/.gpu/bin/*.xz "$root"/.gpu/old/*.xz "$root"/.gpu/knob/*.xz; do
  [ -e "$f" ] && xz -d -f "$f"
done
log=$out/first.log
: > "$log"
say() { echo "$*" | tee -a "$log"; }
left() { echo $((limit - (SECONDS - start))); }
# step SECONDS NAME command...: at most SECONDS, and never past the overall limit
step() {
  local secs=$1 name=$2
  shift 2
  local l
  l=$(left)
  [ "$secs" -gt "$l" ] && secs=$l
  if [ "$secs" -le 5 ]; then
    say "== $name: skipped, the overall limit is reached"
    return 0
  fi
  say "== $name (limit ${secs}s)"
  local t0=$SECONDS
  timeout -k 10 "$secs" "$@" 2>&1 | tee -a "$log"
  say "== $name: rc ${PIPESTATUS[0]}, $((SECONDS - t0))s"
}
say "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
say "tree: $(git -C "$root" log --oneline -1 2>/dev/null || echo '(no git)')"

mkdir -p "$out/next" "$out/san" "$out/hunt"
step 300 checks env OUT="$out/next" bash "$root/scripts/gpu_next_check.sh"
mv "$out/next/next-logs.tgz" "$out/next/next-summary.txt" "$out/" 2>/dev/null
step 150 sanitize env OUT="$out/san" BIN="$root/.gpu/bin" bash "$root/scripts/gpu_sanitize.sh"
(cd "$out/san" && tar czf "$out/sanitize.tgz" . 2>/dev/null)
# the units' services in their sandboxes, by hand (this machine has no systemd), with and
# without MPS - where the bundle has demo_client and unit_seccomp
if [ -x "$root/.gpu/bin/unit_seccomp" ] && [ -x "$root/.gpu/bin/demo_client" ]; then
  mkdir -p "$out/node"
  step 120 node python3 "$root/scripts/gpu_node_check.py" --bundle "$root/.gpu" --mps --out "$out/node"
  (cd "$out/node" && tar czf "$out/node.tgz" . 2>/dev/null)
else
  say "== node: skipped, the bundle has no unit_seccomp and demo_client"
fi

builds=()
[ -x "$root/.gpu/old/bench_gpu" ] && builds+=("old=$root/.gpu/old/bench_gpu")
builds+=("new=$root/.gpu/bin/bench_gpu")
[ -x "$root/.gpu/knob/bench_gpu" ] && builds+=("knob=$root/.gpu/knob/bench_gpu")
if [ ${#builds[@]} -gt 1 ]; then
  step 120 ab env OUT="$out" REPS=5 bash "$root/scripts/gpu_ab.sh" \
    "${SHAPES:-64,1024,causal 128,1024,full 96,1024,full 128,4096,causal 64,4096,causal}" "${builds[@]}"
  # the packed batch and a 1k window (bench_gpu --lengths / --window), each build in turn
  lengths=$(python3 "$root/bench/varlen_peers.py" --packed-lengths)
  vl() { # build case args...: one bench_gpu run, one line
    local exe=${1#*=} name=${1%%=*} what=$2
    shift 2
    if [ "$(left)" -lt 60 ]; then
      say "$name $what: skipped, the overall limit is near"
      return
    fi
    timeout 40 "$exe" --reps 5 "$@" 2>/dev/null |
      python3 -c 'import json, sys
r = json.load(sys.stdin)["rows"][0]
print(sys.argv[1], sys.argv[2], "fwd %.1f TFLOPS" % r["fwd_tflops"],
      " ".join("%s %.3f ms" % (b["schedule"], b["ms"]) for b in r["bwd"]))' "$name" "$what" 2>&1 |
      tee -a "$log"
  }
  say "== vl: the packed batch and a 1k window, each build in turn, twice"
  for round in 1 2; do
    for b in "${builds[@]}"; do
      vl "$b" packed --only 128,16384,causal,shift --lengths "$lengths"
      vl "$b" window-1k --only 128,16384,causal,descending --window 1024
    done
  done
  grep -E "^(old|new|knob) (packed|window)" "$log" > "$out/vl.txt"
fi

# what the audit adds to a 4k backward, part by part (issue 16 item 4), where bundled
if [ -x "$root/.gpu/bin/bench_audit" ]; then
  step 60 audit "$root/.gpu/bin/bench_audit" --seqlen 4096
fi

step "$(($(left) - 15))" hunt env OUT="$out/hunt" SUITES=gpu_dashd REPEAT="${HUNT:-10}" STEP_SECS=60 \
  bash "$root/scripts/gpu_next_check.sh"
(cd "$out/hunt" && tar czf "$out/hunt.tgz" . 2>/dev/null)
rm -rf "$out/next" "$out/san" "$out/hunt" "$out/node"
say "== done in $((SECONDS - start))s"
