"""flashattn: FlashAttention's forward pass (CUDA and CPU backends) for any DLPack array.

    import flashattn
    out = flashattn.flash_attn_func(q, k, v, causal=True)            # BSHD, like FlashAttention
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True)  # options keyword-only
    out = flashattn.flash_attn_func(q, k, v, window_size=(256, 0), softcap=30.0)
    out = flashattn.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k)
    flashattn.forward(q, k, v, out, lse)                            # into your own arrays
    flashattn.list_backends()

Options (FlashAttention's names): softmax_scale, causal, window_size, softcap, alibi_slopes,
sinks; varlen adds seqused_k. With PyTorch importable, the ops are also torch.ops.flashattn.fwd
and torch.ops.flashattn.fwd_varlen (torch.compile, CUDA graphs, opcheck).
`python -m flashattn.bench` compares the backends with PyTorch's SDPA backends (`--variants`: each
variant beside the dense case and FlexAttention's equivalent). The command-line
tool comes with the package: `flashattn info` (or `python -m flashattn info`).

Errors raise ValueError (bad shapes, strides, alignment, head dim, scale, option values,
aliasing, backend name), TypeError (dtypes, non-arrays, options of the wrong type) or
RuntimeError (devices, unavailable backend, a backend that does not implement an option, out of
memory, CUDA errors), with the library's message prefixed by its status code.
"""
from ._C import version as __version__
from ._api import (BackendInfo, flash_attn_func, flash_attn_varlen_func, forward,
                   list_backends)
from ._ops import torch as _torch

TORCH_AVAILABLE: bool = _torch is not None
"""Whether torch was importable: then torch.ops.flashattn.fwd and fwd_varlen are registered."""

__all__ = ["BackendInfo", "TORCH_AVAILABLE", "__version__", "flash_attn_func",
           "flash_attn_varlen_func", "forward", "list_backends"]
