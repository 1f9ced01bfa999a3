"""A first decode timing on the GPU machine (issue 11), until `python -m flashattn.bench --decode`
exists: flash_attn_with_kvcache (flash-decode) beside torch's SDPA cuDNN and FlashAttention-2
backends (enable_gqa, contiguous cache) in the same process. bf16, d128, one new token appended
per step; CUDA events, L2 flushed (256 MiB write) before each run, median of 20 after 3 warm-ups.
Effective bandwidth = K and V bytes of the cache read / time.

    python3 scripts/device_decode_bench.py [--json FILE]
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import flashattn


def timed(fn, flush, reps=20, warmup=3):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)  # us
    return statistics.median(times)


def cell(batch, heads, kv_heads, cache_len, page, flush):
    d, dt, dev = 128, torch.bfloat16, "cuda"
    q = torch.randn(batch, 1, heads, d, device=dev, dtype=dt)
    k_new = torch.randn(batch, 1, kv_heads, d, device=dev, dtype=dt)
    v_new = torch.randn_like(k_new)
    seqlens = torch.full((batch,), cache_len - 1, device=dev, dtype=torch.int32)
    if page:
        pages_per_seq = cache_len // page
        k_cache = torch.randn(batch * pages_per_seq, page, kv_heads, d, device=dev, dtype=dt)
        table = torch.randperm(batch * pages_per_seq, device=dev, dtype=torch.int32).view(batch, -1)
    else:
        k_cache = torch.randn(batch, cache_len, kv_heads, d, device=dev, dtype=dt)
        table = None
    v_cache = torch.randn_like(k_cache)
    ours = lambda: flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                                     cache_seqlens=seqlens, block_table=table)
    row = {"batch": batch, "heads": heads, "kv_heads": kv_heads, "cache_len": cache_len,
           "page": page, "flashattn_us": timed(ours, flush)}
    kv_bytes = 2 * batch * cache_len * kv_heads * d * 2
    row["flashattn_tbs"] = kv_bytes / (row["flashattn_us"] * 1e-6) / 1e12
    if not page:
        qs = q.transpose(1, 2)
        ks = k_cache.transpose(1, 2)
        vs = v_cache.transpose(1, 2)
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                              ("fa2", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    fn = lambda: F.scaled_dot_product_attention(qs, ks, vs, enable_gqa=True)
                    row[name + "_us"] = timed(fn, flush)
                    row[name + "_tbs"] = kv_bytes / (row[name + "_us"] * 1e-6) / 1e12
            except RuntimeError as e:
                row[name + "_us"] = None
                row[name + "_error"] = str(e).splitlines()[0][:120]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    rows = []
    grid = [(64, 32, 8, 8192, 0), (64, 32, 8, 8192, 64), (8, 32, 8, 8192, 0), (1, 32, 8, 131072, 0),
            (1, 32, 8, 131072, 64), (128, 64, 8, 1024, 0), (8, 64, 8, 32768, 16),
            (8, 64, 8, 32768, 256)]
    print(f"{'batch':>5} {'heads':>6} {'cache':>7} {'page':>4} | {'ours us':>9} {'TB/s':>5} | "
          f"{'cudnn us':>9} {'TB/s':>5} | {'fa2 us':>9} {'TB/s':>5}")
    for b, h, hk, L, page in grid:
        r = cell(b, h, hk, L, page, flush)
        rows.append(r)
        fmt = lambda k: (f"{r[k + '_us']:9.1f} {r[k + '_tbs']:5.2f}" if r.get(k + "_us") else
                         f"{'-':>9} {'-':>5}")
        print(f"{b:5d} {h:3d}/{hk:<2d} {L:7d} {page:4d} | {fmt('flashattn')} | {fmt('cudnn')} | "
              f"{fmt('fa2')}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
