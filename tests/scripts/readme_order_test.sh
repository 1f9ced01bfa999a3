#!/usr/bin/env bash
# The README's two commands in its order, quickstart.sh then test.sh, must run the whole C++
# suite. They share build/, and quickstart.sh configures it with the tests off; test.sh used to
# reconfigure without saying what it wanted, kept that, built no test, and ctest printed "No
# tests were found!!!" and exited 0. This replays their configure steps (scripts/env.sh's
# flashattn_configure, which both scripts call) on a throwaway build dir, without building:
# a few seconds, not the minutes of a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/env.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build=$work/build
source tests/scripts/check.sh  # check, check_summary
fails() { ! "$@"; }
is() { [ "$1" = "$2" ]; }
cached() { sed -nE "s/^$1:[A-Z]+=//p" "$build/CMakeCache.txt"; }
listed() { ctest --test-dir "$build" -N | sed -nE 's/^Total Tests: ([0-9]+)$/\1/p'; }
configure() {  # configure LOG ARGS...: fails the whole test, log shown, if CMake fails
  local log=$work/$1
  shift
  "$@" > "$log" 2>&1 || { echo "configure failed: $*"; tail -20 "$log"; exit 1; }
}
kernels=ON
command -v nvcc >/dev/null || kernels=OFF
test_sources=$(find tests -name '*_test.cc' | wc -l)

echo "readme_order_test: quickstart.sh then test.sh on one build dir"
# The scripts go through the functions checked below.
check "quickstart.sh configures with flashattn_configure ... quickstart" \
  grep -q '^flashattn_configure "$FLASHATTN_BUILD_DIR" quickstart' scripts/quickstart.sh
check "test.sh configures with flashattn_configure ... test" \
  grep -q '^flashattn_configure "$FLASHATTN_BUILD_DIR" test$' scripts/test.sh
check "test.sh runs ctest with flashattn_ctest" grep -q '^flashattn_ctest "$FLASHATTN_BUILD_DIR"' \
  scripts/test.sh

# 1. A new user's first command: tests off, so ctest there must fail, not pass on nothing.
configure quickstart.log flashattn_configure "$build" quickstart
check "quickstart: FLASHATTN_BUILD_TESTS=OFF" is "$(cached FLASHATTN_BUILD_TESTS)" OFF
check "quickstart: ctest lists no test" is "$(listed)" 0
ctest_here() { flashattn_ctest "$build" > "$work/ctest-empty.log" 2>&1; }
check "flashattn_ctest fails where it finds no test" fails ctest_here
check "  ... saying so" grep -q "No tests were found" "$work/ctest-empty.log"

# 2. The second command on the same cache: the tests and the CLI are back on.
configure test.log flashattn_configure "$build" test
check "test: FLASHATTN_BUILD_TESTS=ON" is "$(cached FLASHATTN_BUILD_TESTS)" ON
check "test: FLASHATTN_BUILD_CLI=ON" is "$(cached FLASHATTN_BUILD_CLI)" ON
# Before a build gtest_discover_tests lists one <target>_NOT_BUILT per test executable; the
# install test is a plain add_test.
check "test: ctest lists every test executable ($test_sources) and the install test" \
  is "$(listed)" $((test_sources + 1))

# 3. Whatever was configured before: every option that decides what is built set the other way.
poison=(-DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_CLI=OFF -DFLASHATTN_BUILD_TUNING=ON
        -DFLASHATTN_CUDART_STATIC=ON -DFLASHATTN_CUDA_ARCHS=90a)
[ $kernels = ON ] && poison+=(-DFLASHATTN_BUILD_CUDA_KERNELS=OFF)
configure poison.log cmake -S . -B "$build" "${poison[@]}"
configure test-again.log flashattn_configure "$build" test
for want in FLASHATTN_BUILD_TESTS=ON FLASHATTN_BUILD_CLI=ON FLASHATTN_BUILD_TUNING=OFF \
            FLASHATTN_CUDART_STATIC=OFF "FLASHATTN_CUDA_ARCHS=80;90a" \
            FLASHATTN_BUILD_CUDA_KERNELS=$kernels FLASHATTN_WERROR=ON; do
  check "test over a cache set the other way: $want" is "$(cached "${want%%=*}")" "${want#*=}"
done

check_summary readme_order_test
