#!/usr/bin/env bash
# call 13 (2026-12-06, third session): issue 20 - where the Python side of a call spends its
# host time on the GPU machine's host (percall.py --profile: cProfile of 100 forward +
# backward pairs), without MPS
L=${LIMIT:-120}
. "$(dirname "$0")/common.sh"
export DASH_LIBRARY=$PWD/.gpu/lib/libdash.so PYTHONPATH=$PWD/client/python PYTHONUNBUFFERED=1
timeout 90 python3 bench/percall.py --dashd .gpu/bin/dashd --profile --out $W/percall-profile.md > $W/percall-profile.log 2>&1; T "percall rc $?"
{ cat $W/times.txt; cat $W/percall-profile.log; } > $OUT/summary.txt; tar czf $OUT/call13.tgz -C $W .
head -c 11500 $OUT/summary.txt
