#!/usr/bin/env bash
# Installs what the build needs and is missing: a C++17 compiler, CMake >= 3.24, Ninja, GoogleTest.
# The CUDA toolkit (nvcc) is looked for on PATH and in /usr/local/cuda; without it the GPU backends
# are not built (the library, the CPU backends and the CLI still are) and this says so.
#   bash scripts/install_deps.sh [--python]
# --python also pip-installs what the Python package needs to build and test (numpy, pytest,
# nanobind, scikit-build-core, ml_dtypes) into the Python that runs the tests: $PYTHON when set,
# else the active virtual environment ($VIRTUAL_ENV), else the project's own .venv, made with
# `python3 -m venv` (Debian's python3-venv is installed for that when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
with_python=0
[ "${1:-}" = "--python" ] && with_python=1
py=$(flashattn_python)
make_venv=0
if [ $with_python -eq 1 ] && [ -z "${PYTHON:-}${VIRTUAL_ENV:-}" ] && [ ! -x "$py" ]; then
  make_venv=1  # .venv is missing (or its interpreter is gone)
fi
missing=()
command -v g++ >/dev/null || missing+=(g++)
command -v cmake >/dev/null || missing+=(cmake)
command -v ninja >/dev/null || missing+=(ninja-build)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
if [ $make_venv -eq 1 ]; then
  # Debian splits venv's pip bootstrap (ensurepip) into python3-venv; headers for the extension.
  command -v python3 >/dev/null || missing+=(python3)
  python3 -c "import ensurepip, venv" 2>/dev/null || missing+=(python3-venv)
  python3 -c "import os, sysconfig; assert os.path.exists(sysconfig.get_path('include') + '/Python.h')" \
    2>/dev/null || missing+=(python3-dev)
elif [ $with_python -eq 1 ] && ! "$py" -m pip --version >/dev/null 2>&1; then
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
if [ $make_venv -eq 1 ]; then
  echo "making the project's Python environment: python3 -m venv .venv" >&2
  rm -rf .venv  # a half-made one (venv without ensurepip leaves a folder and no pip)
  python3 -m venv .venv
fi
if [ $with_python -eq 1 ] &&
   ! "$py" -c "import numpy, pytest, nanobind, scikit_build_core, ml_dtypes" 2>/dev/null; then
  # ml_dtypes (a few MB, needs only numpy): the tests of JAX-style bfloat16 NumPy arrays.
  echo "installing Python packages into $("$py" -c 'import sys; print(sys.prefix)'): numpy" \
       "pytest nanobind scikit-build-core ml_dtypes" >&2
  "$py" -m pip install -q --disable-pip-version-check numpy pytest 'nanobind>=2.0' \
    'scikit-build-core>=0.10' ml_dtypes
fi
