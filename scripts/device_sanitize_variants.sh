#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the variant kernels: every GPU backend
# through `flashattn verify` with a window, softcap, ALiBi, sinks and varlen together, on odd
# lengths, in bf16 (fp32 for the CUDA-core backends too). Needs build-device/ (device_run.sh
# build). Writes $OUT/sanitize-variants.log and prints one line per run.
set -uo pipefail
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
cli=build-device/tools/flashattn/flashattn
log="$out/sanitize-variants.log"
: > "$log"
shapes=("--dtype bf16 --head-dim 64 --window 32,0 --softcap 30 --alibi heads --sinks --causal --batch 1 --seqlen-q 113 --seqlen-k 203"
        "--dtype bf16 --head-dim 128 --varlen 17,0,90 --varlen-k 33,5,0 --window 8,-1 --sinks"
        "--dtype fp16 --head-dim 256 --window 16,16 --alibi batch-heads --batch 2 --seqlen-q 77 --seqlen-k 77")
pass=0; runs=0
for backend in flash-sm80 flash naive; do
  for tool in memcheck racecheck synccheck; do
    for args in "${shapes[@]}"; do
      [ $tool != memcheck ] && [ "$args" != "${shapes[0]}" ] && continue
      runs=$((runs + 1))
      compute-sanitizer --tool $tool --error-exitcode 9 "$cli" verify --device cuda \
        --backend $backend --heads 2 --kv-heads 1 $args >> "$log" 2>&1
      rc=$?
      echo "== $tool $backend $args: rc=$rc" >> "$log"
      [ $rc -eq 0 ] && pass=$((pass + 1)) || echo "FAILED: $tool $backend $args rc=$rc"
    done
  done
done
echo "sanitizer (variants): $pass of $runs clean"
