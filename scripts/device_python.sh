#!/usr/bin/env bash
# The Python package on the GPU machine (no network; torch, nanobind, scikit-build-core, numpy,
# matplotlib and pytest are preinstalled): pip install, the Python tests (GPU and torch ones
# included), the side-by-side benchmark, the decode benchmark. Files in $OUT (or ./device-out):
# summary.txt, pytest.log, bench.txt, bench.json, bench.png, decode.txt, decode.json, decode.png
# and logs.tgz (pip's build log, the benchmarks' stderr).
#   bash scripts/device_python.sh [STAGES] [bench args...]
# PYTEST_K narrows the test stage to pytest -k "$PYTEST_K" (the whole suite took 495 s on the
# H200; e.g. PYTEST_K="torch or kvcache or workspace").
# STAGES: comma-separated from install,test,bench,decode (default: install,test,bench). Each
# stage fits one 10-minute device call on its own if they do not together; the bench args go to
# both benchmarks (with decode alone: --decode-batches 8,64 and the like narrow its grid).
set -uo pipefail
cd "$(dirname "$0")/.."
stages=${1:-install,test,bench}; shift || true
has() { [[ ",$stages," == *",$1,"* ]]; }
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
logs=$(mktemp -d)
summary="$out/summary.txt"
touch "$summary"
note() { echo "$*" | tee -a "$summary"; }
py=${PYTHON:-python3}
source scripts/env.sh 2>/dev/null  # nvcc on PATH
py_version=$("$py" -c 'import sys; print(sys.version.split()[0])')
note "== $(date -u +%FT%TZ) stages=$stages python=$py_version"

if has install; then
  start=$(date +%s)
  # No persistent build dir: pip builds in a fresh temporary one, so nothing stale survives from
  # an earlier call (copied sources can look older than objects left here).
  CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$py" -m pip install --no-build-isolation --no-deps -v . \
    > "$logs/pip-install.log" 2>&1
  rc=$?
  note "pip install: rc=$rc in $(( $(date +%s) - start )) s"
  [ $rc -eq 0 ] || tail -30 "$logs/pip-install.log" | tee -a "$summary"
  (cd /tmp && "$py" -c "import flashattn
print('flashattn', flashattn.__version__, 'torch' if flashattn.TORCH_AVAILABLE else 'no torch')
for b in flashattn.list_backends():
    print(f'  {b.name:14} {b.device:5} usable={b.usable} {b.why_not}')") 2>&1 | tee -a "$summary"
fi

if has test; then
  start=$(date +%s)
  "$py" -m pytest tests/python -q -rs ${PYTEST_K:+-k "$PYTEST_K"} > "$out/pytest.log" 2>&1
  rc=$?
  note "pytest: rc=$rc in $(( $(date +%s) - start )) s: $(tail -1 "$out/pytest.log")"
  grep -E "^(FAILED|ERROR)" "$out/pytest.log" | head -20 | tee -a "$summary"
fi

if has bench; then
  start=$(date +%s)
  "$py" -m flashattn.bench --json "$out/bench.json" --plot "$out/bench.png" "$@" \
    > "$out/bench.txt" 2> "$logs/bench-stderr.log"
  rc=$?
  note "bench: rc=$rc in $(( $(date +%s) - start )) s"
  [ $rc -eq 0 ] || tail -20 "$logs/bench-stderr.log" | tee -a "$summary"
  cat "$out/bench.txt"
fi

if has decode; then
  start=$(date +%s)
  "$py" -m flashattn.bench --decode --json "$out/decode.json" --plot "$out/decode.png" "$@" \
    > "$out/decode.txt" 2> "$logs/decode-stderr.log"
  rc=$?
  note "decode: rc=$rc in $(( $(date +%s) - start )) s"
  [ $rc -eq 0 ] || tail -20 "$logs/decode-stderr.log" | tee -a "$summary"
  cat "$out/decode.txt"
fi

tar -czf "$out/logs.tgz" -C "$logs" . && rm -rf "$logs"
echo; cat "$summary"
