"""flashattn: FlashAttention's forward pass (CUDA and CPU backends) for any DLPack array.

    import flashattn
    out = flashattn.flash_attn_func(q, k, v, causal=True)            # BSHD, like FlashAttention
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True)  # options keyword-only
    flashattn.forward(q, k, v, out, lse)                            # into your own arrays
    flashattn.list_backends()

With PyTorch importable, the op is also torch.ops.flashattn.fwd (torch.compile, CUDA graphs,
opcheck). `python -m flashattn.bench` compares the backends with PyTorch's SDPA backends. The
command-line tool comes with the package: `flashattn info` (or `python -m flashattn info`).

Errors raise ValueError (bad shapes, strides, alignment, head dim, scale, aliasing, backend name),
TypeError (dtypes, non-arrays) or RuntimeError (devices, unavailable backend, out of memory, CUDA
errors), with the library's message prefixed by its status code.
"""
from ._C import version as __version__
from ._api import BackendInfo, flash_attn_func, forward, list_backends
from ._ops import torch as _torch

TORCH_AVAILABLE: bool = _torch is not None
"""Whether torch was importable: then torch.ops.flashattn.fwd is registered."""

__all__ = ["BackendInfo", "TORCH_AVAILABLE", "__version__", "flash_attn_func", "forward",
           "list_backends"]
