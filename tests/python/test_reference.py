"""The NumPy reference (flashattn/_reference.py) against params.h's definition, on cases small
enough to write the answer down: which keys each row sees, the transformed score of a row with
one key, the sink's share of the denominator, the varlen layout. The library is not involved,
so these run whatever the backends implement."""
import numpy as np
import pytest

from flashattn._reference import attention_numpy
from helpers import bloom_slopes, cu_seqlens
from tolerance import baseline_bound, baseline_lse_bound, error_stats


def seen_keys(seqlen_q, seqlen_k, **options):
    """The keys each query row attends to, read off the reference: V = identity over the keys,
    so O's row i is row i's attention weights."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, seqlen_q, 1, 8))
    k = rng.standard_normal((1, seqlen_k, 1, 8))
    v = np.eye(seqlen_k).reshape(1, seqlen_k, 1, seqlen_k)
    out, lse = attention_numpy(q, k, v, **options)
    seen = [set(np.flatnonzero(out[0, i, 0] > 0).tolist()) for i in range(seqlen_q)]
    return seen, out, lse


# (id, seqlen_q, seqlen_k, options, the keys of each row): diag = seqlen_k - seqlen_q.
MASKS = [
    ("full", 3, 4, {}, [{0, 1, 2, 3}] * 3),
    ("causal_sq_lt_sk", 4, 6, {"causal": True},
     [{0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5}]),
    ("causal_sq_gt_sk", 6, 4, {"causal": True},
     [set(), set(), {0}, {0, 1}, {0, 1, 2}, {0, 1, 2, 3}]),
    ("window_1_0", 4, 6, {"window_size": (1, 0)}, [{1, 2}, {2, 3}, {3, 4}, {4, 5}]),
    ("window_0_0", 4, 6, {"window_size": (0, 0)}, [{2}, {3}, {4}, {5}]),
    ("window_2_1", 4, 6, {"window_size": (2, 1)},
     [{0, 1, 2, 3}, {1, 2, 3, 4}, {2, 3, 4, 5}, {3, 4, 5}]),
    ("window_left_only", 4, 6, {"window_size": (1, -1)},
     [{1, 2, 3, 4, 5}, {2, 3, 4, 5}, {3, 4, 5}, {4, 5}]),
    ("window_right_only", 4, 6, {"window_size": (-1, 1)},
     [{0, 1, 2, 3}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}]),
    ("window_-1_0_is_causal", 4, 6, {"window_size": (-1, 0)},
     [{0, 1, 2}, {0, 1, 2, 3}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5}]),
    # causal is the right edge 0 (window_right -1 or 0) and keeps the left
    ("causal_with_window_1_-1", 4, 6, {"window_size": (1, -1), "causal": True},
     [{1, 2}, {2, 3}, {3, 4}, {4, 5}]),
    ("causal_with_window_1_0", 4, 6, {"window_size": (1, 0), "causal": True},
     [{1, 2}, {2, 3}, {3, 4}, {4, 5}]),
    ("window_past_the_keys", 5, 2, {"window_size": (0, 1)}, [set(), set(), {0}, {0, 1}, {1}]),
    ("window_wider_than_the_sequence", 3, 4, {"window_size": (10 ** 6, 10 ** 6)},
     [{0, 1, 2, 3}] * 3),
    ("no_keys", 2, 0, {}, [set(), set()]),
]


@pytest.mark.parametrize("sq, sk, options, expected", [m[1:] for m in MASKS],
                         ids=[m[0] for m in MASKS])
def test_reference_mask(sq, sk, options, expected):
    seen, out, lse = seen_keys(sq, sk, **options)
    assert seen == expected
    for i, keys in enumerate(expected):
        if not keys:  # a row without keys: O = 0, LSE = -inf, never NaN
            assert np.all(out[0, i] == 0) and np.isneginf(lse[0, 0, i])
        else:
            assert np.isfinite(lse[0, 0, i]) and np.isclose(out[0, i, 0].sum(), 1.0)


def test_reference_refuses_causal_with_a_right_edge():
    """params.h: with causal, window_right must be -1 or 0 (the library refuses a wider one)."""
    q = np.ones((1, 2, 1, 8))
    with pytest.raises(ValueError, match=r"window_right = 1 with causal"):
        attention_numpy(q, q, q, causal=True, window_size=(-1, 1))


def test_reference_score_transform_softcap_then_alibi():
    """With one key per row, LSE is that row's transformed score: softcap * tanh(s / softcap),
    then - slope * |i + diag - j| (diag = 1 - seqlen_q, j = 0)."""
    rng = np.random.default_rng(1)
    sq, h, d = 5, 3, 16
    q = rng.standard_normal((1, sq, h, d)) * 3
    k = rng.standard_normal((1, 1, h, d)) * 3
    v = rng.standard_normal((1, 1, h, d))
    scale, softcap = 0.7, 2.5
    slopes = np.array([0.5, 0.25, 2.0], np.float32)
    _, lse = attention_numpy(q, k, v, scale, softcap=softcap, alibi_slopes=slopes)
    s = scale * np.einsum("bqhd,bkhd->bhq", q, k)
    dist = np.abs(np.arange(sq) + 1 - sq)
    expected = softcap * np.tanh(s / softcap) - slopes.astype(np.float64)[None, :, None] * dist
    assert np.allclose(lse, expected, rtol=1e-13, atol=1e-13)


def test_reference_alibi_shapes_agree():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 9, 4, 8)) for _ in range(3))
    slopes = bloom_slopes(4)
    a = attention_numpy(q, k, v, causal=True, alibi_slopes=slopes)
    b = attention_numpy(q, k, v, causal=True, alibi_slopes=np.stack([slopes, slopes]))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    zero = attention_numpy(q, k, v, alibi_slopes=np.zeros(4, np.float32))
    plain = attention_numpy(q, k, v)
    assert np.allclose(zero[0], plain[0], atol=1e-14)
    # per batch: batch 1's slopes reach batch 1 only
    c = attention_numpy(q, k, v, alibi_slopes=np.stack([np.zeros(4, np.float32), slopes]))
    assert np.allclose(c[0][0], plain[0][0], atol=1e-14)
    assert np.allclose(c[0][1], attention_numpy(q, k, v, alibi_slopes=slopes)[0][1], atol=1e-14)


def test_reference_sinks():
    """A sink joins the denominator: LSE' = logaddexp(LSE, sink), O' = O * exp(LSE - LSE');
    a row without keys gets O = 0 and LSE = its sink."""
    rng = np.random.default_rng(3)
    q = rng.standard_normal((2, 7, 3, 8))
    k, v = (rng.standard_normal((2, 5, 3, 8)) for _ in range(2))
    sinks = np.array([0.5, -3.0, 4.0], np.float32)
    out, lse = attention_numpy(q, k, v, causal=True)  # rows 0, 1 see no key
    out_s, lse_s = attention_numpy(q, k, v, causal=True, sinks=sinks)
    sink = sinks.astype(np.float64)[None, :, None]
    assert np.allclose(lse_s, np.logaddexp(lse, sink), rtol=1e-13, atol=1e-13)
    with np.errstate(invalid="ignore"):
        expected = out * np.exp(lse - lse_s).transpose(0, 2, 1)[..., None]
    assert np.allclose(out_s[:, 2:], expected[:, 2:], rtol=1e-12, atol=1e-13)
    assert np.all(out_s[:, :2] == 0)
    assert np.array_equal(lse_s[:, :, :2], np.broadcast_to(sink, (2, 3, 2)))
    # a sink of -inf is no sink
    out_n, lse_n = attention_numpy(q, k, v, causal=True, sinks=np.full(3, -np.inf, np.float32))
    assert np.array_equal(out_n, out) and np.array_equal(lse_n, lse)


def test_reference_varlen_is_each_sequence_alone():
    rng = np.random.default_rng(4)
    lens_q, lens_k, used = [3, 0, 5, 2], [4, 2, 0, 6], [4, 1, 0, 3]
    h, hk, d = 4, 2, 8
    q = rng.standard_normal((sum(lens_q) + 2, h, d))  # 2 rows in no sequence
    k, v = (rng.standard_normal((sum(lens_k), hk, d)) for _ in range(2))
    slopes = rng.uniform(0, 1, (4, h)).astype(np.float32)
    sinks = rng.standard_normal(h).astype(np.float32)
    cq, ck = cu_seqlens(lens_q), cu_seqlens(lens_k)
    options = dict(causal=True, window_size=(2, -1), softcap=3.0, sinks=sinks)
    out, lse = attention_numpy(q, k, v, cu_seqlens_q=cq, cu_seqlens_k=ck, seqused_k=used,
                               alibi_slopes=slopes, **options)
    assert out.shape == q.shape and lse.shape == (h, q.shape[0])
    for b in range(4):
        rows, keys = slice(cq[b], cq[b + 1]), slice(ck[b], ck[b] + used[b])
        o_b, lse_b = attention_numpy(q[None, rows], k[None, keys], v[None, keys],
                                     alibi_slopes=slopes[b], **options)
        assert np.array_equal(out[rows], o_b[0]) and np.array_equal(lse[:, rows], lse_b[0])
    assert np.all(np.isnan(out[-2:])) and np.all(np.isnan(lse[:, -2:]))


def test_reference_float32_baseline_tracks_float64():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((1, 33, 2, 16)) for _ in range(3))
    options = dict(causal=True, window_size=(7, 0), softcap=4.0,
                   alibi_slopes=bloom_slopes(2), sinks=np.array([1.0, -1.0], np.float32))
    out64, lse64 = attention_numpy(q, k, v, **options)
    out32, lse32 = attention_numpy(q, k, v, compute_dtype=np.float32, **options)
    assert out32.dtype == np.float32
    # within the rule's fixed baseline bound (tolerance.py), as the tests' CPU baseline must be
    err = error_stats(out32, lse32, out64, lse64)
    assert err["max_abs"] <= baseline_bound(out64, lse64, "fp32"), err["max_abs"]
    assert err["lse_max_abs"] <= baseline_lse_bound(lse64), err["lse_max_abs"]
    assert err["nonfinite"] == err["masked_nonzero"] == err["lse_inf_mismatch"] == 0
