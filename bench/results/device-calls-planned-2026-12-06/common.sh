# common.sh - sourced by call1-7.sh (run from this folder's scripts): the repository root,
# the bundle unpacked, its libraries, a work folder W (/tmp/w-callN, tarred into $OUT at the
# end), T NAME (NAME and the seconds since the start, into $W/times.txt) and before S
# (true while fewer than S seconds have passed; else it says what was skipped). Also lane,
# backward_lanes and bundle_commit (below).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
t0=$(date +%s)
for f in .gpu/bin/*.xz .gpu/trial-*/*.xz; do [ -e "$f" ] && xz -d -f "$f" & done; wait
export LD_LIBRARY_PATH=$PWD/.gpu/lib
W=/tmp/w-$(basename "$0" .sh); rm -rf "$W"; mkdir -p "$W"
T() { echo "$1 at $(( $(date +%s) - t0 )) s" >> "$W/times.txt"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ] || { T "skipped (time) before $1"; false; }; }
# lane NAME ENV... COMMAND...: a check in the background, its output in $W/lane-NAME.out and
# its exit status in times.txt (wait for them all with `wait`)
lane() { local n=$1; shift; ( env "$@" > $W/lane-$n.out 2>&1; T "lane $n rc $?" ) & }
# the backward's suites (gpu_attn, gpu_attn_vl) and the sanitizers in three lanes of at most
# $1 seconds each
backward_lanes() {
  lane mattn MAIN_CHECKS="gpu_attn" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mattn timeout $1 bash scripts/gpu_trials.sh
  lane mvl MAIN_CHECKS="gpu_attn_vl" CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/mvl timeout $1 bash scripts/gpu_trials.sh
  lane san BIN=.gpu/bin OUT=$W/san timeout $1 bash scripts/gpu_sanitize.sh
}
# the commit of main's bundle (prepare.sh writes it into .gpu/bin.what)
bundle_commit=$(awk '{print $4}' .gpu/bin.what 2>/dev/null | tr -d ,)
