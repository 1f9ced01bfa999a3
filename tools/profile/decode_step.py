"""One decode step of flash_attn_with_kvcache, repeated, for a profiler to attach to (ncu on the
GPU machine: scripts/device_profile.sh). bf16, d128, one token appended per step. --timing
instead prints the host time per call (issue only, over --steps calls without a sync) beside the
GPU time per call (CUDA events over the same calls): a call whose host time is the larger is
bound by the Python and C++ host path, not by the kernels.

    python3 tools/profile/decode_step.py [--batch 64] [--heads 32] [--kv-heads 8]
        [--cache-len 8192] [--page 0] [--steps 5] [--timing]
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
    p.add_argument("--timing", action="store_true", help="host vs GPU time per call")
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
    def step():
        flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                          cache_seqlens=seqlens, block_table=table,
                                          num_splits=a.num_splits)

    if a.cprofile:
        print_cprofile(step, a.steps)
        return
    if not a.timing:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
        return
    host_us, gpu_us = host_and_gpu_us(step, a.steps, warmup=3)
    print(f"batch {a.batch} heads {a.heads}/{a.kv_heads} cache {a.cache_len} page {a.page}: "
          f"host {host_us:.1f} us/call, GPU {gpu_us:.1f} us/call over {a.steps} calls")


if __name__ == "__main__":
    main()
