#!/usr/bin/env bash
# call 5 (2026-12-06): main with narrow96, pairdrain and onedrain adopted - the backward's
# suites and the sanitizers in parallel lanes, then the peers run alone (the figures of record)
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=250
backward_lanes 280
wait; T "lanes done"
mkdir -p $W/bench; OUT=$W/bench timeout $((L - $(( $(date +%s) - t0 )) - 15)) bash scripts/gpu_bench.sh $bundle_commit > $W/bench/log.txt 2>&1; T "bench rc $?"
{ cat $W/times.txt; for d in mattn mvl; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; echo "== san"; cat $W/lane-san.out; echo "== bench"; tail -3 $W/bench/log.txt; } > $OUT/summary.txt
tar czf $OUT/call5.tgz -C $W .
cat $OUT/summary.txt; grep -A8 "## hdim 64, causal" $W/bench/gpu-report.md
