# Sourced by the device scripts that time a tree's Python package in place (decode A/B, sweep,
# traces): pip_sm90a DIR SRC LOG [CUDA_FLAGS] builds the package of source tree SRC for sm_90a
# only (about 25 s on the GPU machine) into DIR (PYTHONPATH=DIR imports it), CUDA_FLAGS added to
# the kernels' flags (a trace's -D), the build's output appended to LOG; on failure it prints
# LOG's tail and returns 1.
pip_sm90a() {
  local dir=$1 src=$2 log=$3 flags=${4:-}
  local extra=()
  [ -n "$flags" ] && extra=(-C "cmake.define.CMAKE_CUDA_FLAGS=$flags")
  rm -rf "$dir"
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "${PYTHON:-python3}" -m pip install --no-build-isolation \
    --no-deps --target "$dir" -C cmake.define.FLASHATTN_CUDA_ARCHS=90a "${extra[@]}" "$src" \
    >> "$log" 2>&1 || { echo "pip build of $src into $dir failed"; tail -30 "$log"; return 1; }
}
