#!/usr/bin/env bash
# Installs what the build needs and is missing: a C++17 compiler, CMake >= 3.24, Ninja, GoogleTest.
# The CUDA toolkit (nvcc) is looked for on PATH and in /usr/local/cuda; without it the GPU backends
# are not built (the library, the CPU backends and the CLI still are) and this says so.
#   bash scripts/install_deps.sh [--python]
# --python also pip-installs what the Python package needs to build and test (numpy, pytest,
# nanobind, scikit-build-core) into the Python that runs the tests ($PYTHON, default python3).
set -euo pipefail
with_python=0
[ "${1:-}" = "--python" ] && with_python=1
py=${PYTHON:-python3}
missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
if [ $with_python -eq 1 ] && ! "$py" -m pip --version >/dev/null 2>&1; then
  missing+=(python3-pip python3-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cmake_version=$(cmake --version | head -1 | awk '{print $3}')
if [ "$(printf '%s\n3.24\n' "$cmake_version" | sort -V | head -1)" != "3.24" ]; then
  echo "CMake $cmake_version is older than 3.24: installing a newer one from PyPI" >&2
  python3 -m pip install -q 'cmake>=3.24'
fi
if [ $with_python -eq 1 ] &&
   ! "$py" -c "import numpy, pytest, nanobind, scikit_build_core" 2>/dev/null; then
  echo "installing Python packages into $("$py" -c 'import sys; print(sys.prefix)'): numpy" \
       "pytest nanobind scikit-build-core" >&2
  "$py" -m pip install -q numpy pytest 'nanobind>=2.0' 'scikit-build-core>=0.10'
fi
