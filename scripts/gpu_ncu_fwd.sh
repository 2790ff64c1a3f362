#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_ncu_fwd.sh - on the GPU machine (device tool, carrying .gpu): Nsight Compute on one
# launch of a kernel per shape (bench_gpu --only): time, occupancy and launch figures, the
# tensor pipe including Hopper's wgmma (the hgmma-inclusive metric: the plain hmma one
# does not count wgmma), wgmma instructions and shared-memory wavefronts, spill refills,
# issue activity and every stall reason per issued instruction. One log per shape under
# $OUT; the headline lines are printed. The default is v3's forward (attn_fwd_wg, sm_90);
# KERNEL=attn_fwd_tc profiled v2's for bench/results/gpu-fwd-profile-2026-11-29.md, and
# KERNEL=attn_bwd_tc_persistent SCHED=shift the backward as in
# ../shared/anchors/ncu-v3-bwd-a793688-2026-12-01. ncu locks the SM clock (1.35 GHz on
# the H200): compare ratios between logs, not durations with bench runs.
#   bash scripts/gpu_ncu_fwd.sh ["D,S,MASK ..."]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$root/.gpu/lib" ] && export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=${BIN:-$( [ -x "$root/.gpu/bin/bench_gpu" ] && echo "$root/.gpu/bin" || echo "$root/build" )}
OUT=${OUT:-/tmp}
KERNEL=${KERNEL:-attn_fwd_wg}
SCHED=${SCHED:-atomic}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
echo "ncu: $NCU, kernel regex $KERNEL"
stalls=""
for s in barrier branch_resolving dispatch_stall gmma lg_throttle long_scoreboard \
         math_pipe_throttle membar mio_throttle no_instruction not_selected selected \
         short_scoreboard sleeping wait misc drain imc_miss tex_throttle; do
  stalls+="smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio,"
done
metrics="${stalls}gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
metrics+=",sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active"
metrics+=",sm__inst_executed_pipe_tensor_op_gmma.sum,sm__sass_inst_executed_op_local_ld.sum"
metrics+=",l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed"
metrics+=",l1tex__data_pipe_lsu_wavefronts_mem_shared_op_gmma.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
metrics+=",sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"
metrics+=",sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed"
for shape in ${1:-64,4096,full 128,4096,full 64,4096,causal 128,4096,causal}; do
  log=$OUT/ncu-${KERNEL}-${shape//,/-}.txt
  timeout 180 "$NCU" -k regex:"$KERNEL" --launch-count 1 --launch-skip 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --metrics "$metrics" \
    "$B/bench_gpu" --reps 2 --only "$shape,$SCHED" > "$log" 2>&1
  echo "== $shape rc $?"
  grep -E "Duration|Registers Per|Achieved Occupancy|hgmma_qgmma|issue_active|local_ld|mem_shared.sum.pct" "$log" |
    awk '{print $1, $NF}' | head -12
  grep -E "stalled" "$log" | awk '$NF + 0 >= 0.05 {print $1, $NF}' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
