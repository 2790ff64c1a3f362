#!/usr/bin/env bash
# device call 1 (2026-12-04 s2): checks of trials tmastore64 (dK/dV TMA stores, 64+128) and tmastoreovl (fwd O TMA stores, dense+VL)
set -u
for f in .gpu/bin/*.xz .gpu/trial-*/*.xz; do xz -d -f "$f"; done
export LD_LIBRARY_PATH=$PWD/.gpu/lib
mkdir -p $OUT/w/a $OUT/w/b
SECONDS=0
CHECKS="gpu_attn gpu_attn_vl gpu_audit racecheck synccheck audit" TRIALS=tmastore64 AB_TRIALS=none OUT=$OUT/w/a timeout 330 bash scripts/gpu_trials.sh
echo "t=$SECONDS"
CHECKS="gpu_attn_fwd gpu_attn_vl racecheck synccheck" TRIALS=tmastoreovl AB_TRIALS=none OUT=$OUT/w/b timeout $((570-SECONDS)) bash scripts/gpu_trials.sh
echo "t=$SECONDS"
cd $OUT && tar czf w.tgz w && rm -rf w
