#!/usr/bin/env bash
# ncu on the GPU machine, our kernel beside the peer's on the same shape (clocks left alone:
# --clock-control none; ncu flushes the caches before each pass, so both start from a cold L2):
# duration, SM clock, launch shape, DRAM bytes and throughput, L2 hit rate, the pipes'
# utilization (the tensor pipe: gmma) and the stall reasons per issued instruction. Ours runs
# from the CLI benchmark of a fresh CMake build (no pip install), the peer from
# tools/profile/peer_sdpa.py (torch only); a decode pair needs the Python package
# (DECODE=1: a pip install for sm_90a only, then tools/profile/decode_step.py).
#   bash scripts/device_ncu_pairs.sh          # logs and ncu-summary.txt under $OUT
# CELLS (';'-separated "name|CLI bench flags|peer_sdpa.py flags") overrides the default cells.
set -uo pipefail
source scripts/env.sh 2>/dev/null
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
summary="$out/ncu-summary.txt"
: > "$summary"
cmake -S . -B build-ncu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_BUILD_TESTS=OFF \
  -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_CUDA_ARCHS=90a > "$out/ncu-build.log" 2>&1 &&
  ninja -C build-ncu -j"$(nproc)" >> "$out/ncu-build.log" 2>&1 ||
  { tail -30 "$out/ncu-build.log"; exit 1; }
cli=build-ncu/tools/flashattn/flashattn
metrics="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,launch__grid_size"
metrics+=",launch__block_size,launch__registers_per_thread,dram__bytes_read.sum"
metrics+=",dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed"
metrics+=",lts__t_sector_hit_rate.pct,lts__t_bytes.sum,smsp__issue_active.avg.pct_of_peak_sustained_active"
metrics+=",regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active"
metrics+=",regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
profile() {  # name kernel-regex skip count command...
  local name=$1 kernel=$2 skip=$3 count=$4
  shift 4
  timeout 240 ncu --clock-control none --kernel-name "regex:$kernel" --launch-skip "$skip" \
    --launch-count "$count" --metrics "$metrics" "$@" > "$out/ncu-$name.txt" 2>&1
  echo "== $name: rc=$?" >> "$summary"
  # The kernel's name line, then every metric but the stalls under 0.1 and idle pipes (< 2%).
  awk '/^  [A-Za-z_].*\(/ && !/==/ {print substr($0, 1, 110)}
       /^    [a-z]/ {v = $NF + 0; if ($1 ~ /stalled|pipe_/ && v < ($1 ~ /stalled/ ? 0.1 : 2)) next;
                      print}' "$out/ncu-$name.txt" >> "$summary"
}
default_cells="d128-512|--batch 32 --heads 16 --head-dim 128 --seqlens 512|--batch 32 --heads 16 --head-dim 128 --seqlen-q 512"
default_cells+=";d64-512|--batch 32 --heads 32 --head-dim 64 --seqlens 512|--batch 32 --heads 32 --head-dim 64 --seqlen-q 512"
default_cells+=";d128-16k|--batch 1 --heads 16 --head-dim 128 --seqlens 16384|--batch 1 --heads 16 --head-dim 128 --seqlen-q 16384"
IFS=';' read -ra cells <<< "${CELLS:-$default_cells}"
for cell in "${cells[@]}"; do
  IFS='|' read -r name ours peer <<< "$cell"
  # shellcheck disable=SC2086
  profile "$name-ours" flash_sm90_kernel 3 1 "$cli" bench --backends flash-sm90 --max-seconds 5 $ours
  # shellcheck disable=SC2086
  profile "$name-cudnn" "sdpa|fprop|cudnn|fmha" 2 1 python3 tools/profile/peer_sdpa.py \
    --backend cudnn --steps 4 $peer
done
if [ "${DECODE:-0}" = 1 ]; then
  python3 -m pip install -q --no-build-isolation --no-deps \
    -C cmake.define.FLASHATTN_CUDA_ARCHS=90a . > "$out/pip.log" 2>&1 ||
    { echo "pip install failed" >> "$summary"; tail -20 "$out/pip.log"; }
  profile decode-b1-8k-ours "decode" 3 4 python3 tools/profile/decode_step.py --batch 1 \
    --cache-len 8192 --steps 4
  profile decode-b1-8k-cudnn "sdpa|fprop|cudnn|fmha" 2 1 python3 tools/profile/peer_sdpa.py \
    --backend cudnn --steps 4 --batch 1 --heads 32 --kv-heads 8 --seqlen-q 1 --seqlen-k 8192
fi
cat "$summary"
