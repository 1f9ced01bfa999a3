"""Where a flash-sm90 work tile's time goes, from a -DFLASHATTN_SM90_TRACE build
(src/cuda/sm90/sm90_trace.cuh; scripts/device_sm90_trace.sh builds it and runs this).

    python3 sm90_trace.py run --head-dim 128 --seqlen 512 --batch 32 --heads 16 > raw.txt
    python3 sm90_trace.py report < raw.txt

`run` calls flash-sm90 on one shape (bf16, N(0.5, 1) inputs like the benchmark) a few times, an
L2 flush before each, and the kernel prints one "sm90-trace" line per consumer warpgroup and
traced work tile (the first rounds of every block). `report` keeps the last launch and gives,
per phase of consume(), the median clocks over the work tiles after each block's first (the
first pays the cold start): the wait for Q, for the first turn, the first S, its softmax, the
wait for the second turn, the spacing of the next turns (one per key tile: both consumers' S and
P V), the last P V and the epilogue; then a work tile's clocks against its key tiles at the
steady spacing: the fixed cost per work tile, in key tiles. Then the steady step (key tiles 1 to
TURNS of each work tile) split where its time goes: the wait for S_j after its turn began, the
softmax, the wait for the previous P V, P's packing and O's rescale, and the wait for the next
turn; the five add up to the turn spacing.
"""
import argparse
import statistics
import sys

# sm90_trace.cuh's Sm90TracePoint, in order (kSm90TraceTurns = TURNS turn marks, turn1 on).
TURNS = 4
POINTS = (["top", "q", "turn0", "s0", "p0"] + [f"turn{j}" for j in range(1, TURNS + 1)] +
          ["last turn", "last pv", "stored"] +
          [f"{m}{j}" for m in ("s", "softmax", "pv", "pack") for j in range(1, TURNS + 1)])


def run(a) -> None:
    import torch

    import flashattn

    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    shape_q = (a.batch, a.seqlen, a.heads, a.head_dim)
    shape_k = (a.batch, a.seqlen, a.kv_heads or a.heads, a.head_dim)
    q = torch.randn(shape_q, device=dev, dtype=dt).add_(0.5)
    k = torch.randn(shape_k, device=dev, dtype=dt).add_(0.5)
    v = torch.randn(shape_k, device=dev, dtype=dt).add_(0.5)
    window = tuple(int(x) for x in a.window.split(",")) if a.window else (-1, -1)
    flush = torch.empty(256 << 18, dtype=torch.float32, device=dev)
    for _ in range(a.launches):
        flush.fill_(1)
        torch.cuda.synchronize()
        flashattn.flash_attn_func(q, k, v, causal=a.causal, window_size=window,
                                  softcap=a.softcap, backend="flash-sm90")
        torch.cuda.synchronize()  # the kernel's printf lands; launches stay apart in time


def parse(lines):
    rows = []
    for line in lines:
        if not line.startswith("sm90-trace"):
            continue
        f = line.split()
        if len(f) != 16 + len(POINTS):  # another build's point count, or a line cut short
            continue
        rows.append({"blk": int(f[2]), "sm": int(f[4]), "c": int(f[6]), "round": int(f[8]),
                     "tile": int(f[10]), "tiles": int(f[12]), "t0": int(f[14]),
                     "clk": [int(x) for x in f[16:16 + len(POINTS)]]})
    return rows


def last_launch(rows):
    rows = sorted(rows, key=lambda r: r["t0"])
    start = 0
    for i in range(1, len(rows)):
        if rows[i]["t0"] - rows[i - 1]["t0"] > 100_000:  # 100 us apart: another launch
            start = i
    return rows[start:]


def report(lines) -> None:
    rows = parse(lines)
    if not rows:
        print("no sm90-trace lines (a build without -DFLASHATTN_SM90_TRACE?)")
        return
    rows = last_launch(rows)
    by = {(r["blk"], r["c"], r["round"]): r for r in rows}
    consumers = sorted({r["c"] for r in rows})
    blocks = sorted({r["blk"] for r in rows})
    # ns per SM clock: the global timer against the clock between a block's first and last
    # traced round.
    rates = []
    for b in blocks:
        rs = sorted((r for r in rows if r["blk"] == b and r["c"] == 0), key=lambda r: r["round"])
        if len(rs) > 1:
            dclk = (rs[-1]["clk"][0] - rs[0]["clk"][0]) & 0xFFFFFFFF
            if dclk > 0:
                rates.append((rs[-1]["t0"] - rs[0]["t0"]) / dclk)
    ghz = 1 / statistics.median(rates) if rates else float("nan")
    tiles = sorted({r["tiles"] for r in rows})
    print(f"{len(blocks)} blocks, {len(consumers)} consumers, rounds traced "
          f"{max(r['round'] for r in rows) + 1}, key tiles per work tile {tiles}, "
          f"SM clock {ghz:.2f} GHz")

    def d(r, a, b):
        return (r["clk"][POINTS.index(b)] - r["clk"][POINTS.index(a)]) & 0xFFFFFFFF

    phases = {}

    def add(name, x):
        phases.setdefault(name, []).append(x)

    for r in rows:
        if r["round"] == 0 or r["tiles"] == 0:
            continue  # the cold start; a tile without keys has no turns
        n = r["tiles"]
        add("Q wait (top -> q)", d(r, "top", "q"))
        add("first turn wait (q -> turn0)", d(r, "q", "turn0"))
        add("first S (turn0 -> s0)", d(r, "turn0", "s0"))
        add("its softmax (s0 -> p0)", d(r, "s0", "p0"))
        if n > 1:
            add("second turn wait (p0 -> turn1)", d(r, "p0", "turn1"))
        for j in range(1, min(n - 1, TURNS)):
            add("turn spacing (turn j -> j+1)", d(r, f"turn{j}", f"turn{j + 1}"))
            add("  S_j wait (turn j -> s j)", d(r, f"turn{j}", f"s{j}"))
            add("  softmax (s j -> softmax j)", d(r, f"s{j}", f"softmax{j}"))
            add("  P V wait (softmax j -> pv j)", d(r, f"softmax{j}", f"pv{j}"))
            add("  pack, rescale (pv j -> pack j)", d(r, f"pv{j}", f"pack{j}"))
            add("  next turn wait (pack j -> turn j+1)", d(r, f"pack{j}", f"turn{j + 1}"))
        if 1 < n <= TURNS + 1:
            add("last turn wait (turn n-1 -> last turn)", d(r, f"turn{n - 1}", "last turn"))
        add("last P V (last turn -> last pv)", d(r, "last turn", "last pv"))
        add("epilogue (last pv -> stored)", d(r, "last pv", "stored"))
        nxt = by.get((r["blk"], r["c"], r["round"] + 1))
        if nxt is not None:
            add("work tile (top -> next top)", (nxt["clk"][0] - r["clk"][0]) & 0xFFFFFFFF)
        if r["c"] > 0:
            c0 = by.get((r["blk"], 0, r["round"]))
            if c0 is not None:
                turn0 = POINTS.index("turn0")
                add(f"consumer {r['c']} first turn after consumer 0's",
                    (r["clk"][turn0] - c0["clk"][turn0]) & 0xFFFFFFFF)
    print(f"{'clocks, work tiles after each block first':48}{'p10':>8}{'median':>8}{'p90':>8}{'n':>6}")
    for name, xs in phases.items():
        xs = sorted(xs)
        print(f"{name:48}{xs[len(xs) // 10]:>8}{statistics.median(xs):>8.0f}"
              f"{xs[(9 * len(xs)) // 10]:>8}{len(xs):>6}")
    spacing = statistics.median(phases.get("turn spacing (turn j -> j+1)", [0])) or None
    tile = phases.get("work tile (top -> next top)")
    if spacing and tile:
        n = statistics.median([r["tiles"] for r in rows if r["round"] > 0])
        w = statistics.median(tile)
        print(f"work tile {w:.0f} clocks for {n:.0f} key tiles at {spacing:.0f} a key tile: fixed "
              f"cost {(w - n * spacing):.0f} clocks = {(w - n * spacing) / spacing:.2f} key tiles "
              f"({(w - n * spacing) / ghz / 1000:.2f} us)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="call flash-sm90 on one shape (a trace build prints)")
    r.add_argument("--head-dim", type=int, default=128)
    r.add_argument("--seqlen", type=int, default=512)
    r.add_argument("--batch", type=int, default=32)
    r.add_argument("--heads", type=int, default=16)
    r.add_argument("--kv-heads", type=int, default=0)
    r.add_argument("--causal", action="store_true")
    r.add_argument("--window", default="", help="L,R")
    r.add_argument("--softcap", type=float, default=0.0)
    r.add_argument("--launches", type=int, default=3)
    sub.add_parser("report", help="read run's output on stdin")
    a = p.parse_args()
    if a.cmd == "run":
        run(a)
    else:
        report(sys.stdin)


if __name__ == "__main__":
    main()
