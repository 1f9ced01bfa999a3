#!/usr/bin/env bash
# Where a flash-sm90 work tile's time goes, per phase of consume(): the Python package built with
# -DFLASHATTN_SM90_TRACE (sm_90a, into build-sm90-trace/; src/cuda/sm90/sm90_trace.cuh), then
# each cell run a few times (tools/profile/sm90_trace.py run) and its phase table (report). The
# trace build spills nothing at d96-d256 (ptxas, sm_90a; the first measured run, 2026-12-07, had
# an 8-byte spill in the d128 N176 dense kernel, since gone) and 4-28 bytes at d64, whose clocks
# therefore read high. Run on the GPU machine.
#   [SM90_TRACE_CELLS="--seqlen 512 --batch 32;--seqlen 16384 --batch 1"] bash scripts/device_sm90_trace.sh
# Output: $OUT/sm90-trace-N.txt (raw lines) and $OUT/sm90-trace-report.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh 2>/dev/null
source scripts/device_pip.sh  # pip_sm90a
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
py=${PYTHON:-python3}
repo=$PWD
start=$(date +%s)
pip_sm90a build-sm90-trace . "$out/build-sm90-trace.log" -DFLASHATTN_SM90_TRACE || exit 1
echo "build: $(( $(date +%s) - start )) s"
: > "$out/sm90-trace-report.txt"
default="--seqlen 512 --batch 32;--seqlen 16384 --batch 1;--seqlen 16384 --batch 1 --window 1024,0;--seqlen 512 --batch 32 --head-dim 64 --heads 32"
IFS=';' read -ra cells <<< "${SM90_TRACE_CELLS:-$default}"
n=0
for cell in "${cells[@]}"; do
  n=$((n + 1))
  # shellcheck disable=SC2086
  (cd tools/profile && PYTHONPATH="$repo/build-sm90-trace" timeout 60 "$py" sm90_trace.py run \
    $cell) > "$out/sm90-trace-$n.txt" 2>&1
  {
    echo "== $n: $cell"
    "$py" tools/profile/sm90_trace.py report < "$out/sm90-trace-$n.txt"
    echo
  } >> "$out/sm90-trace-report.txt"
done
cat "$out/sm90-trace-report.txt"
