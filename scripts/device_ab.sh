#!/usr/bin/env bash
# Same-session A/B of a backend's dense figures (AB_BACKEND, default flash-sm80): an earlier version of the sources (unpacked
# into .device/base by `git archive REV | tar -x -C .device/base`, carried with the device call)
# against this tree, the two CLI binaries' benchmarks alternating ROUNDS times on the same GPU,
# each cell on fresh inputs with the L2 flushed. Needs build-device/ from scripts/device_run.sh
# build (run it in the same call). Output: $OUT/ab.txt (each run's table) and $OUT/ab-summary.txt
# (per cell: the median over rounds of each version's TFLOP/s and their ratio).
#   [AB_BACKEND=flash-sm90] [AB_HEAD_DIMS="64 128"] [AB_SEQLENS="1024 16384": batch 16384/seqlen] bash scripts/device_ab.sh [ROUNDS]
set -uo pipefail
rounds=${1:-3}
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
start=$(date +%s)
[ -x build-base/tools/flashattn/flashattn ] ||
cmake -S .device/base -B build-base -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_BUILD_TESTS=OFF \
  -DFLASHATTN_BUILD_PYTHON=OFF '-DFLASHATTN_CUDA_ARCHS=90a' > "$out/ab-build.log" 2>&1 &&
  ninja -C build-base -j"$(nproc)" flashattn_cli >> "$out/ab-build.log" 2>&1 ||
  { echo "base build failed"; tail -20 "$out/ab-build.log"; exit 1; }
echo "base build: $(( $(date +%s) - start )) s"
csv=$(mktemp -d)
: > "$out/ab.txt"
for r in $(seq "$rounds"); do
  for v in base new; do
    bin=build-device/tools/flashattn/flashattn
    [ $v = base ] && bin=build-base/tools/flashattn/flashattn
    for s in ${AB_SEQLENS:-16384}; do
    for d in ${AB_HEAD_DIMS:-64 128 256}; do
      for causal in "" "--causal"; do
        h=$((2048 / d))
        cell="$d${causal:+c}s$s"
        "$bin" bench --device cuda --backends "${AB_BACKEND:-flash-sm80}" --head-dim $d --heads $h \
          --batch $((16384 / s)) --seqlens $s $causal --csv "$csv/ab-$v-$r-$cell.csv" > /dev/null 2>&1
        echo "$v round=$r d=$d s=$s ${causal:-full} $(tail -1 "$csv/ab-$v-$r-$cell.csv")" >> "$out/ab.txt"
      done
    done
    done
  done
done
python3 - "$csv" <<'PY' > "$out/ab-summary.txt"
import csv, glob, os, statistics, sys
out = sys.argv[1]
rows = {}
for path in glob.glob(os.path.join(out, "ab-*-*-*.csv")):
    v, r, rest = os.path.basename(path)[3:-4].split("-", 2)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row.get("backend") == os.environ.get("AB_BACKEND", "flash-sm80") and row.get("tflops"):
                rows.setdefault((rest, v), []).append(float(row["tflops"]))
print(f"{'cell':10} {'base':>8} {'new':>8} {'new/base':>9}   (median TFLOP/s over rounds)")
for cell in sorted({c for c, _ in rows}):
    b = statistics.median(rows.get((cell, "base"), [float("nan")]))
    n = statistics.median(rows.get((cell, "new"), [float("nan")]))
    print(f"{cell:10} {b:8.1f} {n:8.1f} {n / b:9.3f}")
PY
cat "$out/ab-summary.txt"
rm -rf "$csv"
