"""flash_attn_func and forward on NumPy (CPU) arrays against the float64 NumPy reference, with the
tolerance rule of docs/testing.md (tolerance.py). Runs everywhere, torch or not."""
import zlib

import numpy as np
import pytest

import flashattn
from flashattn._reference import attention_numpy
from helpers import (DLPackOnly, aligned_empty, attention_inputs, bhsd_storage, cpu_backends,
                     padded_heads, NUMPY_DTYPES)
from tolerance import check_attention, naive_float32

# (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim): tails that are not tile multiples,
# seqlen_q != seqlen_k both ways, GQA and MQA, small and large head dims.
SHAPES = [
    (2, 113, 203, 6, 2, 64),
    (1, 203, 113, 6, 1, 128),
    (2, 17, 17, 4, 4, 8),
    (1, 1, 239, 2, 1, 256),
    (1, 127, 1, 3, 3, 40),
    (1, 339, 339, 2, 2, 72),
]


def shape_id(s):
    b, sq, sk, h, hk, d = s
    return f"b{b}_sq{sq}_sk{sk}_h{h}/{hk}_d{d}"


def run_and_check(q, k, v, dtype, causal, backend, softmax_scale=None, context=""):
    out, lse = flashattn.flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal,
                                         return_lse=True, backend=backend)
    assert isinstance(out, np.ndarray) and out.dtype == q.dtype and out.shape == q.shape
    assert out.flags.c_contiguous
    assert lse.dtype == np.float32 and lse.shape == (q.shape[0], q.shape[2], q.shape[1])
    ref_out, ref_lse = attention_numpy(q, k, v, softmax_scale, causal)
    base_out, base_lse = naive_float32(q, k, v, softmax_scale, causal, dtype)
    check_attention(out, lse, ref_out, ref_lse, base_out, base_lse, dtype,
                    context=f"{context} {backend} {dtype} causal={causal}")
    return out, lse


@pytest.mark.parametrize("backend", cpu_backends() + ["auto"])
@pytest.mark.parametrize("dtype", list(NUMPY_DTYPES))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_matches_float64_reference(shape, causal, dtype, backend):
    b, sq, sk, h, hk, d = shape
    seed = zlib.crc32(repr((shape, causal, dtype)).encode())
    q, k, v = attention_inputs(b, sq, sk, h, hk, d, NUMPY_DTYPES[dtype], seed)
    run_and_check(q, k, v, dtype, causal, backend, context=f"{shape_id(shape)} seed={seed}")


@pytest.mark.parametrize("layout", ["bhsd", "padded_heads", "mixed"])
def test_strided_inputs(layout):
    q, k, v = attention_inputs(2, 113, 203, 6, 2, 64, np.float16, seed=7)
    if layout == "bhsd":
        q, k, v = bhsd_storage(q), bhsd_storage(k), bhsd_storage(v)
    elif layout == "padded_heads":
        q, k, v = padded_heads(q), padded_heads(k), padded_heads(v)
    else:
        q, k = bhsd_storage(q), padded_heads(k)
    assert not q.flags.c_contiguous or not k.flags.c_contiguous
    run_and_check(q, k, v, "fp16", True, "auto", context=layout)


def test_explicit_softmax_scale_and_large_scores():
    q, k, v = attention_inputs(1, 64, 96, 4, 2, 32, np.float32, seed=3)
    run_and_check(q, k, v, "fp32", False, "auto", softmax_scale=3.0, context="scale=3")
    ref_default, _ = attention_numpy(q, k, v)
    ref_scaled, _ = attention_numpy(q, k, v, softmax_scale=3.0)
    assert np.abs(ref_default - ref_scaled).max() > 0.1  # the scale reaches the kernel


@pytest.mark.parametrize("backend", cpu_backends())
def test_rows_without_keys_are_zero_and_lse_minus_inf(backend):
    # Causal with seqlen_q > seqlen_k: the first seqlen_q - seqlen_k rows see no key.
    q, k, v = attention_inputs(2, 203, 113, 4, 2, 64, np.float32, seed=11)
    out, lse = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True, backend=backend)
    masked = 203 - 113
    assert np.all(out[:, :masked] == 0.0)
    assert np.all(np.isneginf(lse[:, :, :masked]))
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(lse[:, :, masked:]))


@pytest.mark.parametrize("sizes", [(0, 5, 7), (2, 0, 7), (2, 5, 0)], ids=["batch0", "sq0", "sk0"])
def test_empty_dimensions(sizes):
    b, sq, sk = sizes
    q, k, v = attention_inputs(b, sq, sk, 4, 2, 32, np.float32, seed=1)
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True)
    assert out.shape == q.shape and lse.shape == (b, 4, sq)
    if sk == 0:  # every row sees no key
        assert np.all(out == 0) and np.all(np.isneginf(lse))


# np.zeros / np.empty of a zero-size shape report every stride as 0 (DLPack carries them), unlike
# the aligned slices above: empty inputs give empty outputs, seqlen_k = 0 gives O = 0, LSE = -inf.
ZERO_SIZE = {"batch0": (0, 5, 7, 4, 2), "sq0": (2, 0, 7, 4, 2), "heads0": (2, 5, 7, 0, 0),
             "sk0": (2, 5, 0, 4, 2)}


@pytest.mark.parametrize("backend", cpu_backends() + ["auto"])
@pytest.mark.parametrize("sizes", list(ZERO_SIZE.values()), ids=list(ZERO_SIZE))
def test_zero_size_numpy_arrays(sizes, backend):
    b, sq, sk, h, hk = sizes
    q = np.zeros((b, sq, h, 16), np.float32)
    k = np.zeros((b, sk, hk, 16), np.float32)
    v = np.ones((b, sk, hk, 16), np.float32)
    assert any(x.size == 0 and x.strides == (0, 0, 0, 0) for x in (q, k))
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True, backend=backend)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (b, h, sq)
    if sk == 0:  # every row sees no key
        assert out.size > 0 and np.all(out == 0) and np.all(np.isneginf(lse))
    # forward() into zero-size outputs of NumPy's own (zero strides too)
    out2, lse2 = np.full(q.shape, 7, np.float32), np.full((b, h, sq), 7, np.float32)
    flashattn.forward(q, k, v, out2, lse2, backend=backend)
    assert np.array_equal(out2, out) and np.array_equal(lse2, lse)


def test_deterministic():
    q, k, v = attention_inputs(2, 113, 203, 6, 2, 64, np.float16, seed=5)
    a = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)
    b = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def test_return_lse_false_returns_out_only():
    q, k, v = attention_inputs(1, 16, 16, 2, 2, 16, np.float32, seed=2)
    out = flashattn.flash_attn_func(q, k, v)
    assert isinstance(out, np.ndarray) and out.shape == q.shape


def test_read_only_inputs():
    q, k, v = attention_inputs(1, 16, 24, 2, 1, 16, np.float32, seed=2)
    for x in (q, k, v):
        x.flags.writeable = False
    run_and_check(q, k, v, "fp32", False, "auto", context="read-only inputs")


def test_forward_writes_into_strided_outputs():
    """forward() writes in place, through the caller's strides, and nothing else."""
    q, k, v = attention_inputs(2, 33, 47, 4, 2, 32, np.float32, seed=9)
    storage = aligned_empty((2, 33, 4 + 3, 32), np.float32)
    storage[...] = -7.0
    out = storage[:, :, 1:5]  # heads 1..4 of 7: a strided view
    lse = aligned_empty((2, 4, 33), np.float32)
    flashattn.forward(q, k, v, out, lse, causal=True, backend="cpu-flash")
    ref_out, ref_lse = attention_numpy(q, k, v, causal=True)
    assert np.abs(out - ref_out).max() < 1e-5
    assert np.abs(lse - ref_lse).max() < 1e-4
    untouched = np.ones(7, dtype=bool)
    untouched[1:5] = False
    assert np.all(storage[:, :, untouched] == -7.0)


def test_forward_without_lse():
    q, k, v = attention_inputs(1, 20, 30, 2, 2, 24, np.float16, seed=4)
    out = aligned_empty(q.shape, q.dtype)
    flashattn.forward(q, k, v, out)
    ref_out, _ = attention_numpy(q, k, v)
    assert np.abs(out - ref_out).max() < 2e-3


def test_other_dlpack_producers():
    q, k, v = attention_inputs(1, 40, 50, 4, 2, 32, np.float32, seed=6)
    out, lse = flashattn.flash_attn_func(DLPackOnly(q), DLPackOnly(k), DLPackOnly(v),
                                         causal=True, return_lse=True)
    ref_out, ref_lse = attention_numpy(q, k, v, causal=True)
    assert np.abs(np.asarray(out) - ref_out).max() < 1e-5
    assert np.abs(np.asarray(lse) - ref_lse).max() < 1e-4


def test_list_backends_and_version():
    backends = flashattn.list_backends()
    names = [b.name for b in backends]
    assert {"cpu-reference", "cpu-flash", "naive", "flash"} <= set(names)
    for b in backends:
        assert b.device in ("cpu", "cuda")
        assert b.usable or b.why_not
    assert all(b.usable for b in backends if b.device == "cpu")
    assert flashattn.__version__.count(".") == 2


# ---- bfloat16 NumPy arrays (ml_dtypes, JAX's NumPy bfloat16) ----

def test_ml_dtypes_bfloat16():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = np.dtype(ml_dtypes.bfloat16)
    q32, k32, v32 = attention_inputs(2, 33, 47, 4, 2, 64, np.float32, seed=12)
    q, k, v = (x.astype(bf16) for x in (q32, k32, v32))
    out, lse = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert isinstance(out, np.ndarray) and out.dtype == bf16 and out.shape == q.shape
    assert lse.dtype == np.float32
    qf, kf, vf = (x.astype(np.float64) for x in (q, k, v))
    ref_out, ref_lse = attention_numpy(qf, kf, vf, causal=True)
    base_out, base_lse = naive_float32(qf, kf, vf, None, True, "bf16")
    check_attention(out.astype(np.float64), lse, ref_out, ref_lse, base_out, base_lse, "bf16",
                    context="ml_dtypes bfloat16")
    # forward() into bf16 outputs (read-only inputs are fine), and the same bits come back
    for x in (q, k, v):
        x.flags.writeable = False
    out2 = aligned_empty(q.shape, bf16)
    flashattn.forward(q, k, v, out2, causal=True)
    assert np.array_equal(out2.view(np.uint16), out.view(np.uint16))
    out2.flags.writeable = False
    with pytest.raises(ValueError, match=r"out is read-only"):
        flashattn.forward(q, k, v, out2)
    with pytest.raises(TypeError, match=r"k\.dtype = fp32 must equal q\.dtype = bf16"):
        flashattn.flash_attn_func(q, k32, v32)
