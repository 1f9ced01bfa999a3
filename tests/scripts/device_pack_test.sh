#!/usr/bin/env bash
# scripts/device_pack.sh: the command's files, however many and however deep, come back packed
# in $OUT/all.tgz, the top-level *.txt summaries (6 at most) beside it, and the command's exit
# status is the script's. Runs in well under a second, no GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source tests/scripts/check.sh  # check, check_summary
rc=0
OUT=$work/out bash scripts/device_pack.sh bash -c '
  mkdir -p "$OUT/a/b/c"; echo deep > "$OUT/a/b/c/run.log"
  for i in 1 2 3 4 5 6 7 8 9; do echo "$i" > "$OUT/s$i.txt"; done
  exit 3' || rc=$?
check "the command's exit status" [ "$rc" = 3 ]
check "one archive" [ -f "$work/out/all.tgz" ]
check "nothing else but 6 summaries beside it" [ "$(ls "$work/out" | wc -l)" = 7 ]
check "the deep file is in the archive" \
  [ "$(tar -xzOf "$work/out/all.tgz" ./a/b/c/run.log)" = deep ]
check "every summary is in the archive" [ "$(tar -tzf "$work/out/all.tgz" | grep -c '\.txt$')" = 9 ]
rc=0
bash scripts/device_pack.sh > /dev/null 2>&1 || rc=$?
check "no command: usage, status 2" [ "$rc" = 2 ]
check_summary device_pack_test
