#!/usr/bin/env bash
# One call on the GPU machine for the flash-sm90 work: build, a first smoke run of the kernel
# (each under a timeout: a wrong mbarrier count traps after ~1 s rather than hanging), the sm90
# tests (primitives and every flash-sm90 case of the GPU grids), then optional stages.
#   bash scripts/device_sm90.sh [STAGES]
# STAGES: comma-separated from build,smoke,test,gtest,alltest,tune,sanitize,decodecheck,decode,
# bench, variants (default build,smoke,test). build takes ARCHS (FLASHATTN_CUDA_ARCHS, e.g. 90a)
# and TARGETS (ninja targets, e.g. "flashattn_cli cuda_gpu_backends_test") for a quicker build;
# gtest runs the GPU test binaries that were built (cuda_gpu_*_test) directly, their cases
# matching GTEST_FILTER (default *sm90*: every flash-sm90 case). test runs the ctest names
# matching TEST_FILTER (default the sm90 ones); tune runs tools/tune_sm90 (TUNE_SEQLENS, default 4096 16384; TUNE_HEAD_DIMS="64" for
# some head dims only); decode runs flash-decode's tests
# under compute-sanitizer and the decode benchmark (scripts/device_python.sh install,decode with
# DECODE_ARGS); decodecheck runs only the sanitizer part.
# bench runs the Python side-by-side benchmark (BENCH_ARGS; JSON and plot), variants its variant
# table (VARIANTS_ARGS, e.g. "--backends flash-sm90 --head-dims 128 --seqlens 16384"). Results go
# to $OUT (or ./device-out); the logs are packed into logs.tgz at the end (the device tool returns
# at most 8 files). Prepare the carried GoogleTest first: scripts/prepare_device.sh.
set -uo pipefail
source scripts/env.sh 2>/dev/null  # nvcc on PATH (the pip builds)
export CMAKE_BUILD_PARALLEL_LEVEL=$(nproc)
stages=${1:-build,smoke,test}
has() { [[ ",$stages," == *",$1,"* ]]; }
source "$(dirname "$0")/device_log.sh"  # out, summary, note, gtest_src
cli=${CLI:-build-device/tools/flashattn/flashattn}  # CLI=...: another build's (smoke)

if has build; then
  start=$(date +%s)
  rm -rf build-device
  # shellcheck disable=SC2086
  cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_WERROR=ON \
    -DFLASHATTN_BUILD_TUNING=$(has tune && echo ON || echo OFF) \
    ${ARCHS:+-DFLASHATTN_CUDA_ARCHS=$ARCHS} \
    -DCMAKE_CUDA_FLAGS="-Xptxas=-v" $gtest_src > "$out/build.log" 2>&1 &&
    ninja -C build-device -j"$(nproc)" ${TARGETS:-} >> "$out/build.log" 2>&1
  rc=$?
  note "build: rc=$rc in $(( $(date +%s) - start )) s"
  [ $rc -eq 0 ] || { tail -40 "$out/build.log"; exit 1; }
fi

# One small case per head dim and dtype, causal and not, then odd lengths and GQA.
if has smoke; then
  : > "$out/smoke.log"
  pass=0; runs=0
  smoke() {
    runs=$((runs + 1))
    if timeout 60 "$cli" verify --device cuda --backend flash-sm90 "$@" >> "$out/smoke.log" 2>&1; then
      pass=$((pass + 1))
    else
      echo "FAILED (rc=$?): $*" | tee -a "$out/smoke.log"
    fi
  }
  smoke --dtype bf16 --head-dim 128 --batch 1 --heads 1 --seqlen-q 128 --seqlen-k 128
  for d in 64 96 128 192 256; do
    for dt in bf16 fp16; do
      smoke --dtype $dt --head-dim $d --batch 2 --heads 4 --kv-heads 2 --seqlen-q 1023 --seqlen-k 1537
      smoke --dtype $dt --head-dim $d --batch 2 --heads 4 --kv-heads 2 --seqlen-q 1023 --seqlen-k 1537 --causal
    done
  done
  smoke --dtype bf16 --head-dim 128 --batch 2 --heads 4 --seqlen-q 300 --seqlen-k 4000 --window 256,0
  smoke --dtype bf16 --head-dim 128 --batch 2 --heads 4 --seqlen-q 300 --seqlen-k 700 --softcap 30
  smoke --dtype bf16 --head-dim 128 --batch 2 --heads 4 --seqlen-q 300 --seqlen-k 700 --alibi heads --sinks
  smoke --dtype bf16 --head-dim 128 --batch 5 --heads 4 --seqlen-q 300 --seqlen-k 700 --varlen random --causal
  note "smoke: $pass of $runs passed"
fi

if has test || has alltest; then
  start=$(date +%s)
  filter=${TEST_FILTER:-sm90|Sm90}
  has alltest && filter='.'
  ctest --test-dir build-device -j8 --output-on-failure --no-tests=error --timeout 300 \
    -R "$filter" -E '[.]Full[A-Za-z]*/' > "$out/ctest.log" 2>&1
  note "ctest -R '$filter' (quick): rc=$? in $(( $(date +%s) - start )) s"
  grep -E "tests passed|tests failed" "$out/ctest.log" | tail -2 | tee -a "$summary"
  grep -E "\(Failed\)|\(Timeout\)|\(SEGFAULT\)|Not Run|Exception" "$out/ctest.log" | head -40 |
    tee -a "$summary"
fi

if has gtest; then
  start=$(date +%s)
  : > "$out/gtest.log"
  for bin in build-device/tests/cuda_gpu_*_test; do
    [ -x "$bin" ] || continue
    timeout 300 "$bin" --gtest_filter="${GTEST_FILTER:-*sm90*}" --gtest_brief=1 >> "$out/gtest.log" 2>&1
    note "$(basename "$bin") ${GTEST_FILTER:-*sm90*}: rc=$? $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' "$out/gtest.log" | tail -2 | tr '\n' ' ')"
  done
  grep -E "^\[  FAILED  \] [A-Z]" "$out/gtest.log" | head -20 >> "$summary"
  note "gtest: $(( $(date +%s) - start )) s"
fi

if has tune; then
  start=$(date +%s)
  build-device/tools/tune_sm90/tune_sm90 ${TUNE_SEQLENS:-4096 16384} > "$out/tune.txt" 2>&1
  note "tune: rc=$? in $(( $(date +%s) - start )) s"
  cat "$out/tune.txt"
fi

if has sanitize; then
  start=$(date +%s)
  # Small problems (about one work tile per block) through each variant, then several work
  # tiles per block (the grid is at most one block per SM; 240 tiles): the persistent loop's Q
  # rounds and ring hand-over under the static deal (dense) and the counter (causal; varlen with
  # rows past a sequence's end and a window leaving rows without keys). At batch 9 x 32 heads,
  # racecheck took 160 s on the first of those alone.
  small="--batch 2 --heads 2 --kv-heads 1"
  many="--batch 3 --heads 16 --kv-heads 4"
  cases=("$small --head-dim 128 --dtype bf16 --seqlen-q 203 --seqlen-k 339 --causal"
         "$small --head-dim 96 --dtype fp16 --seqlen-q 129 --seqlen-k 257 --varlen random"
         "$small --head-dim 192 --dtype bf16 --seqlen-q 113 --seqlen-k 203 --window 64,8
           --softcap 20"
         "$many --head-dim 64 --dtype bf16 --seqlen-q 600 --seqlen-k 700"
         "$many --head-dim 128 --dtype fp16 --seqlen-q 520 --seqlen-k 520 --causal"
         "$many --head-dim 64 --dtype bf16 --seqlen-q 300 --seqlen-k 300 --varlen random
           --window 0,-1 --sinks")
  for tool in memcheck racecheck synccheck; do
    for args in "${cases[@]}"; do
      # shellcheck disable=SC2086
      timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$cli" verify --device cuda \
        --backend flash-sm90 $args >> "$out/sanitizer.log" 2>&1
      rc=$?
      echo "== $tool $(echo $args): rc=$rc" >> "$out/sanitizer.log"
      [ $rc -eq 0 ] || note "sanitizer FAILED: $tool $(echo $args) rc=$rc"
    done
  done
  note "sanitizer: $(grep -c 'rc=0$' "$out/sanitizer.log") of $(grep -c '^== ' "$out/sanitizer.log") clean in $(( $(date +%s) - start )) s"
fi

if has decode || has decodecheck; then
  start=$(date +%s)
  kv_test=build-device/tests/cuda_gpu_kv_cache_test
  for tool in memcheck racecheck synccheck; do
    timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 "$kv_test" \
      --gtest_filter='*paged64*:*splits7*:*d256*:*d40*:*window_softcap*:*rows_without*:*append16*:*nan_workspace*:GpuCombine*' \
      >> "$out/decode-sanitizer.log" 2>&1
    rc=$?
    echo "== $tool: rc=$rc" >> "$out/decode-sanitizer.log"
    [ $rc -eq 0 ] || note "decode sanitizer FAILED: $tool rc=$rc"
  done
  note "decode sanitizer: $(grep -c 'rc=0$' "$out/decode-sanitizer.log") of 3 clean in $(( $(date +%s) - start )) s"
fi
if has decode; then
  # The benchmark itself: device_python.sh's install and decode stages, into the same $OUT.
  # shellcheck disable=SC2086
  OUT="$out" bash scripts/device_python.sh install,decode ${DECODE_ARGS:-}
fi

if has bench; then
  start=$(date +%s)
  python3 -m pip install -q --no-build-isolation --no-deps . > "$out/pip.log" 2>&1 ||
    { note "pip install failed"; tail -20 "$out/pip.log"; }
  # shellcheck disable=SC2086
  (cd /tmp && timeout ${BENCH_TIMEOUT:-400} python3 -m flashattn.bench ${BENCH_ARGS:-} \
    --json "$out/bench.json" --plot "$out/bench.png") > "$out/bench.txt" 2> "$out/bench.err"
  note "bench: rc=$? in $(( $(date +%s) - start )) s"
  cat "$out/bench.txt"
fi

if has variants; then
  start=$(date +%s)
  has bench || python3 -m pip install -q --no-build-isolation --no-deps . > "$out/pip.log" 2>&1 ||
    { note "pip install failed"; tail -20 "$out/pip.log"; }
  # shellcheck disable=SC2086
  (cd /tmp && timeout ${VARIANTS_TIMEOUT:-300} python3 -m flashattn.bench --variants \
    ${VARIANTS_ARGS:-} --json "$out/variants.json") > "$out/variants.txt" 2> "$out/variants.err"
  note "variants: rc=$? in $(( $(date +%s) - start )) s"
  cat "$out/variants.txt"
fi
(cd "$out" && ls ./*.log ./*.err > /dev/null 2>&1 && tar -czf logs.tgz ./*.log ./*.err &&
  rm -f ./*.log ./*.err)
echo; cat "$summary"
