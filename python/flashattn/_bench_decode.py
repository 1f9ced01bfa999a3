"""The decode grid of `python -m flashattn.bench --decode` (issue 11), without torch: the cells
(DecodeCell), the options that narrow the grid, the bytes a cell reads and whether its cache fits
the GPU, the JSON row, the ratios to cuDNN, the summary and the table and check text. The device
side (inputs, CUDA-graph capture, timing, the float64 check) is _bench_decode_run.py.

A cell is one decode step, flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
cache_seqlens, block_table, causal=True): `new` query tokens per sequence (1, or 4 for
speculative decoding / chunked prefill), appended at cache_seqlens = cache_len - new, so every
sequence then attends to cache_len keys, the new ones bottom-right causal. The cache is contiguous
(batch, cache_len, kv_heads, head_dim) or paged (page_size 16, 64 or 256; the block table a random
permutation of the pages).

Effective bandwidth = the K and V bytes of the cache the step reads (2 * batch * cache_len *
kv_heads * head_dim * dtype size) / time: what a memory-bound decode kernel is judged by (H200:
4.8 TB/s peak HBM3e). The new tokens, q, the output and the block table are not counted.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

DEFAULT_BATCHES = [1, 8, 64, 128]
DEFAULT_CACHE_LENS = [1024, 8192, 32768, 131072]
DEFAULT_HEADS = [(32, 8), (64, 8)]
DEFAULT_NEW_TOKENS = [1, 4]
DEFAULT_PAGES = [0, 16, 64, 256]  # 0: the contiguous cache
DEFAULT_HEAD_DIM = 128
MODES = ("eager", "graph")
# A cell runs only when its K + V cache takes at most this share of the GPU memory available:
# the rest holds the L2 flush buffer (256 MiB), the peers' workspaces and the CUDA graphs' pools.
MEMORY_FRACTION = 0.6
# torch SDPA's backends that take a decode step over a contiguous cache (enable_gqa, no copy of
# K and V per head): cuDNN and FlashAttention-2. They have no paged cache.
DECODE_PEERS = ("cudnn", "fa2")
CUDNN = "cudnn"
GRAPH = "graph"

BANDWIDTH_CONVENTION = (
    "TB/s = K and V bytes of the cache read / time (2 * batch * cache_len * kv_heads * head_dim "
    "* 2 bytes for bf16; q, the new tokens and the output not counted)")
RATIO_NOTE = ("vs cuDNN = cuDNN's time / ours in the same mode (eager with eager, graph with "
              "graph): > 1 means ours is faster")


def sig4(x: float) -> float:
    """Four significant digits: what the timings support."""
    return float(f"{x:.4g}")


@dataclass(frozen=True)
class DecodeCell:
    batch: int
    heads: int
    kv_heads: int
    cache_len: int   # keys per sequence after the step (cache_seqlens + new)
    new: int         # new tokens = seqlen_q
    page: int        # page_size, 0 for the contiguous cache
    head_dim: int = DEFAULT_HEAD_DIM

    @property
    def layout(self) -> str:
        return f"paged{self.page}" if self.page else "contiguous"

    def label(self) -> str:
        return (f"H{self.heads}/{self.kv_heads} B={self.batch} cache={length_text(self.cache_len)}"
                f" new={self.new} {self.layout}")

    def kv_bytes(self, itemsize: int = 2) -> int:
        """The K and V bytes of the cache the step reads."""
        return 2 * self.batch * self.cache_len * self.kv_heads * self.head_dim * itemsize

    def shape_key(self) -> Tuple[int, int, int, int]:
        """Cells with the same key share one K and one V buffer (the paged caches are views of
        the contiguous one's memory)."""
        return (self.batch, self.cache_len, self.kv_heads, self.head_dim)

    def peers_apply(self) -> bool:
        """SDPA has no paged cache: the peers run the contiguous cells only."""
        return self.page == 0


def length_text(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def build_decode_cells(heads: Sequence[Tuple[int, int]], batches: Sequence[int],
                       cache_lens: Sequence[int], new_tokens: Sequence[int],
                       pages: Sequence[int], head_dims: Sequence[int] = (DEFAULT_HEAD_DIM,)
                       ) -> List[DecodeCell]:
    """Every combination, by head dim, batch, cache length, heads, new tokens and layout: the
    cells of one shape (shape_key: the heads pairs of one kv_heads count, next to each other)
    follow each other and share one K and one V buffer. A page size that does not divide the
    cache length has no cell (a block table covers whole pages), nor does a cache shorter than
    the new tokens."""
    cells = []
    for hd in head_dims:
        for b in batches:
            for n in cache_lens:
                for h, hk in sorted(heads, key=lambda pair: pair[1]):
                    for new in new_tokens:
                        for page in pages:
                            if (page and n % page) or n < new:
                                continue
                            cells.append(DecodeCell(b, h, hk, n, new, page, hd))
    return cells


def fits(cell: DecodeCell, available_bytes: int, itemsize: int = 2) -> Optional[str]:
    """None when the cell's cache fits MEMORY_FRACTION of the available GPU memory, else why
    not (what the table prints for a skipped cell)."""
    need = cell.kv_bytes(itemsize)
    if need <= MEMORY_FRACTION * available_bytes:
        return None
    return (f"K+V cache {need / 1e9:.1f} GB > {MEMORY_FRACTION:.0%} of "
            f"{available_bytes / 1e9:.1f} GB available")


# ---- the command line ----

def parse_int_list(text: str, name: str, minimum: int = 1) -> List[int]:
    """"1,8,1k" -> [1, 8, 1024] (k = 1024); ValueError naming the option otherwise."""
    values = []
    for item in text.split(","):
        item = item.strip().lower()
        scale = 1024 if item.endswith("k") else 1
        try:
            value = int(item[:-1] if scale > 1 else item) * scale
        except ValueError:
            raise ValueError(f"{name}: {item!r} is not an integer") from None
        if value < minimum:
            raise ValueError(f"{name}: {value} must be >= {minimum}")
        values.append(value)
    return values


def parse_heads(text: str) -> List[Tuple[int, int]]:
    """"32/8,64/8" -> [(32, 8), (64, 8)]; "16" is 16/16. kv_heads must divide heads."""
    pairs = []
    for item in text.split(","):
        parts = item.strip().split("/")
        if len(parts) > 2:
            raise ValueError(f"--decode-heads: {item.strip()!r}, expected HEADS/KV_HEADS")
        h, hk = (parse_int_list(p, "--decode-heads")[0] for p in (parts[0], parts[-1]))
        if h % hk:
            raise ValueError(f"--decode-heads: {h}/{hk}: kv heads must divide heads")
        pairs.append((h, hk))
    return pairs


def parse_pages(text: str) -> List[int]:
    """"0,16,64" or "contiguous,16" -> [0, 16, 64]: page sizes, 0 (or "contiguous") for the
    contiguous cache. The library takes multiples of 16 from 16 to 256."""
    pages = []
    for item in text.split(","):
        item = item.strip().lower()
        page = 0 if item in ("contiguous", "contig") else parse_int_list(item, "--decode-pages",
                                                                        minimum=0)[0]
        if page and (page % 16 or page > 256):
            raise ValueError(f"--decode-pages: {page}, expected 0 (contiguous) or a multiple of "
                             "16 from 16 to 256")
        pages.append(page)
    return pages


def parse_modes(text: str) -> List[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ValueError(f"--decode-modes: unknown mode(s) {', '.join(unknown) or '(none)'}; "
                         f"expected {','.join(MODES)}")
    return [m for m in MODES if m in modes]


def runner_names(ours: Sequence[str], peers: Sequence[str], modes: Sequence[str]) -> List[str]:
    """The table's columns: each backend eager ("cudnn") and replayed from a CUDA graph
    ("cudnn+graph"), as the modes ask."""
    names = []
    for n in list(ours) + list(peers):
        if "eager" in modes:
            names.append(n)
        if GRAPH in modes:
            names.append(graph_name(n))
    return names


def graph_name(name: str) -> str:
    return f"{name}+{GRAPH}"


def base_name(runner: str) -> Tuple[str, str]:
    """("cudnn", "graph") for "cudnn+graph", ("cudnn", "eager") for "cudnn"."""
    if runner.endswith("+" + GRAPH):
        return runner[:-len(GRAPH) - 1], GRAPH
    return runner, "eager"


# ---- rows, ratios, summary ----

def row_record(cell: DecodeCell, runners: List[str], us: Dict[str, float],
               na: Dict[str, str], itemsize: int = 2) -> dict:
    """The JSON row of a timed cell: every runner in `runners` is in us (timed, median
    microseconds) or in na (why not; "-" when it does not apply to the cell)."""
    kv = cell.kv_bytes(itemsize)
    row = {"label": cell.label(), "batch": cell.batch, "heads": cell.heads,
           "kv_heads": cell.kv_heads, "head_dim": cell.head_dim, "cache_len": cell.cache_len,
           "new": cell.new, "page": cell.page, "layout": cell.layout, "kv_bytes": kv,
           "runners": list(runners),
           "us": {n: sig4(us[n]) for n in runners if n in us},
           "tbs": {n: sig4(kv / (us[n] * 1e-6) / 1e12) for n in runners
                   if n in us and us[n] > 0},
           "na": {n: na[n] for n in runners if n in na and n not in us}}
    row["vs_cudnn"] = ratios_to_cudnn(row)
    return row


def skipped_record(cell: DecodeCell, reason: str, itemsize: int = 2) -> dict:
    row = row_record(cell, [], {}, {}, itemsize)
    row["skipped"] = reason
    return row


def ratios_to_cudnn(row: dict) -> Dict[str, float]:
    """{runner: cuDNN's time / its time} for ours, each against cuDNN in the same mode."""
    out = {}
    for runner, t in row["us"].items():
        name, mode = base_name(runner)
        if name in DECODE_PEERS or t <= 0:
            continue
        ref = row["us"].get(CUDNN if mode == "eager" else graph_name(CUDNN))
        if ref:
            out[runner] = round(ref / t, 3)
    return out


def geomean(values: Iterable[Optional[float]]) -> Optional[float]:
    values = [x for x in values if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in values) / len(values)) if values else None


def decode_summary(rows: List[dict], runners: List[str]) -> dict:
    """Per runner: cells run, cells skipped for memory, and for ours the geometric mean of its
    ratio to cuDNN over the cells where cuDNN ran (in its mode)."""
    per_runner = {}
    for n in runners:
        ratios = [r["vs_cudnn"].get(n) for r in rows]
        g = geomean(ratios)
        per_runner[n] = {"cells": sum(n in r["us"] for r in rows),
                         "geomean_vs_cudnn": g and round(g, 3),
                         "cells_vs_cudnn": sum(x is not None for x in ratios)}
    return {"runners": per_runner, "skipped_cells": sum("skipped" in r for r in rows)}


# ---- text ----

COL = 19  # "   15012.3  4.56 |": microseconds and TB/s of one runner (names up to 18)
RATIO_LEAD = "  vs cuDNN: "


def header_lines(runners: List[str]) -> List[str]:
    ratio_cols = [n for n in runners if base_name(n)[0] not in DECODE_PEERS]
    head = f"{'heads':>6} {'batch':>5} {'cache':>6} {'new':>3} {'layout':<10} {'KV GB':>7} |"
    names = head + "".join(f"{n:>{COL}} |" for n in runners)
    if ratio_cols:
        names += RATIO_LEAD + " ".join(ratio_cols)
    units = " " * len(head) + "".join(f"{'us':>{COL - 6}} {'TB/s':>5} |" for _ in runners)
    return [names, units]


def _ratio_text(x: Optional[float]) -> str:
    return f"{x:.2f}x" if x is not None else "-"


def _value(us: Optional[float], tbs: Optional[float]) -> str:
    if us is None:
        return f"{'n/a':>{COL}} |"
    tb = f"{tbs:.2f}" if tbs is not None else "-"
    return f"{us:>{COL - 6}.1f} {tb:>5} |"


def row_line(row: dict, runners: List[str]) -> str:
    heads = f"{row['heads']}/{row['kv_heads']}"
    head = (f"{heads:>6} {row['batch']:>5} {length_text(row['cache_len']):>6} {row['new']:>3} "
            f"{row['layout']:<10} {row['kv_bytes'] / 1e9:>7.3f} |")
    if "skipped" in row:
        return head + f" skipped: {row['skipped']}"
    cells = []
    for n in runners:
        if n in row["us"]:
            cells.append(_value(row["us"][n], row["tbs"].get(n)))
        elif row["na"].get(n) == "-":
            cells.append(f"{'-':>{COL}} |")
        else:
            cells.append(_value(None, None))
    ratio_cols = [n for n in runners if base_name(n)[0] not in DECODE_PEERS]
    ratios = " ".join(f"{_ratio_text(row['vs_cudnn'].get(n)):>{len(n)}}" for n in ratio_cols)
    return head + "".join(cells) + (" " * len(RATIO_LEAD) + ratios if ratio_cols else "")


def not_available_lines(rows: List[dict]) -> List[str]:
    """One line per (runner, reason), with the cells it applies to; "-" (does not apply) is not
    a reason."""
    by_reason: Dict[tuple, List[str]] = {}
    for r in rows:
        for name, reason in r["na"].items():
            if reason != "-":
                by_reason.setdefault((name, reason), []).append(r["label"])
    lines = []
    for (name, reason), labels in by_reason.items():
        where = labels[0] if len(labels) == 1 else f"{len(labels)} cells, e.g. {labels[0]}"
        lines.append(f"  n/a {name} ({where}): {reason}")
    return lines


def summary_lines(summary: dict, runners: List[str]) -> List[str]:
    lines = []
    for n in runners:
        s = summary["runners"][n]
        if base_name(n)[0] in DECODE_PEERS:
            continue
        g = s["geomean_vs_cudnn"]
        if g is None:
            lines.append(f"  {n}: ours/cuDNN n/a: cuDNN ran in none of its {s['cells']} cells")
            continue
        lines.append(f"  {n}: ours/cuDNN geometric mean {_ratio_text(g)} over "
                     f"the {s['cells_vs_cudnn']} cells where cuDNN ran ({s['cells']} cells run)")
    if summary["skipped_cells"]:
        lines.append(f"  {summary['skipped_cells']} cells skipped: their cache does not fit "
                     f"{MEMORY_FRACTION:.0%} of the GPU memory available")
    return lines


def check_lines(rows: List[dict]) -> List[str]:
    """The --check table: per cell max|O - O_ref| against float64 for ours (eager) and cuDNN,
    max|ours - cuDNN|, the dtype's rounding floor, and whether the graph replay gave the eager
    bits."""
    lines = ["max|O - O_ref| against float64 (sequences 0 and batch - 1, every head and new "
             "token); floor = the dtype's rounding of O_ref; graph = eager: bit for bit"]
    for r in rows:
        c = r.get("check")
        if not c:
            continue
        if "error" in c:
            lines.append(f"  {r['label']:<44} check failed: {c['error']}")
            continue
        parts = [f"{n} {e:.3g}" for n, e in c["max_abs_err"].items()]
        parts += [f"{n} vs cuDNN {d:.3g}" for n, d in c.get("vs_cudnn", {}).items()]
        parts += [f"{n} graph = eager: {'yes' if same else 'NO'}"
                  for n, same in c.get("graph_equals_eager", {}).items()]
        lines.append(f"  {r['label']:<44} floor {c['floor']:.3g} | " + ", ".join(parts))
    return lines
