"""tools/profile/sm90_trace.py's report on synthetic trace lines (the GPU trace build prints them;
src/cuda/sm90/sm90_trace.cuh): the phases come out as the stamps were laid, the steady step's five
parts add up to the turn spacing, and a line of the wrong length is not taken for a trace."""
import io
import re
from contextlib import redirect_stdout

from helpers import load_tool


# The steady step's parts (clocks): S_j wait, softmax, P V wait, pack, next turn wait.
STEP = (600, 1300, 100, 200, 1756)


def trace_line(mod, blk, c, rnd, clk0, tiles=6):
    """One work tile's line, its stamps laid from clk0 by fixed phase lengths."""
    at = {}
    t = clk0
    for name, dt in (("top", 0), ("q", 900), ("turn0", 250), ("s0", 1000), ("p0", 1300)):
        t += dt
        at[name] = t
    t += 277
    for j in range(1, mod.TURNS + 1):
        at[f"turn{j}"] = t
        for name, dt in zip(("s", "softmax", "pv", "pack"), STEP[:4]):
            t += dt
            at[f"{name}{j}"] = t
        t += STEP[4]
    at["last turn"] = t
    at["last pv"] = t + 1000
    at["stored"] = t + 2700
    clk = " ".join(str(at[p] & 0xFFFFFFFF) for p in mod.POINTS)
    return (f"sm90-trace blk {blk} sm {blk} c {c} round {rnd} tile {blk * 8 + rnd} tiles {tiles} "
            f"t0 {1_000_000 + rnd * 20_000} clk {clk}")


def test_sm90_trace_report_splits_the_steady_step():
    mod = load_tool("tools/profile/sm90_trace.py")
    assert len(mod.POINTS) == 28  # sm90_trace.cuh's kSm90TracePoints
    lines = [trace_line(mod, blk, c, rnd, 10_000 + rnd * 40_000 + c * 2_000)
             for blk in range(2) for c in range(2) for rnd in range(3)]
    # Cut short (or from a build with other points), inside the launch: left out, not misread.
    lines.append("sm90-trace blk 9 sm 9 c 0 round 1 tile 3 tiles 6 t0 1000005 clk 1 2 3")
    out = io.StringIO()
    with redirect_stdout(out):
        mod.report(lines)
    text = out.getvalue()

    def median(label):
        m = re.search(re.escape(label) + r"\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", text)
        assert m, f"no row {label!r} in:\n{text}"
        return int(m.group(2))

    assert median("turn spacing (turn j -> j+1)") == sum(STEP)
    assert median("S_j wait (turn j -> s j)") == STEP[0]
    assert median("softmax (s j -> softmax j)") == STEP[1]
    assert median("P V wait (softmax j -> pv j)") == STEP[2]
    assert median("pack, rescale (pv j -> pack j)") == STEP[3]
    assert median("next turn wait (pack j -> turn j+1)") == STEP[4]
    assert median("its softmax (s0 -> p0)") == 1300
    assert median("epilogue (last pv -> stored)") == 1700
    assert "2 blocks, 2 consumers" in text
