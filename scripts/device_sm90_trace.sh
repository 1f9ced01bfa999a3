#!/usr/bin/env bash
# Where a flash-sm90 work tile's time goes, per phase of consume(): the Python package built with
# -DFLASHATTN_SM90_TRACE (sm_90a, into build-sm90-trace/; src/cuda/sm90/sm90_trace.cuh), then
# each cell run a few times (tools/profile/sm90_trace.py run) and its phase table (report). The
# trace build's dense N176 kernels spill 8 bytes (ptxas), the others none. Run on the GPU machine.
#   [SM90_TRACE_CELLS="--seqlen 512 --batch 32;--seqlen 16384 --batch 1"] bash scripts/device_sm90_trace.sh
# Output: $OUT/sm90-trace-N.txt (raw lines) and $OUT/sm90-trace-report.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh 2>/dev/null
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
py=${PYTHON:-python3}
repo=$PWD
start=$(date +%s)
rm -rf build-sm90-trace
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$py" -m pip install --no-build-isolation --no-deps \
  --target build-sm90-trace -C cmake.define.FLASHATTN_CUDA_ARCHS=90a \
  -C "cmake.define.CMAKE_CUDA_FLAGS=-DFLASHATTN_SM90_TRACE" . > "$out/build-sm90-trace.log" 2>&1 ||
  { echo "trace build failed"; tail -30 "$out/build-sm90-trace.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
: > "$out/sm90-trace-report.txt"
default="--seqlen 512 --batch 32;--seqlen 16384 --batch 1;--seqlen 16384 --batch 1 --window 1024,0;--seqlen 512 --batch 32 --head-dim 64 --heads 32"
IFS=';' read -ra cells <<< "${SM90_TRACE_CELLS:-$default}"
n=0
for cell in "${cells[@]}"; do
  n=$((n + 1))
  # shellcheck disable=SC2086
  (cd tools/profile && PYTHONPATH="$repo/build-sm90-trace" timeout 60 "$py" sm90_trace.py run \
    $cell) > "$out/sm90-trace-$n.txt" 2>&1
  {
    echo "== $n: $cell"
    "$py" tools/profile/sm90_trace.py report < "$out/sm90-trace-$n.txt"
    echo
  } >> "$out/sm90-trace-report.txt"
done
cat "$out/sm90-trace-report.txt"
