"""Where a flash-decode step's time goes, from the "decode-trace" lines a -DFLASHATTN_DECODE_TRACE
build prints (src/cuda/decode/decode_trace.cuh; tools/profile/decode_step.py --trace): the
launches told apart by gaps in the blocks' start times, the first one dropped (it ran before the
graph's capture), and for the rest each phase boundary's time after the launch's first block
started, in microseconds, over the blocks (min, median, max; medians over launches), beside the
SM clock the cycle counts were converted at.

    python3 decode_step.py --trace --steps 5 ... | python3 decode_trace_report.py
"""
import statistics
import sys

# decode_trace.cuh's DecodeTracePoint, in order: kTraceTiles = TILES tile marks from TILE0.
POINTS = ["entry", "block known", "tiles issued", "loop start", "tile 0 landed", "tile 1 landed",
          "tile 2 landed", "tile 3 landed", "loop end", "warps merged", "rows written"]
TILE0, TILES = POINTS.index("tile 0 landed"), 4


def main() -> None:
    blocks = []
    for line in sys.stdin:
        if not line.startswith("decode-trace"):
            continue
        f = line.split()
        t0, t1, tiles = int(f[7]), int(f[9]), int(f[11])
        clk = [int(x) for x in f[13:13 + len(POINTS)]]
        blocks.append((t0, t1, tiles, clk, int(f[5])))
    if not blocks:
        print("no decode-trace lines (a build without -DFLASHATTN_DECODE_TRACE?)")
        return
    blocks.sort()
    launches, cur = [], [blocks[0]]
    for b in blocks[1:]:
        if b[0] - cur[-1][0] > 50_000:  # 50 us: a new launch
            launches.append(cur)
            cur = []
        cur.append(b)
    launches.append(cur)
    if len(launches) > 1:
        launches = launches[1:]
    # ns per cycle from each block's start and end on both clocks.
    rates = [(b[1] - b[0]) / b[3][-1] for ln in launches for b in ln if b[3][-1] > 0]
    ns_per_clk = statistics.median(rates)
    print(f"{len(launches)} launches of {len(launches[0])} blocks, tiles per block "
          f"{sorted({b[2] for b in launches[0]})}, SM clock {1 / ns_per_clk:.2f} GHz, "
          f"blocks per SM {max(sum(1 for b in launches[0] if b[4] == s) for s in {b[4] for b in launches[0]})}")
    print(f"{'us after the first block started':34}{'min':>8}{'median':>8}{'max':>8}")
    rows = {p: [[], [], []] for p in POINTS + ["block end (globaltimer)"]}
    for ln in launches:
        start = ln[0][0]
        for i, p in enumerate(POINTS):
            v = sorted((b[0] - start + b[3][i] * ns_per_clk) / 1000 for b in ln
                       if i < TILE0 + min(b[2], TILES) or i >= TILE0 + TILES)
            if v:
                for k, x in enumerate((v[0], v[len(v) // 2], v[-1])):
                    rows[p][k].append(x)
        v = sorted((b[1] - start) / 1000 for b in ln)
        for k, x in enumerate((v[0], v[len(v) // 2], v[-1])):
            rows["block end (globaltimer)"][k].append(x)
    for p, cols in rows.items():
        if cols[0]:
            print(f"  {p:32}" + "".join(f"{statistics.median(c):8.2f}" for c in cols))


if __name__ == "__main__":
    main()
