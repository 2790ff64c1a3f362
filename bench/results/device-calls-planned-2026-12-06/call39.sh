#!/usr/bin/env bash
# call 39 (seventh session of 2026-12-06, the last ~250 s of device time): call 37 at its
# smallest - trial auditall's gpu_attn and gpu_audit + gpu_digest and main's gpu_attn in
# lanes (80 s), then bench_audit at 4k head dim 128 with main and auditall taking turns.
L=${LIMIT:-150}
. "$(dirname "$0")/common.sh"
export SUITE_TIMEOUT=75
lane m-gpu_attn MAIN_CHECKS=gpu_attn CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/m-gpu_attn timeout 80 bash scripts/gpu_trials.sh
lane t-auditall1 MAIN_CHECKS= CHECKS="gpu_attn" TRIALS=auditall AB_TRIALS=none OUT=$W/t-auditall1 timeout 80 bash scripts/gpu_trials.sh
lane t-auditall2 MAIN_CHECKS= CHECKS="gpu_audit gpu_digest" TRIALS=auditall AB_TRIALS=none OUT=$W/t-auditall2 timeout 80 bash scripts/gpu_trials.sh
wait; T "lanes done"
{ cat $W/times.txt; for d in $W/m-* $W/t-*; do echo "== ${d##*/}"; cat $d/trials.log 2>/dev/null; done; } > $OUT/summary.txt
for r in 1 2 3 4; do
  for b in main=.gpu/bin auditall=.gpu/trial-auditall; do
    before $((L - 20)) || break 2
    echo "== ${b%%=*} run $r" >> $W/audit.txt
    timeout 30 ${b#*=}/bench_audit --seqlen 4096 --hdim 128 2>&1 | grep -E "^\| (full|causal)" >> $W/audit.txt
  done
done
T "audit done"
{ cat $W/audit.txt; tail -3 $W/times.txt; } >> $OUT/summary.txt
tar czf $OUT/call39.tgz -C $W .
cat $OUT/summary.txt
