"""The public Python API: flash_attn_func, flash_attn_varlen_func and flash_attn_with_kvcache
(allocate the outputs), forward (writes into yours), combine (merges partial results),
list_backends.

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

import collections.abc
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
    if type(value) is bool:  # the common case first: the eager call's host time (see _is_int)
        return value
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
    # A plain int first: the isinstance checks against numbers' ABCs cost ~1 us each, a
    # measurable share of an eager call's host time (tools/profile/forward_host.py).
    if type(x) is int:
        return True
    if isinstance(x, (bool, np.bool_)):
        return False
    return isinstance(x, numbers.Integral) or (torch is not None and isinstance(x, torch.SymInt))


def _int64(x, name: str, expected: str):
    """x as an int for the extension's int64; beyond int64: the library's kind of message, with
    its code (the extension would raise nanobind's argument dump). A torch.SymInt stays one, and
    under torch.compile an int (a SymInt too) is never passed through int(), which would
    specialize it."""
    if type(x) is int and _INT64_MIN <= x <= _INT64_MAX:
        return x
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
    if type(value) is float:  # the common case (see _is_int); NaN and inf are the library's
        return value
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


_NUM_SPLITS_EXPECTED = "0 (chosen) to 256"


def _check_num_splits(num_splits) -> int:
    """An int; its value (0 to 256) is the library's to check: its message names num_splits."""
    if not _is_int(num_splits):
        raise TypeError("num_splits must be an int, 0 (the backend picks) or 1 to 256 (that many "
                        f"key splits), got {type(num_splits).__name__}")
    return _int64(num_splits, "num_splits", _NUM_SPLITS_EXPECTED)


_INT32_MAX = 2 ** 31 - 1


def _check_cache_seqlens_int(cache_seqlens):
    """An int cache_seqlens (every sequence holds that many keys), checked here because its value
    is known: the library reads an array's values on the host only, never on a CUDA device.
    Capacity is the library's to check (on the host). A torch.SymInt (torch.compile with dynamic
    shapes) is not compared: that would specialize it."""
    if torch is not None and isinstance(cache_seqlens, torch.SymInt):
        return cache_seqlens
    cache_seqlens = int(cache_seqlens)
    if not 0 <= cache_seqlens <= _INT32_MAX:
        raise ValueError(f"invalid_argument: cache_seqlens = {cache_seqlens}, expected an int32 "
                         f"key count from 0 to {_INT32_MAX} (the keys already in the cache)")
    return cache_seqlens


def _batch(q) -> int:
    """q's batch size for an int cache_seqlens; 0 for a q of rank 0 (the library then names q's
    rank before it looks at cache_seqlens' shape)."""
    return q.shape[0] if len(q.shape) >= 1 else 0


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
            seqused_k=None, k_cache=None, v_cache=None, cache_seqlens=None, block_table=None,
            num_splits: int = 0, backend: str = "auto", stream: Optional[int] = None,
            workspace=None) -> None:
    """Attention forward into caller-provided arrays (the library's forward()).

    Dense: q (batch, seqlen_q, heads, head_dim); k, v (batch, seqlen_k, kv_heads, head_dim);
    out like q; lse float32 (batch, heads, seqlen_q) or None.
    Variable length (cu_seqlens_q and cu_seqlens_k given, with max_seqlen_q and max_seqlen_k):
    q, out (total_q, heads, head_dim); k, v (total_k, kv_heads, head_dim); lse float32
    (heads, total_q) or None; see flash_attn_varlen_func.
    KV cache (k_cache given, with v_cache and cache_seqlens): k and v are the new tokens
    (batch, seqlen_new, kv_heads, head_dim), or None for none, written into the caches in place
    (then the caches must be writable); out like q; see flash_attn_with_kvcache (here
    cache_seqlens must be an int32 array: every array is the caller's).
    Any DLPack arrays (the inputs may be read-only; out and lse must be writable and are written
    in place, never copied), all on one device, with 16-byte aligned data and non-last strides,
    last dim contiguous. The options are flash_attn_func's and flash_attn_varlen_func's.

    stream: a cudaStream_t as an int. None means torch's current stream for torch tensors, CuPy's
    current stream for CuPy arrays, and the default stream (0) otherwise. Ignored on the CPU.
    workspace: scratch memory for a backend that needs some (workspace_bytes() says how much:
    flash-decode's split-KV partial results, the naive backend's S matrix, flash-sm90's tile
    counter (16 bytes) for causal, windowed or varlen problems; 0 for the others).
    An array of at least that many bytes on q's device (rank 1, contiguous, 16-byte aligned,
    writable, any dtype), or a callable taking the bytes and returning one (called only when
    they are > 0). None: for torch CUDA tensors one from torch's caching allocator, which can
    be captured in a CUDA graph; for other arrays the library allocates one, synchronizes the
    stream and frees it, which cannot be captured (pass a workspace to capture).
    Every argument after lse is keyword-only. Raises as flash_attn_func does; also ValueError for
    a read-only out or lse, or a workspace smaller than workspace_bytes() ("invalid_argument:
    workspace_size = ... bytes, expected at least ..."), of another rank or stride, or
    misaligned; RuntimeError for one on another device.
    """
    args, kwargs = _forward_arguments(
        q, k, v, out, lse, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks,
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, k_cache, v_cache,
        cache_seqlens, block_table, num_splits, backend)
    q = args[0]
    stream = _current_stream(q) if stream is None else _check_stream(stream)
    if workspace is None and _is_torch(q):
        workspace = _ops.torch_workspace(q, stream)
    _C.forward(*args, **kwargs, stream=stream, workspace=workspace)


def workspace_bytes(q, k, v, out, lse=None, *, softmax_scale: Optional[float] = None,
                    causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                    softcap: float = 0.0, alibi_slopes=None, sinks=None, cu_seqlens_q=None,
                    cu_seqlens_k=None, max_seqlen_q: Optional[int] = None,
                    max_seqlen_k: Optional[int] = None, seqused_k=None, k_cache=None,
                    v_cache=None, cache_seqlens=None, block_table=None, num_splits: int = 0,
                    backend: str = "auto") -> int:
    """Bytes of workspace forward() with these arguments needs (the library's workspace_bytes()),
    for the backend that would run them ("auto" resolved as forward() resolves it): on a GPU
    flash-decode's split-KV partial results when it splits the keys (num_splits other than 1;
    for 0 the split count it picks from the GPU and the shape), the naive backend's S matrix,
    flash-sm90's tile counter (16 bytes) for causal, windowed or varlen problems; 0 for every
    other backend and on the CPU. The arguments are forward()'s (no stream, no
    workspace), checked as forward() checks them (the same errors); nothing runs.
    2**64 - 1 means the count does not fit 64 bits (forward() then refuses the call)."""
    args, kwargs = _forward_arguments(
        q, k, v, out, lse, softmax_scale, causal, window_size, softcap, alibi_slopes, sinks,
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, k_cache, v_cache,
        cache_seqlens, block_table, num_splits, backend)
    return _C.workspace_bytes(*args, **kwargs)


def _forward_arguments(q, k, v, out, lse, softmax_scale, causal, window_size, softcap,
                       alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                       max_seqlen_k, seqused_k, k_cache, v_cache, cache_seqlens, block_table,
                       num_splits, backend):
    """forward()'s and workspace_bytes()' arguments, checked, as (args, kwargs) of _C.forward
    and _C.workspace_bytes (up to num_splits)."""
    opts = _check_options(softmax_scale, causal, backend, window_size, softcap)
    max_seqlen_q, max_seqlen_k = _check_varlen(cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                               max_seqlen_k)
    num_splits = _check_num_splits(num_splits)
    arrays = (q, k, v, out, lse, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, seqused_k,
              k_cache, v_cache, cache_seqlens, block_table)
    if torch is not None:  # older torch refuses DLPack export of tensors that require grad
        arrays = tuple(x.detach() if _is_torch(x) else x for x in arrays)
    (q, k, v, out, lse, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, seqused_k, k_cache,
     v_cache, cache_seqlens, block_table) = arrays
    args = (q, k, v, out, lse, opts.softmax_scale, opts.causal, opts.window_left,
            opts.window_right, opts.softcap, alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k,
            seqused_k, max_seqlen_q, max_seqlen_k, opts.backend)
    kwargs = {"k_cache": k_cache, "v_cache": v_cache, "cache_seqlens": cache_seqlens,
              "block_table": block_table, "num_splits": num_splits}
    return args, kwargs


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

    CUDA graphs: with torch tensors every CUDA backend can be captured and replayed. A backend
    that needs scratch memory (the "naive" backend's S matrix, batch * heads * seqlen_q *
    seqlen_k * 4 bytes; flash-sm90's 16-byte tile counter for causal, windowed or varlen
    problems; flash-decode's split-KV partials) gets it from torch's caching allocator, on the
    current stream (inside a capture: from the graph's pool), so the library neither allocates nor
    synchronizes (when that allocation fails, torch.OutOfMemoryError, a RuntimeError, says so
    instead of the library's out_of_memory). Arrays of other frameworks reach the library through
    torch.from_dlpack where torch is importable (the same path); flashattn.forward on them
    without workspace= lets the library cudaMalloc the naive backend's S and synchronize, which
    cannot be captured.

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


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, *, cache_seqlens=None,
                            block_table=None, softmax_scale: Optional[float] = None,
                            causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                            softcap: float = 0.0, alibi_slopes=None, sinks=None,
                            num_splits: int = 0, return_lse: bool = False,
                            backend: str = "auto") -> Union[Any, Tuple[Any, Any]]:
    """Attention of new queries over a KV cache, appending new keys and values to the cache in
    place first (FlashAttention-2's flash_attn_with_kvcache: decoding and chunked prefill).

    Args:
        q: (batch, seqlen_q, heads, head_dim).
        k_cache, v_cache: the cache, q's dtype, last dim contiguous. Contiguous:
            (batch, cache_len, kv_heads, head_dim). Paged (block_table given):
            (num_pages, page_size, kv_heads, head_dim), page_size a multiple of 16 from 16 to
            256; key j of sequence b is row j % page_size of page block_table[b, j // page_size].
            Written in place when k, v are given (then they must be writable).
        k, v: the new tokens (batch, seqlen_new, kv_heads, head_dim), both or neither (None):
            written into the cache at rows cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1
            of sequence b, then attended with the rest. Positional, as in FlashAttention.
        cache_seqlens: int32 (batch), the keys already in the cache of each sequence (before the
            new ones), or an int for every sequence (made into an int32 array on q's device).
            Required. Sequence b attends to its first cache_seqlens[b] + seqlen_new keys, which
            must fit the capacity (cache_len, or max_pages_per_seq * page_size).
        block_table: int32 (batch, max_pages_per_seq), or None for a contiguous cache. Every
            entry a sequence uses must be a page index in [0, num_pages); sequences must not
            share a page they append to.
        causal, window_size, softcap, alibi_slopes, sinks, softmax_scale: flash_attn_func's, with
            seqlen_k = cache_seqlens[b] + seqlen_new per sequence: causal is aligned bottom-right,
            so new query i sees the cache and the new keys up to its own position.
        num_splits: 0 lets the backend pick, 1 to 256 splits each sequence's keys into that many
            blocks merged as combine() does (GPU decoding); the result is the same up to float32
            rounding, and the CPU backends compute unsplit.
        return_lse: also return the float32 LSE (batch, heads, seqlen_q).
        backend: as flash_attn_func; "auto" picks one that implements a KV cache (on the CPU:
            cpu-flash; on the GPU: flash-decode). A backend without it raises RuntimeError
            ("unsupported: backend ... does not implement a KV cache (k_cache / v_cache)").
        Every argument after v is keyword-only (FlashAttention-2's sixth positional argument is
        rotary_cos, which flashattn does not take; nor cache_batch_idx, cache_leftpad).

    Returns:
        out with q's shape and dtype (contiguous), or (out, lse) when return_lse. A row that sees
        no key (cache_seqlens[b] = 0 and no new tokens) gives O = 0 and LSE = -inf.

    Arrays: as flash_attn_func; every array of q's framework (torch tensors run
    torch.ops.flashattn.fwd_kvcache, which marks k_cache and v_cache as mutated, so
    torch.compile(fullgraph=True) traces it). On any error nothing is written: neither the
    cache nor an output. On a CUDA device the library cannot read cache_seqlens and block_table
    without synchronizing, so their values are the caller's contract there (an int
    cache_seqlens is checked here).

    CUDA graphs: a decode step with torch tensors can be captured with any num_splits (0
    included) and replayed: flash-decode's split-KV partial results (num_splits != 1) live in a
    workspace from torch's caching allocator (the graph's pool inside a capture), never one the
    library allocates. The split count for num_splits=0 depends on the shapes and the GPU, not on
    cache_seqlens, so a captured step stays right as cache_seqlens (a tensor updated in place)
    grows.

    Raises: as flash_attn_func; the cache's own rules (ranks, dtypes, page size, capacity,
    block_table entries, num_splits) with the library's messages, e.g. "ValueError:
    invalid_argument: block_table[1, 0] = 9, expected a page index from 0 to 7
    (k_cache.shape[0] (num_pages) = 8)". TypeError for a cache or cache_seqlens that is None.
    """
    opts = _check_options(softmax_scale, causal, backend, window_size, softcap)
    return_lse = _check_bool(return_lse, "return_lse")
    num_splits = _check_num_splits(num_splits)
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if x is None:
            raise TypeError(f"{name} must be an array (batch, cache_len, kv_heads, head_dim), or "
                            "(num_pages, page_size, kv_heads, head_dim) with block_table, got "
                            "None")
    if cache_seqlens is None:
        raise TypeError("cache_seqlens must be an int32 array (batch) of the keys already in the "
                        "cache, or an int for every sequence, got None")
    if _is_int(cache_seqlens):
        cache_seqlens = _check_cache_seqlens_int(cache_seqlens)
    out, lse = _kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, opts,
                        alibi_slopes, sinks, num_splits)
    return (out, lse) if return_lse else out


def _kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table, opts: _Options,
             alibi_slopes, sinks, num_splits: int):
    """(out, lse) of a KV cache call, allocated for q's framework; cache_seqlens an array or a
    checked int."""
    as_int = _is_int(cache_seqlens)
    others = (("k_cache", k_cache), ("v_cache", v_cache), ("k", k), ("v", v),
              ("cache_seqlens", None if as_int else cache_seqlens), ("block_table", block_table),
              ("alibi_slopes", alibi_slopes), ("sinks", sinks))
    if _is_torch(q) or isinstance(q, np.ndarray):
        is_kind = _is_torch if _is_torch(q) else (lambda x: isinstance(x, np.ndarray))
        for name, x in others:
            if x is not None and not is_kind(x):
                raise TypeError(f"{name} is a {_kind(x)} but q is a {_kind(q)}: the caches, the "
                                "new tokens and the side inputs must be arrays of q's framework "
                                "(or None)")
    if _is_torch(q):
        if as_int:
            cache_seqlens = torch.full((_batch(q),), cache_seqlens, dtype=torch.int32,
                                       device=q.device)
        return _ops.call_fwd_kvcache(q, k_cache, v_cache, k, v, cache_seqlens, block_table,
                                opts.softmax_scale, opts.causal, opts.window_left,
                                opts.window_right, opts.softcap, alibi_slopes, sinks, num_splits,
                                opts.backend)
    if isinstance(q, np.ndarray):
        if as_int:
            cache_seqlens = np.full(_batch(q), cache_seqlens, dtype=np.int32)
        out = (np.empty(q.shape, q.dtype) if q.dtype.hasobject
               else _aligned_empty(q.shape, q.dtype))
        lse = _aligned_empty(_ops.lse_shape(q.shape), np.float32)
        _C.forward(q, k, v, out, lse, opts.softmax_scale, opts.causal, opts.window_left,
                   opts.window_right, opts.softcap, alibi_slopes, sinks, None, None, None, 0, 0,
                   opts.backend, k_cache=k_cache, v_cache=v_cache, cache_seqlens=cache_seqlens,
                   block_table=block_table, num_splits=num_splits)
        return out, lse
    # Another framework: zero-copy views, so the new tokens land in the caller's cache.
    q = _as_torch_or_numpy(q, "q")
    k_cache, v_cache, k, v, seqlens, block_table, alibi_slopes, sinks = (
        None if x is None else _as_torch_or_numpy(x, name) for name, x in others)
    return _kvcache(q, k_cache, v_cache, k, v, cache_seqlens if as_int else seqlens, block_table,
                    opts, alibi_slopes, sinks, num_splits)


def combine(outs, lses, *, out_dtype=None,
            return_lse: bool = False) -> Union[Any, Tuple[Any, Any]]:
    """Merges partial attention results over disjoint key sets of the same queries into the
    result over their union (split-KV decoding, cascade inference, context parallelism): the
    library's combine() (include/flashattn/combine.h).

    Args:
        outs: a list (or tuple) of N >= 1 float32 arrays (batch, seqlen_q, heads, head_dim), each
            part's O normalized over its keys (what flash_attn_func returns in float32).
        lses: as many float32 arrays (batch, heads, seqlen_q), each part's LSE (return_lse=True).
        out_dtype: the merged O's dtype: bfloat16, float16 or float32 of the parts' framework
            (torch.dtype; for NumPy anything numpy.dtype takes, ml_dtypes.bfloat16 too); None is
            float32.
        return_lse: also return the merged float32 LSE (batch, heads, seqlen_q).

    Per (batch, head, row), in float64 with the max subtracted: LSE = log(sum_i exp(lse_i)),
    O = sum_i exp(lse_i - LSE) O_i. A part with lse_i = -inf (no key) has weight 0 and its O_i is
    not read; where every part is -inf, O = 0 and LSE = -inf. Overlapping key sets count the
    common keys twice: the sets must be disjoint.

    Returns: out (batch, seqlen_q, heads, head_dim) of out_dtype, contiguous, or (out, lse).

    Arrays: as flash_attn_func, every part of one framework (torch tensors run
    torch.ops.flashattn.combine). CUDA arrays raise RuntimeError ("unsupported: combine() has no
    CUDA implementation yet") until the library has one.

    Raises: TypeError for outs / lses that are not lists of arrays, a part of another framework
    or an out_dtype that is not a dtype; ValueError for an empty list; the library's messages for
    the rest (part counts, ranks, dtypes, shapes, strides, devices), naming the part: "TypeError:
    invalid_dtype: outs[1].dtype = fp16, expected fp32 (partial results are float32)".
    """
    return_lse = _check_bool(return_lse, "return_lse")
    outs, lses = _check_parts(outs, "outs"), _check_parts(lses, "lses")
    if not outs:
        raise ValueError("invalid_argument: outs is empty: combine() allocates out in the parts' "
                         "shape, expected at least one part")
    out, lse = _combine(outs, lses, out_dtype)
    return (out, lse) if return_lse else out


def _check_parts(parts, name: str) -> list:
    """A list or tuple (any sequence but a string) of parts, as a list; an array itself is not
    one (a (N, batch, ...) array would have to be split: pass list(array))."""
    if isinstance(parts, (str, bytes)) or not isinstance(parts, collections.abc.Sequence):
        raise TypeError(f"{name} must be a list (or tuple) of arrays, one per part, got "
                        f"{_kind(parts)}")
    return list(parts)


def _combine(outs: list, lses: list, out_dtype):
    """(out, lse) of combine(), allocated for the first part's framework."""
    first = outs[0]
    parts = [(f"outs[{i}]", x) for i, x in enumerate(outs)]
    parts += [(f"lses[{i}]", x) for i, x in enumerate(lses)]
    if _is_torch(first) or isinstance(first, np.ndarray):
        is_kind = _is_torch if _is_torch(first) else (lambda x: isinstance(x, np.ndarray))
        for name, x in parts:
            if not is_kind(x):
                raise TypeError(f"{name} is a {_kind(x)} but outs[0] is a {_kind(first)}: every "
                                "part must be an array of one framework")
        # The library names a part's rank; out's shape comes from outs[0], so its rank first.
        if len(first.shape) != 4:
            raise ValueError(_ops._PART_RANK_MESSAGE.format(len(first.shape)))
    if _is_torch(first):
        if out_dtype is None:
            out_dtype = torch.float32
        elif not isinstance(out_dtype, torch.dtype):
            raise TypeError("out_dtype must be a torch.dtype (torch.bfloat16, torch.float16 or "
                            f"torch.float32) or None for torch parts, got {_kind(out_dtype)}")
        return _ops.call_combine(outs, lses, out_dtype)
    if isinstance(first, np.ndarray):
        try:
            out_dtype = np.dtype(np.float32 if out_dtype is None else out_dtype)
        except TypeError as e:
            raise TypeError(f"out_dtype must be a NumPy dtype (float16, float32, "
                            f"ml_dtypes.bfloat16) or None, got {out_dtype!r}: {e}") from None
        out = (np.empty(first.shape, out_dtype) if out_dtype.hasobject
               else _aligned_empty(first.shape, out_dtype))
        lse = _aligned_empty(_ops.combine_lse_shape(first.shape), np.float32)
        _C.combine(outs, lses, out, lse, 0)
        return out, lse
    outs = [_as_torch_or_numpy(x, f"outs[{i}]") for i, x in enumerate(outs)]
    lses = [_as_torch_or_numpy(x, f"lses[{i}]") for i, x in enumerate(lses)]
    return _combine(outs, lses, out_dtype)


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
            return _ops.call_fwd(q, k, v, *scalars)
        return _ops.call_fwd_varlen(q, k, v, cu_q, cu_k, max_q, max_k, used, *scalars)
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
                   max_k, opts.backend)
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
