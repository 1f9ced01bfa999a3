#!/usr/bin/env bash
# ncu on the GPU machine (clocks left alone: --clock-control none), after a pip install of the
# package: one launch of the kernels matching KERNEL (a regex) in each command line of PROFILE
# (';'-separated python3 commands, default one decode step), speed of light, occupancy, warp
# stalls, the pipes' utilization (MUFU is "xu": is a kernel bound by its exponentials?) and the
# source lines that stall most. Logs to $OUT/profile-N.txt.
#   KERNEL=decode_mma PROFILE="tools/profile/decode_step.py --batch 64" bash scripts/device_profile.sh
#   KERNEL=flash_sm90 PROFILE="tools/profile/forward_host.py --head-dim 64 --heads 32 --batch 1 \
#     --seqlen 16384 --steps 3" bash scripts/device_profile.sh
set -uo pipefail
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
python3 -m pip install -q --no-build-isolation --no-deps . > "$out/pip.log" 2>&1 ||
  { echo "pip install failed"; tail -20 "$out/pip.log"; exit 1; }
IFS=';' read -ra cmds <<< "${PROFILE:-tools/profile/decode_step.py}"
n=0
for cmd in "${cmds[@]}"; do
  n=$((n + 1))
  # shellcheck disable=SC2086
  timeout 300 ncu --clock-control none --kernel-name "regex:${KERNEL:-decode}" --launch-skip 2 \
    --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    --section SourceCounters \
    --section ComputeWorkloadAnalysis --section InstructionStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active" \
    python3 $cmd > "$out/profile-$n.txt" 2>&1
  echo "== profile $n ($cmd): rc=$?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issued Warp|No Eligible|Dynamic Shared" "$out/profile-$n.txt" | head -40
  # The stall reasons above 0.1 cycles per issued instruction, largest first.
  grep -E "issue_stalled_.*ratio" "$out/profile-$n.txt" | awk '$NF + 0 > 0.1' | sort -k3 -gr |
    head -8
  # The busiest pipes (instructions and cycles, % of peak), largest first.
  grep -E "sm__(inst_executed_pipe|pipe)_.*pct_of_peak" "$out/profile-$n.txt" |
    awk '$NF + 0 > 5' | sort -k3 -gr | head -10
  grep -E "Issue Slots Busy|Executed Ipc Active" "$out/profile-$n.txt" | head -4
done
