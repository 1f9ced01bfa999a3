# Sourced by the scripts: finds nvcc and picks the build directory and CMake flags.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
FLASHATTN_BUILD_DIR=${FLASHATTN_BUILD_DIR:-build}
FLASHATTN_CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_WERROR=ON)
if ! command -v nvcc >/dev/null; then
  echo "note: no CUDA toolkit (nvcc) found: building without the GPU backends" >&2
  FLASHATTN_CMAKE_FLAGS+=(-DFLASHATTN_BUILD_CUDA_KERNELS=OFF)
fi
FLASHATTN_JOBS=${FLASHATTN_JOBS:-$(nproc)}
