"""The public Python API: flash_attn_func and flash_attn_varlen_func (allocate the outputs),
forward (writes into yours), list_backends.

Errors: the library checks every argument and its message comes through unchanged, prefixed with
its status code ("invalid_shape: k.shape[2] (kv heads) = 3 must divide q.shape[2] (heads) = 8").
  ValueError   invalid_rank, invalid_shape, invalid_stride, misaligned, unsupported_head_dim,
               invalid_scale, invalid_argument, aliasing, null_pointer, unknown_backend; a
               read-only output
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


_INT64_MIN, _INT64_MAX = -2 ** 63, 2 ** 63 - 1


class _Options(NamedTuple):
    """The scalar options, checked: what the ops and the extension take."""
    softmax_scale: Optional[float]
    causal: bool
    window_left: int
    window_right: int
    softcap: float
    backend: str


def _is_int(x) -> bool:
    """An int, a NumPy integer, or (under torch.compile with dynamic shapes) a torch.SymInt;
    never a bool."""
    if isinstance(x, (bool, np.bool_)):
        return False
    return isinstance(x, numbers.Integral) or (torch is not None and isinstance(x, torch.SymInt))


def _int64(x, name: str, expected: str):
    """x as an int for the extension's int64; beyond int64: the library's kind of message, with
    its code (the extension would raise nanobind's argument dump). A torch.SymInt stays one, and
    under torch.compile an int (a SymInt too) is never passed through int(), which would
    specialize it."""
    if not isinstance(x, int):  # NumPy integers
        if torch is not None and isinstance(x, torch.SymInt):
            return x
        x = int(x)
    if not _INT64_MIN <= x <= _INT64_MAX:
        raise ValueError(f"invalid_argument: {name} = {x} is beyond int64, expected {expected}")
    return x


def _check_real(value, name: str, also: str, code: str, expected: str) -> float:
    """A real number (not a bool) as a float; `also` completes the TypeError ("or None"). An int
    beyond 1.8e308 would raise a bare OverflowError in float(): the library's verdict instead,
    with its code and `expected`. A check, not try/except, so that torch.compile traces this
    function as plain code."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number{also}, got {type(value).__name__}")
    if isinstance(value, numbers.Integral) and abs(value) > sys.float_info.max:
        raise ValueError(f"{code}: {name} = an {type(value).__name__} beyond the float range, "
                         f"expected {expected}")
    return float(value)


_WINDOW_EXPECTED = "-1 (unbounded) or a key count >= 0"


def _check_window(window_size) -> Tuple[int, int]:
    """FlashAttention's window_size = (left, right): a tuple or list of two ints. Their values
    (>= -1) are the library's to check: its message names window_left / window_right."""
    if not isinstance(window_size, (tuple, list)):
        raise TypeError("window_size must be a pair of ints (window_left, window_right), -1 "
                        f"unbounded, got {type(window_size).__name__}")
    if len(window_size) != 2:
        raise ValueError(f"window_size = {tuple(window_size)!r} has {len(window_size)} elements, "
                         "expected 2 (window_left, window_right)")
    sides = []
    for i, name in enumerate(("window_left", "window_right")):
        w = window_size[i]
        if not _is_int(w):
            raise TypeError(f"window_size[{i}] ({name}) must be an int, {_WINDOW_EXPECTED}, got "
                            f"{type(w).__name__}")
        sides.append(_int64(w, name, _WINDOW_EXPECTED))
    return sides[0], sides[1]


def _check_options(softmax_scale, causal, backend, window_size=(-1, -1),
                   softcap=0.0) -> _Options:
    if softmax_scale is not None:
        softmax_scale = _check_real(softmax_scale, "softmax_scale", " or None", "invalid_scale",
                                    "a finite value > 0")
    causal = _check_bool(causal, "causal")
    window_left, window_right = _check_window(window_size)
    # Its value (finite, >= 0) is the library's to check.
    softcap = _check_real(softcap, "softcap", " (0: off)", "invalid_argument",
                          "a finite value >= 0 (0 is off)")
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, got {type(backend).__name__}")
    return _Options(softmax_scale, causal, window_left, window_right, softcap, backend)


def _check_varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k):
    """(max_seqlen_q, max_seqlen_k) for the extension: ints when cu_seqlens are given (their
    values, >= 0 and bounding every length, are the library's to check), 0 otherwise, where
    giving one is an error: an option never goes unread."""
    if cu_seqlens_q is None and cu_seqlens_k is None:
        for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
            if value is not None:
                raise ValueError(f"invalid_argument: {name} is given without cu_seqlens_q / "
                                 "cu_seqlens_k: it bounds the lengths of variable-length "
                                 "sequences")
        return 0, 0
    lengths = []
    for name, value in (("max_seqlen_q", max_seqlen_q), ("max_seqlen_k", max_seqlen_k)):
        if not _is_int(value):
            raise TypeError(f"{name} must be an int >= 0 bounding every sequence's length (a "
                            "Python int, e.g. int(seqlens.max()), so that torch.compile does not "
                            f"break), got {type(value).__name__}")
        lengths.append(_int64(value, name, ">= 0"))
    return lengths[0], lengths[1]


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
            causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
            alibi_slopes=None, sinks=None, cu_seqlens_q=None, cu_seqlens_k=None,
            max_seqlen_q: Optional[int] = None, max_seqlen_k: Optional[int] = None,
            seqused_k=None, backend: str = "auto", stream: Optional[int] = None) -> None:
    """Attention forward into caller-provided arrays (the library's forward()).

    Dense: q (batch, seqlen_q, heads, head_dim); k, v (batch, seqlen_k, kv_heads, head_dim);
    out like q; lse float32 (batch, heads, seqlen_q) or None.
    Variable length (cu_seqlens_q and cu_seqlens_k given, with max_seqlen_q and max_seqlen_k):
    q, out (total_q, heads, head_dim); k, v (total_k, kv_heads, head_dim); lse float32
    (heads, total_q) or None; see flash_attn_varlen_func.
    Any DLPack arrays (the inputs may be read-only; out and lse must be writable and are written
    in place, never copied), all on one device, with 16-byte aligned data and non-last strides,
    last dim contiguous. The options are flash_attn_func's and flash_attn_varlen_func's.

    stream: a cudaStream_t as an int. None means torch's current stream for torch tensors, CuPy's
    current stream for CuPy arrays, and the default stream (0) otherwise. Ignored on the CPU.
    Every argument after lse is keyword-only. Raises as flash_attn_func does; also ValueError for
    a read-only out or lse.
    """
    opts = _check_options(softmax_scale, causal, backend, window_size, softcap)
    max_seqlen_q, max_seqlen_k = _check_varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                               max_seqlen_k)
    stream = _current_stream(q) if stream is None else _check_stream(stream)
    arrays = (q, k, v, out, lse, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, seqused_k)
    if torch is not None:  # older torch refuses DLPack export of tensors that require grad
        arrays = tuple(x.detach() if _is_torch(x) else x for x in arrays)
    q, k, v, out, lse, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, seqused_k = arrays
    _C.forward(q, k, v, out, lse, opts.softmax_scale, opts.causal, opts.window_left,
               opts.window_right, opts.softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k,
               seqused_k, max_seqlen_q, max_seqlen_k, opts.backend, stream)


def flash_attn_func(q, k, v, *, softmax_scale: Optional[float] = None, causal: bool = False,
                    window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes=None, sinks=None, return_lse: bool = False,
                    backend: str = "auto") -> Union[Any, Tuple[Any, Any]]:
    """Scaled dot-product attention, FlashAttention's forward: softmax(S + bias + mask) V.

    Every argument after v is keyword-only: FlashAttention-2's flash_attn_func takes dropout_p
    fourth and FlashAttention-3's softmax_scale, so a positional fourth argument would mean
    different things to their users.

    Args:
        q: (batch, seqlen_q, heads, head_dim).
        k, v: (batch, seqlen_k, kv_heads, head_dim); heads % kv_heads == 0 (GQA/MQA: query head h
            reads kv head h // (heads // kv_heads)).
            Arbitrary strides with the last dim contiguous; bfloat16, float16 or float32 (one
            dtype for all three); head_dim a multiple of 8 up to 256.
        softmax_scale: S = softmax_scale * Q K^T; default 1 / sqrt(head_dim).
        causal: window_size[1] = 0: query row i sees key j iff j <= i + seqlen_k - seqlen_q
            (aligned bottom-right). A row that sees no key gives O = 0 and LSE = -inf.
        window_size: (left, right), FlashAttention's sliding window: row i sees key j iff
            i + seqlen_k - seqlen_q - left <= j <= i + seqlen_k - seqlen_q + right; -1 leaves a
            side unbounded. Ints >= -1; with causal, right must be -1 or 0 (causal puts the
            right edge on the diagonal; FlashAttention would silently use 0).
        softcap: S becomes softcap * tanh(S / softcap) before the bias and the softmax (Gemma 2,
            Grok); 0 is off. A finite real >= 0.
        alibi_slopes: float32 (heads) or (batch, heads): bias = -slope * |i + seqlen_k -
            seqlen_q - j| (BLOOM, MPT). None for none.
        sinks: float32 (heads): one logit per head that joins every row's softmax denominator
            and adds no value (gpt-oss); a row that sees no key then has LSE = its sink.
        return_lse: also return the float32 log-sum-exp of the final scores (sinks included),
            (batch, heads, seqlen_q). causal and return_lse are bool or numpy.bool_.
        backend: "auto" (the best usable backend for the tensors' device that implements the
            options given), or a name from list_backends(): "flash" (fused, GPU), "naive" (S in
            GPU memory), "cpu-flash", "cpu-reference" (float64), and what else is built in.
            A backend that does not implement an option raises RuntimeError ("unsupported:
            backend ... does not implement softcap"); none ignores one.

    Returns:
        out with q's shape and dtype (BSHD contiguous), or (out, lse) when return_lse.

    Arrays and devices:
        torch.Tensor: runs torch.ops.flashattn.fwd (so torch.compile(fullgraph=True) traces it
            and CUDA graphs capture it); CUDA tensors run on their device and on the caller's
            current stream, CPU tensors on the CPU backends (bfloat16 included). alibi_slopes
            and sinks must be torch tensors too.
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
            invalid_scale, invalid_argument (window < -1, softcap < 0 or NaN, ...), aliasing,
            null_pointer, unknown_backend.
        TypeError: invalid_dtype (slopes or sinks not float32 included); an argument that is
            not an array; q, k, v of different frameworks; an option of the wrong type.
        RuntimeError: invalid_device (a CPU/CUDA mix, a backend for the other device, no CUDA
            device), backend_unavailable, unsupported, out_of_memory, cuda_error, internal.
    """
    opts = _check_options(softmax_scale, causal, backend, window_size, softcap)
    return_lse = _check_bool(return_lse, "return_lse")
    out, lse = _attention(q, k, v, opts, alibi_slopes, sinks, None)
    return (out, lse) if return_lse else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                           max_seqlen_k: int, *, seqused_k=None,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes=None, sinks=None, return_lse: bool = False,
                           backend: str = "auto") -> Union[Any, Tuple[Any, Any]]:
    """Attention over a batch of sequences of different lengths, packed along one token axis
    (FlashAttention's flash_attn_varlen_func).

    Args:
        q: (total_q, heads, head_dim); k, v: (total_k, kv_heads, head_dim).
        cu_seqlens_q, cu_seqlens_k: int32 (batch + 1) offsets, starting at 0, non-decreasing:
            sequence b is rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q and rows
            [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v. Arrays of q's framework and
            device.
        max_seqlen_q, max_seqlen_k: ints >= 0 that bound every sequence's length (Python ints,
            not tensors, so that torch.compile(fullgraph=True) does not break; the library
            checks them against CPU offsets).
        seqused_k: int32 (batch) or None: sequence b uses only the first seqused_k[b] of its
            keys (a KV cache with room to grow); its seqlen_k is then seqused_k[b].
        The other options are flash_attn_func's, applied per sequence with that sequence's
        seqlen_q and seqlen_k (causal and windows aligned to its bottom-right corner);
        alibi_slopes (batch, heads) gives sequence b row b. Every argument after max_seqlen_k
        is keyword-only (FlashAttention-2's eighth positional argument is dropout_p).

    Returns:
        out (total_q, heads, head_dim) of q's dtype, contiguous, or (out, lse) when return_lse,
        lse float32 (heads, total_q). A row that sees no key gives O = 0 and LSE = -inf (its
        sink with sinks). Rows of q after cu_seqlens_q[batch] belong to no sequence: their
        outputs are not defined.

    Arrays, devices and errors as flash_attn_func (torch tensors run torch.ops.flashattn.
    fwd_varlen).
    """
    opts = _check_options(softmax_scale, causal, backend, window_size, softcap)
    return_lse = _check_bool(return_lse, "return_lse")
    for name, offsets in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if offsets is None:
            raise TypeError(f"{name} must be an int32 array (batch + 1) of offsets, got None")
    max_seqlen_q, max_seqlen_k = _check_varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                               max_seqlen_k)
    varlen = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)
    out, lse = _attention(q, k, v, opts, alibi_slopes, sinks, varlen)
    return (out, lse) if return_lse else out


def _attention(q, k, v, opts: _Options, alibi_slopes, sinks, varlen):
    """(out, lse), allocated for q's framework. varlen: None (dense) or (cu_seqlens_q,
    cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k)."""
    cu_q, cu_k, max_q, max_k, used = (None, None, 0, 0, None) if varlen is None else varlen
    sides = (("alibi_slopes", alibi_slopes), ("sinks", sinks), ("cu_seqlens_q", cu_q),
             ("cu_seqlens_k", cu_k), ("seqused_k", used))
    if _is_torch(q):
        _check_same_framework(q, k, v, _is_torch)
        for name, x in sides:
            if x is not None and not _is_torch(x):
                raise TypeError(f"{name} is a {_kind(x)} but q is a {_kind(q)}: the side inputs "
                                "must be torch tensors (or None) too")
        scalars = (opts.softmax_scale, opts.causal, opts.window_left, opts.window_right,
                   opts.softcap, alibi_slopes, sinks, opts.backend)
        if varlen is None:
            return _ops.fwd(q, k, v, *scalars)
        return _ops.fwd_varlen(q, k, v, cu_q, cu_k, max_q, max_k, used, *scalars)
    if isinstance(q, np.ndarray):
        _check_same_framework(q, k, v, lambda x: isinstance(x, np.ndarray))
        # q's dtype object: ml_dtypes' bfloat16 too. An object array cannot be viewed from bytes:
        # it gets a plain out, and q's import reports the dtype before out is looked at.
        out = (np.empty(q.shape, q.dtype) if q.dtype.hasobject
               else _aligned_empty(q.shape, q.dtype))
        lse_shape = _ops.lse_shape(q.shape) if varlen is None else _ops.varlen_lse_shape(q.shape)
        lse = _aligned_empty(lse_shape, np.float32)
        _C.forward(q, k, v, out, lse, opts.softmax_scale, opts.causal, opts.window_left,
                   opts.window_right, opts.softcap, alibi_slopes, sinks, cu_q, cu_k, used, max_q,
                   max_k, opts.backend, 0)
        return out, lse
    q, k, v = (_as_torch_or_numpy(x, name) for x, name in ((q, "q"), (k, "k"), (v, "v")))
    alibi_slopes, sinks, cu_q, cu_k, used = (
        None if x is None else _as_torch_or_numpy(x, name) for name, x in sides)
    return _attention(q, k, v, opts, alibi_slopes, sinks,
                      None if varlen is None else (cu_q, cu_k, max_q, max_k, used))


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
