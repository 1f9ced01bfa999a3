"""Every bad input raises the mapped exception type with the library's message, which names the
argument (docs/testing.md, "Bad input"). NumPy arrays, so this runs on every machine."""
import numpy as np
import pytest

import flashattn
from helpers import aligned_empty, attention_inputs


def inputs(dtype=np.float16, b=2, sq=16, sk=24, h=4, hk=2, d=32):
    return attention_inputs(b, sq, sk, h, hk, d, dtype, seed=0)


def strided_last_dim(x):
    """Same shape as x, last-dim stride 2."""
    wide = aligned_empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[...] = 0.5
    return wide[..., ::2]


def misaligned(x, offset_bytes=2):
    y = aligned_empty(x.shape, x.dtype, offset_bytes=offset_bytes)
    y[...] = x
    return y


def head_stride_72_bytes():
    """fp16 (2, 16, 4, 32) viewed in a (2, 16, 4, 36) tensor: the head stride is 36 elements =
    72 bytes, not a multiple of 16."""
    q = aligned_empty((2, 16, 4, 36), np.float16)
    q[...] = 0.5
    return q[..., :32]


def call(q, k, v, **kw):
    return flashattn.flash_attn_func(q, k, v, **kw)


q0, k0, v0 = inputs()

# (id, q, k, v, kwargs, exception, message regex)
CASES = [
    ("q_rank3", q0[0], k0, v0, {}, ValueError, r"invalid_rank: q\.rank = 3, expected 4"),
    ("k_rank5", q0, k0[None], v0, {}, ValueError, r"invalid_rank: k\.rank = 5, expected 4"),
    ("v_rank2", q0, k0, v0[0, 0], {}, ValueError, r"invalid_rank: v\.rank = 2"),
    ("batch_mismatch", q0, k0[:1], v0[:1], {}, ValueError, r"k\.shape\[0\] \(batch\) = 1"),
    ("head_dim_mismatch", q0, k0[..., :16], v0[..., :16], {}, ValueError,
     r"k\.shape\[3\] \(head_dim\) = 16 must equal q\.shape\[3\] = 32"),
    ("v_seqlen_mismatch", q0, k0, v0[:, :20], {}, ValueError,
     r"v\.shape\[1\] \(seqlen_k\) = 20 must equal k\.shape\[1\] = 24"),
    ("v_heads_mismatch", q0, k0, v0[:, :, :1], {}, ValueError, r"v\.shape\[2\] \(kv_heads\)"),
    ("heads_not_divisible", q0, inputs(hk=3)[1], inputs(hk=3)[2], {}, ValueError,
     r"k\.shape\[2\] \(kv heads\) = 3 must divide q\.shape\[2\] \(heads\) = 4"),
    ("dtype_mismatch", q0, k0.astype(np.float32), v0.astype(np.float32), {}, TypeError,
     r"invalid_dtype: k\.dtype = fp32 must equal q\.dtype = fp16"),
    ("v_dtype_mismatch", q0, k0, v0.astype(np.float32), {}, TypeError, r"v\.dtype = fp32"),
    ("unsupported_dtype_float64", *inputs(np.float64), {}, TypeError,
     r"invalid_dtype: q\.dtype = float64 is not supported"),
    ("unsupported_dtype_int32", q0.astype(np.int32), k0.astype(np.int32), v0.astype(np.int32),
     {}, TypeError, r"q\.dtype = int32"),
    ("k_unsupported_dtype", q0, k0.astype(np.float64), v0, {}, TypeError,
     r"k\.dtype = float64 is not supported"),
    ("last_dim_not_contiguous", strided_last_dim(q0), k0, v0, {}, ValueError,
     r"invalid_stride: q\.stride\[3\] = 2, expected 1"),
    ("v_last_dim_not_contiguous", q0, k0, strided_last_dim(v0), {}, ValueError,
     r"invalid_stride: v\.stride\[3\] = 2"),
    ("negative_stride", q0[:, ::-1], k0, v0, {}, ValueError,
     r"invalid_stride: q\.stride\[1\] = -\d+, expected >= 0"),
    # Its data pointer is the row's last element, misaligned too: the stride is the cause.
    ("reversed_last_dim", q0[..., ::-1], k0, v0, {}, ValueError,
     r"invalid_stride: q\.stride\[3\] = -1, expected 1"),
    ("stride_not_16_bytes", head_stride_72_bytes(), k0, v0, {}, ValueError,
     r"invalid_stride: q\.stride\[2\] = 36 elements \(72 bytes\), expected a multiple of 8 "
     r"elements \(16 bytes\)"),
    ("misaligned_base", misaligned(q0), k0, v0, {}, ValueError,
     r"misaligned: q\.data = \d+ is not 16-byte aligned"),
    ("head_dim_12", *inputs(d=12), {}, ValueError,
     r"unsupported_head_dim: q\.shape\[3\] \(head_dim\) = 12 is not supported; supported: "
     r"multiples of 8 from 8 to 256"),
    ("head_dim_264", *inputs(d=264), {}, ValueError, r"q\.shape\[3\] \(head_dim\) = 264"),
    ("scale_zero", q0, k0, v0, {"softmax_scale": 0.0}, ValueError,
     r"invalid_scale: softmax_scale = 0, expected a finite value > 0"),
    ("scale_negative", q0, k0, v0, {"softmax_scale": -1.0}, ValueError, r"softmax_scale = -1"),
    ("scale_inf", q0, k0, v0, {"softmax_scale": float("inf")}, ValueError,
     r"softmax_scale = inf"),
    ("scale_nan", q0, k0, v0, {"softmax_scale": float("nan")}, ValueError,
     r"softmax_scale = nan"),
    ("scale_string", q0, k0, v0, {"softmax_scale": "0.1"}, TypeError, r"softmax_scale must be"),
    ("causal_string", q0, k0, v0, {"causal": "yes"}, TypeError, r"causal must be a bool"),
    ("causal_int", q0, k0, v0, {"causal": 1}, TypeError, r"causal must be a bool, got int"),
    ("causal_none", q0, k0, v0, {"causal": None}, TypeError, r"causal must be a bool"),
    ("return_lse_string", q0, k0, v0, {"return_lse": "x"}, TypeError,
     r"return_lse must be a bool, got str"),
    ("return_lse_int", q0, k0, v0, {"return_lse": 1}, TypeError, r"return_lse must be a bool"),
    ("return_lse_none", q0, k0, v0, {"return_lse": None}, TypeError,
     r"return_lse must be a bool"),
    ("backend_not_str", q0, k0, v0, {"backend": 1}, TypeError, r"backend must be a str"),
    ("unknown_backend", q0, k0, v0, {"backend": "fastest"}, ValueError,
     r"unknown_backend: backend = \"fastest\" is unknown; expected one of .*cpu-flash"),
    ("gpu_backend_on_cpu_arrays", q0, k0, v0, {"backend": "flash"}, RuntimeError,
     r"backend \"flash\""),
    ("q_not_an_array", q0.tolist(), k0, v0, {}, TypeError,
     r"q: expected a torch.Tensor, a numpy.ndarray or an array with __dlpack__, got "
     r"builtins.list"),
    ("q_object_dtype", q0.astype(object), k0, v0, {}, TypeError,
     r"^q: expected an array that supports DLPack .*, got numpy\.ndarray of dtype object: its "
     r"__dlpack__\(\) raised BufferError"),
    ("k_other_framework", q0, k0.tolist(), v0, {}, TypeError,
     r"k is a builtins.list but q is a numpy.ndarray"),
]


@pytest.mark.parametrize("q, k, v, kwargs, exc, match", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_flash_attn_func_rejects(q, k, v, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        call(q, k, v, **kwargs)


# ---- forward(): the outputs are the caller's ----

def outputs(q, dtype=None, lse_dtype=np.float32):
    out = aligned_empty(q.shape, dtype or q.dtype)
    lse = aligned_empty((q.shape[0], q.shape[2], q.shape[1]), lse_dtype)
    return out, lse


def test_out_aliasing_q():
    q, k, v = inputs()
    with pytest.raises(ValueError, match=r"aliasing: out overlaps q"):
        flashattn.forward(q, k, v, q)


def test_lse_aliasing_out():
    q, k, v = inputs(np.float32, sq=16, h=4, d=32)
    out, _ = outputs(q)
    lse = out.reshape(-1)[:2 * 4 * 16].reshape(2, 4, 16)
    with pytest.raises(ValueError, match=r"aliasing: lse overlaps out"):
        flashattn.forward(q, k, v, out, lse)


def test_out_wrong_shape():
    q, k, v = inputs()
    out = aligned_empty((2, 16, 4, 16), q.dtype)
    with pytest.raises(ValueError, match=r"out\.shape\[3\] \(head_dim\) = 16 must equal q\.shape"):
        flashattn.forward(q, k, v, out)


def test_out_wrong_dtype():
    q, k, v = inputs()
    out, _ = outputs(q, dtype=np.float32)
    with pytest.raises(TypeError, match=r"out\.dtype = fp32 must equal q\.dtype = fp16"):
        flashattn.forward(q, k, v, out)


def test_lse_wrong_dtype():
    q, k, v = inputs()
    out, lse = outputs(q, lse_dtype=np.float16)
    with pytest.raises(TypeError, match=r"lse\.dtype = fp16, expected fp32"):
        flashattn.forward(q, k, v, out, lse)


def test_lse_unsupported_dtype_expects_float32():
    q, k, v = inputs()
    out, lse = outputs(q, lse_dtype=np.float64)
    with pytest.raises(TypeError, match=r"^invalid_dtype: lse\.dtype = float64, expected float32$"):
        flashattn.forward(q, k, v, out, lse)


def test_lse_wrong_shape():
    q, k, v = inputs()
    out, _ = outputs(q)
    lse = aligned_empty((2, 16, 4), np.float32)  # (batch, seqlen_q, heads): transposed
    with pytest.raises(ValueError, match=r"lse\.shape\[1\] \(heads\) = 16 must equal"):
        flashattn.forward(q, k, v, out, lse)


@pytest.mark.parametrize("rank", [0, 2])
def test_lse_wrong_rank(rank):
    q, k, v = inputs()
    out, _ = outputs(q)
    lse = aligned_empty((4,) * rank, np.float32)
    with pytest.raises(ValueError, match=rf"invalid_rank: lse\.rank = {rank}, expected 3"):
        flashattn.forward(q, k, v, out, lse)


def test_read_only_out():
    q, k, v = inputs()
    out, lse = outputs(q)
    out.flags.writeable = False
    with pytest.raises(ValueError, match=r"out is read-only"):
        flashattn.forward(q, k, v, out, lse)


def test_out_not_an_array():
    q, k, v = inputs()
    with pytest.raises(TypeError, match=r"out: expected a writable array that supports DLPack, "
                                        r"got list"):
        flashattn.forward(q, k, v, [0.0])


def test_stream_wrong_type():
    q, k, v = inputs()
    out, lse = outputs(q)
    with pytest.raises(TypeError, match=r"stream must be an int"):
        flashattn.forward(q, k, v, out, lse, stream="default")


def test_nothing_written_on_error():
    q, k, v = inputs()
    out, lse = outputs(q)
    out[...] = 3.0
    lse[...] = 3.0
    with pytest.raises(ValueError):
        flashattn.forward(q, k, v, out, lse, softmax_scale=-1.0)
    assert np.all(out == 3.0) and np.all(lse == 3.0)


# ---- arguments of the wrong kind: a TypeError naming the argument, never nanobind's dump ----

def _forward_args():
    q, k, v = inputs()
    out, lse = outputs(q)
    return {"q": q, "k": k, "v": v, "out": out, "lse": lse}


NOT_ARRAYS = [None, [0.5], "q", 3, 2.5, object()]


@pytest.mark.parametrize("name", ["q", "k", "v", "out", "lse"])
@pytest.mark.parametrize("value", NOT_ARRAYS, ids=lambda x: type(x).__name__)
def test_forward_names_an_argument_that_is_not_an_array(name, value):
    if name == "lse" and value is None:
        return  # lse=None means "no LSE"
    args = _forward_args()
    args[name] = value
    with pytest.raises(TypeError) as info:
        flashattn.forward(args["q"], args["k"], args["v"], args["out"], args["lse"])
    message = str(info.value)
    assert message.startswith(f"{name}: expected "), message
    assert "incompatible function arguments" not in message
    assert message.endswith(f"got {'None' if value is None else type(value).__name__}"), message


def test_forward_out_none():
    q, k, v = inputs()
    with pytest.raises(TypeError, match=r"^out: expected a writable array that supports DLPack, "
                                        r"got None$"):
        flashattn.forward(q, k, v, None)


@pytest.mark.parametrize("name", ["q", "k", "v"])
@pytest.mark.parametrize("value", NOT_ARRAYS, ids=lambda x: type(x).__name__)
def test_flash_attn_func_names_an_argument_that_is_not_an_array(name, value):
    args = dict(zip("qkv", inputs()))
    args[name] = value
    with pytest.raises(TypeError) as info:
        flashattn.flash_attn_func(args["q"], args["k"], args["v"])
    message = str(info.value)
    assert message.startswith(name), message
    assert "incompatible function arguments" not in message


# Options of the wrong kind, through both entry points: (kwargs, exception, message regex).
BAD_OPTIONS = [
    ({"causal": 1}, TypeError, r"^causal must be a bool, got int$"),
    ({"causal": "x"}, TypeError, r"^causal must be a bool, got str$"),
    ({"causal": None}, TypeError, r"^causal must be a bool, got NoneType$"),
    ({"softmax_scale": "0.1"}, TypeError, r"^softmax_scale must be a real number or None"),
    ({"softmax_scale": True}, TypeError, r"^softmax_scale must be a real number or None"),
    ({"softmax_scale": 10 ** 400}, ValueError,
     r"^invalid_scale: softmax_scale = an int beyond the float range, expected a finite value "
     r"> 0$"),
    ({"backend": None}, TypeError, r"^backend must be a str, got NoneType$"),
    ({"backend": b"cpu-flash"}, TypeError, r"^backend must be a str, got bytes$"),
]


@pytest.mark.parametrize("kwargs, exc, match", BAD_OPTIONS, ids=lambda x: repr(x)[:30])
def test_flash_attn_func_options_of_the_wrong_kind(kwargs, exc, match):
    q, k, v = inputs()
    with pytest.raises(exc, match=match):
        flashattn.flash_attn_func(q, k, v, **kwargs)


@pytest.mark.parametrize("kwargs, exc, match", BAD_OPTIONS + [
    ({"stream": "default"}, TypeError,
     r"^stream must be an int \(a cudaStream_t\) or None, got str$"),
    ({"stream": True}, TypeError, r"^stream must be an int"),
    ({"stream": 1.0}, TypeError, r"^stream must be an int"),
    ({"stream": -1}, ValueError,
     r"^stream = -1, expected a cudaStream_t: an int in \[0, 2\*\*64\)$"),
    ({"stream": 2 ** 64}, ValueError, r"^stream = 18446744073709551616, expected a cudaStream_t"),
], ids=lambda x: repr(x)[:30])
def test_forward_options_of_the_wrong_kind(kwargs, exc, match):
    q, k, v = inputs()
    out, lse = outputs(q)
    with pytest.raises(exc, match=match):
        flashattn.forward(q, k, v, out, lse, **kwargs)


def test_numpy_bools_and_integers_are_accepted():
    q, k, v = inputs(np.float32)
    out, lse = outputs(q)
    flashattn.forward(q, k, v, out, lse, causal=np.bool_(True), stream=np.int64(0))
    expected, expected_lse = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True)
    assert np.array_equal(out, expected) and np.array_equal(lse, expected_lse)
    only_out = flashattn.flash_attn_func(q, k, v, causal=np.True_, return_lse=np.False_)
    assert isinstance(only_out, np.ndarray) and np.array_equal(only_out, expected)


# ---- every argument after v (after lse for forward) is keyword-only ----

def test_flash_attn_func_options_are_keyword_only():
    # FlashAttention-2's flash_attn_func(q, k, v, dropout_p, softmax_scale, causal): a positional
    # 0.1 meant as dropout must not run as softmax_scale = 0.1.
    q, k, v = inputs()
    with pytest.raises(TypeError, match=r"positional argument"):
        flashattn.flash_attn_func(q, k, v, 0.1)


def test_forward_options_are_keyword_only():
    q, k, v = inputs()
    out, lse = outputs(q)
    with pytest.raises(TypeError, match=r"positional argument"):
        flashattn.forward(q, k, v, out, lse, 0.1)
