#!/usr/bin/env bash
# Same-call A/B of flash-decode between versions of the sources: each tree's Python package built
# into a directory of its own (pip --target build-decode-ab/NAME, sm_90a only, 25 s each), then
# `python -m flashattn.bench --decode` of each tree in turn, ROUNDS times, the peers (cuDNN, FA2)
# timed again in every run so drift between runs shows.
#   AB_TREES="v4=.device/trees/d064b8f new=." [DECODE_ARGS="--decode-batches 1,8 ..."]
#   bash scripts/device_decode_ab.sh [ROUNDS]
# (scripts/prepare_device.sh REV... unpacks the trees; carry .device with the call.)
# Output: $OUT/decode-ab.txt (every run's table) and $OUT/decode-ab-summary.txt (per cell: the
# median over rounds of each tree's flash-decode microseconds, its ratio to the first tree's, and
# cuDNN's median over every run).
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
out=${OUT:-$PWD/device-out}
mkdir -p "$out"
py=${PYTHON:-python3}
source scripts/env.sh 2>/dev/null  # nvcc on PATH
source scripts/device_pip.sh  # pip_sm90a
: > "$out/decode-ab-build.log"
names=()
declare -A dirs
for spec in ${AB_TREES:?AB_TREES=\"name=dir ...\"}; do
  name=${spec%%=*} src=${spec#*=} start=$(date +%s)
  dirs[$name]=$PWD/build-decode-ab/$name  # PYTHONPATH=that for tools/profile/decode_step.py
  pip_sm90a "${dirs[$name]}" "$src" "$out/decode-ab-build.log" || exit 1
  echo "$name build: $(( $(date +%s) - start )) s"
  names+=("$name")
done

args=${DECODE_ARGS:---decode-heads 32/8 --decode-batches 1,8 --decode-cache-lens 8k,128k --decode-new-tokens 1 --decode-pages 0 --decode-modes eager,graph}
json=$(mktemp -d)
: > "$out/decode-ab.txt"
for r in $(seq "$rounds"); do
  for v in "${names[@]}"; do
    # Run outside the source tree so `import flashattn` finds the tree's build, not python/.
    # A second of matmuls first: the GPU idles between runs and its clocks take a while to come
    # back (the first cells of a run measured 2-5x slow without it).
    (cd /tmp && PYTHONPATH="${dirs[$v]}" "$py" -c '
import runpy, sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t = time.time()
while time.time() - t < 1.0:
    a @ a
torch.cuda.synchronize()
sys.argv = ["flashattn.bench"] + sys.argv[1:]
runpy.run_module("flashattn.bench", run_name="__main__")' --decode $args \
      --json "$json/${v}__$r.json") > "$json/${v}__$r.txt" 2> "$json/${v}__$r.err" ||
      { echo "$v round $r failed"; tail -20 "$json/${v}__$r.err"; }
    { echo "== $v round $r"; cat "$json/${v}__$r.txt"; } >> "$out/decode-ab.txt"
  done
done

AB_NAMES="${names[*]}" "$py" - "$json" <<'PY' | tee "$out/decode-ab-summary.txt"
import glob, json, os, statistics, sys
names = os.environ["AB_NAMES"].split()
ours, peer = {}, {}
for path in glob.glob(os.path.join(sys.argv[1], "*.json")):
    v = os.path.basename(path).rsplit("__", 1)[0]
    for row in json.load(open(path))["rows"]:
        for mode in ("", "+graph"):
            us = row.get("us", {})
            label = row["label"] + (" graph" if mode else " eager")
            if "flash-decode" + mode in us:
                ours.setdefault((label, v), []).append(us["flash-decode" + mode])
            if "cudnn" + mode in us:
                peer.setdefault(label, []).append(us["cudnn" + mode])
labels = sorted({label for label, _ in ours})
print("flash-decode us, median over rounds (ratio: first tree's time / this one's); "
      "cuDNN: median over every run")
print(f"{'cell':44}" + "".join(f"{n:>16}" for n in names) + f"{'cudnn':>10}")
for label in labels:
    base = statistics.median(ours.get((label, names[0]), [float("nan")]))
    cols = []
    for n in names:
        t = statistics.median(ours.get((label, n), [float("nan")]))
        cols.append(f"{t:9.1f} ({base / t:4.2f})")
    c = statistics.median(peer.get(label, [float("nan")]))
    print(f"{label:44}" + "".join(f"{x:>16}" for x in cols) + f"{c:10.1f}")
PY
