#!/usr/bin/env bash
# One call on the GPU machine for a flash-decode change: its GPU tests (the kv-cache test binary
# alone, sm_90a, built from this tree), memcheck on the paged and split cases, then the same-call
# A/B of the decode benchmark against other trees (scripts/device_decode_ab.sh) and each tree's
# kernel timeline at batch 1 x 8k (tools/profile/decode_step.py --timeline: each kernel's median
# duration inside a CUDA-graph replay). Prepare first: scripts/prepare_device.sh REV (GoogleTest
# and the trees), carry .device.
#   AB_TREES="main=.device/trees/main new=." [DECODE_ARGS=...] bash scripts/device_decode_check.sh [ROUNDS]
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh 2>/dev/null
source "$(dirname "$0")/device_log.sh"  # out, summary, note, gtest_src

start=$(date +%s)
rm -rf build-decode
cmake -S . -B build-decode -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_WERROR=ON \
  -DFLASHATTN_CUDA_ARCHS=90a -DFLASHATTN_BUILD_PYTHON=OFF $gtest_src > "$out/build.log" 2>&1 &&
  ninja -C build-decode -j"$(nproc)" cuda_gpu_kv_cache_test >> "$out/build.log" 2>&1
rc=$?
note "build: rc=$rc in $(( $(date +%s) - start )) s"
[ $rc -eq 0 ] || { tail -40 "$out/build.log"; exit 1; }
kv_test=build-decode/tests/cuda_gpu_kv_cache_test
start=$(date +%s)
timeout 300 "$kv_test" > "$out/kv-test.log" 2>&1
note "kv-cache tests: rc=$? in $(( $(date +%s) - start )) s; $(grep -E '^\[  PASSED|^\[  FAILED' "$out/kv-test.log" | tr '\n' ' ')"
grep -E "^\[  FAILED" "$out/kv-test.log" | head -20 >> "$summary"
start=$(date +%s)
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$kv_test" \
  --gtest_filter='*paged*:*splits7*:*d256*:*d40*:*append16*:*nan_workspace*' \
  > "$out/kv-memcheck.log" 2>&1
note "memcheck (paged, splits, d256, d40, append): rc=$? in $(( $(date +%s) - start )) s"

OUT="$out" bash scripts/device_decode_ab.sh "${1:-2}" > "$out/ab.log" 2>&1
note "decode A/B: rc=$?"
cat "$out/decode-ab-summary.txt" >> "$summary" 2>/dev/null

for spec in ${AB_TREES:?}; do
  name=${spec%%=*}
  for page in 0 64; do
    (cd tools/profile && PYTHONPATH="$PWD/../../build-decode-ab/$name" timeout 60 python3 \
      decode_step.py --batch 1 --cache-len 8192 --page "$page" --steps 30 --timeline) \
      > "$out/timeline-$name-page$page.txt" 2>&1
    { echo "== timeline $name page $page (batch 1 x 8k)"; tail -8 "$out/timeline-$name-page$page.txt"; } >> "$summary"
  done
done
cat "$summary"
