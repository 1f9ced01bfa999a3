#!/usr/bin/env bash
# Run here before a device call: the GPU machine has no package manager and no GoogleTest, so the
# sources of this machine's googletest package are copied into .device/ (git-ignored through
# .git/info/exclude) and carried along: `run` with carry [".device"], then
# `bash scripts/device_run.sh [stages]` there.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
[ -d /usr/src/googletest ] || bash scripts/install_deps.sh
mkdir -p .device
rm -rf .device/googletest
cp -r /usr/src/googletest .device/googletest
echo "ready: carry .device with the device call"
