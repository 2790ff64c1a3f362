#!/usr/bin/env bash
# call 54 (second session of 2026-12-07): call 53 cut to what ~3 minutes allow, after a
# refused start left too little device time - main after the adoptions: gpu_attn (both
# lap trials' tests; the merged kernels are the trials' machine code, checked by cuobjdump),
# gpu_audit three times (the flip test now waits for its own copies), then
# gpu_attn_fwd while time lasts. Carry: .gpu/bin .gpu/bin.what .gpu/lib
L=${LIMIT:-170}
. "$(dirname "$0")/common.sh"
LT=$(( L - 15 ))
export SUITE_TIMEOUT=$((LT - 5))
lane n1 MAIN_CHECKS=gpu_attn CHECKS=none TRIALS=none AB_TRIALS=none OUT=$W/n1 timeout $LT bash scripts/gpu_trials.sh
( for i in 1 2 3; do
    (cd .gpu/bin && DASH_GPU_SUITE=gpu_audit timeout 40 ./test_dash_gpu > $W/audit-$i.log 2>&1)
    echo "gpu_audit run $i rc $?: $(grep -E 'agreed|differed|FAILED|asserts' $W/audit-$i.log | tr -s ' ' | tr '\n' ' ')" >> $W/audit.txt
  done; T "audit done"
  (cd .gpu/bin && DASH_GPU_SUITE=gpu_attn_fwd timeout $((LT - 40)) ./test_dash_gpu > $W/fwd.log 2>&1)
  echo "gpu_attn_fwd rc $?: $(grep -E '^ +(tests|asserts)|FAILED' $W/fwd.log | tr -s ' ' | tr '\n' ' ')" >> $W/audit.txt; T "fwd done" ) &
wait; T "checks done"
{ echo "== n1"; cat $W/n1/trials.log 2>/dev/null; echo "== gpu_audit x3, gpu_attn_fwd"; cat $W/audit.txt; cat $W/times.txt; } > $OUT/summary.txt
tar czf $OUT/call54.tgz -C $W .
cat $OUT/summary.txt
