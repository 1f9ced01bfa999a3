#!/usr/bin/env bash
# Runs a command with $OUT pointed at a fresh folder, then packs that folder into $OUT/all.tgz:
# the device tool brings back at most 8 files from $OUT, none more than 2 folders down, so a
# call that writes more (the A/B runs, build logs, traces, one folder per step) loses files
# silently without it. Beside all.tgz go the folder's top-level *.txt files, the first 6 of at
# most 1 MiB, to read without unpacking. The command's exit status is the script's.
#   bash scripts/device_pack.sh bash .device/callG.sh
#   bash scripts/device_pack.sh bash scripts/device_sm90_trace.sh
set -uo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/device_pack.sh COMMAND [ARGS...]" >&2; exit 2; }
final=${OUT:-$PWD/device-out}
mkdir -p "$final"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT  # the status below survives the trap
OUT=$work "$@"
rc=$?
tar -czf "$final/all.tgz" -C "$work" .
n=0
for f in "$work"/*.txt; do
  [ -f "$f" ] && [ "$(stat -c %s "$f")" -le 1048576 ] || continue
  cp "$f" "$final/" && n=$((n + 1))
  [ $n -lt 6 ] || break
done
exit $rc
