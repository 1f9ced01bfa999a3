#!/usr/bin/env bash
# Set up and run the main job: install what is missing, build, then `flashattn info`, a
# verification and a short benchmark. Without a GPU this runs the CPU backends and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/install_deps.sh
# Every option given (scripts/env.sh says why): test.sh reuses this build dir, tests turned on.
flashattn_configure "$FLASHATTN_BUILD_DIR" quickstart >/dev/null
cmake --build "$FLASHATTN_BUILD_DIR" -j "$FLASHATTN_JOBS"
cli="$FLASHATTN_BUILD_DIR/tools/flashattn/flashattn"
echo; echo "== flashattn info"; "$cli" info
if "$cli" info | grep -q "^CUDA devices: none"; then
  echo; echo "No CUDA device here: running the CPU backends (cpu-flash against cpu-reference)."
  echo; echo "== flashattn verify --device cpu"
  "$cli" verify --device cpu --backend cpu-flash --dtype bf16 --batch 2 --heads 4 --kv-heads 2 \
    --seqlen-q 113 --seqlen-k 203 --head-dim 64 --causal
  echo; echo "== flashattn bench --device cpu"
  "$cli" bench --device cpu --seqlens 128,256,512
else
  echo; echo "== flashattn verify --device cuda"
  "$cli" verify --device cuda --backend flash --dtype bf16 --batch 2 --heads 8 --kv-heads 2 \
    --seqlen-q 1023 --seqlen-k 1025 --head-dim 128 --causal
  echo; echo "== flashattn bench --device cuda"
  "$cli" bench --device cuda --seqlens 512,1024,2048,4096
fi
