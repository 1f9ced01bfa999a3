"""The PyTorch operator torch.ops.flashattn.fwd, registered through torch.library when torch is
importable.

Schema: fwd(Tensor q, Tensor k, Tensor v, float? softmax_scale, bool causal, str backend)
        -> (Tensor out, Tensor lse)

- One implementation for CPU and CUDA tensors: it allocates out (q's shape and dtype, BSHD
  contiguous) and the float32 LSE (batch, heads, seqlen_q) on q's device and calls the library,
  on the caller's current CUDA stream for CUDA tensors.
- The fake (meta) implementation returns empties of the same shapes, dtypes and strides, so
  torch.compile(fullgraph=True) traces the op as one node and torch.library.opcheck passes.
  Argument checks happen when the op runs (in the library), except q's rank, which the fake
  needs to compute the LSE shape.
- There is no backward pass yet: the autograd formula raises when a gradient is requested.
"""
# No `from __future__ import annotations` here: torch.library reads the schema from real
# annotation objects.
from typing import Optional, Tuple

from . import _C

try:
    import torch
except ImportError:  # torch is optional: the NumPy/DLPack path works without it
    torch = None

_Q_RANK_MESSAGE = "invalid_rank: q.rank = {}, expected 4 (batch, seqlen_q, heads, head_dim)"

NO_BACKWARD_MESSAGE = (
    "flashattn has no backward pass yet (forward only): call flash_attn_func under "
    "torch.no_grad() / torch.inference_mode(), or on tensors that do not require grad")


def lse_shape(q_shape) -> Tuple[int, ...]:
    """(batch, heads, seqlen_q) for a BSHD q shape. For a q of the wrong rank the library names
    q's rank first; (0,) is only a placeholder."""
    return (q_shape[0], q_shape[2], q_shape[1]) if len(q_shape) == 4 else (0,)


def torch_stream(t) -> int:
    """The cudaStream_t (as an int) of torch's current stream on t's device; 0 for CPU tensors."""
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


if torch is not None:

    @torch.library.custom_op("flashattn::fwd", mutates_args=(), device_types=("cpu", "cuda"))
    def fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softmax_scale: Optional[float],
            causal: bool, backend: str) -> Tuple[torch.Tensor, torch.Tensor]:
        """Attention forward: returns (out, lse). See flashattn.flash_attn_func."""
        out = q.new_empty(q.shape)
        lse = q.new_empty(lse_shape(q.shape), dtype=torch.float32)
        stream = torch_stream(q)
        # detach(): older torch refuses DLPack export of tensors that require grad; only read.
        _C.forward(q.detach(), k.detach(), v.detach(), out, lse, softmax_scale, causal, backend,
                   stream)
        return out, lse

    @fwd.register_fake
    def _fwd_fake(q, k, v, softmax_scale, causal, backend):
        if q.dim() != 4:
            raise ValueError(_Q_RANK_MESSAGE.format(q.dim()))
        return q.new_empty(q.shape), q.new_empty(lse_shape(q.shape), dtype=torch.float32)

    def _setup_context(ctx, inputs, output):
        pass

    def _backward(ctx, grad_out, grad_lse):
        raise RuntimeError(NO_BACKWARD_MESSAGE)

    fwd.register_autograd(_backward, setup_context=_setup_context)
else:
    fwd = None
