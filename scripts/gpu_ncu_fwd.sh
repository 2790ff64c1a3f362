#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# gpu_ncu_fwd.sh - on the GPU machine (device tool, carrying .gpu): Nsight Compute on the
# v2 forward (attn_fwd_tc) at seqlen 4k, hdim 64 and 128: throughput, occupancy, pipe
# use and the stall reasons per issued instruction. One log per shape under $OUT; the
# summary lines are printed. bench/results/gpu-fwd-profile-2026-11-29.md reads one run.
#   bash scripts/gpu_ncu_fwd.sh ["D,S,MASK ..."]
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
[ -d "$root/.gpu/lib" ] && export LD_LIBRARY_PATH=$root/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=${BIN:-$( [ -x "$root/.gpu/bin/bench_gpu" ] && echo "$root/.gpu/bin" || echo "$root/build" )}
OUT=${OUT:-/tmp}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
echo "ncu: $NCU"
for shape in ${1:-64,4096,full 128,4096,full 64,4096,causal}; do
  log=$OUT/ncu-fwd-${shape//,/-}.txt
  timeout 120 $NCU -k regex:attn_fwd_tc --launch-count 1 --launch-skip 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats --metrics smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio,smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_misc_per_issue_active.ratio,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio,smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active \
    $B/bench_gpu --reps 2 --only $shape,atomic > "$log" 2>&1
  echo "== $shape rc $?"
  grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issue Slots Busy|Issued Ipc|No Eligible|Warp Cycles Per Issued|Stall|Executed Ipc|Block Limit|pipe|Pipe" "$log" | head -40
  grep -E "stalled|pipe_" "$log" | awk '{print $1, $NF}' | head -30
done
