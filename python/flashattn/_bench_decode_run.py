"""How `python -m flashattn.bench --decode` runs its grid (_bench_decode.py) on the device.

Per shape (batch, cache_len, kv_heads, head_dim) one K and one V buffer of batch * cache_len rows,
random, shared by the shape's cells: the contiguous cache is a view of it, and so is each paged
cache, with a block table that is a random permutation of the pages (what a paged allocator hands
out after a while). A shape whose K + V would take more than MEMORY_FRACTION of the GPU memory
available is skipped, and the table says so.

Per cell: ours (flash_attn_with_kvcache) and the SDPA peers (contiguous cells only) are warmed
up eagerly, then each is captured in a CUDA graph (after a warm-up on a side stream) and replayed;
eager and graph runners alternate round-robin, >= --repeats CUDA-event timings each with the L2
flushed before every run (_bench_timing), medians. A peer that fails to run or to capture shows
n/a with the reason; nothing stops the grid.

--check: ours (eager) and cuDNN against float64 (_reference.attention_torch over the sequence's
keys as the cache holds them after the step) on sequences 0 and batch - 1, and ours replayed from
the graph against ours eager, bit for bit.
"""
from __future__ import annotations

import math
import textwrap
from typing import Callable, Dict, List, Optional, Sequence

from . import _bench_decode as bd
from ._bench_output import write_json
from ._bench_runners import graph_runner, kvcache_runner, one_line, sdpa_decode_runner


def available_memory(device) -> int:
    """Bytes a new allocation can get on a CUDA device: free memory plus what torch's caching
    allocator holds unused (the previous shape's buffers, once dropped)."""
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def _randn(shape, generator, dtype, device):
    """normal + 0.5 (never time or check zeros), made in `dtype`: a 128k-token cache in float32
    first would need twice its memory."""
    import torch

    return torch.randn(shape, generator=generator, dtype=dtype, device=device).add_(0.5)


def make_cache(cell: bd.DecodeCell, dtype, device, seed: int) -> dict:
    """{"k", "v"}: (batch * cache_len, kv_heads, head_dim) buffers for the cell's shape."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    shape = (cell.batch * cell.cache_len, cell.kv_heads, cell.head_dim)
    return {"k": _randn(shape, g, dtype, device), "v": _randn(shape, g, dtype, device)}


def make_step(cell: bd.DecodeCell, cache: dict, dtype, device, seed: int) -> dict:
    """One decode step's tensors: q (batch, new, heads, head_dim), the new tokens k, v,
    cache_seqlens = cache_len - new (int32), k_cache / v_cache views of the shape's buffers and
    the block table (None for the contiguous cache)."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    b, n, hk, d = cell.batch, cell.cache_len, cell.kv_heads, cell.head_dim
    step = {"q": _randn((b, cell.new, cell.heads, d), g, dtype, device),
            "k": _randn((b, cell.new, hk, d), g, dtype, device),
            "v": _randn((b, cell.new, hk, d), g, dtype, device),
            "cache_seqlens": torch.full((b,), n - cell.new, dtype=torch.int32, device=device)}
    if cell.page:
        pages = b * n // cell.page
        step["k_cache"] = cache["k"].view(pages, cell.page, hk, d)
        step["v_cache"] = cache["v"].view(pages, cell.page, hk, d)
        step["block_table"] = torch.randperm(pages, generator=g, device=device).to(
            torch.int32).view(b, n // cell.page)
    else:
        step["k_cache"] = cache["k"].view(b, n, hk, d)
        step["v_cache"] = cache["v"].view(b, n, hk, d)
        step["block_table"] = None
    return step


def sequence_keys(step: dict, b: int):
    """(k, v) of sequence b as the cache holds them, (1, cache_len, kv_heads, head_dim)."""
    k, v = step["k_cache"], step["v_cache"]
    if step["block_table"] is None:
        return k[b:b + 1], v[b:b + 1]
    pages = step["block_table"][b].long()
    return (k[pages].reshape(1, -1, *k.shape[2:]), v[pages].reshape(1, -1, *v.shape[2:]))


def check_cell(step: dict, runners: Dict[str, Callable], ours: Sequence[str], dtype) -> dict:
    """{"floor", "max_abs_err": {name: max|O - O_ref|}, "vs_cudnn": {ours: max|O - O_cudnn|},
    "graph_equals_eager": {ours: bool}} over sequences 0 and batch - 1 (every head and new
    token). The eager runs have appended the new tokens, so the cache holds the step's keys."""
    from ._reference import attention_torch

    q = step["q"]
    seqs = sorted({0, q.shape[0] - 1})
    refs = []
    for b in seqs:
        k, v = sequence_keys(step, b)
        refs.append(attention_torch(q[b:b + 1], k, v, causal=True)[0])
    floor = max((r.to(dtype).double() - r).abs().max().item() for r in refs)
    outs = {}
    for name, run in runners.items():
        base, mode = bd.base_name(name)
        if mode != "eager":
            continue
        try:
            out = run()
        except Exception:  # it ran while timed; if it fails now, the check leaves it out
            continue
        outs[name] = out.transpose(1, 2) if base in bd.DECODE_PEERS else out
    result = {"floor": floor, "max_abs_err": {}, "vs_cudnn": {}, "graph_equals_eager": {}}
    for name, out in outs.items():
        err = max((out[b:b + 1].double() - r).abs().max().item() for b, r in zip(seqs, refs))
        result["max_abs_err"][name] = err if math.isfinite(err) else float("inf")
    for name in ours:
        if name in outs and bd.CUDNN in outs:
            d = max((outs[name][b].double() - outs[bd.CUDNN][b].double()).abs().max().item()
                    for b in seqs)
            result["vs_cudnn"][name] = d if math.isfinite(d) else float("inf")
        graph = runners.get(bd.graph_name(name))
        if name in outs and graph is not None:
            import torch

            result["graph_equals_eager"][name] = bool(torch.equal(graph(), outs[name]))
    return result


def run_cell(cell: bd.DecodeCell, step: dict, ours: List[str], peers: List[str],
             modes: List[str], args, dtype, flusher) -> dict:
    """Times one cell (warm-up, graph capture, round-robin, medians) and returns its JSON row,
    with the check when args.check."""
    from ._bench_timing import time_round_robin, warm_up

    eager: Dict[str, Callable] = {}
    na: Dict[str, str] = {}
    for name in ours:
        eager[name] = kvcache_runner(name, step)
    for peer in peers:
        if not cell.peers_apply():
            na[peer] = na[bd.graph_name(peer)] = "-"  # SDPA has no paged cache
            continue
        try:
            eager[peer] = sdpa_decode_runner(peer, step)
        except Exception as e:  # e.g. a torch without enable_gqa: say why, go on
            na[peer] = one_line(e)
    na.update(warm_up(eager, max(1, args.warmup)))
    eager = {n: r for n, r in eager.items() if n not in na}
    runners = dict(eager) if "eager" in modes else {}
    if bd.GRAPH in modes:
        for name in ours + peers:
            if name not in eager and bd.graph_name(name) not in na:
                na[bd.graph_name(name)] = f"not captured: the eager step failed ({na[name]})"
        for name, run in eager.items():
            if step["q"].device.type != "cuda":  # torch would capture an empty graph
                na[bd.graph_name(name)] = "CUDA graphs need CUDA tensors"
                continue
            try:
                runners[bd.graph_name(name)] = graph_runner(run)
            except Exception as e:  # cannot be captured (or failed inside the capture)
                na[bd.graph_name(name)] = one_line(e)
                _synchronize()
    na.update(warm_up({n: r for n, r in runners.items() if n not in eager}, 1))
    runners = {n: r for n, r in runners.items() if n not in na}
    ms, failed = time_round_robin(runners, args.repeats, flusher) if runners else ({}, {})
    na.update(failed)
    names = bd.runner_names(ours, peers, modes)
    row = bd.row_record(cell, names, {n: t * 1e3 for n, t in ms.items()}, na, dtype.itemsize)
    if args.check:
        try:
            checked = {n: r for n, r in runners.items() if n not in failed}
            checked.update({n: r for n, r in eager.items() if n not in failed})
            row["check"] = check_cell(step, checked, ours, dtype)
        except Exception as e:  # e.g. out of memory for the reference: say so, go on
            row["check"] = {"error": one_line(e)}
    return row


def _synchronize() -> None:
    """Waits for the device, ignoring an error the failed runner left (it was reported)."""
    import torch

    try:
        torch.cuda.synchronize()
    except Exception:
        pass


def run_decode(args, cells: List[bd.DecodeCell], ours: List[str], peers: List[str], dtype,
               device, meta: dict, flusher, available: Optional[Callable[[], int]] = None) -> int:
    """The decode grid: every cell timed and printed as it finishes (or skipped when its cache
    does not fit), then the summary, what was not available and why, the check table (--check),
    the JSON (--json) and the plot (--plot). available: bytes a shape's buffers may take (default:
    available_memory on the device)."""
    if available is None:
        def available():
            return available_memory(device)
    modes = args.decode_modes
    runners = bd.runner_names(ours, peers, modes)
    meta.pop("flops", None)  # the dense grid's convention; here bandwidth counts
    meta.update({"mode": "decode", "bandwidth": bd.BANDWIDTH_CONVENTION,
                 "ratio": bd.RATIO_NOTE, "memory_fraction": bd.MEMORY_FRACTION,
                 "ours": ours, "peers": peers, "modes": modes, "runners": runners,
                 "causal": True, "num_splits": 0, "seed": args.seed})
    from ._bench_timing import L2_FLUSH_BYTES

    wrap = textwrap.TextWrapper(width=100, subsequent_indent="    ")
    print(f"flashattn.bench --decode: {meta['device']}, torch {meta['torch']}, cuDNN "
          f"{meta['cudnn']}, flashattn {meta['flashattn']}, {args.dtype}, {len(cells)} cells")
    for text in (
            f"A step: flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens ="
            f" cache_len - new, block_table, causal=True, num_splits=0) with backend "
            f"{', '.join(ours) or '(none)'}; peers {', '.join(peers) or 'none'}: torch SDPA "
            "(enable_gqa) over the contiguous cache only, bottom-right causal for new > 1; "
            "+graph: the step captured in a CUDA graph once and replayed",
            bd.BANDWIDTH_CONVENTION, bd.RATIO_NOTE,
            f"Median of {args.repeats} CUDA-event timings per runner and cell after "
            f"{args.warmup} warm-up runs, L2 flushed (a {L2_FLUSH_BYTES >> 20} MiB write) before "
            "each; runners alternate within a cell. The flush keeps the GPU busy while the host "
            "issues the step, so eager launch overhead shorter than the flush is hidden: the "
            "graph column shows what capture saves beyond that",
            f"Cells whose K + V cache exceeds {bd.MEMORY_FRACTION:.0%} of the GPU memory "
            "available are skipped (said in their row)"):
        print(wrap.fill(text))
    print()
    print("\n".join(bd.header_lines(runners)))
    rows: List[dict] = []
    cache_key, cache, skip_reason = None, None, None
    for i, cell in enumerate(cells):
        if cell.shape_key() != cache_key:
            cache, cache_key = None, cell.shape_key()  # free the previous shape's buffers first
            skip_reason = bd.fits(cell, available(), dtype.itemsize)
            if skip_reason is None:
                try:
                    cache = make_cache(cell, dtype, device, seed=args.seed + i)
                except Exception as e:  # out of memory after all: skip the shape, say why
                    skip_reason = one_line(e)
        if cache is None:
            row = bd.skipped_record(cell, skip_reason, dtype.itemsize)
        else:
            step = make_step(cell, cache, dtype, device, seed=args.seed + i)
            row = run_cell(cell, step, ours, peers, modes, args, dtype, flusher)
            step = None
        rows.append(row)
        print(bd.row_line(row, runners), flush=True)
    cache = None
    totals = bd.decode_summary(rows, runners)
    print()
    print("\n".join(bd.summary_lines(totals, runners)))
    notes = bd.not_available_lines(rows)
    if notes:
        print("\n".join(["", "Not available:"] + notes))
    if args.check:
        print()
        print("\n".join(bd.check_lines(rows)))
    if args.json:
        write_json(args.json, meta, rows, totals)
    if args.plot:
        from ._bench_plot import plot_decode

        plot_decode(rows, runners, args.plot,
                    f"{meta['device']}, {args.dtype}, decode; {bd.BANDWIDTH_CONVENTION}")
        print(f"wrote {args.plot}")
    return 0

