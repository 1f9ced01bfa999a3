"""One decode step of flash_attn_with_kvcache, repeated, for a profiler to attach to (ncu on the
GPU machine: scripts/device_profile.sh). bf16, d128, one token appended per step. --timing
instead prints the host time per call (issue only, over --steps calls without a sync) beside the
GPU time per call (CUDA events over the same calls): a call whose host time is the larger is
bound by the Python and C++ host path, not by the kernels. --timeline captures the step in a
CUDA graph and replays it --steps times after an L2 flush each, under torch.profiler: each kernel's
median duration and the median gaps between the step's kernels (what a launch costs inside a
graph), beside the median span of the whole step; --flush-mib 1 leaves a cache that fits
in L2 there, and --flush-read reads the buffer (a sum) rather than writing it, so L2 is left
holding clean lines instead of dirty ones that must be written back as the step's loads evict
them. --peer cudnn (or flash) times torch's SDPA with that backend instead (enable_gqa, the
whole contiguous cache as keys, as the bench's decode peers), for the same timeline. --trace
replays the graph --steps times the same way, one at a time, for a build with
-DFLASHATTN_DECODE_TRACE (scripts/device_decode_trace.sh), whose attention blocks print their
phase timestamps (decode_trace_report.py reads them).

    python3 tools/profile/decode_step.py [--batch 64] [--heads 32] [--kv-heads 8]
        [--cache-len 8192] [--page 0] [--steps 5]
        [--timing | --timeline | --trace] [--flush-mib 256] [--flush-read] [--peer cudnn]
"""
import argparse

import torch

import flashattn
from host_timing import host_and_gpu_us, print_cprofile


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--cache-len", type=int, default=8192)
    p.add_argument("--page", type=int, default=0, help="page size, 0: contiguous cache")
    p.add_argument("--num-splits", type=int, default=0)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--flush-mib", type=int, default=256,
                   help="--timeline: MiB written before each replay (1: the cache stays in L2)")
    p.add_argument("--flush-read", action="store_true",
                   help="--timeline / --trace: flush by reading the buffer (clean L2) instead of writing")
    p.add_argument("--timing", action="store_true", help="host vs GPU time per call")
    p.add_argument("--timeline", action="store_true",
                   help="kernel durations and the gaps between them, graph replays")
    p.add_argument("--peer", choices=["cudnn", "flash"], default=None,
                   help="time torch SDPA with this backend instead of flashattn")
    p.add_argument("--trace", action="store_true",
                   help="graph replays one at a time, for a -DFLASHATTN_DECODE_TRACE build")
    p.add_argument("--cprofile", action="store_true",
                   help="the host path's functions by cumulative time over --steps calls")
    a = p.parse_args()
    d, dt, dev = 128, torch.bfloat16, "cuda"
    q = torch.randn(a.batch, 1, a.heads, d, device=dev, dtype=dt)
    k_new = torch.randn(a.batch, 1, a.kv_heads, d, device=dev, dtype=dt)
    v_new = torch.randn_like(k_new)
    seqlens = torch.full((a.batch,), a.cache_len - 1, device=dev, dtype=torch.int32)
    table = None
    if a.page:
        pages = a.batch * (a.cache_len // a.page)
        k_cache = torch.randn(pages, a.page, a.kv_heads, d, device=dev, dtype=dt)
        table = torch.randperm(pages, device=dev, dtype=torch.int32).view(a.batch, -1)
    else:
        k_cache = torch.randn(a.batch, a.cache_len, a.kv_heads, d, device=dev, dtype=dt)
    v_cache = torch.randn_like(k_cache)
    if a.peer:
        step = peer_step(a.peer, q, k_cache, v_cache, a.kv_heads != a.heads)
    else:
        def step():
            flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                              cache_seqlens=seqlens, block_table=table,
                                              num_splits=a.num_splits)

    if a.cprofile:
        print_cprofile(step, a.steps)
        return
    if a.trace:
        replay_one_at_a_time(step, a.steps, make_flush(a.flush_mib, a.flush_read))
        return
    if a.timeline:
        print_timeline(step, a.steps, make_flush(a.flush_mib, a.flush_read),
                       f"batch {a.batch} heads {a.heads}/{a.kv_heads} cache {a.cache_len} page "
                       f"{a.page} splits {a.num_splits or 'auto'} flush {a.flush_mib} MiB"
                       f"{' read' if a.flush_read else ''}")
        return
    if not a.timing:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
        return
    host_us, gpu_us = host_and_gpu_us(step, a.steps, warmup=3)
    print(f"batch {a.batch} heads {a.heads}/{a.kv_heads} cache {a.cache_len} page {a.page}: "
          f"host {host_us:.1f} us/call, GPU {gpu_us:.1f} us/call over {a.steps} calls")


def peer_step(peer: str, q, k_cache, v_cache, gqa: bool):
    """torch SDPA's decode step with backend `peer` over the whole contiguous cache."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[peer]
    qt, kt, vt = q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2)

    def step():
        with sdpa_kernel(backend):
            scaled_dot_product_attention(qt, kt, vt, enable_gqa=gqa)
    return step


def make_flush(flush_mib: int, read: bool):
    """The L2 flush run before each replay: writes (fill_) or reads (a sum of) the buffer."""
    buf = torch.ones(max(1, flush_mib) << 18, dtype=torch.float32, device="cuda")  # sum: no cast
    if read:
        return lambda: buf.sum()
    return lambda: buf.fill_(1)


def replay_one_at_a_time(step, steps: int, flush) -> None:
    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(steps):
        flush()
        torch.cuda.synchronize()  # the trace's launches stay apart in time
        graph.replay()
        torch.cuda.synchronize()


def print_timeline(step, steps: int, flush, title: str) -> None:
    import statistics

    from torch.profiler import ProfilerActivity, profile

    step()  # the cache's first append, kernel images loaded
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            flush()
            graph.replay()
        torch.cuda.synchronize()
    # The events in time order; a step is the kernels after each flush.
    events = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                    key=lambda e: e.time_range.start)
    runs, cur = [], None
    for e in events:
        if any(w in e.name.lower() for w in ("fill", "memset", "reduce")):  # the flush
            cur = []
            runs.append(cur)
        elif cur is not None:
            cur.append(e)
    if not runs:
        print(f"{title}: no flush found among {sorted({e.name[:60] for e in events})}")
        return
    durations, gaps, spans = {}, {}, []
    for run in runs:
        if not run:
            continue
        spans.append(run[-1].time_range.end - run[0].time_range.start)
        for i, e in enumerate(run):
            name = e.name.split("<")[0].split("(")[0]
            durations.setdefault((i, name), []).append(e.time_range.end - e.time_range.start)
            if i:
                gaps.setdefault(i, []).append(e.time_range.start - run[i - 1].time_range.end)
    print(f"{title}: {len(spans)} graph replays, median us")
    for (i, name), ds in sorted(durations.items()):
        gap = f", gap before it {statistics.median(gaps[i]):.1f}" if i in gaps else ""
        print(f"  kernel {i} {name}: {statistics.median(ds):.1f}{gap}")
    if spans:
        print(f"  step span (first kernel start to last end): {statistics.median(spans):.1f}")


if __name__ == "__main__":
    main()
