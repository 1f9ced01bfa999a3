"""The variants (sliding window, softcap, ALiBi, sinks, variable length) through flash_attn_func,
flash_attn_varlen_func and forward on NumPy arrays, on every CPU backend and "auto", in bf16,
fp16 and fp32, against the float64 NumPy reference with the tolerance rule of docs/testing.md
(tolerance.py). Runs everywhere, torch or not."""
import functools
import zlib

import numpy as np
import pytest

import flashattn
from flashattn._reference import attention_numpy
from helpers import (VARIANT_DTYPES, DLPackOnly, aligned_copy, aligned_empty, as_float64,
                     attention_inputs, bhsd_storage, bloom_slopes, cpu_backends, cu_seqlens,
                     numpy_dtype, padded_heads, varlen_inputs)
from tolerance import check_attention, naive_float32

BACKENDS = cpu_backends() + ["auto"]

# Side inputs made per test from (batch, heads, rng): float32 as the library wants them.
SLOPES_HEADS = lambda b, h, rng: bloom_slopes(h)  # noqa: E731
SLOPES_BATCH_HEADS = lambda b, h, rng: rng.uniform(0.0, 1.0, (b, h)).astype(np.float32)  # noqa
SLOPES_LARGE = lambda b, h, rng: np.full(h, 4.0, np.float32)  # noqa: E731
SINKS = lambda b, h, rng: rng.normal(0.0, 2.0, h).astype(np.float32)  # noqa: E731
SINKS_HIGH = lambda b, h, rng: np.full(h, 1e4, np.float32)  # noqa: E731  (O ~ 0)
SINKS_LOW = lambda b, h, rng: np.full(h, -1e4, np.float32)  # noqa: E731  (no effect)
SINKS_MIXED = lambda b, h, rng: np.array([-np.inf, 30.0, -5.0, 0.0, 1e4, -1e4][:h],  # noqa
                                         np.float32)


def materialize(options, batch, heads, seed):
    """The options with their side-input makers called."""
    rng = np.random.default_rng(seed)
    return {name: (value(batch, heads, rng) if callable(value) else value)
            for name, value in options.items()}


def reference_options(options):
    """attention_numpy's keywords: the API's options without softmax_scale, causal, max_seqlen."""
    return {name: value for name, value in options.items()
            if name not in ("softmax_scale", "causal", "max_seqlen_q", "max_seqlen_k")}


def reference_and_baseline(q, k, v, dtype, options):
    """(ref_out, ref_lse, base_out, base_lse); varlen (total, heads, d) / (heads, total)."""
    qf, kf, vf = (as_float64(x) for x in (q, k, v))
    scale, causal = options.get("softmax_scale"), options.get("causal", False)
    ref_options = reference_options(options)
    ref = attention_numpy(qf, kf, vf, scale, causal, **ref_options)
    base = naive_float32(qf, kf, vf, scale, causal, dtype, **ref_options)
    return (*ref, *base)


def check_against_reference(q, k, v, out, lse, dtype, options, context, expected=None,
                            rows_without_keys=None):
    """The tolerance rule; varlen as one batch of one. `expected`: reference_and_baseline's
    result when the caller has it; `rows_without_keys` (b, s): the rows the mask leaves without
    a key (default: those whose LSE_ref is -inf, which misses them with sinks)."""
    expected = expected or reference_and_baseline(q, k, v, dtype, options)
    results = [as_float64(out), lse, *expected]
    if "cu_seqlens_q" in options:
        results = [x[None] for x in results]
    check_attention(*results, dtype, context=context, rows_without_keys=rows_without_keys)


# ---- dense (BSHD) ----

# (id, (batch, seqlen_q, seqlen_k, heads, kv_heads, head_dim), options)
BASE = (2, 113, 203, 6, 2, 64)
SQ_GT_SK = (1, 203, 113, 4, 2, 64)  # diag = -90: causal-like windows leave rows without keys
DENSE_CASES = [
    ("window_32_16", BASE, {"window_size": (32, 16)}),
    ("window_0_0", BASE, {"window_size": (0, 0)}),
    ("window_left_only", BASE, {"window_size": (40, -1)}),
    ("window_right_only", BASE, {"window_size": (-1, 7)}),
    ("window_causal_left", BASE, {"window_size": (24, 0), "causal": True}),
    ("window_wider_than_sequence", BASE, {"window_size": (10 ** 6, 10 ** 6)}),
    ("window_wider_causal", SQ_GT_SK, {"window_size": (10 ** 6, 0)}),
    ("window_rows_without_keys", SQ_GT_SK, {"window_size": (8, 4)}),
    ("window_rows_without_keys_causal", SQ_GT_SK, {"window_size": (16, -1), "causal": True}),
    ("softcap_strong", BASE, {"softcap": 0.5}),
    ("softcap_30_large_scores", BASE, {"softcap": 30.0, "softmax_scale": 1.0}),
    ("softcap_large", BASE, {"softcap": 1e4, "softmax_scale": 3.0}),
    ("softcap_causal", SQ_GT_SK, {"softcap": 5.0, "causal": True}),
    ("alibi_heads", BASE, {"alibi_slopes": SLOPES_HEADS}),
    ("alibi_heads_causal", BASE, {"alibi_slopes": SLOPES_HEADS, "causal": True}),
    ("alibi_batch_heads", BASE, {"alibi_slopes": SLOPES_BATCH_HEADS}),
    ("alibi_large_slopes", SQ_GT_SK, {"alibi_slopes": SLOPES_LARGE, "causal": True}),
    ("sinks", BASE, {"sinks": SINKS}),
    ("sinks_causal_rows_without_keys", SQ_GT_SK, {"sinks": SINKS, "causal": True}),
    ("sinks_high", BASE, {"sinks": SINKS_HIGH}),
    ("sinks_low", BASE, {"sinks": SINKS_LOW, "causal": True}),
    ("sinks_mixed", (1, 47, 33, 6, 3, 32), {"sinks": SINKS_MIXED, "causal": True}),
    ("all_variants", BASE, {"window_size": (48, -1), "causal": True, "softcap": 8.0,
                            "alibi_slopes": SLOPES_BATCH_HEADS, "sinks": SINKS}),
    ("all_variants_sq_gt_sk", SQ_GT_SK, {"window_size": (20, 2), "softcap": 2.0,
                                         "alibi_slopes": SLOPES_HEADS, "sinks": SINKS}),
]


@functools.lru_cache(maxsize=None)
def dense_case(name, dtype):
    """Inputs, options, reference and baseline of DENSE_CASES[name] in `dtype`, made once for
    every backend; `empty` marks the (batch, head, row) that see no key."""
    _, (b, sq, sk, h, hk, d), options = next(c for c in DENSE_CASES if c[0] == name)
    seed = zlib.crc32(f"{name} {dtype}".encode())
    q, k, v = attention_inputs(b, sq, sk, h, hk, d, numpy_dtype(dtype), seed)
    options = materialize(options, b, h, seed)
    expected = reference_and_baseline(q, k, v, dtype, options)
    no_sinks = {**options, "sinks": None}
    empty = np.isneginf(reference_and_baseline(q, k, v, dtype, no_sinks)[3])
    for x in (q, k, v, *options.values(), *expected, empty):
        if isinstance(x, np.ndarray):
            x.flags.writeable = False
    return q, k, v, options, expected, empty, seed


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", VARIANT_DTYPES)
@pytest.mark.parametrize("name", [c[0] for c in DENSE_CASES])
def test_dense_variant_matches_reference(name, dtype, backend):
    q, k, v, options, expected, empty, seed = dense_case(name, dtype)
    b, sq, h = q.shape[0], q.shape[1], q.shape[2]
    out, lse = flashattn.flash_attn_func(q, k, v, return_lse=True, backend=backend, **options)
    assert isinstance(out, np.ndarray) and out.dtype == q.dtype and out.shape == q.shape
    assert out.flags.c_contiguous and lse.dtype == np.float32 and lse.shape == (b, h, sq)
    check_against_reference(q, k, v, out, lse, dtype, options, expected=expected,
                            context=f"{name} {backend} {dtype} seed={seed}",
                            rows_without_keys=empty[:, 0, :])
    if "sinks" in options:  # rows without keys: O = 0 and LSE = the sink, exactly
        sinks = np.broadcast_to(options["sinks"][None, :, None], lse.shape)
        assert np.all(out.transpose(0, 2, 1, 3)[empty] == 0)
        assert np.array_equal(lse[empty], sinks[empty])


def test_cases_cover_rows_without_keys():
    """The cases named so do leave rows without keys (and the wide window does not)."""
    for name, _, options in DENSE_CASES:
        empty = dense_case(name, "fp32")[5]
        assert empty.any() == ("rows_without_keys" in name or "sq_gt_sk" in name
                               or name in ("window_wider_causal", "softcap_causal",
                                           "alibi_large_slopes", "sinks_mixed")), name


@pytest.mark.parametrize("backend", cpu_backends())
def test_window_rows_without_keys_exact(backend):
    q, k, v = attention_inputs(1, 203, 113, 4, 2, 64, np.float32, seed=21)
    out, lse = flashattn.flash_attn_func(q, k, v, window_size=(8, 4), return_lse=True,
                                         backend=backend)
    # diag = -90: row i sees keys [i - 98, i - 86], none for i < 86
    assert np.all(out[:, :86] == 0) and np.all(np.isneginf(lse[:, :, :86]))
    assert np.all(np.isfinite(lse[:, :, 86:]))


@pytest.mark.parametrize("backend", cpu_backends())
def test_sinks_rows_without_keys_give_the_sink(backend):
    q, k, v = attention_inputs(2, 203, 113, 4, 2, 64, np.float16, seed=22)
    sinks = np.array([0.5, -2.0, 7.0, -np.inf], np.float32)
    out, lse = flashattn.flash_attn_func(q, k, v, causal=True, sinks=sinks, return_lse=True,
                                         backend=backend)
    assert np.all(out[:, :90] == 0)
    assert np.array_equal(lse[:, :, :90], np.broadcast_to(sinks[None, :, None], (2, 4, 90)))


@pytest.mark.parametrize("backend", cpu_backends())
def test_causal_equals_window_minus1_0(backend):
    q, k, v = attention_inputs(2, 113, 203, 6, 2, 64, np.float32, seed=23)
    a = flashattn.flash_attn_func(q, k, v, causal=True, return_lse=True, backend=backend)
    b = flashattn.flash_attn_func(q, k, v, window_size=(-1, 0), return_lse=True,
                                  backend=backend)
    # the same problem; a window may take another code path, so within the rule, not bitwise
    ref_out, ref_lse = attention_numpy(q, k, v, causal=True)
    base_out, base_lse = naive_float32(q, k, v, None, True, "fp32")
    for out, lse in (a, b):
        check_attention(out, lse, ref_out, ref_lse, base_out, base_lse, "fp32", backend)


def test_strided_inputs_with_variants():
    q, k, v = attention_inputs(2, 113, 203, 6, 2, 64, np.float16, seed=24)
    options = {"window_size": (30, 5), "softcap": 10.0, "alibi_slopes": bloom_slopes(6),
               "sinks": np.linspace(-1, 1, 6).astype(np.float32)}
    qs, ks, vs = bhsd_storage(q), padded_heads(k), bhsd_storage(v)
    out, lse = flashattn.flash_attn_func(qs, ks, vs, return_lse=True, **options)
    check_against_reference(q, k, v, out, lse, "fp16", options, context="strided")


def test_forward_with_variants_into_strided_outputs():
    q, k, v = attention_inputs(2, 33, 47, 4, 2, 32, np.float32, seed=25)
    options = {"causal": True, "window_size": (5, 0), "softcap": 3.0,
               "alibi_slopes": np.full((2, 4), 0.3, np.float32),
               "sinks": np.array([0.0, 1.0, 2.0, 3.0], np.float32)}
    storage = aligned_empty((2, 33, 4 + 3, 32), np.float32)
    storage[...] = -7.0
    out = storage[:, :, 1:5]
    lse = aligned_empty((2, 4, 33), np.float32)
    lse[...] = np.nan
    flashattn.forward(q, k, v, out, lse, backend="cpu-flash", **options)
    check_against_reference(q, k, v, out, lse, "fp32", options, context="forward")
    untouched = np.ones(7, dtype=bool)
    untouched[1:5] = False
    assert np.all(storage[:, :, untouched] == -7.0)


def test_read_only_side_inputs_and_numpy_scalars():
    q, k, v = attention_inputs(1, 40, 50, 4, 2, 32, np.float32, seed=26)
    slopes, sinks = bloom_slopes(4), np.zeros(4, np.float32)
    for x in (q, k, v, slopes, sinks):
        x.flags.writeable = False
    out = flashattn.flash_attn_func(q, k, v, window_size=(np.int64(9), np.int32(-1)),
                                    softcap=np.float32(20.0), alibi_slopes=slopes, sinks=sinks,
                                    causal=np.True_)
    expected = flashattn.flash_attn_func(q, k, v, window_size=[9, -1], softcap=20.0,
                                         alibi_slopes=slopes.copy(), sinks=sinks.copy(),
                                         causal=True)
    assert np.array_equal(out, expected)


# ---- variable length ----

LENS_Q = [17, 0, 64, 1, 33]  # odd and zero lengths; the last sequence has 33 queries, 1 key
LENS_K = [40, 0, 64, 7, 1]
USED_K = [30, 0, 10, 7, 0]  # seqused_k: a prefix of each sequence's keys
VARLEN_CASES = [
    ("plain", {}),
    ("causal", {"causal": True}),
    ("seqused_k", {"seqused_k": USED_K}),
    ("seqused_k_causal", {"seqused_k": USED_K, "causal": True}),
    ("max_seqlen_above_longest", {"max_seqlen_q": 1000, "max_seqlen_k": 77}),
    ("window", {"window_size": (16, 4)}),
    ("window_causal", {"window_size": (8, 0), "causal": True}),
    ("softcap", {"softcap": 5.0}),
    ("softcap_large", {"softcap": 1e4, "softmax_scale": 2.0, "causal": True}),
    ("alibi_heads", {"alibi_slopes": SLOPES_HEADS, "causal": True}),
    ("alibi_batch_heads", {"alibi_slopes": SLOPES_BATCH_HEADS}),
    ("sinks", {"sinks": SINKS}),
    ("sinks_causal", {"sinks": SINKS, "causal": True}),
    ("all_variants", {"window_size": (12, -1), "causal": True, "softcap": 4.0,
                      "alibi_slopes": SLOPES_BATCH_HEADS, "sinks": SINKS,
                      "seqused_k": USED_K}),
]


def varlen_case(options, dtype, seed, heads=6, kv_heads=2, head_dim=64, extra_k=0):
    q, k, v, cq, ck = varlen_inputs(LENS_Q, LENS_K, heads, kv_heads, head_dim,
                                    numpy_dtype(dtype), seed, extra_k=extra_k)
    options = materialize(options, len(LENS_Q), heads, seed)
    if "seqused_k" in options:
        options["seqused_k"] = np.asarray(options["seqused_k"], np.int32)
    lengths = {"max_seqlen_q": max(LENS_Q), "max_seqlen_k": max(LENS_K)}
    lengths.update({n: options.pop(n) for n in ("max_seqlen_q", "max_seqlen_k") if n in options})
    return q, k, v, cq, ck, lengths, options


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", VARIANT_DTYPES)
@pytest.mark.parametrize("case", VARLEN_CASES, ids=[c[0] for c in VARLEN_CASES])
def test_varlen_matches_reference(case, dtype, backend):
    name, options = case
    seed = zlib.crc32(f"varlen {name} {dtype}".encode())
    q, k, v, cq, ck, lengths, options = varlen_case(options, dtype, seed, extra_k=5)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cq, ck, lengths["max_seqlen_q"],
                                                lengths["max_seqlen_k"], return_lse=True,
                                                backend=backend, **options)
    assert isinstance(out, np.ndarray) and out.dtype == q.dtype and out.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == (6, q.shape[0])
    # k and v end in 5 NaN rows past the last sequence: a backend that reads them fails here
    check_against_reference(q, k, v, out, lse, dtype,
                            {**options, "cu_seqlens_q": cq, "cu_seqlens_k": ck},
                            context=f"varlen {backend} {dtype} seed={seed}")


PACKED_CASES = [("causal", {"causal": True}), VARLEN_CASES[-1]]


@pytest.mark.parametrize("backend", cpu_backends())
@pytest.mark.parametrize("options", [c[1] for c in PACKED_CASES],
                         ids=[c[0] for c in PACKED_CASES])
def test_varlen_packed_equals_each_sequence_alone(options, backend):
    """Packing changes nothing: each sequence's rows are bit-identical to a dense call on that
    sequence alone (with its ALiBi row and its seqused_k keys)."""
    q, k, v, cq, ck, lengths, options = varlen_case(options, "bf16", seed=31)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cq, ck, lengths["max_seqlen_q"],
                                                lengths["max_seqlen_k"], return_lse=True,
                                                backend=backend, **options)
    used = options.pop("seqused_k", None)
    slopes = options.pop("alibi_slopes", None)
    for b in range(len(LENS_Q)):
        rows = slice(cq[b], cq[b + 1])
        keys = slice(ck[b], ck[b + 1] if used is None else ck[b] + used[b])
        alone = {} if slopes is None else {"alibi_slopes": aligned_copy(slopes[b])}
        o_b, lse_b = flashattn.flash_attn_func(
            *(aligned_copy(x[None, s]) for x, s in ((q, rows), (k, keys), (v, keys))),
            return_lse=True, backend=backend, **alone, **options)
        assert np.array_equal(out[rows].view(np.uint16), o_b[0].view(np.uint16)), b
        assert np.array_equal(lse[:, rows], lse_b[0]), b


@pytest.mark.parametrize("backend", BACKENDS)
def test_varlen_rows_without_keys(backend):
    """Zero-length key sequences, seqused_k = 0 and causal with more queries than keys: O = 0 and
    LSE = -inf (the sink with sinks), exactly."""
    q, k, v, cq, ck = varlen_inputs([5, 4, 6], [0, 3, 2], 4, 2, 32, np.float32, seed=32)
    used = np.array([0, 0, 2], np.int32)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cq, ck, 6, 3, seqused_k=used,
                                                causal=True, return_lse=True, backend=backend)
    # sequence 0: no keys; 1: seqused_k = 0; 2: 6 queries, 2 keys, causal: rows 0..3 see none
    empty = np.arange(13)
    assert np.all(out[empty] == 0) and np.all(np.isneginf(lse[:, empty]))
    assert np.all(np.isfinite(lse[:, 13:]))
    sinks = np.array([1.0, -1.0, 0.0, 3.0], np.float32)
    out, lse = flashattn.flash_attn_varlen_func(q, k, v, cq, ck, 6, 3, seqused_k=used,
                                                causal=True, sinks=sinks, return_lse=True,
                                                backend=backend)
    assert np.all(out[empty] == 0)
    assert np.array_equal(lse[:, empty], np.broadcast_to(sinks[:, None], (4, len(empty))))


def test_varlen_batch_zero_and_empty():
    q = aligned_empty((0, 4, 32), np.float32)
    cq = np.zeros(1, np.int32)
    out, lse = flashattn.flash_attn_varlen_func(q, q, q, cq, cq, 0, 0, return_lse=True)
    assert out.shape == (0, 4, 32) and lse.shape == (4, 0)
    # every sequence empty
    cq = np.zeros(4, np.int32)
    out, lse = flashattn.flash_attn_varlen_func(q, q, q, cq, cq, 0, 0, return_lse=True)
    assert out.shape == (0, 4, 32) and lse.shape == (4, 0)


def test_varlen_forward_into_strided_outputs():
    q, k, v, cq, ck = varlen_inputs(LENS_Q, LENS_K, 4, 2, 32, np.float16, seed=33)
    options = {"causal": True, "window_size": (10, 0), "sinks": np.ones(4, np.float32)}
    storage = aligned_empty((q.shape[0], 4 + 3, 32), np.float16)
    storage[...] = -7.0
    out = storage[:, 1:5]
    lse = aligned_empty((4, q.shape[0]), np.float32)
    lse[...] = np.nan
    flashattn.forward(q, k, v, out, lse, cu_seqlens_q=cq, cu_seqlens_k=ck,
                      max_seqlen_q=max(LENS_Q), max_seqlen_k=max(LENS_K), **options)
    check_against_reference(q, k, v, out, lse, "fp16",
                            {**options, "cu_seqlens_q": cq, "cu_seqlens_k": ck}, "forward")
    assert np.all(storage[:, [0, 5, 6]] == -7.0)
    # and without an LSE
    out2 = aligned_empty(q.shape, np.float16)
    flashattn.forward(q, k, v, out2, cu_seqlens_q=cq, cu_seqlens_k=ck, max_seqlen_q=64,
                      max_seqlen_k=64, **options)
    assert np.array_equal(out2, out)


def test_other_dlpack_producers_with_variants():
    q, k, v, cq, ck = varlen_inputs(LENS_Q, LENS_K, 4, 2, 32, np.float32, seed=34)
    slopes, sinks = bloom_slopes(4), np.zeros(4, np.float32)
    wrap = DLPackOnly
    out, lse = flashattn.flash_attn_varlen_func(
        wrap(q), wrap(k), wrap(v), wrap(cq), wrap(ck), 64, 64, causal=True,
        alibi_slopes=wrap(slopes), sinks=wrap(sinks), return_lse=True)
    expected, expected_lse = flashattn.flash_attn_varlen_func(
        q, k, v, cq, ck, 64, 64, causal=True, alibi_slopes=slopes, sinks=sinks, return_lse=True)
    assert np.array_equal(np.asarray(out), expected)
    assert np.array_equal(np.asarray(lse), expected_lse)
    dense = attention_inputs(1, 20, 30, 4, 2, 32, np.float32, seed=35)
    out = flashattn.flash_attn_func(*(wrap(x) for x in dense), window_size=(3, 3),
                                    sinks=wrap(sinks))
    assert np.array_equal(np.asarray(out),
                          flashattn.flash_attn_func(*dense, window_size=(3, 3), sinks=sinks))


def test_varlen_deterministic():
    q, k, v, cq, ck, lengths, options = varlen_case(VARLEN_CASES[-1][1], "fp16", seed=36)
    runs = [flashattn.flash_attn_varlen_func(q, k, v, cq, ck, 64, 64, return_lse=True, **options)
            for _ in range(2)]
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])


def test_cu_seqlens_helper():
    assert np.array_equal(cu_seqlens([3, 0, 2]), np.array([0, 3, 3, 5], np.int32))
