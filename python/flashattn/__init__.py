"""flashattn: FlashAttention's forward pass (CUDA and CPU backends) for any DLPack array.

    import flashattn
    out = flashattn.flash_attn_func(q, k, v, causal=True)            # BSHD, like FlashAttention
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True)  # options keyword-only
    out = flashattn.flash_attn_func(q, k, v, window_size=(256, 0), softcap=30.0)
    out = flashattn.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_q, max_k)
    out = flashattn.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                            cache_seqlens=lens, block_table=pages, causal=True)
    out = flashattn.combine([out_a, out_b], [lse_a, lse_b])         # merge key-disjoint parts
    flashattn.forward(q, k, v, out, lse)                            # into your own arrays
    flashattn.workspace_bytes(q, k, v, out, lse)                    # forward()'s scratch bytes
    flashattn.list_backends()

Options (FlashAttention's names): softmax_scale, causal, window_size, softcap, alibi_slopes,
sinks; varlen adds seqused_k; the KV cache cache_seqlens, block_table and num_splits. With PyTorch
importable, the ops are also torch.ops.flashattn.fwd, fwd_varlen, fwd_kvcache (which mutates the
cache) and combine (torch.compile, CUDA graphs, opcheck); a backend's scratch memory (split-KV
partial results, for one) comes from torch's caching allocator, so every call on CUDA tensors
can be captured in a CUDA graph.
`python -m flashattn.bench` compares the backends with PyTorch's SDPA backends (`--variants`: each
variant beside the dense case and FlexAttention's equivalent). The command-line
tool comes with the package: `flashattn info` (or `python -m flashattn info`).

Errors raise ValueError (bad shapes, strides, alignment, head dim, scale, option values,
aliasing, backend name), TypeError (dtypes, non-arrays, options of the wrong type) or
RuntimeError (devices, unavailable backend, a backend that does not implement an option, out of
memory, CUDA errors), with the library's message prefixed by its status code.
"""
from ._C import version as __version__
from ._api import (BackendInfo, combine, flash_attn_func, flash_attn_varlen_func,
                   flash_attn_with_kvcache, forward, list_backends, workspace_bytes)
from ._ops import torch as _torch

TORCH_AVAILABLE: bool = _torch is not None
"""Whether torch was importable: then torch.ops.flashattn.fwd, fwd_varlen, fwd_kvcache and
combine are registered."""

__all__ = ["BackendInfo", "TORCH_AVAILABLE", "__version__", "combine", "flash_attn_func",
           "flash_attn_varlen_func", "flash_attn_with_kvcache", "forward", "list_backends",
           "workspace_bytes"]
