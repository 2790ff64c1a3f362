#!/usr/bin/env bash
# call 61: trial leafaddr (head dim 128's unit-end leaves read the staged dK/dV with eight
# chunk offsets instead of 64 offsets formed whole; the same reads, the same bits) - first
# bench_audit main / trial in turns (paired rounds, 4k head dim 128), quiet; then the
# trial's gpu_attn (its leaves checked against XXH64 of the rows) and gpu_audit (dashd
# built with the trial) in two lanes.
# Carry: .gpu/lib .gpu/fix .gpu/trial-leafaddr
L=${LIMIT:-200}
. "$(dirname "$0")/common.sh"
for f in .gpu/fix/bin/*.xz .gpu/trial-leafaddr/*.xz; do [ -e "$f" ] && xz -d -f "$f"; done
for i in 1 2; do for b in fix/bin trial-leafaddr; do
  timeout 30 .gpu/$b/bench_audit --seqlen 4096 --hdim 128 > $W/audit-${b%%/*}-$i.txt 2>&1; T "audit $b $i rc $?"
  echo "== bench_audit $b run $i"; grep -E "^\| (full|causal)" $W/audit-${b%%/*}-$i.txt; done; done > $OUT/summary.txt
LT=$(( L - 10 - $(( $(date +%s) - t0 )) ))
for s in gpu_attn gpu_audit; do
  ( cd .gpu/trial-leafaddr && DASH_GPU_SUITE=$s timeout $LT ./test_dash_gpu > $W/$s.log 2>&1
    echo "trial $s rc $?: $(grep -E '^ +(tests|asserts)|FAILED|differ' $W/$s.log | tr -s ' ' | head -4 | tr '\n' ' ')" >> $W/checks.txt; T "$s" ) &
done; wait
cat $W/checks.txt >> $OUT/summary.txt
cat $W/times.txt >> $OUT/summary.txt
tar czf $OUT/call61.tgz -C $W .
cat $OUT/summary.txt
