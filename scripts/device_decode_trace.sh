#!/usr/bin/env bash
# Where flash-decode's time goes, per phase: the Python package built with
# -DFLASHATTN_DECODE_TRACE (sm_90a, into build-trace/; src/cuda/decode/decode_trace.cuh), then
# decode steps replayed one at a time (tools/profile/decode_step.py --trace) and each cell's
# phase table (tools/profile/decode_trace_report.py), beside the untraced build's kernel timeline
# of the same cell (the trace's own cost: compare the "block end" column with it). Run on the
# GPU machine.
#   [TRACE_CELLS="--batch 1 --cache-len 8192;--batch 1 --cache-len 8192 --flush-mib 1"]
#   bash scripts/device_decode_trace.sh
# Output: $OUT/trace-N.txt (raw lines) and $OUT/trace-report.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh 2>/dev/null
source scripts/device_pip.sh  # pip_sm90a
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
py=${PYTHON:-python3}
repo=$PWD
start=$(date +%s)
for kind in trace plain; do
  flags=""
  [ $kind = trace ] && flags="-DFLASHATTN_DECODE_TRACE"
  pip_sm90a "build-$kind" . "$out/build-$kind.log" "$flags" || exit 1
done
echo "builds: $(( $(date +%s) - start )) s"
: > "$out/trace-report.txt"
IFS=';' read -ra cells <<< "${TRACE_CELLS:---batch 1 --cache-len 8192;--batch 1 --cache-len 8192 --flush-mib 1}"
n=0
for cell in "${cells[@]}"; do
  n=$((n + 1))
  # shellcheck disable=SC2086
  (cd tools/profile && PYTHONPATH="$repo/build-trace" timeout 60 "$py" decode_step.py --trace \
    --steps 5 $cell) > "$out/trace-$n.txt" 2>&1
  {
    echo "== $n: $cell"
    "$py" tools/profile/decode_trace_report.py < "$out/trace-$n.txt"
    # shellcheck disable=SC2086
    (cd tools/profile && PYTHONPATH="$repo/build-plain" timeout 60 "$py" decode_step.py \
      --timeline --steps 20 $cell 2>/dev/null | grep -E "kernel|span")
  } >> "$out/trace-report.txt" 2>&1
done
cat "$out/trace-report.txt"
