"""What flashattn.bench times: one zero-argument callable per backend for one cell's inputs.

Every runner reads the same BSHD tensors. flashattn's backends take them as they are; PyTorch's
SDPA backends and FlexAttention get BHSD views of the same memory (q.transpose(1, 2)), which is
also how FlashAttention-2 itself stores them. Causal masks coincide because seqlen_q == seqlen_k
in the benchmark (SDPA aligns top-left, flashattn bottom-right).
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import flashattn

# Peer names, as in /work/shared/data/peers-*.json: SDPA backend (None: FlexAttention).
PEERS = {
    "cudnn": "CUDNN_ATTENTION",
    "fa2": "FLASH_ATTENTION",
    "mem_eff": "EFFICIENT_ATTENTION",
    "flex": None,
}
PEER_DESCRIPTIONS = {
    "cudnn": "torch SDPA, cuDNN backend",
    "fa2": "torch SDPA, FlashAttention-2 backend",
    "mem_eff": "torch SDPA, memory-efficient backend",
    "flex": "torch.compile(flex_attention), Triton",
}


def flashattn_cuda_backends(include_naive: bool = False) -> list:
    """Usable CUDA backends of the library; naive is left out by default (its S matrix runs out
    of memory at the benchmark's sizes)."""
    return [b.name for b in flashattn.list_backends()
            if b.device == "cuda" and b.usable and (include_naive or b.name != "naive")]


def flashattn_runner(name: str, q, k, v, causal: bool) -> Callable:
    def run():
        return flashattn.flash_attn_func(q, k, v, causal=causal, backend=name)
    return run


def sdpa_runner(peer: str, q, k, v, causal: bool) -> Callable:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    backend = getattr(SDPBackend, PEERS[peer])
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    gqa = q.shape[2] != k.shape[2]

    def run():
        with sdpa_kernel(backend):
            if gqa:  # the keyword exists since torch 2.5; leave it out otherwise
                return scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                    enable_gqa=True)
            return scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
    return run


class FlexCompiler:
    """One torch.compile'd flex_attention for the whole run. dynamic=True compiles once per head
    dim and mask kind rather than once per shape (minutes saved over the grid); static=True
    compiles per shape."""

    def __init__(self, static: bool = False):
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        import torch._dynamo

        # Every distinct shape or mask is a recompile; past the limit dynamo would silently run
        # flex_attention eagerly (materializing S), which is not what we want to time.
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        self._create_block_mask = create_block_mask
        self._flex = torch.compile(flex_attention, dynamic=not static)
        self.mode = "static shapes" if static else "dynamic=True"

    def runner(self, q, k, v, causal: bool) -> Callable:
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        block_mask = None
        if causal:
            def causal_mask(b, h, q_idx, kv_idx):
                return q_idx >= kv_idx
            block_mask = self._create_block_mask(causal_mask, None, None, q.shape[1], k.shape[1],
                                                 device=q.device)
        gqa = q.shape[2] != k.shape[2]

        def run():
            return self._flex(qt, kt, vt, block_mask=block_mask, enable_gqa=gqa)
        return run


def build_runners(names, q, k, v, causal: bool, flex: Optional[FlexCompiler]) -> tuple:
    """({name: runner}, {name: why not}) for the requested backend names."""
    runners: Dict[str, Callable] = {}
    not_available: Dict[str, str] = {}
    for name in names:
        try:
            if name == "flex":
                if flex is None:
                    raise RuntimeError("FlexAttention did not compile (see the header)")
                runners[name] = flex.runner(q, k, v, causal)
            elif name in PEERS:
                runners[name] = sdpa_runner(name, q, k, v, causal)
            else:
                runners[name] = flashattn_runner(name, q, k, v, causal)
        except Exception as e:  # a backend that cannot be set up for this cell: say why
            not_available[name] = one_line(e)
    return runners, not_available


def one_line(e: BaseException, limit: int = 160) -> str:
    """The first line of an exception message, shortened: what a table cell can hold."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = f"{type(e).__name__}: {text}"
    return text if len(text) <= limit else text[:limit - 3] + "..."
