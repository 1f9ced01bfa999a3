"""python -m flashattn.bench --variants: the torch-free parts on any machine (visible-pair counts
against brute force, FLOPs, varlen lengths, the command line, the rows, ratios, table and JSON,
and FlexAttention's mask_mod / score_mod / sinks formulations run on NumPy against the library's
float64 reference), the whole variant driver on CPU tensors (torch), and a short real run on a
GPU."""
import itertools
import json
import math
import sys

import numpy as np
import pytest

from flashattn import _bench_variants as bv
from flashattn import bench
from flashattn._reference import attention_numpy
from helpers import HostClockEvent, run_bench

try:
    import torch
except ImportError:
    torch = None


# ---- (query, key) pairs and FLOPs ----

def brute_pairs(sq, sk, left, right, causal=False):
    """The library's mask rule, one pair at a time."""
    if causal:
        right = 0
    diag = sk - sq
    count = 0
    for i in range(sq):
        for j in range(sk):
            if left >= 0 and j < i + diag - left:
                continue
            if right >= 0 and j > i + diag + right:
                continue
            count += 1
    return count


def test_visible_pairs_against_brute_force():
    sides = [-1, 0, 1, 2, 3, 5, 8, 20]
    for sq, sk in itertools.product(range(0, 9), range(0, 9)):
        for left, right in itertools.product(sides, sides):
            assert bv.visible_pairs(sq, sk, left, right) == brute_pairs(sq, sk, left, right), \
                (sq, sk, left, right)
        for left in sides:  # causal: right -1 or 0
            for right in (-1, 0):
                assert bv.visible_pairs(sq, sk, left, right, causal=True) == \
                    brute_pairs(sq, sk, left, right, causal=True), (sq, sk, left, right)


def test_visible_pairs_against_the_reference_mask():
    """The pairs the library's float64 reference attends to: with equal scores (q = 0) and
    one-hot values (v[j] = e_j), O[i, j] > 0 exactly where row i sees key j."""
    for sq, sk, left, right, causal in [(5, 9, 2, 1, False), (9, 5, 3, -1, False),
                                        (7, 7, -1, 0, False), (6, 11, 0, 0, False),
                                        (12, 4, 1, 2, False), (10, 10, 3, -1, True),
                                        (4, 13, -1, -1, True)]:
        q = np.zeros((1, sq, 1, sk))
        k = np.ones((1, sk, 1, sk))
        v = np.eye(sk)[None, :, None, :]
        out, _ = attention_numpy(q, k, v, causal=causal, window_size=(left, right))
        assert int((out > 0).sum()) == bv.visible_pairs(sq, sk, left, right, causal)


def test_visible_pairs_large_and_closed_form():
    L = 16384
    assert bv.visible_pairs(L, L, 1024, 0) == sum(min(i, 1024) + 1 for i in range(L))
    assert bv.visible_pairs(L, L, -1, 0) == L * (L + 1) // 2
    assert bv.visible_pairs(L, L, -1, -1) == L * L
    assert bv.visible_pairs(L, L, 256, 256) == sum(min(i, 256) + min(L - 1 - i, 256) + 1
                                                   for i in range(L))
    # a window wider than the sequence masks nothing; no overflow at any size (Python ints)
    assert bv.visible_pairs(L, L, 10 ** 30, 10 ** 30) == L * L
    assert bv.visible_pairs(2 ** 40, 2 ** 40, -1, 0) == 2 ** 40 * (2 ** 40 + 1) // 2
    # the anchors' figure: (1024, 0) keeps 12.1% of the causal FLOPs at 16k
    assert round(bv.visible_pairs(L, L, 1024, 0) / (L * L / 2), 3) == 0.121


@pytest.mark.parametrize("kwargs, message", [
    (dict(left=-2), "window left = -2"),
    (dict(right=-5), "window right = -5"),
    (dict(right=3, causal=True), "with causal"),
])
def test_visible_pairs_refuses(kwargs, message):
    with pytest.raises(ValueError, match=message):
        bv.visible_pairs(8, 8, **kwargs)


def test_clamped_sum_against_brute_force():
    for n, c, sk in itertools.product(range(0, 7), range(-9, 10), range(0, 7)):
        assert bv.clamped_sum(n, c, sk) == sum(min(max(i + c, 0), sk) for i in range(n))


def test_flops():
    assert bv.dense_flops(2, 16, 128, 1024, 1024, False) == 4 * 2 * 16 * 1024 * 1024 * 128
    assert bv.dense_flops(2, 16, 128, 1024, 1024, True) == 2 * 2 * 16 * 1024 * 1024 * 128
    assert bv.window_flops(1, 16, 128, 16384, (1024, 0)) == \
        4 * 16 * 128 * bv.visible_pairs(16384, 16384, 1024, 0)
    lengths = [3, 5, 8]
    assert bv.varlen_flops(lengths, 16, 128, False) == 4 * 16 * 128 * (9 + 25 + 64)
    assert bv.varlen_flops(lengths, 16, 128, True) == 2 * 16 * 128 * (9 + 25 + 64)
    # the dense grid's convention is the same for dense rows
    assert bv.dense_flops(8, 16, 128, 2048, 2048, True) == \
        bench.Cell(128, True, 2048, 8, 16, 16).flops()


def test_cell_flops_per_variant():
    lengths = (100, 300, 24)
    rows = {
        "dense": bv.VariantCell("dense", 64, True, 512, 2, 4, 4),
        "window": bv.VariantCell("window", 64, False, 512, 2, 4, 4, window=(32, 0)),
        "softcap": bv.VariantCell("softcap", 64, False, 512, 2, 4, 4, softcap=30.0),
        "varlen": bv.VariantCell("varlen", 64, True, 300, 3, 4, 2, lengths=lengths),
    }
    assert rows["dense"].flops() == 4 * 2 * 4 * 512 * 512 * 64 / 2
    assert rows["window"].flops() == 4 * 2 * 4 * 64 * brute_pairs(512, 512, 32, 0)
    assert rows["softcap"].flops() == 4 * 2 * 4 * 512 * 512 * 64
    assert rows["varlen"].flops() == 4 * 4 * 64 * sum(n * n for n in lengths) / 2
    assert rows["varlen"].total == 424 and rows["dense"].total == 1024
    assert "visible" in rows["window"].flop_rule() and "sum(len^2) / 2" in \
        rows["varlen"].flop_rule()
    assert rows["window"].dense_causal() and not bv.VariantCell(
        "window", 64, False, 512, 2, 4, 4, window=(32, 32)).dense_causal()
    assert rows["window"].label() == "window (32, 0) 2x512 H4 d64"
    assert rows["varlen"].label() == "varlen 3 seqs causal T=424 H4/2 d64"


# ---- numbers ----

def test_random_lengths():
    lengths = bv.random_lengths(32, 32768, seed=0)
    assert len(lengths) == 32 and sum(lengths) == 32768 and min(lengths) >= 1
    assert lengths == bv.random_lengths(32, 32768, seed=0)  # seeded: the same every time
    assert lengths != bv.random_lengths(32, 32768, seed=1)
    assert len(set(lengths)) > 8  # random, not equal parts
    assert bv.random_lengths(1, 10, 0) == [10] and bv.random_lengths(5, 5, 3) == [1] * 5
    for count, total in [(0, 10), (11, 10)]:
        with pytest.raises(ValueError):
            bv.random_lengths(count, total, 0)


def test_alibi_slopes_and_sinks():
    s = bv.alibi_slopes(16)
    assert len(s) == 16 and s[0] == 2 ** -0.5 and s[-1] == 2 ** -8
    assert all(a > b for a, b in zip(s, s[1:]))
    sinks = bv.sink_logits(16, 16384, seed=3)
    assert len(sinks) == 16 and sinks == bv.sink_logits(16, 16384, seed=3)
    assert abs(sum(sinks) / 16 - (math.log(16384) + 2)) < 1.5


def test_document_ids_and_offsets():
    assert bv.document_ids([2, 1, 3]) == [0, 0, 1, 2, 2, 2]
    assert bv.cu_seqlens([2, 1, 3]) == [0, 2, 3, 6]


# ---- FlexAttention's formulation, run on NumPy, against the library's reference ----

def flex_numpy(q, k, v, score_mod=None, mask_mod=None):
    """What flex_attention computes, for BHSD float64 arrays: S = Q K^T / sqrt(d), score_mod on
    every score with broadcast index arrays, mask_mod's False as -inf; (out, natural-log LSE)."""
    b_, h_, lq, d = q.shape
    group = h_ // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = q @ k.swapaxes(-1, -2) / math.sqrt(d)
    b = np.arange(b_)[:, None, None, None]
    h = np.arange(h_)[None, :, None, None]
    qi = np.arange(lq)[None, None, :, None]
    ki = np.arange(k.shape[2])[None, None, None, :]
    if score_mod is not None:
        s = score_mod(s, b, h, qi, ki)
    if mask_mod is not None:
        s = np.where(np.broadcast_to(mask_mod(b, h, qi, ki), s.shape), s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - m)
    total = p.sum(axis=-1, keepdims=True)
    return (p / total) @ v, (m + np.log(total))[..., 0]


def bhsd(x):
    return x.transpose(0, 2, 1, 3)


def random_qkv(b, l, h, hk, d, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((b, l, h, d)) + 0.5, rng.standard_normal((b, l, hk, d)) + 0.5,
            rng.standard_normal((b, l, hk, d)) + 0.5)


@pytest.mark.parametrize("window", [(8, 0), (0, 0), (5, 3), (-1, 4), (6, -1), (40, 0)])
def test_window_mask_mod_is_the_librarys_window(window):
    L = 33
    qi, ki = np.arange(L)[:, None], np.arange(L)[None, :]
    mask = bv.window_mask_mod(*window)(None, None, qi, ki)
    assert int(np.broadcast_to(mask, (L, L)).sum()) == bv.visible_pairs(L, L, *window)
    q, k, v = random_qkv(2, L, 4, 2, 16, seed=1)
    ref, _ = attention_numpy(q, k, v, window_size=window)
    out, _ = flex_numpy(bhsd(q), bhsd(k), bhsd(v), mask_mod=bv.window_mask_mod(*window))
    np.testing.assert_allclose(bhsd(out), ref, atol=1e-12, rtol=0)


def test_window_mask_mod_refuses_no_window():
    with pytest.raises(ValueError, match="no window"):
        bv.window_mask_mod(-1, -1)


@pytest.mark.parametrize("causal", [False, True])
def test_softcap_score_mod_is_the_librarys_softcap(causal):
    q, k, v = random_qkv(1, 40, 4, 4, 16, seed=2)
    q *= 4  # scores large enough that the cap bites
    ref, _ = attention_numpy(q, k, v, causal=causal, softcap=5.0)
    out, _ = flex_numpy(bhsd(q), bhsd(k), bhsd(v), score_mod=bv.softcap_score_mod(5.0, np.tanh),
                        mask_mod=bv.causal_mask_mod if causal else None)
    np.testing.assert_allclose(bhsd(out), ref, atol=1e-12, rtol=0)
    plain, _ = attention_numpy(q, k, v, causal=causal)
    assert np.abs(plain - ref).max() > 1e-2  # the cap changed the outputs


@pytest.mark.parametrize("causal", [False, True])
def test_alibi_score_mod_is_the_librarys_alibi(causal):
    heads = 8
    q, k, v = random_qkv(2, 37, heads, 2, 16, seed=3)
    slopes = np.asarray(bv.alibi_slopes(heads), np.float32)
    ref, _ = attention_numpy(q, k, v, causal=causal, alibi_slopes=slopes)
    out, _ = flex_numpy(bhsd(q), bhsd(k), bhsd(v),
                        score_mod=bv.alibi_score_mod(slopes.astype(np.float64)),
                        mask_mod=bv.causal_mask_mod if causal else None)
    np.testing.assert_allclose(bhsd(out), ref, atol=1e-12, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_sinks_correction_is_the_librarys_sinks(causal):
    heads, L = 4, 50
    q, k, v = random_qkv(2, L, heads, 4, 16, seed=4)
    sinks = np.asarray(bv.sink_logits(heads, L, seed=0), np.float32)
    ref, ref_lse = attention_numpy(q, k, v, causal=causal, sinks=sinks)
    out, lse = flex_numpy(bhsd(q), bhsd(k), bhsd(v),
                          mask_mod=bv.causal_mask_mod if causal else None)
    corrected = out * bv.sink_factor(lse, sinks.astype(np.float64), np.exp)[..., None]
    np.testing.assert_allclose(bhsd(corrected), ref, atol=1e-12, rtol=0)
    # the sink took a visible share (the benchmark's sinks are chosen for that)
    assert np.abs(bhsd(out) - ref).max() > 1e-2
    # and the sink's LSE is log(exp(lse) + exp(sink))
    np.testing.assert_allclose(np.logaddexp(lse, sinks[None, :, None]), ref_lse, atol=1e-12)


def test_sink_factor_never_nan():
    lse = np.array([[[-np.inf, 0.0, 1e4]]])
    with np.errstate(over="ignore"):
        f = bv.sink_factor(lse, np.array([1e4]), np.exp)
    assert np.isfinite(f).all() and f[0, 0, 0] == 0.0


@pytest.mark.parametrize("causal", [False, True])
def test_document_mask_mod_is_the_librarys_varlen(causal):
    lengths = [7, 1, 12, 5]
    heads, kv_heads, d = 4, 2, 16
    total = sum(lengths)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((total, heads, d)) + 0.5
    k = rng.standard_normal((total, kv_heads, d)) + 0.5
    v = rng.standard_normal((total, kv_heads, d)) + 0.5
    cu = np.asarray(bv.cu_seqlens(lengths), np.int32)
    ref, _ = attention_numpy(q, k, v, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu)
    doc = np.asarray(bv.document_ids(lengths))
    out, _ = flex_numpy(bhsd(q[None]), bhsd(k[None]), bhsd(v[None]),
                        mask_mod=bv.document_mask_mod(doc, causal))
    np.testing.assert_allclose(bhsd(out)[0], ref, atol=1e-12, rtol=0)
    qi, ki = np.arange(total)[:, None], np.arange(total)[None, :]
    visible = int(bv.document_mask_mod(doc, causal)(None, None, qi, ki).sum())
    pairs = sum(n * (n + 1) // 2 if causal else n * n for n in lengths)
    assert visible == pairs == sum(bv.visible_pairs(n, n, -1, 0 if causal else -1)
                                   for n in lengths)


# ---- the command line ----

def test_help_lists_the_variants():
    r = run_bench("--help")
    assert r.returncode == 0, r.stderr
    for text in ("--variants", "--window", "--softcap", "--varlen", "unsupported: <why>",
                 "python -m flashattn.bench --variants"):
        assert text in r.stdout, text


@pytest.mark.parametrize("args, message", [
    (["--softcap", "30"], "belong(s) to the variant table: add --variants"),
    (["--window", "1024,0", "--varlen"], "--window, --varlen belong(s)"),
    (["--variants", "fancy"], "unknown variant(s) fancy"),
    (["--variants", "--window", "1,2,3"], "expected LEFT,RIGHT"),
    (["--variants", "--window=-1,-1"], "masks nothing"),
    (["--variants", "--window=-3,0"], "must be -1 (unbounded) or >= 0"),
    (["--variants", "--window", "-1,8"], "argument --window: expected one argument"),
    (["--variants", "--window", "a,0"], "not an integer"),
    (["--variants", "--softcap", "0"], "expected a finite value > 0"),
    (["--variants", "--softcap", "x"], "is not a number"),
    (["--variants", "--varlen", "0x5"], "expected 1 <= COUNT <= TOTAL"),
    (["--variants", "--varlen", "9x4"], "expected 1 <= COUNT <= TOTAL"),
    (["--variants", "--varlen", "3,0,2"], "every length must be >= 1"),
    (["--variants", "--varlen", "2x2100000k"], "do not fit the int32 offsets"),
    (["--variants", "window", "--softcap", "30"], "--softcap is given but softcap is not among"),
    (["--variants", "--plot", "x.png"], "--plot draws the dense grid"),
    (["--variants", "--seqlens", "0"], "must be >= 1"),
])
def test_bad_variant_arguments_exit_2(args, message):
    r = run_bench(*args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.skipif(torch is not None and torch.cuda.is_available(),
                    reason="a CUDA device is present: the message is for machines without one")
def test_variants_clear_message_without_cuda():
    r = run_bench("--variants")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert ("no CUDA device" in r.stderr) if torch is not None else ("needs PyTorch" in r.stderr)


def test_dense_grid_defaults_unchanged():
    args = bench.parse_args([])
    assert args.variants is None
    assert args.head_dims == [64, 128, 256] and args.seqlens == [512, 1024, 2048, 4096, 8192,
                                                                  16384]
    assert len(bench.build_grid(args)) == 36 + 6


def test_default_variant_table():
    args = bench.parse_args(["--variants"])
    cells = bench.build_variant_grid(args)
    assert [c.label() for c in cells] == [
        "dense 1x16384 H16 d128", "dense causal 1x16384 H16 d128",
        "window (1024, 0) 1x16384 H16 d128",
        "softcap 30 1x16384 H16 d128", "softcap 30 causal 1x16384 H16 d128",
        "alibi 1x16384 H16 d128", "alibi causal 1x16384 H16 d128",
        "sinks 1x16384 H16 d128", "sinks causal 1x16384 H16 d128",
        "varlen 32 seqs T=32768 H16 d128", "varlen 32 seqs causal T=32768 H16 d128"]
    varlen = cells[-1]
    assert varlen.total == 32768 and len(varlen.lengths) == 32
    assert list(varlen.lengths) == bv.random_lengths(32, 32768, seed=0)
    # the example spells out the defaults
    same = bench.build_variant_grid(bench.parse_args(["--variants", "--head-dims", "128",
                                                      "--seqlens", "16k"]))
    assert same == cells


def test_variant_table_options():
    args = bench.parse_args(["--variants", "window,alibi,varlen", "--causal", "yes", "--window",
                             "256,256", "--window", "512,0", "--varlen", "1k,2k", "--head-dims",
                             "64,128", "--seqlens", "4k", "--kv-heads", "4"])
    cells = bench.build_variant_grid(args)
    labels = [c.label() for c in cells]
    assert labels[:5] == ["dense 4x4096 H32/4 d64", "dense causal 4x4096 H32/4 d64",
                          "window (256, 256) 4x4096 H32/4 d64", "window (512, 0) 4x4096 H32/4 d64",
                          "alibi causal 4x4096 H32/4 d64"]
    assert labels[5] == "varlen 2 seqs causal T=3072 H32/4 d64"
    assert len(cells) == 12 and labels[6].endswith("H16/4 d128")
    assert not any(c.variant in ("softcap", "sinks") for c in cells)
    # --causal no keeps the causal dense row a (left, 0) window is compared with
    cells = bench.build_variant_grid(bench.parse_args(["--variants", "window", "--causal", "no"]))
    assert [c.label() for c in cells] == ["dense 1x16384 H16 d128",
                                          "dense causal 1x16384 H16 d128",
                                          "window (1024, 0) 1x16384 H16 d128"]
    cells = bench.build_variant_grid(bench.parse_args(["--variants", "sinks", "--causal", "yes",
                                                       "--batch", "2", "--heads", "8"]))
    assert [c.label() for c in cells] == ["dense causal 2x16384 H8 d128",
                                          "sinks causal 2x16384 H8 d128"]


def test_parse_helpers():
    assert bv.parse_variants("all") == list(bv.VARIANTS)
    assert bv.parse_variants("varlen, window") == ["dense", "window", "varlen"]
    assert bv.parse_window("1k,0") == (1024, 0) and bv.parse_window("-1,8") == (-1, 8)
    assert bv.parse_softcaps("30,50.5") == [30.0, 50.5]
    assert bv.parse_varlen("4x1k", seed=0) == bv.random_lengths(4, 1024, 0)
    assert bv.parse_varlen("1k,3,5", seed=0) == [1024, 3, 5]
    assert bv.parse_count("16K") == 16384 and bv.parse_count("-1") == -1


# ---- rows, ratios, table, JSON ----

def synthetic_rows():
    """dense / dense causal / window / softcap (flash-sm80 refused) / varlen, as run_variants
    makes them."""
    ours = ["flash-sm80", "flash"]
    cells = [bv.VariantCell("dense", 128, False, 16384, 1, 16, 16),
             bv.VariantCell("dense", 128, True, 16384, 1, 16, 16),
             bv.VariantCell("window", 128, False, 16384, 1, 16, 16, window=(1024, 0)),
             bv.VariantCell("softcap", 128, True, 16384, 1, 16, 16, softcap=30.0),
             bv.VariantCell("varlen", 128, True, 4000, 3, 16, 16, lengths=(4000, 3000, 1000))]
    times = [{"flash-sm80": 5.4, "flash": 100.0, "cudnn": 3.1, "flex": 5.6},
             {"flash-sm80": 2.96, "flash": 55.0, "cudnn": 1.7, "flex": 3.0},
             {"flash-sm80": 0.4, "flash": 7.0, "flex": 0.447},
             {"flash": 60.0, "flex": 5.9},
             {"flash-sm80": 0.2, "flex": 0.3}]
    refusals = [{}, {}, {},
                {"flash-sm80": "RuntimeError: unsupported: backend flash-sm80 does not implement "
                               "softcap"},
                {"flash": "RuntimeError: out_of_memory: no"}]
    peers = [["cudnn", "flex"], ["cudnn", "flex"], ["flex"], ["flex"], ["flex"]]
    rows = []
    for cell, ms, na, row_peers in zip(cells, times, refusals, peers):
        row = bv.row_record(cell, ours + row_peers, ms, na)
        bv.add_ratios(row, rows, ours)
        rows.append(row)
    return rows, ours


def test_rows_and_ratios():
    rows, ours = synthetic_rows()
    dense, causal, window, softcap, varlen = rows
    assert dense["ratio_time_to_dense"]["flash-sm80"] == 1.0  # its own reference
    assert window["dense_ref"] == causal["label"]
    assert window["ratio_time_to_dense"]["flash-sm80"] == round(0.4 / 2.96, 3)
    w_tflops = window["flops"] / 0.4e-3 / 1e12
    assert math.isclose(window["tflops"]["flash-sm80"], w_tflops, rel_tol=1e-3)
    assert math.isclose(window["ratio_tflops_to_dense"]["flash-sm80"],
                        w_tflops / causal["tflops"]["flash-sm80"], rel_tol=2e-3)
    assert window["speedup_vs_flex"] == {"flash-sm80": round(0.447 / 0.4, 3),
                                         "flash": round(0.447 / 7.0, 3)}
    assert softcap["status"] == {"flash-sm80": "unsupported", "flash": "ok", "flex": "ok"}
    assert "flash-sm80" not in softcap["ms"] and "flash-sm80" not in softcap["speedup_vs_flex"]
    assert softcap["dense_ref"] == causal["label"]
    # varlen: TFLOP/s against the dense row of the longest seqlen, no time ratio
    assert varlen["ratio_time_to_dense"] == {} and varlen["dense_ref"] == causal["label"]
    assert "flash-sm80" in varlen["ratio_tflops_to_dense"]
    assert varlen["status"]["flash"] == "n/a"
    assert varlen["flops"] == bv.varlen_flops((4000, 3000, 1000), 16, 128, True)
    json.dumps(rows)


def test_dense_twin_cells():
    cells = [bv.VariantCell("dense", 128, False, 16384, 1, 16, 16),
             bv.VariantCell("dense", 128, True, 16384, 1, 16, 16),
             bv.VariantCell("dense", 128, True, 4096, 4, 16, 16),
             bv.VariantCell("window", 128, False, 4096, 4, 16, 16, window=(1024, 0)),
             bv.VariantCell("window", 128, False, 4096, 4, 16, 16, window=(256, 256)),
             bv.VariantCell("alibi", 128, False, 16384, 1, 16, 16),
             bv.VariantCell("varlen", 128, True, 4000, 3, 16, 16, lengths=(4000, 3000, 1000)),
             bv.VariantCell("varlen", 64, True, 4000, 3, 32, 32, lengths=(4000, 3000, 1000))]
    dense, causal, causal4k, window, band, alibi, varlen, varlen64 = cells
    assert bv.dense_twin_cell(dense, cells) is None
    # a window (left, 0) is compared with the causal dense call of its own shape
    assert bv.dense_twin_cell(window, cells) == causal4k
    assert bv.dense_twin_cell(band, cells) == bv.VariantCell("dense", 128, False, 4096, 4, 16, 16)
    assert bv.dense_twin_cell(alibi, cells) == dense
    # varlen: the longest dense seqlen of its head dim, heads and causal mode; none: None
    assert bv.dense_twin_cell(varlen, cells) == causal
    assert bv.dense_twin_cell(varlen64, cells) is None


def test_paired_dense_ratios_and_drift():
    """The twin's time is the reference of t/dense and TF/dense; drift compares it with the
    dense row timed earlier: a GPU running 10% slower by the time of this row shows drift 1.1,
    and the paired ratio then differs from the unpaired one by that factor."""
    rows, ours = synthetic_rows()
    dense, causal, window, softcap, varlen = rows
    window_cell = bv.VariantCell("window", 128, False, 16384, 1, 16, 16, window=(1024, 0))
    twin = bv.dense_twin_cell(window_cell, [window_cell])
    bv.add_paired_ratios(window, twin, {"flash-sm80": 2.96 * 1.1}, rows[:2])
    assert window["paired_dense"]["label"] == causal["label"]
    assert window["ratio_time_to_paired_dense"] == {"flash-sm80": round(0.4 / (2.96 * 1.1), 3)}
    assert window["dense_drift"] == {"flash-sm80": 1.1}
    assert math.isclose(window["ratio_tflops_to_paired_dense"]["flash-sm80"],
                        window["ratio_tflops_to_dense"]["flash-sm80"] * 1.1, rel_tol=3e-3)
    # the table shows the paired ratios and the drift under their columns
    line = next(line for line in bv.table_lines(window) if "flash-sm80" in line)
    t_text = f"{0.4 / (2.96 * 1.1):.3f}"
    assert line.index(t_text) + len(t_text) == bv.TABLE_HEADER.index("t/dense") + len("t/dense")
    assert line.index("1.100") + len("1.100") == bv.TABLE_HEADER.index("drift") + len("drift")
    # varlen: only the TFLOP/s ratio, against the twin of the longest seqlen
    varlen_cell = bv.VariantCell("varlen", 128, True, 4000, 3, 16, 16,
                                 lengths=(4000, 3000, 1000))
    causal_cell = bv.VariantCell("dense", 128, True, 16384, 1, 16, 16)
    bv.add_paired_ratios(varlen, bv.dense_twin_cell(varlen_cell, [causal_cell]),
                         {"flash-sm80": 2.96}, rows[:2])
    assert varlen["ratio_time_to_paired_dense"] == {}
    assert math.isclose(varlen["ratio_tflops_to_paired_dense"]["flash-sm80"],
                        varlen["ratio_tflops_to_dense"]["flash-sm80"], rel_tol=2e-3)
    assert varlen["dense_drift"] == {"flash-sm80": 1.0}
    # no twin timed: nothing paired, the table falls back to the earlier dense row
    bv.add_paired_ratios(softcap, None, {}, rows[:2])
    assert softcap["ratio_tflops_to_paired_dense"] == {} and "paired_dense" not in softcap
    assert bv.paired_or_unpaired(softcap, "flash") == (
        softcap["ratio_time_to_dense"]["flash"], softcap["ratio_tflops_to_dense"]["flash"])
    json.dumps(rows)


def test_table_text():
    rows, ours = synthetic_rows()
    lines = [line for r in rows for line in bv.table_lines(r)]
    text = "\n".join(lines)
    assert len(lines) == sum(len(r["backends"]) for r in rows)
    assert "unsupported: backend flash-sm80 does not implement softcap" in text
    assert "RuntimeError: unsupported" not in text
    assert "n/a: RuntimeError: out_of_memory: no" in text
    window_line = next(line for line in lines if line.startswith("window (1024, 0)"))
    assert "flash-sm80" in window_line and "1.12x" in window_line and "0.135" in window_line
    for column in ("TFLOP/s", "t/dense", "TF/dense", "drift", "vs flex"):
        assert column in bv.TABLE_HEADER
    # the numbers sit under their columns
    assert window_line.index("0.135") + len("0.135") == \
        bv.TABLE_HEADER.index("t/dense") + len("t/dense")
    summary = bv.variant_summary(rows, ours)
    s = summary["flash-sm80"]
    assert s["variant_rows"] == 2 and s["rows"] == 4 and s["unsupported"] == [rows[3]["label"]]
    assert math.isclose(s["geomean_speedup_vs_flex_variants"],
                        math.sqrt(0.447 / 0.4 * 0.3 / 0.2), rel_tol=2e-3)
    assert any("unsupported in 1 rows" in line for line in bv.summary_lines(summary))
    json.dumps(summary)


def test_check_text():
    rows, _ = synthetic_rows()
    rows[0]["check"] = {"rows": 256, "floor": 0.0039, "max_abs_err": {"flash-sm80": 0.0041,
                                                                      "flex": 0.0045},
                        "vs_flex": {"flash-sm80": 0.0078}}
    rows[1]["check"] = {"error": "MemoryError: no"}
    lines = bv.check_lines(rows[:2], 256)
    assert "flash-sm80 0.0041 [flex: 0.0078]" in lines[1] and "flex 0.0045" in lines[1]
    assert "check failed: MemoryError: no" in lines[2]


# ---- the variant driver on CPU tensors (torch), and a short GPU run ----

@pytest.mark.torch
def test_variant_driver_on_cpu(monkeypatch, tmp_path, capsys):
    """run_variants end to end on CPU tensors: cpu-flash implements every variant and matches
    the float64 reference; the peers without a CPU path (SDPA cuDNN, Flex not compiled) are n/a
    with a reason; the table, check table and JSON come out."""
    from flashattn import _bench_timing

    monkeypatch.setattr(torch.cuda, "Event", HostClockEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    path = tmp_path / "variants.json"
    args = bench.parse_args(["--variants", "--head-dims", "64", "--seqlens", "96", "--heads", "4",
                             "--kv-heads", "2", "--tokens", "192", "--window", "16,0",
                             "--window", "8,8", "--softcap", "5", "--varlen", "3x200",
                             "--check", "--check-rows", "40", "--repeats", "2", "--warmup", "1",
                             "--json", str(path)])
    meta = {"device": "cpu", "torch": torch.__version__, "cudnn": None, "flashattn": "test"}
    flusher = _bench_timing.L2Flusher(torch.device("cpu"), nbytes=1 << 20)
    from flashattn import _bench_telemetry as bt

    # a fake nvidia-smi, every millisecond: the rows' spans and the table's MHz column
    sampler = bt.Telemetry([sys.executable, "-c", "import time\nwhile True:\n"
                            "    print('1755, 63, 699.8, 0x4', flush=True); time.sleep(0.001)"])
    sampler.start()
    try:
        rc = bench.run_variants(args, ["cpu-flash", "cudnn", "flex"], torch.bfloat16,
                                torch.device("cpu"), None, "", meta, flusher, sampler)
    finally:
        sampler.stop()
    assert rc == 0
    out = capsys.readouterr().out
    assert "MHz" in out and "GPU clock telemetry (" in out and "sw_power_cap" in out
    assert "window (16, 0)" in out and "varlen 3 seqs" in out and "max|O - O_ref|" in out
    data = json.loads(path.read_text())
    rows = data["rows"]
    assert [r["variant"] for r in rows].count("dense") == 2 and len(rows) == 12
    assert any(r["gpu"]["samples"] > 0 for r in rows)
    for r in rows:
        assert r["gpu"]["samples"] > 0 or "no sample" in r["gpu"]["why_not"], r["gpu"]
        assert r["status"]["cpu-flash"] == "ok", (r["label"], r["na"])
        assert r["tflops"]["cpu-flash"] > 0
        assert r["check"]["max_abs_err"]["cpu-flash"] <= 2 * r["check"]["floor"] + 1e-2, r
        assert r["status"]["flex"] == "n/a" and "did not compile" in r["na"]["flex"]
        assert ("cudnn" in r["backends"]) == (r["variant"] == "dense")
        if r["variant"] != "dense":
            assert r["dense_ref"] and "cpu-flash" in r["ratio_tflops_to_dense"]
            # the dense twin ran in the row's round-robin: paired ratios and the drift
            assert r["paired_dense"]["label"] == r["dense_ref"], r["label"]
            assert r["paired_dense"]["ms"]["cpu-flash"] > 0
            assert "cpu-flash" in r["ratio_tflops_to_paired_dense"]
            assert r["dense_drift"]["cpu-flash"] > 0
            assert ("cpu-flash" in r["ratio_time_to_paired_dense"]) == (r["variant"] != "varlen")
    alibi = next(r for r in rows if r["variant"] == "alibi")
    assert alibi["params"]["alibi_slopes"] == bv.alibi_slopes(4)
    sinks = next(r for r in rows if r["variant"] == "sinks")
    assert len(sinks["params"]["sinks"]) == 4
    varlen = next(r for r in rows if r["variant"] == "varlen")
    assert sum(varlen["params"]["lengths"]) == 200 and varlen["check"]["rows"] == min(
        40, max(varlen["params"]["lengths"]))


@pytest.mark.gpu
def test_short_variant_run_on_gpu(tmp_path):
    """The variant table on the GPU, small: every row's Flex runs and matches the float64
    reference (the mask_mods, score_mods and the sinks correction are right on real Flex), each
    of our CUDA backends runs a row or refuses it as unsupported, nothing else."""
    path = tmp_path / "variants.json"
    r = run_bench("--variants", "--seqlens", "1k", "--causal", "yes", "--window", "128,0",
                  "--varlen", "4x2k", "--repeats", "2", "--warmup", "1", "--check",
                  "--check-rows", "128", "--json", str(path), timeout=1500)
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(path.read_text())
    rows = data["rows"]
    assert [row["variant"] for row in rows] == ["dense", "window", "softcap", "alibi", "sinks",
                                                "varlen"]
    ours = [n for n in data["meta"]["backends"] if n not in bench.PEERS]
    for row in rows:
        c = row["check"]
        assert "error" not in c, c
        assert row["status"]["flex"] == "ok", (row["label"], row["na"])
        assert c["max_abs_err"]["flex"] < 8 * c["floor"] + 1e-3, (row["label"], c)
        for name in ours:
            assert row["status"][name] in ("ok", "unsupported"), (row["label"], row["na"])
            if row["status"][name] == "ok":
                assert c["max_abs_err"][name] < 4 * c["floor"] + 1e-3, (row["label"], name, c)
                assert row["speedup_vs_flex"][name] > 0
    assert "vs flex, geometric mean" in r.stdout
    # nvidia-smi is on the GPU machine: the telemetry ran (a row may be too short for a sample)
    assert "query" in data["meta"]["gpu_telemetry"], data["meta"]["gpu_telemetry"]
    assert "GPU clock telemetry" in r.stdout
