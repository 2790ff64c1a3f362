#!/usr/bin/env bash
# call 27 (planned 2026-12-06, fifth session, for the next one): the peers run with
# bench_gpu timing our calls as the peers' (CUDA events, median of 10 after 3 warm-ups,
# since e4764cc): the figures of record for issue 16, and the A/B table of the
# old timing against the new at three shapes (the same kernels: what the method alone
# changes) - .gpu/trial-hosttimed holds bench_gpu built at 2885bf1 (host-timed).
L=${LIMIT:-400}
. "$(dirname "$0")/common.sh"
mkdir -p $W/bench
OUT=$W/bench timeout 260 bash scripts/gpu_bench.sh $bundle_commit > $W/bench/log.txt 2>&1; T "bench rc $?"
{ grep -B2 -A8 "fwd / FE fwd" $W/bench/gpu-report.md | head -80; cat $W/times.txt; } > $OUT/summary.txt
if [ -x .gpu/trial-hosttimed/bench_gpu ] && before $((L - 100)); then
  for s in 128,1024,causal,auto 128,4096,full,auto 64,1024,full,auto; do
    for b in .gpu/bin .gpu/trial-hosttimed; do
      echo "== $b $s" >> $W/timing.txt
      timeout 40 $b/bench_gpu --only $s 2>&1 | grep -o '"fwd_ms": [0-9.]*\|"ms": [0-9.]*' | tr '\n' ' ' >> $W/timing.txt; echo >> $W/timing.txt
    done
  done
  T "timing done"
fi
cat $W/timing.txt >> $OUT/summary.txt 2>/dev/null
tar czf $OUT/call27.tgz -C $W .
head -c 11000 $OUT/summary.txt
