#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything (every kernel for sm_80 and
# sm_90a, warnings and register spills are errors), runs ctest; then builds and installs the
# Python package into the current Python ($PYTHON, default python3) with pip and runs its tests.
# GPU tests report "Skipped" when there is no CUDA device, torch tests when torch is not
# installed. FLASHATTN_TEST_TIER=full runs the full grid instead of the quick one.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --python
source scripts/env.sh
cmake -S . -B "$FLASHATTN_BUILD_DIR" "${FLASHATTN_CMAKE_FLAGS[@]}"
cmake --build "$FLASHATTN_BUILD_DIR" -j "$FLASHATTN_JOBS"
# The quick tier leaves out the "Full*" grid suites.
exclude=(-E '[.]Full[A-Za-z]*/')
[ "${FLASHATTN_TEST_TIER:-quick}" = full ] && exclude=()
ctest --test-dir "$FLASHATTN_BUILD_DIR" -j "$FLASHATTN_JOBS" --output-on-failure --timeout 1200 \
  "${exclude[@]}"

# The Python package: pip builds the same CMake project (scikit-build-core, pyproject.toml) with
# the same flags minus the generator and build type, which scikit-build-core sets. build-py/ keeps
# its build tree, so a second run on this machine only rebuilds what changed.
py=${PYTHON:-python3}
export CMAKE_BUILD_PARALLEL_LEVEL=$FLASHATTN_JOBS
cmake_args=()
for flag in "${FLASHATTN_CMAKE_FLAGS[@]}"; do
  case $flag in -G|Ninja|-DCMAKE_BUILD_TYPE=*) ;; *) cmake_args+=("$flag") ;; esac
done
start=$(date +%s)
CMAKE_ARGS="${cmake_args[*]}" "$py" -m pip install --no-build-isolation --no-deps -q \
  --config-settings=build-dir="build-py/{wheel_tag}" .
echo "pip install .: $(( $(date +%s) - start )) s"
"$py" -m pytest tests/python -q -rs
