#!/usr/bin/env bash
# call 25 (2026-12-06, fifth session): main's bundle at 2885bf1 (the dQ accumulator's first
# addition a copy, no memset, dense and window/packed; treefold) - gpu_attn (with the new
# NaN-scratch test), gpu_attn_vl and the sanitizers in lanes; then the figures of record at
# HEAD: the peers run (gpu_bench.sh) and the varlen peers.
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=200
backward_lanes 220
wait; T "lanes done"
{ cat $W/times.txt; for d in mattn mvl; do echo "== $d"; cat $W/$d/trials.log 2>/dev/null; done; echo "== san"; tail -8 $W/lane-san.out; } > $OUT/summary.txt
mkdir -p $W/bench $W/vl
before $((L - 220)) && OUT=$W/bench timeout 200 bash scripts/gpu_bench.sh $bundle_commit > $W/bench/log.txt 2>&1; T "bench rc $?"
before $((L - 90)) && OUT=$W/vl timeout 80 bash scripts/gpu_bench.sh $bundle_commit --varlen > $W/vl/log.txt 2>&1; T "varlen rc $?"
{ grep -B2 -A8 "fwd / FE fwd" $W/bench/gpu-report.md | head -60; grep -A12 "Issue 17" $W/vl/varlen-report.md; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call25.tgz -C $W .
head -c 11000 $OUT/summary.txt
