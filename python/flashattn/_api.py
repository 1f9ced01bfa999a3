"""The public Python API: flash_attn_func (allocates the outputs), forward (writes into yours),
list_backends.

Errors: the library checks every argument and its message comes through unchanged, prefixed with
its status code ("invalid_shape: k.shape[2] (kv heads) = 3 must divide q.shape[2] (heads) = 8").
  ValueError   invalid_rank, invalid_shape, invalid_stride, misaligned, unsupported_head_dim,
               invalid_scale, aliasing, null_pointer, unknown_backend; a read-only output
  TypeError    invalid_dtype; an argument that is not an array, arrays of different frameworks,
               an option of the wrong type
  RuntimeError invalid_device (CPU/CUDA mix, no CUDA device), backend_unavailable, unsupported,
               out_of_memory, cuda_error, internal
"""
from __future__ import annotations

import numbers
import sys
from typing import Any, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from . import _C, _ops

torch = _ops.torch  # None when torch is not importable

# Output buffers are aligned to this many bytes (the library needs 16).
_ALIGNMENT = 64
_DLPACK_CPU, _DLPACK_CUDA_HOST = 1, 3


class BackendInfo(NamedTuple):
    name: str
    description: str
    device: str  # "cpu" or "cuda"
    usable: bool  # built in and runnable on this machine now
    why_not: str  # when not usable: "no CUDA device ...", "not built ..."


def list_backends() -> List[BackendInfo]:
    """Every backend built into the library, in registry order ("auto" is not one of them:
    it picks the first usable one for the tensors' device)."""
    return [BackendInfo(*row) for row in _C.list_backends()]


def _check_bool(value, name: str) -> bool:
    """Every boolean option: bool or numpy.bool_, nothing else (1, "x" or None would mean
    something by accident)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def _check_options(softmax_scale, causal, backend) -> Tuple[Optional[float], bool]:
    if softmax_scale is not None:
        if isinstance(softmax_scale, (bool, np.bool_)) or not isinstance(softmax_scale,
                                                                          numbers.Real):
            raise TypeError("softmax_scale must be a real number or None, got "
                            f"{type(softmax_scale).__name__}")
        # An int beyond 1.8e308 would raise a bare OverflowError in float(): the library's
        # verdict instead, with its code. A check, not try/except, so that torch.compile traces
        # this function as plain code.
        if isinstance(softmax_scale, numbers.Integral) and abs(softmax_scale) > sys.float_info.max:
            raise ValueError(f"invalid_scale: softmax_scale = an {type(softmax_scale).__name__} "
                             "beyond the float range, expected a finite value > 0")
        softmax_scale = float(softmax_scale)
    causal = _check_bool(causal, "causal")
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {type(backend).__name__}")
    return softmax_scale, causal


def _check_stream(stream) -> int:
    """A cudaStream_t as an int (NumPy integers too); the extension takes it as a uintptr_t."""
    if isinstance(stream, (bool, np.bool_)) or not isinstance(stream, numbers.Integral):
        raise TypeError(f"stream must be an int (a cudaStream_t) or None, got "
                        f"{type(stream).__name__}")
    stream = int(stream)
    if not 0 <= stream < 2 ** 64:
        raise ValueError(f"stream = {stream}, expected a cudaStream_t: an int in [0, 2**64)")
    return stream


def _is_torch(x) -> bool:
    return torch is not None and isinstance(x, torch.Tensor)


def _kind(x) -> str:
    return "None" if x is None else f"{type(x).__module__}.{type(x).__qualname__}"


def _check_same_framework(q, k, v, is_kind) -> None:
    for name, x in (("k", k), ("v", v)):
        if not is_kind(x):
            raise TypeError(f"{name} is a {_kind(x)} but q is a {_kind(q)}: q, k and v must be "
                            "arrays of one framework")


def _aligned_empty(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.empty(count * dtype.itemsize + _ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % _ALIGNMENT
    return raw[start:start + count * dtype.itemsize].view(dtype).reshape(shape)


def _current_stream(q) -> int:
    """The stream work on q's device should go to: torch's or CuPy's current stream, else 0."""
    if _is_torch(q):
        return _ops.torch_stream(q)
    if type(q).__module__.startswith("cupy") and "cupy" in sys.modules:
        return sys.modules["cupy"].cuda.get_current_stream().ptr
    return 0


def forward(q, k, v, out, lse=None, *, softmax_scale: Optional[float] = None,
            causal: bool = False, backend: str = "auto", stream: Optional[int] = None) -> None:
    """Attention forward into caller-provided arrays (the library's forward()).

    q: (batch, seqlen_q, heads, head_dim); k, v: (batch, seqlen_k, kv_heads, head_dim);
    out: like q; lse: float32 (batch, heads, seqlen_q) or None. Any DLPack arrays (the inputs may
    be read-only; out and lse must be writable and are written in place, never copied), all on one
    device, with 16-byte aligned data and non-last strides, last dim contiguous.

    stream: a cudaStream_t as an int. None means torch's current stream for torch tensors, CuPy's
    current stream for CuPy arrays, and the default stream (0) otherwise. Ignored on the CPU.
    Every argument after lse is keyword-only. Raises as flash_attn_func does; also ValueError for
    a read-only out or lse.
    """
    softmax_scale, causal = _check_options(softmax_scale, causal, backend)
    stream = _current_stream(q) if stream is None else _check_stream(stream)
    if torch is not None:  # older torch refuses DLPack export of tensors that require grad
        q, k, v, out, lse = (x.detach() if _is_torch(x) else x for x in (q, k, v, out, lse))
    _C.forward(q, k, v, out, lse, softmax_scale, causal, backend, stream)


def flash_attn_func(q, k, v, *, softmax_scale: Optional[float] = None, causal: bool = False,
                    return_lse: bool = False, backend: str = "auto") -> Union[Any, Tuple[Any, Any]]:
    """Scaled dot-product attention, FlashAttention's forward: softmax(scale * Q K^T + mask) V.

    Every argument after v is keyword-only: FlashAttention-2's flash_attn_func takes dropout_p
    fourth and FlashAttention-3's softmax_scale, so a positional fourth argument would mean
    different things to their users.

    Args:
        q: (batch, seqlen_q, heads, head_dim).
        k, v: (batch, seqlen_k, kv_heads, head_dim); heads % kv_heads == 0 (GQA/MQA: query head h
            reads kv head h // (heads // kv_heads)).
            Arbitrary strides with the last dim contiguous; bfloat16, float16 or float32 (one
            dtype for all three); head_dim a multiple of 8 up to 256.
        softmax_scale: default 1 / sqrt(head_dim).
        causal: mask aligned bottom-right: query row i sees key j iff
            j <= i + seqlen_k - seqlen_q. A row that sees no key gives O = 0 and LSE = -inf.
        return_lse: also return the float32 log-sum-exp of the scaled scores,
            (batch, heads, seqlen_q). causal and return_lse are bool or numpy.bool_.
        backend: "auto" (the best usable backend for the tensors' device), or a name from
            list_backends(): "flash" (fused, GPU), "naive" (S in GPU memory), "cpu-flash",
            "cpu-reference" (float64), and what else is built in.

    Returns:
        out with q's shape and dtype (BSHD contiguous), or (out, lse) when return_lse.

    Arrays and devices:
        torch.Tensor: runs torch.ops.flashattn.fwd (so torch.compile(fullgraph=True) traces it
            and CUDA graphs capture it); CUDA tensors run on their device and on the caller's
            current stream, CPU tensors on the CPU backends (bfloat16 included).
        numpy.ndarray: CPU backends, NumPy outputs of q's dtype: float16, float32, or
            ml_dtypes' bfloat16 (JAX's NumPy bfloat16; NumPy itself has none).
        Any other DLPack array (CuPy, JAX, ...): viewed without a copy through torch.from_dlpack
            when torch is importable (which also orders the producer's stream before torch's
            current stream), else through numpy.from_dlpack (CPU arrays only); the outputs are
            torch tensors (resp. NumPy arrays): turn them back with your framework's from_dlpack,
            or call flashattn.forward with outputs you allocated.

    CUDA graphs: the "flash" backend allocates nothing and does not synchronize, so capture and
    replay work. The "naive" backend allocates its S workspace with cudaMalloc and synchronizes
    the stream: it cannot be captured (and it blocks the host).

    Autograd: forward only. With inputs that require grad the outputs do too, and backward()
    raises RuntimeError.

    Raises (the library's message, prefixed with its status code):
        ValueError: invalid_rank, invalid_shape, invalid_stride, misaligned, unsupported_head_dim,
            invalid_scale, aliasing, null_pointer, unknown_backend.
        TypeError: invalid_dtype; an argument that is not an array; q, k, v of different
            frameworks; an option of the wrong type.
        RuntimeError: invalid_device (a CPU/CUDA mix, a backend for the other device, no CUDA
            device), backend_unavailable, unsupported, out_of_memory, cuda_error, internal.
    """
    softmax_scale, causal = _check_options(softmax_scale, causal, backend)
    return_lse = _check_bool(return_lse, "return_lse")
    if _is_torch(q):
        _check_same_framework(q, k, v, _is_torch)
        out, lse = _ops.fwd(q, k, v, softmax_scale, causal, backend)
    elif isinstance(q, np.ndarray):
        _check_same_framework(q, k, v, lambda x: isinstance(x, np.ndarray))
        # q's dtype object: ml_dtypes' bfloat16 too. An object array cannot be viewed from bytes:
        # it gets a plain out, and q's import reports the dtype before out is looked at.
        out = (np.empty(q.shape, q.dtype) if q.dtype.hasobject
               else _aligned_empty(q.shape, q.dtype))
        lse = _aligned_empty(_ops.lse_shape(q.shape), np.float32)
        _C.forward(q, k, v, out, lse, softmax_scale, causal, backend, 0)
    else:
        q, k, v = (_as_torch_or_numpy(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
        return flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                               return_lse=return_lse, backend=backend)
    return (out, lse) if return_lse else out


def _as_torch_or_numpy(x, name: str):
    """A zero-copy torch (else NumPy) view of another framework's DLPack array."""
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"{name}: expected a torch.Tensor, a numpy.ndarray or an array with "
                        f"__dlpack__, got {_kind(x)}")
    if torch is not None:
        return torch.from_dlpack(x)
    device_type, _ = x.__dlpack_device__()
    if device_type in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
        return np.from_dlpack(x)
    raise TypeError(f"{name} is a {_kind(x)} on DLPack device type {device_type}: without torch, "
                    "flash_attn_func can only allocate outputs for CPU arrays; install torch, or "
                    "call flashattn.forward with outputs you allocated")
