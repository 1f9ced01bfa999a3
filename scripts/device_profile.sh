#!/usr/bin/env bash
# ncu on the GPU machine (clocks left alone: --clock-control none), after a pip install of the
# package: one launch of the kernels matching KERNEL (a regex) in each command line of PROFILE
# (';'-separated python3 commands, default one decode step), speed of light, occupancy, warp
# stalls and the source lines that stall most. Logs to $OUT/profile-N.txt.
#   KERNEL=decode_mma PROFILE="tools/profile/decode_step.py --batch 64" bash scripts/device_profile.sh
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
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    python3 $cmd > "$out/profile-$n.txt" 2>&1
  echo "== profile $n ($cmd): rc=$?"
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issued Warp|No Eligible|Dynamic Shared" "$out/profile-$n.txt" | head -40
  # The stall reasons above 0.1 cycles per issued instruction, largest first.
  grep -E "issue_stalled_.*ratio" "$out/profile-$n.txt" | awk '$NF + 0 > 0.1' | sort -k3 -gr |
    head -8
done
