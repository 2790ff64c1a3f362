# common.sh - sourced by call1-3.sh (run from this folder's scripts): the repository root,
# the bundle unpacked, its libraries, a work folder W (/tmp/w-callN, tarred into $OUT at the
# end), T NAME (NAME and the seconds since the start, into $W/times.txt) and before S
# (true while fewer than S seconds have passed; else it says what was skipped).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
t0=$(date +%s)
for f in .gpu/bin/*.xz .gpu/trial-*/*.xz; do [ -e "$f" ] && xz -d -f "$f" & done; wait
export LD_LIBRARY_PATH=$PWD/.gpu/lib
W=/tmp/w-$(basename "$0" .sh); rm -rf "$W"; mkdir -p "$W"
T() { echo "$1 at $(( $(date +%s) - t0 )) s" >> "$W/times.txt"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ] || { T "skipped (time) before $1"; false; }; }
