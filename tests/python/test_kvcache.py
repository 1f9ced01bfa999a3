"""flash_attn_with_kvcache (and forward's KV cache keywords) on NumPy arrays: contiguous and paged
caches (page sizes 16 and 64), ragged cache_seqlens with 0, new tokens appended in place (the
caches checked element for element), GQA ratios 1 to 8, causal over the new keys, the variants,
num_splits 0 / 1 / 3, rows without keys, and every bad input with the library's message and
nothing written. Against the float64 reference (flashattn._reference.kvcache_numpy) with the
tolerance rule of docs/testing.md (tolerance.py), float32 arrays unless the test says otherwise.
Runs everywhere, torch or not; the torch op is in test_torch_kvcache.py."""
import zlib

import numpy as np
import pytest

import flashattn
from flashattn._reference import kvcache_numpy
from helpers import (aligned_copy, aligned_empty, as_float64, bloom_slopes, kvcache_inputs,
                     numpy_dtype, same_bits)
from tolerance import check_attention, round_to

# The backends with a KV cache on the CPU: cpu-reference, and auto (which picks it).
BACKENDS = ["cpu-reference", "cpu-flash", "auto"]
LAYOUTS = {"contiguous": None, "paged16": 16, "paged64": 64}
CAPACITY = 128  # cache_len, or max_pages_per_seq * page_size (8 x 16, 2 x 64)


def seed_of(*parts) -> int:
    return zlib.crc32(" ".join(map(str, parts)).encode())


def reference(problem, dtype="fp32", **options):
    """(ref_out, ref_lse, base_out, base_lse, k_cache_after, v_cache_after): the float64
    reference, and the float32 naive baseline (the tolerance rule's), of a kvcache_inputs
    problem."""
    scale, causal = options.pop("softmax_scale", None), options.pop("causal", False)
    arrays = {name: (as_float64(x) if name in ("q", "k", "v") and x is not None else x)
              for name, x in problem.items()}
    ref_out, ref_lse, k_after, v_after = kvcache_numpy(**arrays, softmax_scale=scale,
                                                       causal=causal, **options)
    base_out, base_lse, _, _ = kvcache_numpy(**arrays, softmax_scale=scale, causal=causal,
                                             compute_dtype=np.float32, **options)
    return (ref_out, ref_lse, round_to(base_out, dtype), base_lse.astype(np.float32), k_after,
            v_after)


def run(problem, **options):
    """flash_attn_with_kvcache on the problem's arrays (its caches written in place)."""
    p = problem
    return flashattn.flash_attn_with_kvcache(
        p["q"], p["k_cache"], p["v_cache"], p["k"], p["v"], cache_seqlens=p["cache_seqlens"],
        block_table=p["block_table"], return_lse=True, **options)


def check(problem, out, lse, expected, context, dtype="fp32"):
    """The tolerance rule on (out, lse), and the caches after the call exactly as expected (the
    new tokens written at their rows, every other element as it was, NaN included)."""
    ref_out, ref_lse, base_out, base_lse, k_after, v_after = expected
    assert out.shape == problem["q"].shape and out.dtype == problem["q"].dtype
    q = problem["q"]
    assert lse.shape == (q.shape[0], q.shape[2], q.shape[1]) and lse.dtype == np.float32
    assert same_bits(problem["k_cache"], k_after), f"{context}: k_cache after the append"
    assert same_bits(problem["v_cache"], v_after), f"{context}: v_cache after the append"
    check_attention(as_float64(out), lse, ref_out, ref_lse, base_out, base_lse, dtype,
                    context=context)


# ---- against the reference ----

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seqlen_new", [0, 1, 4])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_matches_reference(layout, seqlen_new, causal, backend):
    # Ragged: an empty sequence, a short one, one that the append fills to capacity exactly,
    # one that ends mid-page. Decoding (seqlen_q = seqlen_new), or 2 queries over the cache alone.
    lens = [0, 37, CAPACITY - seqlen_new, 5]
    seqlen_q = seqlen_new or 2
    seed = seed_of(layout, seqlen_new, causal, backend)
    p = kvcache_inputs(lens, seqlen_q, seqlen_new, 6, 2, 64, np.float32, seed,
                       capacity=CAPACITY, page_size=LAYOUTS[layout])
    expected = reference(p, causal=causal)
    out, lse = run(p, causal=causal, backend=backend)
    check(p, out, lse, expected, f"{layout} new={seqlen_new} causal={causal} {backend}")


@pytest.mark.parametrize("group", range(1, 9))
def test_gqa_ratios(group):
    p = kvcache_inputs([3, 70, 0], 3, 3, 2 * group, 2, 32, np.float32, seed_of("gqa", group),
                       page_size=16)
    expected = reference(p, causal=True)
    out, lse = run(p, causal=True)
    check(p, out, lse, expected, f"heads {2 * group} / kv_heads 2")


def test_causal_new_tokens_see_the_cache_and_themselves():
    # Query i of the new tokens sees the cache and new keys 0..i (bottom-right): with one cache
    # key, query 0 sees 2 keys, query 3 sees 5. A cache row left NaN that a query read would
    # make its output NaN: the reference's and the library's masks agree on every row.
    p = kvcache_inputs([1, 16], 4, 4, 4, 1, 64, np.float32, seed_of("causal new"),
                       capacity=32, page_size=16)
    expected = reference(p, causal=True)
    out, lse = run(p, causal=True)
    check(p, out, lse, expected, "causal new tokens")
    # Query 0 of sequence 0 attends to exactly cache key 0 and new key 0.
    q, k, v = (as_float64(x) for x in (p["q"], p["k_cache"], p["v_cache"]))
    page = p["block_table"][0, 0]
    keys = np.stack([k[page, 0], as_float64(p["k"])[0, 0]])[:, 0]  # (2, d), kv head 0
    values = np.stack([v[page, 0], as_float64(p["v"])[0, 0]])[:, 0]
    s = keys @ q[0, 0, 0] / np.sqrt(64)
    w = np.exp(s - s.max())
    np.testing.assert_allclose(out[0, 0, 0], (w / w.sum()) @ values, rtol=1e-5, atol=1e-5)


# (id, options): the variants over a cache, with each sequence's seqlen_k = its keys.
VARIANTS = [
    ("window_causal", {"window_size": (16, 0), "causal": True}),
    ("window_both_sides", {"window_size": (8, 2)}),
    ("softcap", {"softcap": 2.0, "softmax_scale": 0.5}),
    ("alibi_heads", {"alibi_slopes": "heads", "causal": True}),
    ("alibi_batch_heads", {"alibi_slopes": "batch_heads"}),
    ("sinks", {"sinks": True, "causal": True}),
]


@pytest.mark.parametrize("layout", ["contiguous", "paged16"])
@pytest.mark.parametrize("name", [c[0] for c in VARIANTS])
def test_variants_over_the_cache(name, layout):
    options = dict(dict(VARIANTS)[name])
    rng = np.random.default_rng(seed_of("variant", name))
    batch, heads = 3, 4
    if options.get("alibi_slopes") == "heads":
        options["alibi_slopes"] = bloom_slopes(heads)
    elif options.get("alibi_slopes") == "batch_heads":
        options["alibi_slopes"] = rng.uniform(0.0, 1.0, (batch, heads)).astype(np.float32)
    if options.get("sinks"):
        options["sinks"] = rng.normal(0.0, 2.0, heads).astype(np.float32)
    p = kvcache_inputs([0, 45, 90], 2, 2, heads, 2, 64, np.float32, seed_of(name, layout),
                       page_size=LAYOUTS[layout])
    expected = reference(p, **options)
    out, lse = run(p, **options)
    # Every row sees a key (at least its own new token), so no row's O is judged by sinks' LSE.
    check(p, out, lse, expected, f"{name} {layout}")


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_dtypes(dtype):
    p = kvcache_inputs([9, 64, 0], 3, 3, 4, 2, 64, numpy_dtype(dtype), seed_of("dtype", dtype),
                       page_size=64)
    expected = reference(p, dtype, causal=True)
    out, lse = run(p, causal=True)
    check(p, out, lse, expected, dtype, dtype=dtype)


def test_rows_without_keys():
    # cache_seqlens 0 and no new tokens: nothing to attend, O = 0 and LSE = -inf exactly. With
    # causal and 3 queries over 2 keys, query 0 of sequence 1 sees none either (0 + 2 - 3 < 0).
    for layout, page_size in LAYOUTS.items():
        p = kvcache_inputs([0, 2, 0], 3, 0, 4, 2, 32, np.float32, seed_of("empty", layout),
                           page_size=page_size)
        out, lse = run(p, causal=True)
        assert np.all(out[0] == 0) and np.all(out[2] == 0), layout
        assert np.all(np.isneginf(lse[0])) and np.all(np.isneginf(lse[2])), layout
        assert np.all(out[1, 0] == 0) and np.all(np.isneginf(lse[1, :, 0])), layout
        assert np.all(np.isfinite(lse[1, :, 1:])), layout
        check(p, out, lse, reference(p, causal=True), f"rows without keys {layout}")


def test_empty_batch():
    p = kvcache_inputs([], 1, 1, 4, 2, 32, np.float32, 0)
    assert p["k"].shape == (0, 1, 2, 32)
    out, lse = run(p)
    assert out.shape == (0, 1, 4, 32) and lse.shape == (0, 4, 1)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_num_splits_give_the_same_result(layout):
    # The CPU backend computes unsplit, so every count gives the same bits (on a GPU: the same
    # up to float32 rounding).
    def make():
        return kvcache_inputs([5, 100, 0, 61], 2, 2, 8, 2, 64, np.float32,
                              seed_of("splits", layout), page_size=LAYOUTS[layout])

    expected = reference(make(), causal=True)
    results = []
    for num_splits in (0, 1, 3):
        p = make()
        out, lse = run(p, causal=True, num_splits=num_splits)
        check(p, out, lse, expected, f"{layout} num_splits={num_splits}")
        results.append((out, lse, p["k_cache"], p["v_cache"]))
    for num_splits, result in zip((1, 3), results[1:]):
        for got, want in zip(result, results[0]):
            assert same_bits(got, want), f"num_splits={num_splits}"


def test_int_cache_seqlens_is_broadcast():
    p = kvcache_inputs([20, 20, 20], 1, 1, 4, 2, 32, np.float32, seed_of("int"), page_size=16)
    q = kvcache_inputs([20, 20, 20], 1, 1, 4, 2, 32, np.float32, seed_of("int"), page_size=16)
    out_array, lse_array = run(p)
    out_int, lse_int = flashattn.flash_attn_with_kvcache(
        q["q"], q["k_cache"], q["v_cache"], q["k"], q["v"], cache_seqlens=np.int64(20),
        block_table=q["block_table"], return_lse=True)
    for got, want in ((out_int, out_array), (lse_int, lse_array), (q["k_cache"], p["k_cache"]),
                      (q["v_cache"], p["v_cache"])):
        assert same_bits(got, want)


def test_decoding_loop_appends_token_by_token():
    # Eight steps of one new token each, against one call that appends all eight: the same cache,
    # and step t's output equals row t of the one-call causal output.
    steps = 8
    one = kvcache_inputs([10, 0], steps, steps, 4, 2, 32, np.float32, seed_of("loop"),
                         capacity=64, page_size=16)
    loop = {name: (None if x is None else aligned_copy(x)) for name, x in one.items()}
    out_all = run(one, causal=True)[0]
    lens = loop["cache_seqlens"].copy()
    for t in range(steps):
        out_t = flashattn.flash_attn_with_kvcache(
            loop["q"][:, t:t + 1], loop["k_cache"], loop["v_cache"], loop["k"][:, t:t + 1],
            loop["v"][:, t:t + 1], cache_seqlens=lens, block_table=loop["block_table"],
            causal=True)
        np.testing.assert_allclose(out_t[:, 0], out_all[:, t], rtol=1e-6, atol=1e-6)
        lens += 1
    assert same_bits(loop["k_cache"], one["k_cache"])
    assert same_bits(loop["v_cache"], one["v_cache"])


def test_forward_into_your_arrays():
    # flashattn.forward with the KV cache keywords: k, v are the new tokens, out and lse yours.
    p = kvcache_inputs([3, 50], 2, 2, 4, 2, 64, np.float32, seed_of("forward"), page_size=16)
    expected = reference(p, causal=True)
    out = aligned_empty(p["q"].shape, np.float32)
    lse = aligned_empty((2, 4, 2), np.float32)
    flashattn.forward(p["q"], p["k"], p["v"], out, lse, causal=True, k_cache=p["k_cache"],
                      v_cache=p["v_cache"], cache_seqlens=p["cache_seqlens"],
                      block_table=p["block_table"], num_splits=2)
    check(p, out, lse, expected, "forward")


def test_read_only_cache_without_new_tokens():
    # Nothing is written without new tokens, so a read-only cache is fine.
    p = kvcache_inputs([3, 50], 1, 0, 4, 2, 64, np.float32, seed_of("ro"))
    expected = reference(p)
    for name in ("k_cache", "v_cache", "q", "cache_seqlens"):
        p[name].flags.writeable = False
    out, lse = run(p)
    check(p, out, lse, expected, "read-only cache")


# ---- bad inputs: the library's message, and nothing written ----

def bad_base(contiguous=False):
    """A valid paged problem (batch 2, 4 pages of 16 per sequence, 9 pages, 2 new tokens), or its
    contiguous twin (cache_len 64), for one field at a time to break."""
    return kvcache_inputs([10, 60], 1, 2, 4, 2, 32, np.float32, 5, capacity=64,
                          page_size=None if contiguous else 16, spare_pages=1)


def with_(**changes):
    def change(p):
        p.update({name: (value(p) if callable(value) else value)
                  for name, value in changes.items()})
    return change


def set_at(name, index, value):
    def change(p):
        p[name][index] = value
    return change


def new_tokens(batch=2, seqlen=2, kv_heads=2, head_dim=32, dtype=np.float32):
    return with_(k=np.full((batch, seqlen, kv_heads, head_dim), 0.5, dtype),
                 v=np.full((batch, seqlen, kv_heads, head_dim), 0.5, dtype))


def cache(num_pages=9, page_size=16, kv_heads=2, head_dim=32, dtype=np.float32, which="kv"):
    arrays = {}
    for name in ("k_cache", "v_cache"):
        if name[0] in which:
            arrays[name] = np.full((num_pages, page_size, kv_heads, head_dim), 0.5, dtype)
    return with_(**arrays)


def strided_last_dim(x):
    wide = aligned_empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
    wide[...] = 0.5
    return wide[..., ::2]


def both(*changes):
    def change(p):
        for c in changes:
            c(p)
    return change


# (id, change to the valid problem, options, exception, message regex): each through
# flash_attn_with_kvcache and through forward into poisoned out / lse.
LIBRARY_CASES = [
    ("block_table_past_num_pages", set_at("block_table", (1, 0), 9), {}, ValueError,
     r"^invalid_argument: block_table\[1, 0\] = 9, expected a page index from 0 to 8 "
     r"\(k_cache\.shape\[0\] \(num_pages\) = 9\)$"),
    ("block_table_negative", set_at("block_table", (1, 3), -3), {}, ValueError,
     r"^invalid_argument: block_table\[1, 3\] = -3, expected a page index from 0 to 8"),
    ("cache_seqlens_past_capacity", set_at("cache_seqlens", 1, 63), {}, ValueError,
     r"^invalid_argument: cache_seqlens\[1\] \+ seqlen_new = 63 \+ 2 is past the capacity "
     r"max_pages_per_seq \* page_size = 4 \* 16 = 64$"),
    ("cache_seqlens_negative", set_at("cache_seqlens", 0, -1), {}, ValueError,
     r"^invalid_argument: cache_seqlens\[0\] = -1, expected >= 0$"),
    ("cache_seqlens_int64", with_(cache_seqlens=np.array([10, 60], np.int64)), {}, TypeError,
     r"^invalid_dtype: cache_seqlens\.dtype = int64, expected int32$"),
    ("cache_seqlens_float32", with_(cache_seqlens=np.array([10, 60], np.float32)), {}, TypeError,
     r"^invalid_dtype: cache_seqlens\.dtype = fp32, expected int32$"),
    ("cache_seqlens_shape", with_(cache_seqlens=np.array([10, 60, 1], np.int32)), {}, ValueError,
     r"^invalid_shape: cache_seqlens\.shape\[0\] = 3, expected 2 \(batch\)$"),
    ("cache_seqlens_rank0", with_(cache_seqlens=np.array(10, np.int32)), {}, ValueError,
     r"^invalid_rank: cache_seqlens\.rank = 0, expected 1 \(batch\)$"),
    ("block_table_int64", with_(block_table=lambda p: p["block_table"].astype(np.int64)), {},
     TypeError, r"^invalid_dtype: block_table\.dtype = int64, expected int32$"),
    ("block_table_batch", with_(block_table=np.zeros((3, 4), np.int32)), {}, ValueError,
     r"^invalid_shape: block_table\.shape\[0\] = 3, expected 2 \(batch, max_pages_per_seq\)$"),
    ("block_table_rank1", with_(block_table=np.zeros(8, np.int32)), {}, ValueError,
     r"^invalid_rank: block_table\.rank = 1, expected 2 \(batch, max_pages_per_seq\)$"),
    ("new_v_seqlen_mismatch", with_(v=lambda p: p["v"][:, :1].copy()), {}, ValueError,
     r"^invalid_shape: v\.shape\[1\] \(seqlen_new\) = 1 must equal k\.shape\[1\] = 2$"),
    ("new_kv_heads_mismatch", new_tokens(kv_heads=1), {}, ValueError,
     r"^invalid_shape: k\.shape\[2\] \(kv_heads\) = 1 must equal k_cache\.shape\[2\] = 2$"),
    ("new_batch_mismatch", new_tokens(batch=1), {}, ValueError,
     r"^invalid_shape: k\.shape\[0\] \(batch\) = 1 must equal q\.shape\[0\] = 2$"),
    ("new_head_dim_mismatch", new_tokens(head_dim=16), {}, ValueError,
     r"^invalid_shape: k\.shape\[3\] \(head_dim\) = 16 must equal k_cache\.shape\[3\] = 32$"),
    ("new_rank3", with_(k=lambda p: p["k"][0], v=lambda p: p["v"][0]), {}, ValueError,
     r"^invalid_rank: k\.rank = 3, expected 4 \(batch, seqlen_new, kv_heads, head_dim\)$"),
    ("k_without_v", with_(v=None), {}, ValueError,
     r"^invalid_argument: k \(new tokens\) is given without v: append both or neither$"),
    ("v_without_k", with_(k=None), {}, ValueError,
     r"^invalid_argument: v \(new tokens\) is given without k: append both or neither$"),
    ("k_cache_dtype", cache(dtype=np.float16, which="k"), {}, TypeError,
     r"^invalid_dtype: k_cache\.dtype = fp16 must equal q\.dtype = fp32$"),
    ("v_cache_dtype", cache(dtype=np.float16, which="v"), {}, TypeError,
     r"^invalid_dtype: v_cache\.dtype = fp16 must equal q\.dtype = fp32$"),
    ("caches_dtype", cache(dtype=np.float16), {}, TypeError,
     r"^invalid_dtype: k_cache\.dtype = fp16 must equal q\.dtype = fp32$"),
    ("new_tokens_dtype", new_tokens(dtype=np.float16), {}, TypeError,
     r"^invalid_dtype: k\.dtype = fp16 must equal q\.dtype = fp32$"),
    ("v_cache_num_pages", cache(num_pages=8, which="v"), {}, ValueError,
     r"^invalid_shape: v_cache\.shape\[0\] \(num_pages\) = 8 must equal k_cache\.shape\[0\] = 9$"),
    ("page_size_24", cache(page_size=24), {}, ValueError,
     r"^invalid_argument: page_size \(k_cache\.shape\[1\]\) = 24, expected a multiple of 16 from "
     r"16 to 256$"),
    ("page_size_8", cache(page_size=8, num_pages=20), {}, ValueError,
     r"^invalid_argument: page_size \(k_cache\.shape\[1\]\) = 8, expected a multiple of 16"),
    ("page_size_272", cache(page_size=272, num_pages=2), {}, ValueError,
     r"^invalid_argument: page_size \(k_cache\.shape\[1\]\) = 272, expected a multiple of 16"),
    ("num_splits_negative", lambda p: None, {"num_splits": -1}, ValueError,
     r"^invalid_argument: num_splits = -1, expected 0 \(chosen\) to 256$"),
    ("num_splits_257", lambda p: None, {"num_splits": 257}, ValueError,
     r"^invalid_argument: num_splits = 257, expected 0 \(chosen\) to 256$"),
    ("num_splits_beyond_int", lambda p: None, {"num_splits": 2 ** 40}, ValueError,
     r"^invalid_argument: num_splits = 1099511627776, expected 0 \(chosen\) to 256$"),
    ("kv_heads_not_dividing", both(cache(kv_heads=3), new_tokens(kv_heads=3)), {}, ValueError,
     r"^invalid_shape: k_cache\.shape\[2\] \(kv heads\) = 3 must divide q\.shape\[2\] \(heads\) "
     r"= 4$"),
    ("cache_head_dim", with_(q=np.full((2, 1, 4, 64), 0.5, np.float32)), {}, ValueError,
     r"^invalid_shape: k_cache\.shape\[3\] \(head_dim\) = 32 must equal q\.shape\[3\] = 64$"),
    ("k_cache_rank3", with_(k_cache=lambda p: p["k_cache"][0]), {}, ValueError,
     r"^invalid_rank: k_cache\.rank = 3, expected 4 \(num_pages, page_size, kv_heads, "
     r"head_dim\)$"),
    ("k_cache_rank0", with_(k_cache=np.array(0.5, np.float32)), {}, ValueError,
     r"^invalid_rank: k_cache\.rank = 0, expected 4 \(batch, cache_len, kv_heads, head_dim\) or, "
     r"paged, \(num_pages, page_size, kv_heads, head_dim\)$"),
    ("k_cache_last_dim_strided", with_(k_cache=lambda p: strided_last_dim(p["k_cache"])), {},
     ValueError, r"^invalid_stride: k_cache\.stride\[3\] = 2, expected 1"),
    ("caches_alias", with_(v_cache=lambda p: p["k_cache"]), {}, ValueError,
     r"^aliasing: k_cache overlaps v_cache$"),
    ("read_only_cache", with_(k_cache=lambda p: read_only(p["k_cache"])), {}, ValueError,
     r"^k_cache is read-only, expected a writable array \(the new tokens k, v are written into "
     r"it\)$"),
    ("window_right_with_causal", lambda p: None, {"causal": True, "window_size": (-1, 2)},
     ValueError, r"^invalid_argument: window_right = 2 with causal = true"),
    ("alibi_shape", lambda p: None, {"alibi_slopes": np.ones(3, np.float32)}, ValueError,
     r"^invalid_shape: alibi_slopes\.shape\[0\] = 3, expected 4 \(heads\) or \(batch, heads\)$"),
    ("unknown_backend", lambda p: None, {"backend": "fastest"}, ValueError, r"^unknown_backend"),
]

CONTIGUOUS_CASES = [
    ("contiguous_past_capacity", set_at("cache_seqlens", 0, 63), {}, ValueError,
     r"^invalid_argument: cache_seqlens\[0\] \+ seqlen_new = 63 \+ 2 is past the capacity "
     r"k_cache\.shape\[1\] \(cache_len\) = 64$"),
    ("contiguous_cache_batch", with_(k_cache=lambda p: p["k_cache"][:1],
                                     v_cache=lambda p: p["v_cache"][:1]), {}, ValueError,
     r"^invalid_shape: k_cache\.shape\[0\] \(batch\) = 1 must equal q\.shape\[0\] = 2$"),
    ("contiguous_v_cache_len", with_(v_cache=lambda p: p["v_cache"][:, :32]), {}, ValueError,
     r"^invalid_shape: v_cache\.shape\[1\] \(cache_len\) = 32 must equal "
     r"k_cache\.shape\[1\] = 64$"),
    ("contiguous_k_cache_rank3", with_(k_cache=lambda p: p["k_cache"][0]), {}, ValueError,
     r"^invalid_rank: k_cache\.rank = 3, expected 4 \(batch, cache_len, kv_heads, head_dim\)$"),
]


def read_only(x):
    x = x.copy()
    x.flags.writeable = False
    return x


def snapshot(p):
    return {name: (None if x is None else np.array(x, copy=True)) for name, x in p.items()}


def assert_unchanged(p, before, context):
    for name in ("k_cache", "v_cache"):
        if isinstance(p[name], np.ndarray) and p[name].shape == before[name].shape:
            assert same_bits(p[name], before[name]), f"{context}: {name} written despite the error"


def broken(case, contiguous):
    _, change, options, _, _ = case
    p = bad_base(contiguous)
    change(p)
    return p, options


@pytest.mark.parametrize("case", LIBRARY_CASES + CONTIGUOUS_CASES,
                         ids=[c[0] for c in LIBRARY_CASES + CONTIGUOUS_CASES])
def test_bad_input_through_flash_attn_with_kvcache(case):
    name, _, _, exc, match = case
    p, options = broken(case, name.startswith("contiguous"))
    before = snapshot(p)
    with pytest.raises(exc, match=match):
        run(p, **options)
    assert_unchanged(p, before, name)


@pytest.mark.parametrize("case", LIBRARY_CASES + CONTIGUOUS_CASES,
                         ids=[c[0] for c in LIBRARY_CASES + CONTIGUOUS_CASES])
def test_bad_input_through_forward_writes_nothing(case):
    name, _, _, exc, match = case
    p, options = broken(case, name.startswith("contiguous"))
    q = p["q"]
    out = aligned_empty(q.shape, q.dtype)
    lse = aligned_empty((q.shape[0], q.shape[2], q.shape[1]), np.float32)
    out[...] = 7.0
    lse[...] = 7.0
    before = snapshot(p)
    with pytest.raises(exc, match=match):
        flashattn.forward(q, p["k"], p["v"], out, lse, k_cache=p["k_cache"],
                          v_cache=p["v_cache"], cache_seqlens=p["cache_seqlens"],
                          block_table=p["block_table"], **options)
    assert_unchanged(p, before, name)
    assert np.all(out == 7.0) and np.all(lse == 7.0), f"{name}: out or lse written"


def test_forward_kv_fields_without_k_cache():
    p = bad_base()
    out = aligned_empty(p["q"].shape, np.float32)
    with pytest.raises(ValueError, match=r"^invalid_argument: v_cache is given without k_cache$"):
        flashattn.forward(p["q"], p["k"], p["v"], out, v_cache=p["v_cache"],
                          cache_seqlens=p["cache_seqlens"])
    with pytest.raises(ValueError,
                       match=r"^invalid_argument: cache_seqlens is given without k_cache$"):
        flashattn.forward(p["q"], p["k"], p["v"], out, cache_seqlens=p["cache_seqlens"])
    with pytest.raises(ValueError, match=r"^invalid_argument: k_cache is given with cu_seqlens"):
        flashattn.forward(p["q"][0], p["k"], p["v"], out[0], k_cache=p["k_cache"],
                          v_cache=p["v_cache"], cache_seqlens=p["cache_seqlens"],
                          block_table=p["block_table"], cu_seqlens_q=p["cache_seqlens"],
                          cu_seqlens_k=p["cache_seqlens"], max_seqlen_q=1, max_seqlen_k=1)


# Caught before the library: the Python layer's own checks (types, None, an int
# cache_seqlens' value), with the cache untouched too.
API_CASES = [
    ("k_cache_none", with_(k_cache=None), {}, TypeError,
     r"^k_cache must be an array \(batch, cache_len, kv_heads, head_dim\), or \(num_pages, "
     r"page_size, kv_heads, head_dim\) with block_table, got None$"),
    ("v_cache_none", with_(v_cache=None), {}, TypeError, r"^v_cache must be an array"),
    ("cache_seqlens_none", with_(cache_seqlens=None), {}, TypeError,
     r"^cache_seqlens must be an int32 array \(batch\) of the keys already in the cache, or an "
     r"int for every sequence, got None$"),
    ("cache_seqlens_int_negative", with_(cache_seqlens=-1), {}, ValueError,
     r"^invalid_argument: cache_seqlens = -1, expected an int32 key count from 0 to 2147483647"),
    ("cache_seqlens_int_beyond_int32", with_(cache_seqlens=2 ** 31), {}, ValueError,
     r"^invalid_argument: cache_seqlens = 2147483648, expected an int32 key count"),
    ("cache_seqlens_int_past_capacity", with_(cache_seqlens=63), {}, ValueError,
     r"^invalid_argument: cache_seqlens\[0\] \+ seqlen_new = 63 \+ 2 is past the capacity"),
    ("cache_seqlens_list", with_(cache_seqlens=[10, 60]), {}, TypeError,
     r"^cache_seqlens is a builtins\.list but q is a numpy\.ndarray: the caches, the new tokens "
     r"and the side inputs must be arrays of q's framework \(or None\)$"),
    ("cache_seqlens_float", with_(cache_seqlens=10.0), {}, TypeError,
     r"^cache_seqlens is a builtins\.float but q is a numpy\.ndarray"),
    ("block_table_list", with_(block_table=[[0, 1, 2, 3], [4, 5, 6, 7]]), {}, TypeError,
     r"^block_table is a builtins\.list but q is a numpy\.ndarray"),
    ("num_splits_float", lambda p: None, {"num_splits": 1.5}, TypeError,
     r"^num_splits must be an int, 0 \(the backend picks\) or 1 to 256 \(that many key splits\), "
     r"got float$"),
    ("num_splits_bool", lambda p: None, {"num_splits": True}, TypeError,
     r"^num_splits must be an int"),
    ("num_splits_beyond_int64", lambda p: None, {"num_splits": 2 ** 70}, ValueError,
     r"^invalid_argument: num_splits = 1180591620717411303424 is beyond int64"),
    ("return_lse_int", lambda p: None, {"return_lse": 1}, TypeError,
     r"^return_lse must be a bool, got int$"),
    ("causal_none", lambda p: None, {"causal": None}, TypeError, r"^causal must be a bool"),
    ("window_size_int", lambda p: None, {"window_size": 4}, TypeError, r"^window_size must be"),
]


@pytest.mark.parametrize("case", API_CASES, ids=[c[0] for c in API_CASES])
def test_bad_argument_before_the_library(case):
    name, _, _, exc, match = case
    p, options = broken(case, False)
    before = snapshot(p)
    options = {"return_lse": True, **options}
    with pytest.raises(exc, match=match):
        flashattn.flash_attn_with_kvcache(
            p["q"], p["k_cache"], p["v_cache"], p["k"], p["v"], cache_seqlens=p["cache_seqlens"],
            block_table=p["block_table"], **options)
    assert_unchanged(p, before, name)


def test_options_after_v_are_keyword_only():
    p = bad_base()
    with pytest.raises(TypeError, match=r"positional"):
        flashattn.flash_attn_with_kvcache(p["q"], p["k_cache"], p["v_cache"], p["k"], p["v"],
                                          p["cache_seqlens"])
