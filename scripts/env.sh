# shellcheck shell=bash
# Sourced by the scripts: finds nvcc, picks the build directory, the CMake flags and the Python.
# Defines functions only; it creates nothing and runs no build (scripts/device_python.sh sources
# it for the nvcc on PATH alone).
FLASHATTN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
FLASHATTN_BUILD_DIR=${FLASHATTN_BUILD_DIR:-build}
# Flags shared by the CMake build and the pip build of the Python package (test.sh drops the
# generator and the build type for pip, which scikit-build-core sets itself).
FLASHATTN_CMAKE_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_WERROR=ON)
if command -v nvcc >/dev/null; then
  FLASHATTN_CMAKE_FLAGS+=(-DFLASHATTN_BUILD_CUDA_KERNELS=ON)
else
  # Once per run: install_deps.sh and the script that called it both source this file.
  if [ -z "${FLASHATTN_NOTED_NO_NVCC:-}" ]; then
    echo "note: no CUDA toolkit (nvcc) found: building without the GPU backends" >&2
    export FLASHATTN_NOTED_NO_NVCC=1
  fi
  FLASHATTN_CMAKE_FLAGS+=(-DFLASHATTN_BUILD_CUDA_KERNELS=OFF)
fi
FLASHATTN_JOBS=${FLASHATTN_JOBS:-$(nproc)}

# Configures DIR for one job: flashattn_configure DIR quickstart|test [more cmake args].
# quickstart.sh and test.sh share build/ so that the library and every kernel compile once
# (their own build dirs would compile the kernels twice: minutes on 2 cores). A shared cache
# keeps whatever the last configure of DIR said for every option not given, so each job gives
# every option that decides what is built, and the two jobs differ only in the tests: switching
# between them reconfigures and compiles the tests, nothing else. (Before, test.sh gave none:
# after quickstart.sh's -DFLASHATTN_BUILD_TESTS=OFF it built no test and ctest found none.)
flashattn_configure() {
  local dir=$1 job=$2 tests
  shift 2
  case $job in
    quickstart) tests=OFF ;;  # the CLI is all it runs: no test binaries to compile
    test) tests=ON ;;
    *) echo "flashattn_configure: unknown job '$job' (quickstart or test)" >&2; return 2 ;;
  esac
  cmake -S "$FLASHATTN_ROOT" -B "$dir" "${FLASHATTN_CMAKE_FLAGS[@]}" \
    -DFLASHATTN_BUILD_TESTS=$tests -DFLASHATTN_BUILD_CLI=ON -DFLASHATTN_BUILD_PYTHON=OFF \
    -DFLASHATTN_BUILD_TUNING=OFF -DFLASHATTN_CUDART_STATIC=OFF '-DFLASHATTN_CUDA_ARCHS=80;90a' "$@"
}

# ctest over DIR; a run that finds no test at all fails instead of passing.
#   flashattn_ctest DIR [ctest args]
flashattn_ctest() {
  local dir=$1
  shift
  ctest --test-dir "$dir" --no-tests=error "$@"
}

# The Python that the tests build the package into: $PYTHON when set, else the active virtual
# environment, else the project's own .venv (install_deps.sh --python makes it). Never the
# system interpreter: pip into it changes what other programs import (and warns as root).
flashattn_python() {
  if [ -n "${PYTHON:-}" ]; then
    echo "$PYTHON"
  elif [ -n "${VIRTUAL_ENV:-}" ]; then
    echo "$VIRTUAL_ENV/bin/python"
  else
    echo "$FLASHATTN_ROOT/.venv/bin/python"
  fi
}
