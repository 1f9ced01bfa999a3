"""Host time against GPU time of one forward call, flash_attn_func beside torch's cuDNN SDPA, on
one shape: the host time is issue only (--steps calls without a sync), the GPU time CUDA events
over the same calls (back to back; --flush adds flashattn.bench's 256 MiB write before each call,
whose GPU time then counts too). A call whose host time is the larger is bound by the host path.
--cprofile lists our host path's functions instead.

    python3 tools/profile/forward_host.py [--batch 32] [--heads 8] [--seqlen 512]
        [--head-dim 256] [--causal] [--steps 200] [--backend auto] [--cprofile]
"""
import argparse

import torch
import torch.nn.functional as F

import flashattn
from host_timing import host_and_gpu_us, print_cprofile


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seqlen", type=int, default=512)
    p.add_argument("--head-dim", type=int, default=256)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--backend", default="auto")
    p.add_argument("--cprofile", action="store_true")
    p.add_argument("--shift", type=float, default=0.0,
                   help="inputs N(shift, 1) (flashattn.bench draws N(0.5, 1))")
    p.add_argument("--flush", action="store_true",
                   help="a 256 MiB write before each call, as flashattn.bench does")
    a = p.parse_args()
    shape = (a.batch, a.seqlen, a.heads, a.head_dim)
    q, k, v = (torch.randn(shape, device="cuda").add_(a.shift).to(torch.bfloat16)
               for _ in range(3))
    flush_buffer = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")

    def ours():
        if a.flush:
            flush_buffer.fill_(1)
        flashattn.flash_attn_func(q, k, v, causal=a.causal, backend=a.backend)

    if a.cprofile:
        print_cprofile(ours, a.steps)
        return
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def cudnn():
        if a.flush:
            flush_buffer.fill_(1)
        F.scaled_dot_product_attention(qt, kt, vt, is_causal=a.causal)

    label = (f"b={a.batch} h={a.heads} s={a.seqlen} d={a.head_dim}{' causal' if a.causal else ''}"
             f" N({a.shift:g},1){' flush' if a.flush else ''}")
    results = [("flashattn " + a.backend, host_and_gpu_us(ours, a.steps, warmup=5))]
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        results.append(("cudnn sdpa", host_and_gpu_us(cudnn, a.steps, warmup=5)))
    for name, (host, gpu) in results:
        print(f"{label} {name:16}: host {host:6.1f} us/call, GPU {gpu:6.1f} us/call")


if __name__ == "__main__":
    main()
