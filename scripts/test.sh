#!/usr/bin/env bash
# The whole test suite: installs what is missing, checks the scripts themselves
# (tests/scripts), builds everything with the tests and the CLI (every kernel for sm_80 and
# sm_90a, warnings and register spills are errors; every option given, so whatever build/ was
# configured with before, quickstart.sh included, does not carry over), runs ctest; then
# builds and installs the Python package with pip into the project's Python (scripts/env.sh:
# $PYTHON, else the active virtual environment, else .venv, made on first use) and runs its
# tests. GPU tests report "Skipped" when there is no CUDA device, torch tests when
# torch is not installed; a ctest or pytest run that finds no test fails. Each step prints its
# counts. FLASHATTN_TEST_TIER=full runs the full grid instead of the quick one.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
bash scripts/install_deps.sh --python
py=$(flashattn_python)
tier=${FLASHATTN_TEST_TIER:-quick}

echo "== tests/scripts: the scripts' own checks"
for t in tests/scripts/*_test.sh; do bash "$t"; done

echo "== build: $FLASHATTN_BUILD_DIR (tests and CLI on)"
flashattn_configure "$FLASHATTN_BUILD_DIR" test
cmake --build "$FLASHATTN_BUILD_DIR" -j "$FLASHATTN_JOBS"

echo "== ctest ($tier tier)"
# The quick tier leaves out the "Full*" grid suites.
exclude=(-E '[.]Full[A-Za-z]*/')
[ "$tier" = full ] && exclude=()
ctest_log="$FLASHATTN_BUILD_DIR/ctest-$tier.log"
set +e
flashattn_ctest "$FLASHATTN_BUILD_DIR" -j "$FLASHATTN_JOBS" --output-on-failure --timeout 1200 \
  "${exclude[@]}" 2>&1 | tee "$ctest_log"
ctest_rc=${PIPESTATUS[0]}
set -e
# ctest's own summary line counts skipped tests among the passed and lists them far below it.
total=$(sed -nE 's/.*tests failed out of ([0-9]+)$/\1/p' "$ctest_log" | tail -1)
failed=$(sed -nE 's/.* ([0-9]+) tests failed out of [0-9]+$/\1/p' "$ctest_log" | tail -1)
skipped=$(grep -cE '^[[:space:]]*[0-9]+ - .* \(Skipped\)$' "$ctest_log" || true)
if [ -n "$total" ]; then
  echo "ctest ($tier tier): $total tests: $((total - failed - skipped)) passed," \
       "$skipped skipped, $failed failed (log: $ctest_log)"
fi
[ "$ctest_rc" -eq 0 ] || exit "$ctest_rc"

# The Python package: pip builds the same CMake project (scikit-build-core, pyproject.toml) with
# the same flags minus the generator and build type, which scikit-build-core sets. build-py/ keeps
# its build tree, so a second run on this machine only rebuilds what changed.
echo "== Python package: $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
export CMAKE_BUILD_PARALLEL_LEVEL=$FLASHATTN_JOBS
cmake_args=()
for flag in "${FLASHATTN_CMAKE_FLAGS[@]}"; do
  case $flag in -G|Ninja|-DCMAKE_BUILD_TYPE=*) ;; *) cmake_args+=("$flag") ;; esac
done
start=$(date +%s)
CMAKE_ARGS="${cmake_args[*]}" "$py" -m pip install --no-build-isolation --no-deps -q \
  --disable-pip-version-check --config-settings=build-dir="build-py/{wheel_tag}" .
echo "pip install .: $(( $(date +%s) - start )) s"
echo "== pytest"
"$py" -m pytest tests/python -q -rs
