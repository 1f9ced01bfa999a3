"""torch SDPA on one shape, repeated, for ncu to attach to beside our kernel of the same shape
(scripts/device_ncu_pairs.sh): bf16 BSHD inputs N(0.5, 1) as flashattn.bench draws them, the
backend forced (cudnn or flash, FlashAttention-2), enable_gqa when kv_heads < heads. A decode
step is --seqlen-q 1 against --seqlen-k keys (the bench's decode peers: a contiguous cache).

    python3 tools/profile/peer_sdpa.py [--backend cudnn] [--batch 32] [--heads 16]
        [--kv-heads 16] [--seqlen-q 512] [--seqlen-k 512] [--head-dim 128] [--causal]
        [--steps 5]
"""
import argparse

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=sorted(BACKENDS), default="cudnn")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=0, help="default --heads")
    p.add_argument("--seqlen-q", type=int, default=512)
    p.add_argument("--seqlen-k", type=int, default=0, help="default --seqlen-q")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--steps", type=int, default=5)
    a = p.parse_args()
    kvh = a.kv_heads or a.heads
    sk = a.seqlen_k or a.seqlen_q

    def draw(s, h):
        return (torch.randn((a.batch, s, h, a.head_dim), device="cuda").add_(0.5)
                .to(torch.bfloat16).transpose(1, 2))
    q, k, v = draw(a.seqlen_q, a.heads), draw(sk, kvh), draw(sk, kvh)
    extra = {"enable_gqa": True} if kvh != a.heads else {}
    with sdpa_kernel(BACKENDS[a.backend]):
        for _ in range(a.steps):
            scaled_dot_product_attention(q, k, v, is_causal=a.causal, **extra)
    torch.cuda.synchronize()
    print(f"{a.backend}: {a.steps} calls of b={a.batch} h={a.heads}/{kvh} sq={a.seqlen_q} "
          f"sk={sk} d={a.head_dim}{' causal' if a.causal else ''}")


if __name__ == "__main__":
    main()
