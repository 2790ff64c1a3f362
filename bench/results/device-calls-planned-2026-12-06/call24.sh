#!/usr/bin/env bash
# call 24 (2026-12-06, fifth session): main at 2e64dbc as trial "dqstore" (.gpu/trial-dqstore:
# the v3 writer copies a dQ tile's first addition instead of adding it to a zeroed dQacc, no
# memset; treefold adopted) against main's bundle at 805b1fb (.gpu/bin): the trial's gpu_attn,
# gpu_attn_vl, gpu_digest, gpu_audit and its sanitizers in lanes; then, alone, the A/B of
# the backward (every schedule; "det bits" must say same: the bits do not change).
L=${LIMIT:-570}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=200
lane chk CHECKS="gpu_attn gpu_attn_vl gpu_digest gpu_audit" TRIALS=dqstore AB_TRIALS=none OUT=$W/chk timeout 220 bash scripts/gpu_trials.sh
lane san BIN=.gpu/trial-dqstore OUT=$W/san timeout 220 bash scripts/gpu_sanitize.sh
wait; T "lanes done"
{ cat $W/times.txt; cat $W/chk/trials.log 2>/dev/null; echo "== san"; tail -12 $W/lane-san.out; } > $OUT/summary.txt
mkdir -p $W/ab
before $((L - 100)) && OUT=$W/ab REPS=5 timeout $((L - 20 - $(( $(date +%s) - t0 )))) bash scripts/gpu_ab.sh \
  "128,1024,full 128,1024,causal 64,1024,causal 64,1024,full 128,4096,full 128,4096,causal 64,4096,causal 128,16384,causal" \
  main=.gpu/bin/bench_gpu dqstore=.gpu/trial-dqstore/bench_gpu > $W/ab/log.txt 2>&1; T "ab rc $?"
{ grep "^|" $W/ab/ab.md; cat $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call24.tgz -C $W .
head -c 11000 $OUT/summary.txt
