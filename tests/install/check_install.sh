#!/usr/bin/env bash
# Installs the built project into a temporary prefix, builds examples/cpp_api against it with
# find_package(flashattn), and runs the example. Usage: check_install.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/include/flashattn/flashattn.h"
test -x "$work/prefix/bin/flashattn"
cmake -S "$src/examples/cpp_api" -B "$work/example" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/example" > "$work/build.log"
"$work/example/cpp_api_example" | tee "$work/run.log"
grep -q "k.shape\[2\] (kv heads) = 3 must divide q.shape\[2\] (heads) = 4" "$work/run.log"
grep -q "^out\[0\]" "$work/run.log"
echo "install check passed"
