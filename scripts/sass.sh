#!/usr/bin/env bash
# SASS of one CUDA translation unit, here, without a GPU: compiles it to a cubin (nvcc, the
# project's include paths), prints ptxas's registers / spills / shared memory per kernel and
# writes each kernel's SASS to build-sass/NAME.sass (cuobjdump). This machine's toolkit has no
# cuobjdump; the first run fetches it and the nvdisasm it calls from the pip index (the
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels) into .tools/ (git-ignored).
#   bash scripts/sass.sh src/cuda/decode/decode_hdim128.cu [ARCH=sm_90a] [KERNEL_REGEX=.]
# The decode kernel's first load, say: grep -n LDGSTS build-sass/*decode_mma_kernel*bfloat16*.sass
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh 2>/dev/null
src=${1:?a .cu file}
arch=${2:-sm_90a}
pattern=${3:-.}
tools=$PWD/.tools
if ! command -v cuobjdump >/dev/null && [ ! -x "$tools/nvidia/cu13/bin/cuobjdump" ]; then
  mkdir -p "$tools/wheels"
  python3 -m pip download --no-deps -q -d "$tools/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  for w in "$tools"/wheels/*.whl; do python3 -m zipfile -e "$w" "$tools"; done
  chmod +x "$tools"/nvidia/cu13/bin/*
fi
command -v cuobjdump >/dev/null || export PATH="$tools/nvidia/cu13/bin:$PATH"
mkdir -p build-sass
cubin=build-sass/$(basename "$src" .cu).$arch.cubin
nvcc -std=c++17 -O3 --expt-relaxed-constexpr -arch="$arch" -cubin -Isrc -Iinclude -o "$cubin" \
  "$src" -Xptxas -v 2>&1 | awk -v pat="$pattern" '
    /Compiling entry function/ { keep = $0 ~ pat; if (keep) print $7 }
    keep && /(spill|Used)/ { sub(/^ptxas info *: */, ""); print "  " $0 }'

cuobjdump -sass "$cubin" | awk -v dir=build-sass -v pat="$pattern" '
  /Function :/ {
    name = $3; keep = name ~ pat
    if (keep) { out = dir "/" name ".sass"; printf "" > out; print "wrote " out > "/dev/stderr" }
  }
  keep && /^ +\/\*[0-9a-f]+\*\// { sub(/ *\/\* 0x[0-9a-f]+ \*\//, ""); print >> out }'
