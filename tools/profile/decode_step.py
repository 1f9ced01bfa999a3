"""One decode step of flash_attn_with_kvcache, repeated, for a profiler to attach to (ncu on the
GPU machine: scripts/device_profile.sh). bf16, d128, one token appended per step.

    python3 tools/profile/decode_step.py [--batch 64] [--heads 32] [--kv-heads 8]
        [--cache-len 8192] [--page 0] [--steps 5]
"""
import argparse

import torch

import flashattn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--cache-len", type=int, default=8192)
    p.add_argument("--page", type=int, default=0, help="page size, 0: contiguous cache")
    p.add_argument("--num-splits", type=int, default=0)
    p.add_argument("--steps", type=int, default=5)
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
    for _ in range(a.steps):
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                          cache_seqlens=seqlens, block_table=table,
                                          num_splits=a.num_splits)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
