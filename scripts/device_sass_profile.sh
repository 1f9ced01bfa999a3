#!/usr/bin/env bash
# Where a kernel's warps wait, per SASS instruction: ncu's source counters (warp-stall samples)
# on one launch per cell, summarized by execution count (a work tile's code runs once per tile
# and warp, the key loop once per key tile) and listed for the instructions holding the most
# samples. Run on the GPU machine.
#   [PROF_TREE=.device/trees/main] [PROF_KERNEL=flash_sm90] [PROF_BACKEND=flash-sm90] \
#   PROF_CELLS="--head-dim 64 --heads 32 --batch 16 --seqlens 1024;--head-dim 128 ..." \
#   bash scripts/device_sass_profile.sh
# Output: $OUT/sass-N.csv (ncu's source page, one per ';'-separated cell: `flashattn bench`
# flags) and $OUT/sass-top.txt (the summaries).
set -uo pipefail
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
tree=${PROF_TREE:-.}
build=build-prof
cmake -S "$tree" -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_BUILD_TESTS=OFF \
  -DFLASHATTN_BUILD_PYTHON=OFF -DFLASHATTN_CUDA_ARCHS=90a -DCMAKE_CUDA_FLAGS=-lineinfo \
  > "$out/prof-build.log" 2>&1 && ninja -C $build flashattn_cli >> "$out/prof-build.log" 2>&1 ||
  { tail -20 "$out/prof-build.log"; exit 1; }
cli=$build/tools/flashattn/flashattn
: > "$out/sass-top.txt"
IFS=';' read -ra cells <<< "${PROF_CELLS:---head-dim 128 --heads 16 --batch 16 --seqlens 1024}"
n=0
for cell in "${cells[@]}"; do
  n=$((n + 1))
  rep=$(mktemp -d)/prof
  # shellcheck disable=SC2086
  timeout 300 ncu --clock-control none --kernel-name "regex:${PROF_KERNEL:-flash_sm90}" \
    --launch-skip 2 --launch-count 1 --section SourceCounters --section WarpStateStats -o "$rep" \
    "$cli" bench --device cuda --backends "${PROF_BACKEND:-flash-sm90}" --warmup 2 --iters 2 \
    $cell > "$out/prof-$n.log" 2>&1
  ncu -i "$rep.ncu-rep" --page source --print-source sass --csv > "$out/sass-$n.csv" 2>&1
  echo "== $n: $cell" >> "$out/sass-top.txt"
  python3 - "$out/sass-$n.csv" >> "$out/sass-top.txt" <<'PY'
import collections, csv, sys
rows = list(csv.reader(open(sys.argv[1])))[1:]  # the first line names the kernel
head = rows[0]
samples, source, executed = (head.index(c) for c in
    ("Warp Stall Sampling (All Samples)", "Source", "Instructions Executed"))
data = rows[1:]
total = sum(float(r[samples] or 0) for r in data) or 1.0
print(f"stall samples {total:.0f}, {len(data)} instructions")
by_count = collections.Counter()
for r in data:
    by_count[r[executed]] += float(r[samples] or 0)
print("samples by execution count (one count per code region):")
for count, s in by_count.most_common(8):
    print(f"  executed {count:>9}: {100 * s / total:5.1f}%")
print("instructions with >= 0.5% of the samples:")
for i, r in enumerate(data):
    s = float(r[samples] or 0)
    if s >= 0.005 * total:
        print(f"  {i:5d} {100 * s / total:5.1f}% x{r[executed]:>9} {r[source].strip()[:72]}")
PY
  rm -rf "$(dirname "$rep")"
done
cat "$out/sass-top.txt"
