#!/usr/bin/env bash
# call 32 (2026-12-06, sixth session): where auditing's +2.5-3% goes (issue 16 item 4) -
# bench_audit --once (4k, head dim 128; per mask the variants in turn: 0 no audit, 1 the
# kernels hash their rows, 2 + the digests' tree from those leaves, 3 digests from memory)
# under ncu, each kernel launch's duration, so the backward's kernels with and without
# their leaf hashing can be compared kernel by kernel.
L=${LIMIT:-200}
. "$(dirname "$0")/common.sh"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout $((L - 20)) $ncu --metrics gpu__time_duration.sum,launch__registers_per_thread --csv \
  .gpu/bin/bench_audit --once --seqlen 4096 --hdim 128 > $W/ncu.csv 2> $W/ncu.err; T "ncu rc $?"
python3 - $W/ncu.csv > $OUT/summary.txt <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; i = {k: hdr.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
for r in rows[1:]:
    print(r[i["ID"]], r[i["Kernel Name"]][:70], r[i["Metric Name"]], r[i["Metric Value"]])
PY
cat $W/times.txt >> $OUT/summary.txt; tail -3 $W/ncu.err >> $OUT/summary.txt
tar czf $OUT/call32.tgz -C $W .
cat $OUT/summary.txt
