#!/usr/bin/env bash
# One call on the GPU machine: build (every kernel, warnings as errors), run the GPU tests, the
# CLI verification matrix, compute-sanitizer on small odd shapes, and the benchmark. Logs go to
# $OUT (or ./device-out). Prepare the carried GoogleTest sources first: scripts/prepare_device.sh.
#   bash scripts/device_run.sh [STAGES] [bench args...]
# STAGES: comma-separated from build,test,fulltest,tune,verify,sanitize,bench
# (default: all but fulltest and tune).
set -uo pipefail
stages=${1:-build,test,verify,sanitize,bench}; shift || true
has() { [[ ",$stages," == *",$1,"* ]]; }
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
jobs=$(nproc)
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv \
  > "$out/nvidia-smi.txt" 2>&1
gtest_src=""
[ -d .device/googletest ] && gtest_src="-DFLASHATTN_GTEST_SOURCE_DIR=$PWD/.device/googletest"

if has build; then
start=$(date +%s)
# Always from scratch: the copied tree keeps this machine's file times, which can be older than
# objects left by a previous call, and ninja would then keep stale kernels.
rm -rf build-device
cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_WERROR=ON \
  -DFLASHATTN_BUILD_TUNING=ON \
  -DCMAKE_CUDA_FLAGS="-Xptxas=-v" $gtest_src > "$out/build.log" 2>&1 &&
  ninja -C build-device -j"$jobs" >> "$out/build.log" 2>&1
rc=$?
note "build: rc=$rc in $(( $(date +%s) - start )) s"
[ $rc -eq 0 ] || { tail -40 "$out/build.log"; exit 1; }
grep -E "spill stores|Used [0-9]+ registers" "$out/build.log" | sort | uniq -c | sort -rn | head -5 >> "$summary"
# Registers of the flash-sm80 kernels as built (library instantiations, sm_90a).
grep -A2 "Compiling entry function '_ZN9flashattn4cuda17flash_sm80_kernel.*sm_90a" "$out/build.log" |
  grep -oE "Sm80ConfigILi[0-9]+ELi[0-9]+ELi[0-9]+|Used [0-9]+ registers|[0-9]+ bytes spill stores" |
  paste -d' ' - - - | sort -u > "$out/sm80_registers.txt"
fi

# The tile-shape tuner: every candidate of tools/tune_sm80 on FlashAttention's grid.
if has tune; then
start=$(date +%s)
build-device/tools/tune_sm80/tune_sm80 ${TUNE_SEQLENS:-1024 4096 16384} > "$out/tune.txt" 2>&1
note "tune: rc=$? in $(( $(date +%s) - start )) s"
fi

cli=build-device/tools/flashattn/flashattn
"$cli" info > "$out/info.txt" 2>&1

if has test || has fulltest; then
start=$(date +%s)
exclude=(-E '[.]Full[A-Za-z]*/')
tier=quick
has fulltest && { exclude=(); tier=full; }
ctest --test-dir build-device -j8 --output-on-failure --no-tests=error --timeout 900 \
  "${exclude[@]}" > "$out/ctest.log" 2>&1
note "ctest ($tier): rc=$? in $(( $(date +%s) - start )) s"
grep -E "tests passed|tests failed|Skipped|Total Test time" "$out/ctest.log" | tail -4 | tee -a "$summary"
grep -E "\*\*\*Failed|\(Failed\)|Not Run" "$out/ctest.log" | head -20 | tee -a "$summary"
fi

# The CLI verification matrix: bf16/fp16/fp32, causal and not, odd lengths, head dims 64/128/256.
if has verify; then
start=$(date +%s)
fails=0; runs=0
for backend in flash-sm80 flash naive; do
  for dtype in bf16 fp16 fp32; do
    [ $backend = flash-sm80 ] && [ $dtype = fp32 ] && continue
    for d in 64 128 256; do
      for causal in "" "--causal"; do
        runs=$((runs + 1))
        if ! "$cli" verify --device cuda --backend $backend --dtype $dtype --head-dim $d $causal \
             --batch 2 --heads 6 --kv-heads 2 --seqlen-q 1023 --seqlen-k 1537 --seed $runs \
             >> "$out/verify.log" 2>&1; then
          fails=$((fails + 1)); echo "FAILED: $backend $dtype d$d $causal" >> "$out/verify.log"
        fi
      done
    done
  done
done
# Scaled scores near 1e10 (finite in float32) through every GPU backend and dtype.
for backend in flash-sm80 flash naive; do
  for dtype in bf16 fp16 fp32; do
    [ $backend = flash-sm80 ] && [ $dtype = fp32 ] && continue
    runs=$((runs + 1))
    if ! "$cli" verify --device cuda --backend $backend --dtype $dtype --head-dim 64 \
         --inputs huge-scores --batch 2 --heads 4 --kv-heads 2 --seqlen-q 1023 --seqlen-k 1537 \
         --seed $runs >> "$out/verify.log" 2>&1; then
      fails=$((fails + 1)); echo "FAILED: $backend $dtype huge-scores" >> "$out/verify.log"
    fi
  done
done
note "cli verify: $((runs - fails)) of $runs passed in $(( $(date +%s) - start )) s"
fi

# compute-sanitizer on small odd shapes: memcheck on three shapes per backend, the other tools on one.
if has sanitize; then
start=$(date +%s)
shapes=("--seqlen-q 113 --seqlen-k 203 --head-dim 72 --dtype bf16 --causal"
        "--seqlen-q 203 --seqlen-k 17 --head-dim 256 --dtype fp16 --causal"
        "--seqlen-q 17 --seqlen-k 113 --head-dim 8 --dtype fp32")
sanitize() {  # tool backend args...
  local tool=$1 backend=$2; shift 2
  compute-sanitizer --tool "$tool" --error-exitcode 9 "$cli" verify --device cuda \
    --backend "$backend" --batch 1 --heads 2 --kv-heads 1 "$@" >> "$out/sanitizer.log" 2>&1
  local rc=$?
  echo "== $tool $backend $*: rc=$rc" >> "$out/sanitizer.log"
  [ $rc -eq 0 ] || note "sanitizer FAILED: $tool $backend $* rc=$rc"
}
for backend in flash naive; do
  for args in "${shapes[@]}"; do sanitize memcheck $backend $args; done
  for tool in racecheck synccheck initcheck; do sanitize $tool $backend ${shapes[0]}; done
done
# flash-sm80: its own head dims and 16-bit types.
shapes=("--seqlen-q 113 --seqlen-k 203 --head-dim 96 --dtype bf16 --causal"
        "--seqlen-q 203 --seqlen-k 17 --head-dim 256 --dtype fp16 --causal"
        "--seqlen-q 17 --seqlen-k 113 --head-dim 64 --dtype fp16"
        "--seqlen-q 129 --seqlen-k 257 --head-dim 192 --dtype bf16")
for args in "${shapes[@]}"; do sanitize memcheck flash-sm80 $args; done
for tool in racecheck synccheck initcheck; do sanitize $tool flash-sm80 ${shapes[0]}; done
note "sanitizer: $(grep -c 'rc=0$' "$out/sanitizer.log") of $(grep -c '^== ' "$out/sanitizer.log") clean in $(( $(date +%s) - start )) s"
fi

# The lesson's table.
if has bench; then
start=$(date +%s)
"$cli" bench --device cuda --csv "$out/bench.csv" "$@" > "$out/bench.txt" 2> "$out/bench.err"
note "bench: rc=$? in $(( $(date +%s) - start )) s"
cat "$out/bench.txt"
fi
echo; cat "$summary"
