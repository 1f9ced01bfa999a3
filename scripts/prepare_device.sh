#!/usr/bin/env bash
# Run here before a device call: the GPU machine has no package manager and no GoogleTest, so the
# sources of this machine's googletest package are copied into .device/ (git-ignored through
# .git/info/exclude) and carried along: `run` with carry [".device"], then
# `bash scripts/device_run.sh [stages]` there.
#   bash scripts/prepare_device.sh [REV ...]
# Each REV (a branch, a commit) is also unpacked into .device/trees/NAME (NAME: REV with / as -,
# about 5 MB each; the carry holds 64 MiB), and the AB_TREES line for scripts/device_ab.sh that
# compares them is printed (the first REV is the one the others are divided by).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
[ -d /usr/src/googletest ] || bash scripts/install_deps.sh
mkdir -p .device
rm -rf .device/googletest
cp -r /usr/src/googletest .device/googletest
trees=""
if [ $# -gt 0 ]; then
  rm -rf .device/trees
  mkdir -p .device/trees
  for rev in "$@"; do
    name=${rev//\//-}
    mkdir -p ".device/trees/$name"
    git archive "$rev" | tar -x -C ".device/trees/$name"
    trees+="${trees:+ }$name=.device/trees/$name"
  done
  echo "AB_TREES=\"$trees\""
fi
echo "ready: carry .device with the device call"
