#!/usr/bin/env bash
# Where flash-decode's time goes at small batch, on the GPU machine: this tree's Python package
# (sm_90a, pip --target build-decode-sweep), then tools/profile/decode_step.py --timeline (each
# kernel's median inside CUDA-graph replays) over split counts and cache lengths, with and without
# the L2 flush, ncu's launch / occupancy / cycle counters on the attention kernel, and its
# warp-stall samples per SASS instruction ($OUT/decode-sass.csv).
#   bash scripts/device_decode_sweep.sh        # logs and sweep.txt under $OUT
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/device_pip.sh  # pip_sm90a
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
sweep="$out/sweep.txt"
: > "$sweep"
pkg=$PWD/build-decode-sweep
start=$(date +%s)
pip_sm90a "$pkg" . "$out/pip.log" || exit 1
echo "package: $(( $(date +%s) - start )) s" >> "$sweep"
step() {  # decode_step.py arguments
  (cd tools/profile && PYTHONPATH="$pkg" timeout 60 python3 decode_step.py --steps 30 --timeline \
    "$@" 2>&1 | grep -v -i warn | tail -5) >> "$sweep"
}
for splits in 8 16 32 64 128; do step --batch 1 --cache-len 8192 --num-splits "$splits"; done
for splits in 32 128; do step --batch 1 --cache-len 8192 --num-splits "$splits" --flush-mib 1; done
for len in 2048 4096 16384 32768; do step --batch 1 --cache-len "$len"; done
step --batch 1 --cache-len 2048 --num-splits 8
step --batch 8 --cache-len 8192
step --batch 8 --cache-len 8192 --flush-mib 1
metrics="gpu__time_duration.sum,sm__cycles_elapsed.avg,sm__cycles_active.avg,sm__cycles_active.max"
metrics+=",sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_registers"
metrics+=",launch__occupancy_limit_shared_mem,launch__shared_mem_per_block_dynamic"
metrics+=",launch__waves_per_multiprocessor,dram__bytes_read.sum,smsp__inst_executed.sum"
metrics+=",smsp__cycles_active.avg,l1tex__t_bytes_pipe_lsu_mem_global_op_ldgsts.sum"
(cd tools/profile && PYTHONPATH="$pkg" timeout 120 ncu --clock-control none \
  --kernel-name regex:decode_mma_kernel --launch-skip 3 --launch-count 1 --metrics "$metrics" \
  python3 decode_step.py --batch 1 --cache-len 8192 --steps 6) > "$out/ncu-decode.txt" 2>&1
grep -E "^    [a-z]" "$out/ncu-decode.txt" >> "$sweep"
# Warp-stall samples per SASS instruction (the CSV comes back for reading here).
rep=$(mktemp -d)/decode
(cd tools/profile && PYTHONPATH="$pkg" timeout 120 ncu --clock-control none \
  --kernel-name regex:decode_mma_kernel --launch-skip 3 --launch-count 1 \
  --section SourceCounters --section WarpStateStats -o "$rep" \
  python3 decode_step.py --batch 1 --cache-len 8192 --steps 6) > "$out/ncu-source.log" 2>&1
ncu -i "$rep.ncu-rep" --page source --print-source sass --csv > "$out/decode-sass.csv" 2>&1
echo "source counters: $(wc -l < "$out/decode-sass.csv") lines" >> "$sweep"
cat "$sweep"
