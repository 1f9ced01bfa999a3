"""Inputs and layouts shared by the Python tests (NumPy; the torch tests convert), and the host
clock that stands in for CUDA events, the command line of the benchmark tests, and the
repository's tool scripts loaded as modules."""
from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
import time

import numpy as np

import flashattn

NUMPY_DTYPES = {"fp16": np.float16, "fp32": np.float32}
ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_tool(path: str):
    """A script of the repository (tools/..., no package) as a module, from its path under ROOT."""
    spec = importlib.util.spec_from_file_location(pathlib.Path(path).stem, ROOT / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def aligned_empty(shape, dtype, offset_bytes: int = 0, align: int = 64) -> np.ndarray:
    """An uninitialized array whose data starts `offset_bytes` after a multiple of `align`."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align + offset_bytes, dtype=np.uint8)
    start = (-raw.ctypes.data) % align + offset_bytes
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def randn(shape, dtype, rng: np.random.Generator) -> np.ndarray:
    """Normal + 0.5 (a zero-mean output would inflate relative errors), rounded to `dtype`."""
    x = aligned_empty(shape, dtype)
    x[...] = rng.standard_normal(shape) + 0.5
    return x


def attention_inputs(batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim, dtype, seed):
    rng = np.random.default_rng(seed)
    q = randn((batch, seqlen_q, heads, head_dim), dtype, rng)
    k = randn((batch, seqlen_k, kv_heads, head_dim), dtype, rng)
    v = randn((batch, seqlen_k, kv_heads, head_dim), dtype, rng)
    return q, k, v


def bhsd_storage(x: np.ndarray) -> np.ndarray:
    """The same values, stored (batch, heads, seq, dim) and seen through BSHD strides."""
    b, s, h, d = x.shape
    storage = aligned_empty((b, h, s, d), x.dtype)
    storage[...] = x.transpose(0, 2, 1, 3)
    return storage.transpose(0, 2, 1, 3)


def padded_heads(x: np.ndarray, pad_value=np.nan) -> np.ndarray:
    """The same values as heads [1, heads + 1) of a tensor with heads + 3 heads (the others hold
    `pad_value`, so a kernel that reads them shows up as NaN)."""
    b, s, h, d = x.shape
    storage = aligned_empty((b, s, h + 3, d), x.dtype)
    storage[...] = pad_value
    storage[:, :, 1:h + 1] = x
    return storage[:, :, 1:h + 1]


def cpu_backends() -> list:
    """The CPU backends usable here (cpu-reference, cpu-flash, ...)."""
    return [b.name for b in flashattn.list_backends() if b.device == "cpu" and b.usable]


# ---- the variants (window, softcap, ALiBi, sinks, varlen) ----

try:
    import ml_dtypes
except ImportError:  # bf16 NumPy arrays need it; its tests skip without it
    ml_dtypes = None

VARIANT_DTYPES = ["bf16", "fp16", "fp32"]


def numpy_dtype(name: str) -> np.dtype:
    """The NumPy dtype of a test dtype name; bf16 is ml_dtypes' bfloat16 (skips without it)."""
    if name == "bf16":
        if ml_dtypes is None:
            import pytest
            pytest.skip("ml_dtypes is not installed (NumPy bfloat16)")
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(NUMPY_DTYPES[name])


def as_float64(x) -> np.ndarray:
    """Any NumPy array (ml_dtypes' bfloat16 too) as float64."""
    return np.asarray(x).astype(np.float64)


def cu_seqlens(lengths) -> np.ndarray:
    """int32 offsets (batch + 1) of sequences of these lengths, starting at 0."""
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def varlen_inputs(seqlens_q, seqlens_k, heads, kv_heads, head_dim, dtype, seed, extra_k=0):
    """Packed q (total_q, heads, d), k, v (total_k + extra_k, kv_heads, d) and the offsets; the
    extra_k rows after the last sequence hold NaN (a backend that reads them shows up)."""
    rng = np.random.default_rng(seed)
    total_q, total_k = int(sum(seqlens_q)), int(sum(seqlens_k))
    q = randn((total_q, heads, head_dim), dtype, rng)
    k = randn((total_k + extra_k, kv_heads, head_dim), dtype, rng)
    v = randn((total_k + extra_k, kv_heads, head_dim), dtype, rng)
    k[total_k:] = np.nan
    v[total_k:] = np.nan
    return q, k, v, cu_seqlens(seqlens_q), cu_seqlens(seqlens_k)


def bloom_slopes(heads: int) -> np.ndarray:
    """ALiBi's slopes (BLOOM, MPT): 2^(-8 h / heads) for h = 1..heads, float32 (heads)."""
    return (2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)).astype(np.float32)


def aligned_copy(x: np.ndarray) -> np.ndarray:
    """A contiguous, 64-byte aligned copy of x (the library needs 16-byte aligned data)."""
    y = aligned_empty(x.shape, x.dtype)
    y[...] = x
    return y


# ---- the KV cache (flash_attn_with_kvcache) ----

def kvcache_inputs(lens, seqlen_q, seqlen_new, heads, kv_heads, head_dim, dtype, seed, *,
                   capacity=128, page_size=None, spare_pages=2, unused_entry=-1):
    """A KV cache problem: dict(q, k_cache, v_cache, k, v, cache_seqlens, block_table), NumPy.

    Sequence b holds lens[b] keys; rows of the cache it does not hold yet (the new tokens' rows
    included) are NaN, so a backend that reads one, or fails to write a new token, shows up.
    Contiguous (page_size None): caches (batch, capacity, kv_heads, head_dim). Paged: every
    sequence gets capacity / page_size distinct pages, shuffled over num_pages = batch *
    that + spare_pages (the spare pages are NaN too); block_table entries past the pages a
    sequence uses (lens[b] + seqlen_new keys) hold `unused_entry` (the library reads only those
    it uses). k, v are None when seqlen_new is 0."""
    rng = np.random.default_rng(seed)
    batch = len(lens)
    q = randn((batch, seqlen_q, heads, head_dim), dtype, rng)
    cache_shape = (kv_heads, head_dim)
    if page_size is None:
        k_cache = aligned_empty((batch, capacity) + cache_shape, dtype)
        table = None
    else:
        assert capacity % page_size == 0
        per_seq = capacity // page_size
        num_pages = batch * per_seq + spare_pages
        k_cache = aligned_empty((num_pages, page_size) + cache_shape, dtype)
        table = rng.permutation(num_pages)[:batch * per_seq].reshape(batch, per_seq)
        table = aligned_copy(table.astype(np.int32))
        for b, n in enumerate(lens):
            used = -(-(n + seqlen_new) // page_size)
            table[b, used:] = unused_entry
    v_cache = aligned_empty(k_cache.shape, dtype)
    k_cache[...] = np.nan
    v_cache[...] = np.nan
    for b, n in enumerate(lens):
        j = np.arange(n)
        at = (b, j) if table is None else (table[b, j // page_size], j % page_size)
        k_cache[at] = rng.standard_normal((n,) + cache_shape) + 0.5
        v_cache[at] = rng.standard_normal((n,) + cache_shape) + 0.5
    k = v = None
    if seqlen_new:
        k = randn((batch, seqlen_new) + cache_shape, dtype, rng)
        v = randn((batch, seqlen_new) + cache_shape, dtype, rng)
    return dict(q=q, k_cache=k_cache, v_cache=v_cache, k=k, v=v,
                cache_seqlens=aligned_copy(np.asarray(lens, dtype=np.int32)), block_table=table)


def same_bits(a, b) -> bool:
    """a and b hold the same values, NaN where the other has NaN (for caches and poisoned
    outputs)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(
        as_float64(a), as_float64(b), equal_nan=True)


class HostClockEvent:
    """Stands in for torch.cuda.Event on the CPU (the benchmarks' pipelines on CPU tensors)."""

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, other):
        return (other.t - self.t) * 1e3


def run_bench(*args, timeout=300) -> subprocess.CompletedProcess:
    """python -m flashattn.bench with these arguments, its output captured."""
    return subprocess.run([sys.executable, "-m", "flashattn.bench", *args], capture_output=True,
                          text=True, timeout=timeout)


class DLPackOnly:
    """A minimal non-NumPy DLPack producer (what JAX or another framework looks like to us):
    wraps an array or tensor and offers only __dlpack__ and __dlpack_device__."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()
