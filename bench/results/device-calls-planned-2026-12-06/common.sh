# common.sh - sourced by the call scripts (run from this folder's scripts): the repository root,
# the bundle unpacked, its libraries, a work folder W (/tmp/w-callN, tarred into $OUT at the
# end), T NAME (NAME and the seconds since the start, into $W/times.txt) and before S
# (true while fewer than S seconds have passed; else it says what was skipped). Also lane,
# backward_lanes, bundle_commit, vl_ab and vl_ab_tables (below).
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
# vl_ab ROUNDS SPT BUILD...: the window/packed backward's A/B (calls 74-77) - the builds
# (.gpu/BUILD) taking turns, ROUNDS rounds of bench_gpu --only 128,16384,causal,auto with a 1k
# window, a 4k window and the packed batch (a JSON document a line into $W/ab-BUILD.json), and
# where SPT is "spt" the packed batch under spt too ($W/spt-BUILD.json)
vl_ab() {
  local rounds=$1 spt=$2 r b c lengths
  shift 2
  lengths=$(python3 bench/varlen_peers.py --packed-lengths)
  for r in $(seq 1 "$rounds"); do
    for b in "$@"; do
      for c in "--window 1024" "--window 4096" "--lengths $lengths"; do
        # shellcheck disable=SC2086 # the case is words
        timeout 60 .gpu/$b/bench_gpu --reps 5 --only 128,16384,causal,auto $c | tr -d '\n' >> $W/ab-$b.json; echo >> $W/ab-$b.json
      done
      [ "$spt" = spt ] || continue
      timeout 60 .gpu/$b/bench_gpu --reps 5 --only 128,16384,causal,spt --lengths $lengths | tr -d '\n' >> $W/spt-$b.json
      echo >> $W/spt-$b.json
    done
    T "VL A/B round $r"
  done
}
# vl_ab_tables TRIAL...: vl_ab's tables of each trial against main's bundle (bin), into
# $W/ab-TRIAL.txt and, where vl_ab ran spt, $W/ab-spt-TRIAL.txt
vl_ab_tables() {
  local t
  for t in "$@"; do
    python3 "$(dirname "${BASH_SOURCE[0]}")/vl_ab.py" $W/ab-bin.json $W/ab-trial-$t.json > $W/ab-$t.txt
    [ -e $W/spt-bin.json ] && python3 "$(dirname "${BASH_SOURCE[0]}")/vl_ab.py" $W/spt-bin.json $W/spt-trial-$t.json > $W/ab-spt-$t.txt
  done
}
