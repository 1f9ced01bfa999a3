"""python -m flashattn.bench: flashattn's CUDA backends side by side with PyTorch's SDPA backends
(cuDNN, FlashAttention-2, memory-efficient) and FlexAttention, in one process, on the same
inputs.

Default grid (FlashAttention's benchmark grid), bf16: head dims 64/128/256 x causal on/off x
seqlen 512..16k with batch * seqlen = 16384 and heads = 2048 / head_dim; plus GQA (64 query heads
on 8 kv heads, d128, batch 1, 8k/16k/32k, causal on/off). Every cell gets fresh random inputs;
its backends alternate round-robin, each timed >= 10 times with CUDA events after warm-up, L2
flushed before every run; the median counts.

TFLOP/s follow FlashAttention's convention: 4 * batch * heads * seqlen_q * seqlen_k * head_dim
per forward, halved for causal. Each cell also shows the ratio to cuDNN; the last line is the
geometric mean over the cells.

    python -m flashattn.bench                                  # the default grid
    python -m flashattn.bench --head-dims 128 --seqlens 2k,16k --causal yes --check
    python -m flashattn.bench --json out.json --plot out.png
    python -m flashattn.bench --batch 2 --heads 32 --kv-heads 4 --seqlens 4k --no-gqa --dtype fp16
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional

import flashattn

from ._bench_runners import PEER_DESCRIPTIONS, PEERS

DEFAULT_HEAD_DIMS = [64, 128, 256]
DEFAULT_SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
DEFAULT_TOKENS = 16384       # batch = tokens / seqlen
DEFAULT_HEAD_BUDGET = 2048   # heads = budget / head_dim
GQA_HEADS, GQA_KV_HEADS, GQA_HEAD_DIM, GQA_BATCH = 64, 8, 128, 1
DEFAULT_GQA_SEQLENS = [8192, 16384, 32768]
FLOP_CONVENTION = ("TFLOP/s = 4 * batch * heads * seqlen_q * seqlen_k * head_dim / time, halved "
                   "for causal (FlashAttention's convention)")
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


@dataclass(frozen=True)
class Cell:
    hd: int
    causal: bool
    L: int     # seqlen_q = seqlen_k
    B: int
    H: int
    KVH: int

    def label(self) -> str:
        return f"d{self.hd} {'causal' if self.causal else 'full'} L={self.L} B={self.B} " \
               f"H={self.H}/{self.KVH}"

    def flops(self) -> float:
        f = 4.0 * self.B * self.H * self.L * self.L * self.hd
        return f / 2 if self.causal else f


# ---- arguments ----

def int_list(text: str) -> List[int]:
    """"512,1k,16k" -> [512, 1024, 16384]."""
    values = []
    for item in text.split(","):
        item = item.strip().lower()
        scale = 1024 if item.endswith("k") else 1
        try:
            values.append(int(item[:-1] if scale > 1 else item) * scale)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer list: {text!r}") from None
    return values


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m flashattn.bench", description=__doc__,
        epilog="Peers: " + "; ".join(f"{k} = {v}" for k, v in PEER_DESCRIPTIONS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", choices=list(DTYPES), default="bf16", help="default: bf16")
    p.add_argument("--head-dims", type=int_list, default=DEFAULT_HEAD_DIMS, metavar="LIST",
                   help="default: 64,128,256")
    p.add_argument("--seqlens", type=int_list, default=DEFAULT_SEQLENS, metavar="LIST",
                   help="seqlen_q = seqlen_k values, 1k = 1024 (default: 512,1k,2k,4k,8k,16k)")
    p.add_argument("--causal", choices=["both", "yes", "no"], default="both",
                   help="default: both")
    p.add_argument("--tokens", type=int, default=DEFAULT_TOKENS,
                   help=f"batch = tokens / seqlen unless --batch is given (default: "
                        f"{DEFAULT_TOKENS})")
    p.add_argument("--batch", type=int, default=None, help="fixed batch for every cell")
    p.add_argument("--heads", type=int, default=None,
                   help=f"query heads (default {DEFAULT_HEAD_BUDGET} / head_dim)")
    p.add_argument("--kv-heads", type=int, default=None, help="kv heads (default: --heads)")
    p.add_argument("--no-gqa", action="store_true",
                   help=f"leave out the GQA cells ({GQA_HEADS}/{GQA_KV_HEADS} heads, "
                        f"d{GQA_HEAD_DIM}, batch {GQA_BATCH})")
    p.add_argument("--gqa-seqlens", type=int_list, default=DEFAULT_GQA_SEQLENS, metavar="LIST",
                   help="default: 8k,16k,32k")
    p.add_argument("--backends", default=None, metavar="LIST",
                   help="comma-separated names: flashattn backends (default: every usable CUDA "
                        "backend but naive) and peers " + ",".join(PEERS) + " (default: all)")
    p.add_argument("--repeats", type=int, default=10,
                   help="timed runs per backend and cell (default: 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs first (default: 3)")
    p.add_argument("--check", action="store_true",
                   help="also report each backend's max error against a float64 reference")
    p.add_argument("--check-rows", type=int, default=256,
                   help="query rows checked: the last ones, batch 0, every head (default: 256)")
    p.add_argument("--flex-static", action="store_true",
                   help="compile FlexAttention per shape (default: dynamic=True, one compile per "
                        "head dim and mask)")
    p.add_argument("--device", type=int, default=0, help="CUDA device index (default: 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="write every cell and the summary as JSON")
    p.add_argument("--plot", metavar="FILE.png", help="TFLOP/s vs seqlen (matplotlib)")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        p.error("--repeats must be >= 1 and --warmup >= 0")
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            p.error("--plot needs matplotlib (pip install matplotlib)")
    if args.backends is not None:
        known = [b.name for b in flashattn.list_backends() if b.device == "cuda"] + list(PEERS)
        args.backends = [n.strip() for n in args.backends.split(",") if n.strip()]
        unknown = [n for n in args.backends if n not in known]
        if unknown:
            p.error(f"unknown backend(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return args


def build_grid(args: argparse.Namespace) -> List[Cell]:
    modes = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    cells = []
    for hd in args.head_dims:
        for causal in modes:
            for L in args.seqlens:
                batch = args.batch or max(1, args.tokens // L)
                heads = args.heads or max(1, DEFAULT_HEAD_BUDGET // hd)
                cells.append(Cell(hd, causal, L, batch, heads, args.kv_heads or heads))
    if not args.no_gqa:
        for causal in modes:
            for L in args.gqa_seqlens:
                cells.append(Cell(GQA_HEAD_DIM, causal, L, GQA_BATCH, GQA_HEADS, GQA_KV_HEADS))
    return cells


def backend_names(args: argparse.Namespace) -> List[str]:
    from ._bench_runners import flashattn_cuda_backends

    if args.backends is not None:
        return args.backends
    return flashattn_cuda_backends() + list(PEERS)


# ---- one cell ----

def make_inputs(cell: Cell, dtype, device, seed: int):
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    shapes = ((cell.B, cell.L, cell.H, cell.hd), (cell.B, cell.L, cell.KVH, cell.hd),
              (cell.B, cell.L, cell.KVH, cell.hd))
    # normal + 0.5, as the tests: never time (or check) zeros
    return tuple(torch.randn(s, generator=g, device=device).add_(0.5).to(dtype) for s in shapes)


def check_errors(cell: Cell, q, k, v, runners, rows: int) -> Dict[str, float]:
    """max|O - O_ref| per backend over the last `rows` query rows of batch 0 (every head), against
    float64 on the GPU; "floor" is the dtype's rounding of O_ref there. Taking the last rows keeps
    the bottom-right causal alignment exact."""
    from ._reference import attention_torch

    r = min(rows, cell.L)
    ref, _ = attention_torch(q[:1, -r:], k[:1], v[:1], causal=cell.causal)
    errors = {"floor": (ref.to(q.dtype).double() - ref).abs().max().item()}
    for name, run in runners.items():
        try:
            out = run()
        except Exception:  # it ran while timed; if it fails now, the table shows n/a
            continue
        if name in PEERS:
            out = out.transpose(1, 2)  # BHSD -> BSHD
        err = (out[:1, -r:].double() - ref).abs().max().item()
        errors[name] = err if math.isfinite(err) else float("inf")
    return errors


def sig4(x: float) -> float:
    """Four significant digits: what the timings support."""
    return float(f"{x:.4g}")


def run_cell(cell: Cell, names: List[str], args, dtype, device, flusher, flex, seed: int) -> dict:
    from ._bench_runners import build_runners
    from ._bench_timing import time_round_robin, warm_up

    q, k, v = make_inputs(cell, dtype, device, seed)
    runners, not_available = build_runners(names, q, k, v, cell.causal, flex)
    not_available.update(warm_up(runners, max(1, args.warmup)))
    runners = {n: r for n, r in runners.items() if n not in not_available}
    ms, failed = time_round_robin(runners, args.repeats, flusher) if runners else ({}, {})
    not_available.update(failed)
    runners = {n: r for n, r in runners.items() if n not in failed}
    row = asdict(cell)
    for name in names:
        row[name] = sig4(cell.flops() / (ms[name] * 1e-3) / 1e12) if name in ms else None
    cudnn = row.get("cudnn")
    row["ratio_to_cudnn"] = {n: round(row[n] / cudnn, 3) for n in names
                             if row[n] is not None and cudnn}
    row["ms"] = {n: sig4(t) for n, t in ms.items()}
    row["na"] = not_available
    if args.check:
        row["check"] = check_errors(cell, q, k, v, runners, args.check_rows)
    return row


# ---- output ----

COL = 14


def header_line(names: List[str]) -> str:
    return f"{'hd':>4} {'causal':>6} {'seqlen':>6} {'batch':>5} {'heads':>6} |" + \
        "".join(f"{n:>{COL}} |" for n in names)


def tflops_text(x: float) -> str:
    return f"{x:.1f}" if x >= 1 else f"{x:.2g}"


def value_cell(tflops: Optional[float], ratio: Optional[float]) -> str:
    """"  123.4 0.21x |": TFLOP/s and the ratio to cuDNN, in COL characters."""
    if tflops is None:
        return f"{'n/a':>{COL}} |"
    if ratio is None:
        return f"{tflops_text(tflops):>{COL}} |"
    return f"{tflops_text(tflops):>{COL - 7}} {ratio:>5.2f}x |"


def row_line(row: dict, names: List[str]) -> str:
    cells = [value_cell(row[n], row["ratio_to_cudnn"].get(n)) for n in names]
    heads = f"{row['H']}/{row['KVH']}" if row["H"] != row["KVH"] else str(row["H"])
    return f"{row['hd']:>4} {'yes' if row['causal'] else 'no':>6} {row['L']:>6} {row['B']:>5} " \
           f"{heads:>6} |" + "".join(cells)


def geomean(values: List[float]) -> Optional[float]:
    values = [x for x in values if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in values) / len(values)) if values else None


def summary(rows: List[dict], names: List[str]) -> dict:
    out = {}
    for n in names:
        tflops = geomean([r[n] for r in rows])
        ratio = geomean([r["ratio_to_cudnn"].get(n) for r in rows])
        cells = sum(r[n] is not None for r in rows)
        out[n] = {"geomean_tflops": tflops and sig4(tflops),
                  "geomean_ratio_to_cudnn": ratio and round(ratio, 3), "cells": cells}
    return out


def summary_line(s: dict, names: List[str]) -> str:
    cells = [value_cell(s[n]["geomean_tflops"], s[n]["geomean_ratio_to_cudnn"]) for n in names]
    return f"{'geometric mean':<32}|" + "".join(cells)


def not_available_notes(rows: List[dict]) -> List[str]:
    """One line per (backend, reason), with the cells it applies to."""
    by_reason: Dict[tuple, List[str]] = {}
    for r in rows:
        label = Cell(r["hd"], r["causal"], r["L"], r["B"], r["H"], r["KVH"]).label()
        for name, reason in r["na"].items():
            by_reason.setdefault((name, reason), []).append(label)
    lines = []
    for (name, reason), labels in by_reason.items():
        where = labels[0] if len(labels) == 1 else f"{len(labels)} cells, e.g. {labels[0]}"
        lines.append(f"  n/a {name} ({where}): {reason}")
    return lines


def check_table(rows: List[dict], names: List[str], check_rows: int) -> List[str]:
    lines = [f"max|O - O_ref| against float64 (batch 0, last {check_rows} query rows, every "
             "head); floor = the dtype's rounding of O_ref",
             f"{'cell':<32}|{'floor':>10} |" + "".join(f"{n:>{COL}} |" for n in names)]
    for r in rows:
        c = r.get("check", {})
        label = Cell(r["hd"], r["causal"], r["L"], r["B"], r["H"], r["KVH"]).label()
        vals = "".join(f"{c[n]:>{COL}.3g} |" if n in c else f"{'n/a':>{COL}} |" for n in names)
        lines.append(f"{label:<32}|{c.get('floor', float('nan')):>10.3g} |" + vals)
    return lines


# ---- main ----

def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if not flashattn.TORCH_AVAILABLE:
        print("flashattn.bench: needs PyTorch (the peers are torch's SDPA backends)",
              file=sys.stderr)
        return 1
    import torch

    if not torch.cuda.is_available():
        print("flashattn.bench: no CUDA device (torch.cuda.is_available() is False); the "
              "benchmark needs one", file=sys.stderr)
        return 1
    if args.device >= torch.cuda.device_count():
        print(f"flashattn.bench: --device {args.device}, but there are "
              f"{torch.cuda.device_count()} CUDA devices", file=sys.stderr)
        return 1
    from ._bench_runners import FlexCompiler
    from ._bench_timing import L2_FLUSH_BYTES, L2Flusher, one_line

    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)
    dtype = getattr(torch, DTYPES[args.dtype])
    names = backend_names(args)
    flex, flex_note = None, ""
    if "flex" in names:
        try:
            flex = FlexCompiler(static=args.flex_static)
            flex_note = f"flex: torch.compile(flex_attention), {flex.mode}"
        except Exception as e:
            flex_note = f"flex: n/a ({one_line(e)})"
    grid = build_grid(args)

    meta = {
        "device": torch.cuda.get_device_name(device), "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "flashattn": flashattn.__version__,
        "dtype": args.dtype, "flops": FLOP_CONVENTION, "repeats": args.repeats,
        "warmup": args.warmup, "l2_flush_bytes": L2_FLUSH_BYTES, "backends": names,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    print(f"flashattn.bench: {meta['device']}, torch {meta['torch']}, cuDNN {meta['cudnn']}, "
          f"flashattn {meta['flashattn']}, {args.dtype}, {len(grid)} cells")
    print(FLOP_CONVENTION + "; (r.rrx) = ratio to cuDNN in the same cell")
    print(f"Median of {args.repeats} CUDA-event timings per backend and cell after {args.warmup} "
          f"warm-up runs, L2 flushed ({L2_FLUSH_BYTES >> 20} MiB write) before each; backends "
          "alternate within a cell; fresh random inputs per cell")
    if flex_note:
        print(flex_note)
    print()
    print(header_line(names))
    flusher = L2Flusher(device)
    rows = []
    for i, cell in enumerate(grid):
        row = run_cell(cell, names, args, dtype, device, flusher, flex, seed=args.seed + i)
        rows.append(row)
        print(row_line(row, names), flush=True)
    totals = summary(rows, names)
    print(summary_line(totals, names))
    notes = not_available_notes(rows)
    if notes:
        print("\n".join(["", "Not available:"] + notes))
    if args.check:
        print()
        print("\n".join(check_table(rows, names, args.check_rows)))

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "summary": totals}, f, indent=1)
        print(f"\nwrote {args.json}")
    if args.plot:
        from ._bench_plot import plot

        plot(rows, names, args.plot,
             f"{meta['device']}, {args.dtype}, forward; {FLOP_CONVENTION}")
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
