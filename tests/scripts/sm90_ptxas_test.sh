#!/usr/bin/env bash
# flash-sm90's kernels must compile for sm_90a with neither register spills nor serialized wgmma:
# ptxas reports the latter only as "ptxas info : (C751x) Potential Performance Loss: wgmma.mma_async
# instructions are serialized ...", which no -Werror turns into an error, and it cost the kernel
# a fifth of its speed twice (docs/performance.md, "flash-sm90" v2: an if / else with the
# producer's branch first, then an exit before setmaxnreg, made ptxas hold the consumers near 180
# registers, spill 250-900 bytes and put a wait after every wgmma). This compiles each head dim's
# translation unit for sm_90a alone (about 10 s each, two at a time) and fails on any such line.
# Without nvcc (CPU-only machines) it says so and passes: there is no sm_90a code to check.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
nvcc=$(command -v nvcc || true)
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then
  echo "sm90_ptxas_test: skipped: no nvcc (CPU-only build)"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
compile() {  # compile SOURCE: ptxas's report into $work/NAME.log
  local name
  name=$(basename "$1" .cu)
  "$nvcc" -DFLASHATTN_HAVE_CUDA_KERNELS=1 -Iinclude -Isrc -O3 -std=c++17 --expt-relaxed-constexpr \
    --generate-code=arch=compute_90a,code=sm_90a -Xptxas -v -c "$1" -o "$work/$name.o" \
    > "$work/$name.log" 2>&1 || { echo "  FAILED: $1 does not compile"; cat "$work/$name.log"; return 1; }
}
export -f compile
export nvcc work
ls src/cuda/sm90/flash_sm90_hdim*.cu | xargs -P 2 -I{} bash -c 'compile {}'
failed=0 kernels=0
for log in "$work"/*.log; do
  name=$(basename "$log" .log)
  kernels=$((kernels + $(grep -c "Compiling entry function" "$log" || true)))
  if grep -q "Potential Performance Loss" "$log"; then
    echo "  FAILED: $name: $(grep -m1 -o 'Potential Performance Loss: [^'"'"']*' "$log")"
    failed=$((failed + 1))
  fi
  if grep -E "[1-9][0-9]* bytes spill (stores|loads)" "$log" > /dev/null; then
    echo "  FAILED: $name spills: $(grep -m1 -E '[1-9][0-9]* bytes spill' "$log" | sed 's/^ *//')"
    failed=$((failed + 1))
  fi
done
if [ "$kernels" -eq 0 ]; then
  echo "  FAILED: no kernel was compiled"
  exit 1
fi
echo "sm90_ptxas_test: $kernels sm_90a kernels, $failed problems"
[ "$failed" -eq 0 ]
