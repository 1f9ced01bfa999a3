#!/usr/bin/env bash
# Same-session A/B of a backend's dense figures (AB_BACKEND, default flash-sm80) between versions
# of the sources, the CLI binaries' benchmarks alternating ROUNDS times on the same GPU, each cell
# on fresh inputs with the L2 flushed.
# - Default, two versions: "base", an earlier version unpacked into .device/base (`git archive
#   REV | tar -x -C .device/base`, carried with the device call), against "new", this tree, whose
#   CLI is build-device/ from scripts/device_run.sh or device_sm90.sh build (run it in the same
#   call).
# - AB_TREES="name=dir ...": any number of versions, each a source tree (a `git archive` of a
#   branch under .device/, or . for this tree), built here (the CLI alone, sm_90a: ~20 s each);
#   the first is the one the others are divided by.
# Output: $OUT/ab.txt (each run's table) and $OUT/ab-summary.txt (per cell: the median over rounds
# of each version's TFLOP/s and its ratio to the first).
#   [AB_BACKEND=flash-sm90] [AB_HEAD_DIMS="64 128"] [AB_SEQLENS="1024 16384": batch 16384/seqlen]
#   [AB_TREES="base=.device/base poly=.device/poly"] [AB_ARGS="--softcap 30"]
#   bash scripts/device_ab.sh [ROUNDS]
# AB_ARGS: more flags for every cell's `flashattn bench` (a variant: --softcap 30, --window 1024,0).
set -uo pipefail
rounds=${1:-3}
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
: > "$out/ab-build.log"

# name -> CLI binary
names=()
declare -A bins
build_tree() {  # build_tree NAME DIR: the CLI of DIR into build-ab-NAME
  local name=$1 dir=$2 start
  start=$(date +%s)
  cmake -S "$dir" -B "build-ab-$name" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_PYTHON=OFF '-DFLASHATTN_CUDA_ARCHS=90a' \
    >> "$out/ab-build.log" 2>&1 &&
    ninja -C "build-ab-$name" -j"$(nproc)" flashattn_cli >> "$out/ab-build.log" 2>&1 ||
    { echo "$name build failed"; tail -20 "$out/ab-build.log"; exit 1; }
  echo "$name build: $(( $(date +%s) - start )) s"
  names+=("$name")
  bins[$name]=build-ab-$name/tools/flashattn/flashattn
}
if [ -n "${AB_TREES:-}" ]; then
  for spec in $AB_TREES; do build_tree "${spec%%=*}" "${spec#*=}"; done
else
  build_tree base .device/base
  [ -x build-device/tools/flashattn/flashattn ] ||
    { echo "no build-device/: run the build stage of scripts/device_run.sh first"; exit 1; }
  names+=(new)
  bins[new]=build-device/tools/flashattn/flashattn
fi

csv=$(mktemp -d)
: > "$out/ab.txt"
for r in $(seq "$rounds"); do
  for v in "${names[@]}"; do
    for s in ${AB_SEQLENS:-16384}; do
    for d in ${AB_HEAD_DIMS:-64 128 256}; do
      for causal in "" "--causal"; do
        h=$((2048 / d))
        cell="$d${causal:+c}s$s"
        "${bins[$v]}" bench --device cuda --backends "${AB_BACKEND:-flash-sm80}" --head-dim $d \
          --heads $h --batch $((16384 / s)) --seqlens $s $causal ${AB_ARGS:-} \
          --csv "$csv/ab__${v}__${r}__$cell.csv" > /dev/null 2>&1
        echo "$v round=$r d=$d s=$s ${causal:-full} $(tail -1 "$csv/ab__${v}__${r}__$cell.csv")" \
          >> "$out/ab.txt"
      done
    done
    done
  done
done
AB_NAMES="${names[*]}" python3 - "$csv" <<'PY' > "$out/ab-summary.txt"
import csv, glob, os, statistics, sys
out = sys.argv[1]
names = os.environ["AB_NAMES"].split()
rows = {}
for path in glob.glob(os.path.join(out, "ab__*.csv")):
    v, r, rest = os.path.basename(path)[4:-4].split("__")  # names may hold "-" (branches)
    with open(path) as f:
        for row in csv.DictReader(f):
            if row.get("backend") == os.environ.get("AB_BACKEND", "flash-sm80") and row.get("tflops"):
                rows.setdefault((rest, v), []).append(float(row["tflops"]))
nan = float("nan")
med = lambda cell, v: statistics.median(rows.get((cell, v), [nan]))
head = f"{'cell':10} " + " ".join(f"{n:>9}" for n in names)
head += "".join(f" {n + '/' + names[0]:>14}" for n in names[1:])
print(head + "   (median TFLOP/s over rounds)")
for cell in sorted({c for c, _ in rows}):
    vals = [med(cell, n) for n in names]
    line = f"{cell:10} " + " ".join(f"{x:9.1f}" for x in vals)
    line += "".join(f" {x / vals[0]:14.3f}" for x in vals[1:])
    print(line)
PY
cat "$out/ab-summary.txt"
rm -rf "$csv"
