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

Variants (--variants): each attention variant beside the dense case and beside torch's
equivalent, same process, same inputs, same timing. Default: bf16, d128, 16 heads (2048 /
head_dim), batch 1 x 16k tokens (batch = --tokens / seqlen), causal off and on, rows:
  dense             the reference rows; peers cuDNN, FA2, memory-efficient, Flex
  window (1024, 0)  window_size = (left, right) (--window); Flex with a sliding-window block mask;
                    compared with the causal dense row when right = 0 (SDPA has no windows)
  softcap 30        softcap (--softcap); Flex with score_mod cap * tanh(score / cap)
  alibi             alibi_slopes 2^(-8 i / heads); Flex with score_mod score - slope * |i - j|
  sinks             one float32 logit per head; Flex has no sinks: flex_attention with its LSE,
                    then O / (1 + exp(sink - lse)), timed as one runner with that correction
  varlen 32 seqs    flash_attn_varlen_func on 32 sequences of random lengths (seeded) summing to
                    32k tokens (--varlen 32x32k, or a list of lengths); Flex with a document
                    block mask, and torch's varlen_attn (FA2) where torch has it
TFLOP/s count each row's real FLOPs (a window only the (query, key) pairs it keeps, exactly;
varlen the sum of len^2 over its sequences, halved for causal), so they compare with the dense
row's; each row also shows its time and TFLOP/s relative to the same backend's dense call of its
shape, timed again inside the row, alternating with it (t/dense, TF/dense: both under the same
clocks, whatever heat the rows before left), how that dense call's time compares with the dense
row's own (drift), and our speed relative to Flex. A backend that does not implement a variant shows "unsupported: <why>".
--check compares every output with a float64 reference of that variant (the library's, on the
last --check-rows query rows) and ours with Flex's.

    python -m flashattn.bench --variants                        # the default variant table
    python -m flashattn.bench --variants --head-dims 128 --seqlens 16k --check --json v.json
    python -m flashattn.bench --variants window,softcap --window 1024,0 --window 256,256
    python -m flashattn.bench --variants softcap,alibi --softcap 30,50 --causal yes
    python -m flashattn.bench --variants varlen --varlen 64x64k --backends flash-sm80,flex,fa2

Decode (--decode): one KV-cache decode step per cell, flash_attn_with_kvcache (flash-decode, the
new tokens appended at cache_seqlens, causal bottom-right, num_splits=0) beside torch SDPA's cuDNN
and FlashAttention-2 backends (enable_gqa, contiguous cache only), each eager and replayed from a
CUDA graph. Default grid, bf16 d128: heads 32/8 and 64/8 x batch 1, 8, 64, 128 x cache 1k, 8k,
32k, 128k x 1 and 4 new tokens x contiguous and paged (page 16, 64, 256; the block table a random
permutation of the pages); a cell whose K + V cache would exceed 60% of the GPU memory available
is skipped and says so. Each cell shows microseconds and effective bandwidth (K and V bytes of
the cache read / time, TB/s) per runner and ours/cuDNN (cuDNN's time / ours, same mode); the
summary gives its geometric mean over the cells where cuDNN ran. --check compares ours and
cuDNN with a float64 reference (sequences 0 and batch - 1) and the graph replay with eager.

    python -m flashattn.bench --decode                          # the whole decode grid
    python -m flashattn.bench --decode --decode-batches 8,64 --decode-cache-lens 8k,32k \\
        --decode-heads 32/8 --decode-pages 0,64 --decode-new-tokens 1 --check
    python -m flashattn.bench --decode --decode-modes graph --json d.json --plot d.png
"""
from __future__ import annotations

import argparse
import datetime
import math
import sys
import textwrap
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Tuple

import flashattn

from . import _bench_decode as bd
from . import _bench_telemetry as bt
from . import _bench_variants as bv
from ._bench_output import write_json
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
DEFAULT_CHECK_ROWS = 256


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
    p.add_argument("--head-dims", type=int_list, default=None, metavar="LIST",
                   help="default: 64,128,256 (--variants: 128)")
    p.add_argument("--seqlens", type=int_list, default=None, metavar="LIST",
                   help="seqlen_q = seqlen_k values, 1k = 1024 (default: 512,1k,2k,4k,8k,16k; "
                        "--variants: 16k)")
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
                   help=f"the dense grid: leave out the GQA cells ({GQA_HEADS}/{GQA_KV_HEADS} "
                        f"heads, d{GQA_HEAD_DIM}, batch {GQA_BATCH})")
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
    p.add_argument("--check-rows", type=int, default=DEFAULT_CHECK_ROWS,
                   help="query rows checked: the last ones, batch 0, every head (--variants: "
                        "varlen's longest sequence) (default: 256)")
    p.add_argument("--flex-static", action="store_true",
                   help="compile FlexAttention per shape (default: dynamic=True, one compile per "
                        "head dim and mask)")
    p.add_argument("--variants", nargs="?", const="all", default=None, metavar="LIST",
                   help="time the variant table instead of the grid: all (the default with no "
                        "LIST) or a comma list of " + ",".join(bv.VARIANTS) + " (dense is "
                        "always there: the reference rows)")
    p.add_argument("--window", action="append", default=None, metavar="LEFT,RIGHT",
                   help="--variants: a window_size row, -1 unbounded (write --window=-1,8 when "
                        "LEFT is negative); repeat for more (default: "
                        f"{bv.DEFAULT_WINDOW[0]},{bv.DEFAULT_WINDOW[1]})")
    p.add_argument("--softcap", default=None, metavar="LIST",
                   help=f"--variants: softcap values (default: {bv.DEFAULT_SOFTCAP:g})")
    p.add_argument("--varlen", nargs="?", const=bv.DEFAULT_VARLEN, default=None, metavar="SPEC",
                   help="--variants: COUNTxTOTAL sequences of random lengths (seeded by --seed) "
                        "or a comma list of lengths (default: 32x32k; heads and head dims as "
                        "the other rows)")
    p.add_argument("--decode", action="store_true",
                   help="time the decode grid instead (flash_attn_with_kvcache against SDPA "
                        "cuDNN and FA2, eager and CUDA graph; --head-dims: 128 by default)")
    p.add_argument("--decode-batches", default=None, metavar="LIST",
                   help="--decode: batch sizes (default: 1,8,64,128)")
    p.add_argument("--decode-cache-lens", default=None, metavar="LIST",
                   help="--decode: keys per sequence after the step, 1k = 1024 (default: "
                        "1k,8k,32k,128k)")
    p.add_argument("--decode-heads", default=None, metavar="LIST",
                   help="--decode: HEADS/KV_HEADS pairs (default: 32/8,64/8)")
    p.add_argument("--decode-new-tokens", default=None, metavar="LIST",
                   help="--decode: new query tokens per step, appended to the cache (default: "
                        "1,4)")
    p.add_argument("--decode-pages", default=None, metavar="LIST",
                   help="--decode: page sizes, 0 = the contiguous cache (default: 0,16,64,256)")
    p.add_argument("--decode-modes", default=None, metavar="LIST",
                   help="--decode: eager, graph (replayed from a CUDA graph) or both (default: "
                        "eager,graph)")
    p.add_argument("--device", type=int, default=0, help="CUDA device index (default: 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="FILE", help="write every cell and the summary as JSON")
    p.add_argument("--plot", metavar="FILE.png",
                   help="TFLOP/s vs seqlen (--decode: TB/s vs cache length) (matplotlib)")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        p.error("--repeats must be >= 1 and --warmup >= 0")
    parse_decode_args(p, args)
    if not args.decode:
        parse_variant_args(p, args)
    if args.plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            p.error("--plot needs matplotlib (pip install matplotlib)")
    if args.backends is not None:
        peers = bd.DECODE_PEERS if args.decode else PEERS
        known = [b.name for b in flashattn.list_backends() if b.device == "cuda"] + list(peers)
        args.backends = [n.strip() for n in args.backends.split(",") if n.strip()]
        unknown = [n for n in args.backends if n not in known]
        if unknown:
            p.error(f"unknown backend(s) {', '.join(unknown)}"
                    f"{' for --decode' if args.decode else ''}; known: {', '.join(known)}")
    return args


# The flags of the dense grid and the variant table, with their defaults: given with --decode
# they would go unread.
DENSE_GRID_FLAGS = {
    "--seqlens": ("seqlens", None), "--causal": ("causal", "both"),
    "--tokens": ("tokens", DEFAULT_TOKENS), "--batch": ("batch", None),
    "--heads": ("heads", None), "--kv-heads": ("kv_heads", None), "--no-gqa": ("no_gqa", False),
    "--gqa-seqlens": ("gqa_seqlens", DEFAULT_GQA_SEQLENS),
    "--check-rows": ("check_rows", DEFAULT_CHECK_ROWS), "--flex-static": ("flex_static", False),
    "--variants": ("variants", None), "--window": ("window", None),
    "--softcap": ("softcap", None), "--varlen": ("varlen", None)}


def parse_decode_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Resolves the decode grid's options into args.decode_* lists (and head_dims: 128 by
    default). A --decode-* option without --decode, or a flag of the dense grid or the variant
    table with it, is an error: no option goes unread."""
    decode_flags = {"--decode-batches": args.decode_batches,
                    "--decode-cache-lens": args.decode_cache_lens,
                    "--decode-heads": args.decode_heads,
                    "--decode-new-tokens": args.decode_new_tokens,
                    "--decode-pages": args.decode_pages, "--decode-modes": args.decode_modes}
    if not args.decode:
        given = [flag for flag, value in decode_flags.items() if value is not None]
        if given:
            p.error(f"{', '.join(given)} belong(s) to the decode grid: add --decode")
        return
    unread = [flag for flag, (name, default) in DENSE_GRID_FLAGS.items()
              if getattr(args, name) != default]
    if unread:
        p.error(f"{', '.join(unread)} do(es) not apply to --decode (its grid: --decode-batches, "
                "--decode-cache-lens, --decode-heads, --decode-new-tokens, --decode-pages)")
    try:
        args.decode_batches = (bd.parse_int_list(args.decode_batches, "--decode-batches")
                               if args.decode_batches is not None else bd.DEFAULT_BATCHES)
        args.decode_cache_lens = (
            bd.parse_int_list(args.decode_cache_lens, "--decode-cache-lens")
            if args.decode_cache_lens is not None else bd.DEFAULT_CACHE_LENS)
        args.decode_heads = (bd.parse_heads(args.decode_heads)
                             if args.decode_heads is not None else bd.DEFAULT_HEADS)
        args.decode_new_tokens = (
            bd.parse_int_list(args.decode_new_tokens, "--decode-new-tokens")
            if args.decode_new_tokens is not None else bd.DEFAULT_NEW_TOKENS)
        args.decode_pages = (bd.parse_pages(args.decode_pages)
                             if args.decode_pages is not None else bd.DEFAULT_PAGES)
        args.decode_modes = (bd.parse_modes(args.decode_modes)
                             if args.decode_modes is not None else list(bd.MODES))
    except ValueError as e:
        p.error(str(e))
    args.head_dims = args.head_dims or [bd.DEFAULT_HEAD_DIM]
    if any(n < 1 for n in args.head_dims):
        p.error("--head-dims must be >= 1")
    args.seqlens, args.windows, args.softcaps, args.varlen_lengths = [], [], [], None
    if not build_decode_grid(args):
        p.error("the decode grid is empty: no page size divides a cache length, or every cache "
                "is shorter than the new tokens")


def parse_variant_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Resolves the mode's defaults (head dims, seqlens) and the variant options: args.variants
    (a list, or None for the dense grid), args.windows, args.softcaps, args.varlen_lengths.
    A variant option without --variants, or for a variant not chosen, is an error: no option
    goes unread."""
    variant_flags = {"--window": args.window, "--softcap": args.softcap,
                     "--varlen": args.varlen}
    if args.variants is None:
        given = [flag for flag, value in variant_flags.items() if value is not None]
        if given:
            p.error(f"{', '.join(given)} belong(s) to the variant table: add --variants")
        args.head_dims = args.head_dims or DEFAULT_HEAD_DIMS
        args.seqlens = args.seqlens or DEFAULT_SEQLENS
        args.windows, args.softcaps, args.varlen_lengths = [], [], None
        return
    try:
        args.variants = bv.parse_variants(args.variants)
        args.windows = ([bv.parse_window(w) for w in args.window] if args.window
                        else [bv.DEFAULT_WINDOW])
        args.softcaps = (bv.parse_softcaps(args.softcap) if args.softcap is not None
                         else [bv.DEFAULT_SOFTCAP])
        args.varlen_lengths = bv.parse_varlen(args.varlen or bv.DEFAULT_VARLEN, args.seed)
    except ValueError as e:
        p.error(str(e))
    for flag, variant in (("--window", "window"), ("--softcap", "softcap"),
                          ("--varlen", "varlen")):
        if variant_flags[flag] is not None and variant not in args.variants:
            p.error(f"{flag} is given but {variant} is not among --variants "
                    f"({','.join(args.variants)})")
    if args.plot:
        p.error("--plot draws the dense grid; the variant table has none (use --json)")
    args.head_dims = args.head_dims or bv.DEFAULT_VARIANT_HEAD_DIMS
    args.seqlens = args.seqlens or bv.DEFAULT_VARIANT_SEQLENS
    if any(n < 1 for n in args.head_dims + args.seqlens):
        p.error("--head-dims and --seqlens must be >= 1")


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
    if args.decode:
        return [DECODE_BACKEND] + list(bd.DECODE_PEERS)
    return flashattn_cuda_backends() + list(PEERS)


# Ours in the decode grid: what "auto" picks for a KV-cache call on the GPU, by name, so the
# table says which kernel it timed.
DECODE_BACKEND = "flash-decode"


def build_decode_grid(args: argparse.Namespace) -> List["bd.DecodeCell"]:
    return bd.build_decode_cells(args.decode_heads, args.decode_batches, args.decode_cache_lens,
                                 args.decode_new_tokens, args.decode_pages, args.head_dims)


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


def run_cell(cell: Cell, names: List[str], args, dtype, device, flusher, flex, seed: int,
             telemetry: Optional["bt.Telemetry"] = None) -> dict:
    from ._bench_runners import build_runners
    from ._bench_timing import time_round_robin, warm_up

    telemetry = telemetry or bt.Telemetry(None)
    q, k, v = make_inputs(cell, dtype, device, seed)
    runners, not_available = build_runners(names, q, k, v, cell.causal, flex)
    not_available.update(warm_up(runners, max(1, args.warmup)))
    runners = {n: r for n, r in runners.items() if n not in not_available}
    t0 = telemetry.now()
    ms, failed = time_round_robin(runners, args.repeats, flusher) if runners else ({}, {})
    gpu = telemetry.span(t0, telemetry.now())
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
    row["gpu"] = gpu
    if args.check:
        row["check"] = check_errors(cell, q, k, v, runners, args.check_rows)
    return row


# ---- output ----

COL = 14


def header_line(names: List[str]) -> str:
    return f"{'hd':>4} {'causal':>6} {'seqlen':>6} {'batch':>5} {'heads':>6} |" + \
        "".join(f"{n:>{COL}} |" for n in names) + f" {'MHz':>5}"


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
           f"{heads:>6} |" + "".join(cells) + f" {bt.clock_text(row.get('gpu')):>5}"


def cell_label(row: dict) -> str:
    """"d128 causal 16384" for the telemetry lines."""
    return f"d{row['hd']} {'causal' if row['causal'] else 'dense'} {row['L']}"


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


# ---- the variant table ----

CAUSAL_MODES = {"both": [False, True], "yes": [True], "no": [False]}


def build_variant_grid(args: argparse.Namespace) -> List["bv.VariantCell"]:
    return bv.build_variant_cells(args.variants, args.head_dims, args.seqlens,
                                  CAUSAL_MODES[args.causal], args.windows, args.softcaps,
                                  args.varlen_lengths, args.batch, args.tokens, args.heads,
                                  args.kv_heads)


def make_variant_inputs(cell: "bv.VariantCell", dtype, device, seed: int) -> dict:
    """{"q", "k", "v"}: dense BSHD (make_inputs), or varlen packed (total, heads, head_dim) with
    "cu_seqlens" (int32), "max_seqlen" and "doc" (int32 token -> sequence ids) on the device."""
    import torch

    if cell.variant != "varlen":
        q, k, v = make_inputs(Cell(cell.hd, cell.causal, cell.L, cell.B, cell.H, cell.KVH), dtype,
                              device, seed)
        return {"q": q, "k": k, "v": v}
    g = torch.Generator(device=device).manual_seed(seed)
    total = cell.total
    shapes = ((total, cell.H, cell.hd), (total, cell.KVH, cell.hd), (total, cell.KVH, cell.hd))
    q, k, v = (torch.randn(s, generator=g, device=device).add_(0.5).to(dtype) for s in shapes)
    return {"q": q, "k": k, "v": v,
            "cu_seqlens": torch.tensor(bv.cu_seqlens(cell.lengths), dtype=torch.int32,
                                       device=device),
            "max_seqlen": max(cell.lengths),
            "doc": torch.tensor(bv.document_ids(cell.lengths), dtype=torch.int32, device=device)}


def variant_side(cell: "bv.VariantCell", device, seed: int) -> Tuple[dict, dict]:
    """(device tensors, their values for the JSON): the ALiBi slopes and the sink logits, float32
    (heads), for the rows that use them."""
    import torch

    values = {}
    if cell.variant == "alibi":
        values["alibi_slopes"] = bv.alibi_slopes(cell.H)
    if cell.variant == "sinks":
        values["sinks"] = bv.sink_logits(cell.H, cell.L, seed)
    tensors = {n: torch.tensor(x, dtype=torch.float32, device=device) for n, x in values.items()}
    return tensors, values


def output_slice(out, layout: str, cell: "bv.VariantCell", rows: slice):
    """The checked query rows of one output as (1, rows, heads, head_dim): batch 0's `rows` for
    the dense layouts, packed rows `rows` for varlen."""
    if layout == "bshd":
        return out[:1, rows]
    if layout == "bhsd":
        return out.transpose(1, 2)[:1, rows]
    if layout == "packed":
        return out[rows][None]
    if layout == "bhsd-packed":
        return out.transpose(1, 2)[0, rows][None]
    raise ValueError(f"unknown output layout {layout!r}")


def variant_reference(cell: "bv.VariantCell", q, k, v, side_values: dict):
    """float64 O of the variant (_reference.attention_numpy, the library's semantics) for q
    (1, r, heads, d) against k, v (1, sk, kv_heads, d): the last r query rows of a sequence of sk
    (bottom-right alignment keeps the causal edge, the window and the ALiBi distances exact).
    One head at a time: S is r * sk float64 values."""
    import numpy as np

    from ._reference import attention_numpy

    q64, k64, v64 = (x.double().cpu().numpy() for x in (q, k, v))
    heads, kv_heads = q64.shape[2], k64.shape[2]
    group = heads // kv_heads
    slopes = side_values.get("alibi_slopes")
    sinks = side_values.get("sinks")
    options = {}
    if cell.variant == "window":
        options["window_size"] = tuple(cell.window)
    if cell.variant == "softcap":
        options["softcap"] = cell.softcap
    out = np.empty(q64.shape, dtype=np.float64)
    for h in range(heads):
        g = h // group
        o, _ = attention_numpy(
            q64[:, :, h:h + 1], k64[:, :, g:g + 1], v64[:, :, g:g + 1], causal=cell.causal,
            alibi_slopes=None if slopes is None else np.asarray(slopes[h:h + 1], np.float32),
            sinks=None if sinks is None else np.asarray(sinks[h:h + 1], np.float32), **options)
        out[:, :, h] = o[:, :, 0]
    return out


def check_variant(cell: "bv.VariantCell", inputs: dict, runners: dict, layouts: dict,
                  side_values: dict, rows: int, ours: List[str], dtype) -> dict:
    """{"max_abs_err": {name: max|O - O_ref|}, "floor": the dtype's rounding of O_ref,
    "vs_flex": {ours: max|O - O_flex|}, "rows": r}: batch 0's last r query rows (varlen: the
    longest sequence's), every head."""
    import numpy as np
    import torch

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    if cell.variant == "varlen":
        b = max(range(len(cell.lengths)), key=lambda i: cell.lengths[i])
        start = sum(cell.lengths[:b])
        end = start + cell.lengths[b]
        r = min(rows, cell.lengths[b])
        sel = slice(end - r, end)
        ref = variant_reference(cell, q[sel][None], k[start:end][None], v[start:end][None],
                                side_values)
    else:
        r = min(rows, cell.L)
        sel = slice(cell.L - r, cell.L)
        ref = variant_reference(cell, q[:1, sel], k[:1], v[:1], side_values)
    rounded = torch.from_numpy(ref).to(dtype).double().numpy()
    result = {"rows": r, "floor": float(np.abs(rounded - ref).max()), "max_abs_err": {},
              "vs_flex": {}}
    outs = {}
    for name, run in runners.items():
        try:
            outs[name] = output_slice(run(), layouts[name], cell, sel).double().cpu().numpy()
        except Exception:  # it ran while timed; if it fails now, the check table leaves it out
            continue
        err = float(np.abs(outs[name] - ref).max())
        result["max_abs_err"][name] = err if math.isfinite(err) else float("inf")
    if bv.FLEX in outs:
        for name in ours:
            if name in outs:
                d = float(np.abs(outs[name] - outs[bv.FLEX]).max())
                result["vs_flex"][name] = d if math.isfinite(d) else float("inf")
    return result


def dense_twin_runners(ours: List[str], runners: dict, twin: Optional["bv.VariantCell"],
                       twin_inputs: Optional[dict]) -> dict:
    """{"<backend> @dense": runner}: the dense call of the row's dense shape (bv.dense_twin_cell)
    for each backend of ours that runs the row, timed in the same round-robin as the row itself,
    so a variant's cost over dense is measured with the GPU in one state (clocks, temperature),
    whatever the rows before it did."""
    from ._bench_runners import flashattn_runner

    if twin is None or twin_inputs is None:
        return {}
    q, k, v = twin_inputs["q"], twin_inputs["k"], twin_inputs["v"]
    return {n + bv.TWIN_SUFFIX: flashattn_runner(n, q, k, v, twin.causal) for n in ours
            if n in runners}


def run_variant_row(cell: "bv.VariantCell", ours: List[str], peers: List[str], inputs: dict,
                    args, dtype, device, flusher, flex, seed: int,
                    twin: Optional["bv.VariantCell"] = None,
                    twin_inputs: Optional[dict] = None,
                    telemetry: Optional["bt.Telemetry"] = None) -> Tuple[dict, Dict[str, float]]:
    """Times one variant row as run_cell times a cell (warm-up, round-robin, medians, L2
    flushed), with the dense twins of ours (dense_twin_runners) in its round-robin; returns its
    JSON row (without the ratios) and the twins' medians {backend: ms}. seed: the sink
    logits'."""
    from ._bench_runners import build_variant_runners
    from ._bench_timing import time_round_robin, warm_up

    row_peers = [p for p in peers if p in bv.VARIANT_PEERS[cell.variant]]
    side, side_values = variant_side(cell, device, seed)
    runners, not_available, layouts = build_variant_runners(cell, ours, row_peers, inputs, side,
                                                            flex)
    not_available.update(warm_up(runners, max(1, args.warmup)))
    runners = {n: r for n, r in runners.items() if n not in not_available}
    twins = dense_twin_runners(ours, runners, twin, twin_inputs)
    twin_failed = warm_up(twins, max(1, args.warmup))
    twins = {n: r for n, r in twins.items() if n not in twin_failed}
    timed = dict(runners, **twins)
    telemetry = telemetry or bt.Telemetry(None)
    t0 = telemetry.now()
    ms, failed = time_round_robin(timed, args.repeats, flusher) if timed else ({}, {})
    gpu = telemetry.span(t0, telemetry.now())
    twin_ms = {n[:-len(bv.TWIN_SUFFIX)]: t for n, t in ms.items() if n in twins}
    ms = {n: t for n, t in ms.items() if n in runners}
    not_available.update({n: why for n, why in failed.items() if n in runners})
    runners = {n: r for n, r in runners.items() if n not in failed}
    row = bv.row_record(cell, list(ours) + row_peers, ms, not_available)
    row["params"].update(side_values)
    row["peers"] = row_peers
    row["gpu"] = gpu
    if args.check:
        try:
            row["check"] = check_variant(cell, inputs, runners, layouts, side_values,
                                         args.check_rows, ours, dtype)
        except Exception as e:  # e.g. out of host memory for the reference: say so, go on
            from ._bench_runners import one_line

            row["check"] = {"error": one_line(e)}
    return row, twin_ms


def run_variants(args, names: List[str], dtype, device, flex, flex_note: str, meta: dict,
                 flusher, telemetry: Optional["bt.Telemetry"] = None) -> int:
    """The variant table: every row timed, printed as it finishes; then the summary, the check
    table (--check) and the JSON (--json)."""
    ours = [n for n in names if n not in PEERS]
    peers = [n for n in names if n in PEERS]
    cells = build_variant_grid(args)
    meta.update({"mode": "variants", "flops": bv.VARIANT_FLOP_CONVENTION,
                 "ratios": bv.RATIO_NOTES, "variants": args.variants,
                 "descriptions": {v: bv.VARIANT_DESCRIPTIONS[v] for v in args.variants},
                 "variant_peers": {v: [p for p in peers if p in bv.VARIANT_PEERS[v]]
                                   for v in args.variants},
                 "seed": args.seed})
    print(f"flashattn.bench --variants: {meta['device']}, torch {meta['torch']}, cuDNN "
          f"{meta['cudnn']}, flashattn {meta['flashattn']}, {args.dtype}, {len(cells)} rows")
    wrap = textwrap.TextWrapper(width=100, subsequent_indent="    ")
    print(wrap.fill(bv.VARIANT_FLOP_CONVENTION))
    print(wrap.fill(bv.RATIO_NOTES))
    print(wrap.fill(f"Median of {args.repeats} CUDA-event timings per backend and row after "
                    f"{args.warmup} warm-up runs, L2 flushed before each; backends alternate "
                    "within a row, and with them each of ours' dense call of the row's dense "
                    "shape (its dense twin, the t/dense reference); one set of random inputs "
                    "per shape, shared by its rows"))
    for v in args.variants:
        row_peers = meta["variant_peers"][v]
        print(wrap.fill(f"  {v}: {bv.VARIANT_DESCRIPTIONS[v]} [peers: "
                        f"{', '.join(row_peers) or 'none'}]"))
    if flex_note:
        print(flex_note)
    print()
    print(bv.TABLE_HEADER)
    rows: List[dict] = []
    inputs_key, inputs = None, None
    for i, cell in enumerate(cells):
        if cell.shape_key() != inputs_key:
            inputs = None  # free the previous shape's tensors first
            inputs_key = cell.shape_key()
            inputs = make_variant_inputs(cell, dtype, device, seed=args.seed + i)
        twin = bv.dense_twin_cell(cell, cells)
        twin_inputs = None
        if twin is not None:
            twin_inputs = (inputs if twin.shape_key() == inputs_key else
                           make_variant_inputs(twin, dtype, device, seed=args.seed + i))
        row, twin_ms = run_variant_row(cell, ours, peers, inputs, args, dtype, device, flusher,
                                       flex, seed=args.seed, twin=twin, twin_inputs=twin_inputs,
                                       telemetry=telemetry)
        twin_inputs = None
        bv.add_ratios(row, rows, ours)
        bv.add_paired_ratios(row, twin, twin_ms, rows)
        rows.append(row)
        print("\n".join(bv.table_lines(row)), flush=True)
    inputs = None
    totals = bv.variant_summary(rows, ours)
    print()
    print("\n".join(bv.summary_lines(totals) + bt.clock_summary(rows, lambda r: r["label"])))
    notes = (flex.notes if flex is not None else [])
    if notes:
        meta["notes"] = list(notes)
        print("\n".join(notes))
    if args.check:
        print()
        print("\n".join(bv.check_lines(rows, args.check_rows)))
    if args.json:
        write_json(args.json, meta, rows, totals)
    return 0


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
            # The variant table compiles per shape: few shapes, and the constants its score_mods
            # and mask_mods close over stay constants.
            flex = FlexCompiler(static=args.flex_static or args.variants is not None)
            flex_note = f"flex: torch.compile(flex_attention), {flex.mode}"
        except Exception as e:
            flex_note = f"flex: n/a ({one_line(e)})"
    meta = {
        "device": torch.cuda.get_device_name(device), "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(), "flashattn": flashattn.__version__,
        "dtype": args.dtype, "flops": FLOP_CONVENTION, "repeats": args.repeats,
        "warmup": args.warmup, "l2_flush_bytes": L2_FLUSH_BYTES, "backends": names,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }
    if args.decode:
        from ._bench_decode_run import run_decode

        return run_decode(args, build_decode_grid(args), [n for n in names if n not in PEERS],
                          [n for n in names if n in PEERS], dtype, device, meta,
                          L2Flusher(device))
    telemetry = bt.start_for(device)
    meta["gpu_telemetry"] = ({"query": bt.QUERY, "period_ms": bt.PERIOD_MS} if telemetry.active
                             else {"why_not": telemetry.why_not})
    try:
        if args.variants is not None:
            return run_variants(args, names, dtype, device, flex, flex_note, meta,
                                L2Flusher(device), telemetry)
        return run_dense(args, names, dtype, device, flex, flex_note, meta, telemetry)
    finally:
        telemetry.stop()


def run_dense(args, names: List[str], dtype, device, flex, flex_note: str, meta: dict,
              telemetry: "bt.Telemetry") -> int:
    """The dense grid: every cell timed, printed as it finishes; the geometric means, the clock
    telemetry, the check table (--check), the JSON (--json) and the plot (--plot)."""
    from ._bench_timing import L2_FLUSH_BYTES, L2Flusher

    grid = build_grid(args)
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
        row = run_cell(cell, names, args, dtype, device, flusher, flex, seed=args.seed + i,
                       telemetry=telemetry)
        rows.append(row)
        print(row_line(row, names), flush=True)
    totals = summary(rows, names)
    print(summary_line(totals, names))
    clock_lines = bt.clock_summary(rows, cell_label)
    if clock_lines:
        print("\n".join(clock_lines))
    notes = not_available_notes(rows)
    if notes:
        print("\n".join(["", "Not available:"] + notes))
    if args.check:
        print()
        print("\n".join(check_table(rows, names, args.check_rows)))

    if args.json:
        write_json(args.json, meta, rows, totals)
    if args.plot:
        from ._bench_plot import plot

        plot(rows, names, args.plot,
             f"{meta['device']}, {args.dtype}, forward; {FLOP_CONVENTION}")
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
