"""Every bad variant input (window_size, softcap, alibi_slopes, sinks, cu_seqlens, max_seqlen,
seqused_k) raises the mapped exception type with a message naming the argument, through
flash_attn_func, flash_attn_varlen_func and forward; never nanobind's "incompatible function
arguments" listing. NumPy arrays, so this runs on every machine: the library checks everything
before it asks a backend, so these pass whatever the backends implement."""
import numpy as np
import pytest

import flashattn
from helpers import aligned_empty, attention_inputs, cu_seqlens, varlen_inputs

B, SQ, SK, H, HK, D = 2, 16, 24, 4, 2, 32
Q, K, V = attention_inputs(B, SQ, SK, H, HK, D, np.float16, seed=0)


def f32(*shape, value=0.5):
    x = aligned_empty(shape, np.float32)
    x[...] = value
    return x


def misaligned_f32(n):
    """float32 (n) whose data is 2 bytes past a 4-byte boundary."""
    return aligned_empty((n,), np.float32, offset_bytes=2)


def assert_raises(exc, match, call, *args, **kwargs):
    with pytest.raises(exc, match=match) as info:
        call(*args, **kwargs)
    assert "incompatible function arguments" not in str(info.value)


# ---- dense: (id, kwargs, exception, message regex) ----

DENSE_BAD = [
    # window_size: a pair of ints >= -1
    ("window_int", {"window_size": 5}, TypeError,
     r"^window_size must be a pair of ints \(window_left, window_right\), -1 unbounded, got int$"),
    ("window_none", {"window_size": None}, TypeError, r"^window_size must be a pair .*NoneType$"),
    ("window_str", {"window_size": "ab"}, TypeError, r"^window_size must be a pair .*got str$"),
    ("window_ndarray", {"window_size": np.array([1, 2])}, TypeError,
     r"^window_size must be a pair .*got ndarray$"),
    ("window_one", {"window_size": (3,)}, ValueError,
     r"^window_size = \(3,\) has 1 elements, expected 2 \(window_left, window_right\)$"),
    ("window_three", {"window_size": [1, 2, 3]}, ValueError, r"^window_size = \(1, 2, 3\) has 3"),
    ("window_float", {"window_size": (1.0, 0)}, TypeError,
     r"^window_size\[0\] \(window_left\) must be an int, -1 \(unbounded\) or a key count >= 0, "
     r"got float$"),
    ("window_bool", {"window_size": (0, True)}, TypeError,
     r"^window_size\[1\] \(window_right\) must be an int, .*got bool$"),
    ("window_none_side", {"window_size": (None, 0)}, TypeError,
     r"^window_size\[0\] \(window_left\) must be an int, .*got NoneType$"),
    ("window_left_below_-1", {"window_size": (-2, 0)}, ValueError,
     r"^invalid_argument: window_left = -2, expected -1 \(unbounded\) or a key count >= 0$"),
    ("window_right_below_-1", {"window_size": (0, -5)}, ValueError,
     r"^invalid_argument: window_right = -5, expected -1"),
    ("window_causal_below_-1", {"window_size": (-3, -1), "causal": True}, ValueError,
     r"^invalid_argument: window_left = -3"),
    ("window_right_with_causal", {"window_size": (4, 2), "causal": True}, ValueError,
     r"^invalid_argument: window_right = 2 with causal = true: causal puts the window's right "
     r"edge on the diagonal \(expected window_right = 0 or -1\)$"),
    ("window_beyond_int64", {"window_size": (2 ** 63, 0)}, ValueError,
     r"^invalid_argument: window_left = 9223372036854775808 is beyond int64, expected -1 "
     r"\(unbounded\) or a key count >= 0$"),
    ("window_below_int64", {"window_size": (0, -2 ** 70)}, ValueError,
     r"^invalid_argument: window_right = -1180591620717411303424 is beyond int64"),
    # softcap: a finite real >= 0
    ("softcap_negative", {"softcap": -1.0}, ValueError,
     r"^invalid_argument: softcap = -1, expected a finite value >= 0 \(0 is off\)$"),
    ("softcap_negative_int", {"softcap": -3}, ValueError, r"^invalid_argument: softcap = -3,"),
    ("softcap_nan", {"softcap": float("nan")}, ValueError, r"^invalid_argument: softcap = nan"),
    ("softcap_inf", {"softcap": float("inf")}, ValueError, r"^invalid_argument: softcap = inf"),
    ("softcap_beyond_float32", {"softcap": 1e39}, ValueError,
     r"^invalid_argument: softcap = 1e\+39 is beyond the range in float32, expected a finite "
     r"value >= 0 \(0 is off\)$"),
    ("softcap_rounds_to_zero", {"softcap": 1e-50}, ValueError,
     r"^invalid_argument: softcap = 1e-50 rounds to 0 \(off\) in float32"),
    ("softcap_huge_int", {"softcap": 10 ** 400}, ValueError,
     r"^invalid_argument: softcap = an int beyond the float range, expected a finite value >= 0 "
     r"\(0 is off\)$"),
    ("softcap_str", {"softcap": "30"}, TypeError,
     r"^softcap must be a real number \(0: off\), got str$"),
    ("softcap_none", {"softcap": None}, TypeError, r"^softcap must be a real number .*NoneType$"),
    ("softcap_bool", {"softcap": True}, TypeError, r"^softcap must be a real number .*got bool$"),
    ("softcap_array", {"softcap": np.array([1.0])}, TypeError, r"^softcap must be .*ndarray$"),
    # alibi_slopes: float32 (heads) or (batch, heads)
    ("alibi_heads_plus_1", {"alibi_slopes": f32(H + 1)}, ValueError,
     r"^invalid_shape: alibi_slopes\.shape\[0\] = 5, expected 4 \(heads\) or \(batch, heads\)$"),
    ("alibi_wrong_batch", {"alibi_slopes": f32(B + 1, H)}, ValueError,
     r"^invalid_shape: alibi_slopes\.shape\[0\] = 3, expected 2 \(batch, heads\)$"),
    ("alibi_wrong_heads_2d", {"alibi_slopes": f32(B, 1)}, ValueError,
     r"^invalid_shape: alibi_slopes\.shape\[1\] = 1, expected 4"),
    ("alibi_rank3", {"alibi_slopes": f32(1, B, H)}, ValueError,
     r"^invalid_rank: alibi_slopes\.rank = 3, expected 1"),
    ("alibi_rank0", {"alibi_slopes": np.array(0.5, np.float32)}, ValueError,
     r"^invalid_rank: alibi_slopes\.rank = 0, expected 1 \(heads\) or 2 \(batch, heads\)$"),
    ("alibi_float64", {"alibi_slopes": np.full(H, 0.5)}, TypeError,
     r"^invalid_dtype: alibi_slopes\.dtype = float64, expected float32$"),
    ("alibi_float16", {"alibi_slopes": np.full(H, 0.5, np.float16)}, TypeError,
     r"^invalid_dtype: alibi_slopes\.dtype = fp16, expected fp32$"),
    ("alibi_int32", {"alibi_slopes": np.ones(H, np.int32)}, TypeError,
     r"^invalid_dtype: alibi_slopes\.dtype = int32, expected fp32$"),
    ("alibi_list", {"alibi_slopes": [0.5] * H}, TypeError,
     r"^alibi_slopes: expected an array that supports DLPack .*got list$"),
    ("alibi_not_contiguous", {"alibi_slopes": f32(2 * H)[::2]}, ValueError,
     r"^invalid_stride: alibi_slopes\.stride\[0\] = 2, expected 1 \(contiguous\)$"),
    ("alibi_misaligned", {"alibi_slopes": misaligned_f32(H)}, ValueError,
     r"^misaligned: alibi_slopes\.data = \d+ is not 4-byte aligned"),
    # sinks: float32 (heads)
    ("sinks_heads_plus_1", {"sinks": f32(H + 1)}, ValueError,
     r"^invalid_shape: sinks\.shape\[0\] = 5, expected 4 \(heads\)$"),
    ("sinks_2d", {"sinks": f32(B, H)}, ValueError,
     r"^invalid_rank: sinks\.rank = 2, expected 1 \(heads\)$"),
    ("sinks_rank0", {"sinks": np.array(1.0, np.float32)}, ValueError,
     r"^invalid_rank: sinks\.rank = 0, expected 1 \(heads\)$"),
    ("sinks_float64", {"sinks": np.zeros(H)}, TypeError,
     r"^invalid_dtype: sinks\.dtype = float64, expected float32$"),
    ("sinks_float", {"sinks": 1.0}, TypeError,
     r"^sinks: expected an array that supports DLPack .*got float$"),
]


@pytest.mark.parametrize("kwargs, exc, match", [c[1:] for c in DENSE_BAD],
                         ids=[c[0] for c in DENSE_BAD])
def test_flash_attn_func_rejects_variant(kwargs, exc, match):
    assert_raises(exc, match, flashattn.flash_attn_func, Q, K, V, **kwargs)


@pytest.mark.parametrize("kwargs, exc, match", [c[1:] for c in DENSE_BAD],
                         ids=[c[0] for c in DENSE_BAD])
def test_forward_rejects_variant_and_writes_nothing(kwargs, exc, match):
    out = aligned_empty(Q.shape, Q.dtype)
    lse = aligned_empty((B, H, SQ), np.float32)
    out[...] = 3.0
    lse[...] = 3.0
    assert_raises(exc, match, flashattn.forward, Q, K, V, out, lse, **kwargs)
    assert np.all(out == 3.0) and np.all(lse == 3.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"max_seqlen_q": 16}, r"^invalid_argument: max_seqlen_q is given without cu_seqlens_q / "
                           r"cu_seqlens_k: it bounds the lengths of variable-length sequences$"),
    ({"max_seqlen_k": 0}, r"^invalid_argument: max_seqlen_k is given without cu_seqlens_q"),
    ({"seqused_k": np.full(B, 4, np.int32)},
     r"^invalid_argument: seqused_k is given without cu_seqlens_q / cu_seqlens_k"),
], ids=["max_seqlen_q", "max_seqlen_k", "seqused_k"])
def test_forward_varlen_options_without_cu_seqlens(kwargs, match):
    out = aligned_empty(Q.shape, Q.dtype)
    assert_raises(ValueError, match, flashattn.forward, Q, K, V, out, **kwargs)


def test_forward_one_cu_seqlens_without_the_other():
    q, k, v, cq, ck = varlen_inputs([3, 5], [4, 6], H, HK, D, np.float16, seed=1)
    out = aligned_empty(q.shape, q.dtype)
    for given, missing in (("cu_seqlens_q", "cu_seqlens_k"), ("cu_seqlens_k", "cu_seqlens_q")):
        assert_raises(ValueError,
                      rf"^invalid_argument: {given} is given without {missing}: variable length "
                      "needs both$", flashattn.forward, q, k, v, out,
                      **{given: cq, "max_seqlen_q": 5, "max_seqlen_k": 6})


# ---- varlen: sequences q [3, 5, 0], k [4, 6, 2] ----

LENS_Q, LENS_K = [3, 5, 0], [4, 6, 2]
VQ, VK, VV, CQ, CK = varlen_inputs(LENS_Q, LENS_K, H, HK, D, np.float16, seed=2)
TOTAL_Q, TOTAL_K = sum(LENS_Q), sum(LENS_K)


def i32(*values):
    return np.array(values, np.int32)


# (id, replacements of the arguments of flash_attn_varlen_func, exception, message regex)
VARLEN_BAD = [
    ("cu_q_int64", {"cu_seqlens_q": CQ.astype(np.int64)}, TypeError,
     r"^invalid_dtype: cu_seqlens_q\.dtype = int64, expected int32$"),
    ("cu_k_uint32", {"cu_seqlens_k": CK.astype(np.uint32)}, TypeError,
     r"^invalid_dtype: cu_seqlens_k\.dtype = uint32, expected int32$"),
    ("cu_k_float32", {"cu_seqlens_k": CK.astype(np.float32)}, TypeError,
     r"^invalid_dtype: cu_seqlens_k\.dtype = fp32, expected int32$"),
    ("cu_q_list", {"cu_seqlens_q": [0, 3, 8, 8]}, TypeError,
     r"^cu_seqlens_q: expected an array that supports DLPack .*got list$"),
    ("cu_q_none", {"cu_seqlens_q": None}, TypeError,
     r"^cu_seqlens_q must be an int32 array \(batch \+ 1\) of offsets, got None$"),
    ("cu_k_none", {"cu_seqlens_k": None}, TypeError, r"^cu_seqlens_k must be an int32 array"),
    ("cu_q_not_from_0", {"cu_seqlens_q": i32(1, 3, 8, 8)}, ValueError,
     r"^invalid_argument: cu_seqlens_q\[0\] = 1, expected 0$"),
    ("cu_k_not_from_0", {"cu_seqlens_k": i32(2, 4, 10, 12)}, ValueError,
     r"^invalid_argument: cu_seqlens_k\[0\] = 2, expected 0$"),
    ("cu_q_decreasing", {"cu_seqlens_q": i32(0, 3, 2, 8)}, ValueError,
     r"^invalid_argument: cu_seqlens_q\[2\] = 2 < cu_seqlens_q\[1\] = 3: offsets must not "
     r"decrease$"),
    ("cu_k_decreasing", {"cu_seqlens_k": i32(0, 4, 10, 9)}, ValueError,
     r"^invalid_argument: cu_seqlens_k\[3\] = 9 < cu_seqlens_k\[2\] = 10"),
    ("cu_q_past_total", {"cu_seqlens_q": i32(0, 3, 8, 9), "max_seqlen_q": 5}, ValueError,
     r"^invalid_argument: cu_seqlens_q\[3\] = 9 is past q\.shape\[0\] \(total_q\) = 8$"),
    ("cu_k_past_total", {"cu_seqlens_k": i32(0, 4, 10, 13), "max_seqlen_k": 6}, ValueError,
     r"^invalid_argument: cu_seqlens_k\[3\] = 13 is past k\.shape\[0\] \(total_k\) = 12$"),
    ("cu_q_longer_than_cu_k", {"cu_seqlens_q": i32(0, 3, 8, 8, 8)}, ValueError,
     r"^invalid_shape: cu_seqlens_k\.shape\[0\] = 4, expected 5 \(batch \+ 1, as cu_seqlens_q\)$"),
    ("cu_k_longer_than_cu_q", {"cu_seqlens_k": i32(0, 4, 10, 12, 12)}, ValueError,
     r"^invalid_shape: cu_seqlens_k\.shape\[0\] = 5, expected 4"),
    ("cu_q_rank2", {"cu_seqlens_q": CQ[None]}, ValueError,
     r"^invalid_rank: cu_seqlens_q\.rank = 2, expected 1 \(batch \+ 1\)$"),
    ("cu_q_rank0", {"cu_seqlens_q": np.array(0, np.int32)}, ValueError,
     r"^invalid_rank: cu_seqlens_q\.rank = 0, expected 1 \(batch \+ 1\)$"),
    ("cu_k_rank0", {"cu_seqlens_k": np.array(0, np.int32)}, ValueError,
     r"^invalid_rank: cu_seqlens_k\.rank = 0, expected 1 \(batch \+ 1\)$"),
    ("cu_q_empty", {"cu_seqlens_q": np.zeros(0, np.int32), "cu_seqlens_k": np.zeros(0, np.int32)},
     ValueError, r"^invalid_shape: cu_seqlens_q\.shape\[0\] = 0, expected >= 1 \(batch \+ 1\)$"),
    ("cu_q_not_contiguous", {"cu_seqlens_q": np.repeat(CQ, 2)[::2]}, ValueError,
     r"^invalid_stride: cu_seqlens_q\.stride\[0\] = 2, expected 1 \(contiguous\)$"),
    # max_seqlen: ints >= 0 bounding every length
    ("max_q_below_a_length", {"max_seqlen_q": 4}, ValueError,
     r"^invalid_argument: max_seqlen_q = 4 is below the length of sequence 1 \(5, from "
     r"cu_seqlens_q\)$"),
    ("max_k_below_a_length", {"max_seqlen_k": 5}, ValueError,
     r"^invalid_argument: max_seqlen_k = 5 is below the length of sequence 1 \(6, from "
     r"cu_seqlens_k\)$"),
    ("max_q_negative", {"max_seqlen_q": -1}, ValueError,
     r"^invalid_argument: max_seqlen_q = -1, expected >= 0$"),
    ("max_k_negative", {"max_seqlen_k": -7}, ValueError,
     r"^invalid_argument: max_seqlen_k = -7, expected >= 0$"),
    ("max_q_beyond_int64", {"max_seqlen_q": 2 ** 63}, ValueError,
     r"^invalid_argument: max_seqlen_q = 9223372036854775808 is beyond int64, expected >= 0$"),
    ("max_q_float", {"max_seqlen_q": 5.0}, TypeError,
     r"^max_seqlen_q must be an int >= 0 bounding every sequence's length \(a Python int, e\.g\. "
     r"int\(seqlens\.max\(\)\), so that torch\.compile does not break\), got float$"),
    ("max_k_none", {"max_seqlen_k": None}, TypeError, r"^max_seqlen_k must be an int >= 0 .*"
                                                      r"got NoneType$"),
    ("max_q_bool", {"max_seqlen_q": True}, TypeError, r"^max_seqlen_q must be an int .*got bool$"),
    ("max_q_array", {"max_seqlen_q": np.array(5)}, TypeError,
     r"^max_seqlen_q must be an int .*got ndarray$"),
    # seqused_k: int32 (batch), each within its sequence's keys
    ("seqused_k_too_many", {"seqused_k": i32(4, 7, 0)}, ValueError,
     r"^invalid_argument: seqused_k\[1\] = 7, expected 0 to 6 \(sequence 1's keys in "
     r"cu_seqlens_k\)$"),
    ("seqused_k_negative", {"seqused_k": i32(-1, 0, 0)}, ValueError,
     r"^invalid_argument: seqused_k\[0\] = -1, expected 0 to 4"),
    ("seqused_k_int64", {"seqused_k": np.zeros(3, np.int64)}, TypeError,
     r"^invalid_dtype: seqused_k\.dtype = int64, expected int32$"),
    ("seqused_k_batch_plus_1", {"seqused_k": i32(0, 0, 0, 0)}, ValueError,
     r"^invalid_shape: seqused_k\.shape\[0\] = 4, expected 3 \(batch\)$"),
    ("seqused_k_rank0", {"seqused_k": np.array(0, np.int32)}, ValueError,
     r"^invalid_rank: seqused_k\.rank = 0, expected 1 \(batch\)$"),
    # the packed layout and the side inputs against the batch of the offsets
    ("q_rank4", {"q": VQ[None]}, ValueError,
     r"^invalid_rank: q\.rank = 4, expected 3 \(total_q, heads, head_dim\)$"),
    ("k_rank4", {"k": VK[None], "v": VV[None]}, ValueError,
     r"^invalid_rank: k\.rank = 4, expected 3 \(total_k, kv_heads, head_dim\)$"),
    ("alibi_batch_of_the_offsets", {"alibi_slopes": f32(2, H)}, ValueError,
     r"^invalid_shape: alibi_slopes\.shape\[0\] = 2, expected 3 \(batch, heads\)$"),
    ("window_below_-1", {"window_size": (0, -2)}, ValueError,
     r"^invalid_argument: window_right = -2"),
    ("window_right_with_causal", {"window_size": (-1, 1), "causal": True}, ValueError,
     r"^invalid_argument: window_right = 1 with causal = true"),
    ("softcap_negative", {"softcap": -0.5}, ValueError, r"^invalid_argument: softcap = -0\.5"),
    ("sinks_wrong_shape", {"sinks": f32(H - 1)}, ValueError,
     r"^invalid_shape: sinks\.shape\[0\] = 3, expected 4 \(heads\)$"),
    ("return_lse_int", {"return_lse": 1}, TypeError, r"^return_lse must be a bool, got int$"),
    ("causal_none", {"causal": None}, TypeError, r"^causal must be a bool, got NoneType$"),
]

POSITIONAL = ("q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k")


def varlen_args(**replace):
    args = {"q": VQ, "k": VK, "v": VV, "cu_seqlens_q": CQ, "cu_seqlens_k": CK,
            "max_seqlen_q": max(LENS_Q), "max_seqlen_k": max(LENS_K)}
    args.update(replace)
    return [args.pop(n) for n in POSITIONAL], args


@pytest.mark.parametrize("replace, exc, match", [c[1:] for c in VARLEN_BAD],
                         ids=[c[0] for c in VARLEN_BAD])
def test_flash_attn_varlen_func_rejects(replace, exc, match):
    positional, options = varlen_args(**replace)
    assert_raises(exc, match, flashattn.flash_attn_varlen_func, *positional, **options)


@pytest.mark.parametrize("replace, exc, match",
                         [c[1:] for c in VARLEN_BAD if c[0] not in ("cu_q_none", "cu_k_none",
                                                                    "return_lse_int")],
                         ids=[c[0] for c in VARLEN_BAD if c[0] not in ("cu_q_none", "cu_k_none",
                                                                       "return_lse_int")])
def test_forward_varlen_rejects_and_writes_nothing(replace, exc, match):
    positional, options = varlen_args(**replace)
    q = positional[0]
    out = aligned_empty(q.shape, q.dtype)
    lse = aligned_empty((H, q.shape[0]) if q.ndim == 3 else (1,), np.float32)
    out[...] = 3.0
    lse[...] = 3.0
    assert_raises(exc, match, flashattn.forward, *positional[:3], out, lse,
                  **dict(zip(POSITIONAL[3:], positional[3:])), **options)
    assert np.all(out == 3.0) and np.all(lse == 3.0)


def test_forward_varlen_output_shapes():
    out = aligned_empty(VQ.shape, VQ.dtype)
    varlen = {"cu_seqlens_q": CQ, "cu_seqlens_k": CK, "max_seqlen_q": 5, "max_seqlen_k": 6}
    assert_raises(ValueError, r"^invalid_rank: out\.rank = 4, expected 3 \(total_q, heads, "
                              r"head_dim\)$",
                  flashattn.forward, VQ, VK, VV, out[None], **varlen)
    assert_raises(ValueError, r"^invalid_rank: lse\.rank = 3, expected 2 \(heads, total_q\)$",
                  flashattn.forward, VQ, VK, VV, out, aligned_empty((1, H, TOTAL_Q), np.float32),
                  **varlen)
    assert_raises(ValueError, r"^invalid_shape: lse\.shape\[0\] \(heads\) = 8 must equal "
                              r"q\.shape\[1\] = 4$",
                  flashattn.forward, VQ, VK, VV, out, aligned_empty((TOTAL_Q, H), np.float32),
                  **varlen)
    assert_raises(ValueError, r"^invalid_rank: lse\.rank = 0, expected 2 \(heads, total_q\)$",
                  flashattn.forward, VQ, VK, VV, out, np.array(0.0, np.float32), **varlen)


# ---- every option after v (after max_seqlen_k) is keyword-only ----

def test_flash_attn_func_variant_options_are_keyword_only():
    # FlashAttention-2's flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size,
    # softcap, alibi_slopes, ...): none of them positional here.
    for extra in ((0.0,), (0.0, None, True), (0.0, None, False, (-1, -1))):
        with pytest.raises(TypeError, match=r"positional argument"):
            flashattn.flash_attn_func(Q, K, V, *extra)


def test_flash_attn_varlen_func_options_are_keyword_only():
    # FlashAttention-2's flash_attn_varlen_func takes dropout_p eighth.
    positional, _ = varlen_args()
    with pytest.raises(TypeError, match=r"positional argument"):
        flashattn.flash_attn_varlen_func(*positional, 0.0)
    with pytest.raises(TypeError, match=r"positional argument"):
        flashattn.flash_attn_varlen_func(*positional, None, 0.1)


def test_forward_variant_options_are_keyword_only():
    out = aligned_empty(Q.shape, Q.dtype)
    lse = aligned_empty((B, H, SQ), np.float32)
    with pytest.raises(TypeError, match=r"positional argument"):
        flashattn.forward(Q, K, V, out, lse, None, False, (-1, -1))


def test_cu_seqlens_values_are_checked():
    """The helpers' offsets are what the library expects (a sanity check of this file)."""
    assert np.array_equal(CQ, cu_seqlens(LENS_Q)) and CQ.dtype == np.int32
    assert VQ.shape == (TOTAL_Q, H, D) and VK.shape == (TOTAL_K, HK, D)
