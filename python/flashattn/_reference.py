"""float64 attention references with the library's semantics (include/flashattn/params.h), for
tests and `bench --check`.

attention_numpy implements every variant, once: BSHD or packed varlen layout; GQA (query head h
reads kv head h // (heads // kv_heads)); per sequence of seqlen_q queries and seqlen_k keys
(diag = seqlen_k - seqlen_q, bottom-right):
  S    = scale * Q K^T, then softcap * tanh(S / softcap) when softcap > 0;
  bias = -alibi_slope[b, h] * |i + diag - j|;
  mask: query i sees key j iff 0 <= j < seqlen_k and
        i + diag - window_left <= j <= i + diag + window_right (a side at -1 is unbounded;
        causal means window_right = 0, and a window_right > 0 with it is refused);
  sinks: one logit per head that joins every row's softmax denominator and adds no value.
A row that sees no key gives O = 0 and LSE = -inf (LSE = the sink's logit with sinks).
kvcache_numpy is flash_attn_with_kvcache's problem on top of it: the new tokens written into a
copy of the (contiguous or paged) cache, then each sequence's keys gathered and attended.
combine_numpy is combine()'s merge of partial results.
attention_torch is the dense, causal-only problem in torch (the benchmark's check on the GPU).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def attention_numpy(q, k, v, softmax_scale: Optional[float] = None, causal: bool = False, *,
                    window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes=None, sinks=None, cu_seqlens_q=None, cu_seqlens_k=None,
                    seqused_k=None, compute_dtype=np.float64) -> Tuple[np.ndarray, np.ndarray]:
    """(out, lse) from NumPy-convertible arrays, every step in `compute_dtype`: float64 for the
    reference, float32 for the tests' CPU baseline (the naive algorithm as the C++ verifier's
    cpu::naive_forward<float> runs it).

    Dense: q (b, sq, h, d), k, v (b, sk, hk, d) -> out (b, sq, h, d), lse (b, h, sq).
    Varlen (cu_seqlens_q and cu_seqlens_k given): q (total_q, h, d), k, v (total_k, hk, d) ->
    out (total_q, h, d), lse (h, total_q); sequence b is rows [cu_seqlens_q[b], cu_seqlens_q[b + 1])
    of q and the first seqused_k[b] (default: all) of rows [cu_seqlens_k[b], cu_seqlens_k[b + 1])
    of k and v. Rows of q in no sequence are not defined by params.h: NaN here.
    softcap, alibi_slopes ((h) or (b, h)) and sinks ((h)) are taken as the float32 values the
    library reads."""
    ct = np.dtype(compute_dtype).type
    q, k, v = (np.asarray(x, dtype=ct) for x in (q, k, v))
    softcap = ct(np.float32(softcap))
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes, np.float32).astype(ct)
    sinks = None if sinks is None else np.asarray(sinks, np.float32).astype(ct)
    scale = ct(default_scale(q.shape[-1]) if softmax_scale is None else softmax_scale)
    left, right = window_size
    if causal:  # the diagonal is the right edge; params.h refuses a wider one, as the library
        if right > 0:
            raise ValueError(f"window_right = {right} with causal: expected -1 or 0")
        right = 0
    variant = dict(scale=scale, left=left, right=right, softcap=softcap, sinks=sinks)
    if cu_seqlens_q is None and cu_seqlens_k is None:
        return _dense(q, k, v, slopes=slopes, **variant)

    cq, ck = (np.asarray(c, np.int64) for c in (cu_seqlens_q, cu_seqlens_k))
    total_q, h, d = q.shape
    out = np.full((total_q, h, d), np.nan, dtype=ct)
    lse = np.full((h, total_q), np.nan, dtype=ct)
    for b in range(len(cq) - 1):
        used = ck[b + 1] - ck[b] if seqused_k is None else int(seqused_k[b])
        rows = slice(cq[b], cq[b + 1])
        keys = slice(ck[b], ck[b] + used)
        slope_b = None if slopes is None else (slopes[b] if slopes.ndim == 2 else slopes)
        o_b, lse_b = _dense(q[None, rows], k[None, keys], v[None, keys], slopes=slope_b, **variant)
        out[rows], lse[:, rows] = o_b[0], lse_b[0]
    return out, lse


def kvcache_numpy(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None,
                  softmax_scale: Optional[float] = None, causal: bool = False, *,
                  window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                  alibi_slopes=None, sinks=None, compute_dtype=np.float64
                  ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(out, lse, k_cache_after, v_cache_after) of flash_attn_with_kvcache (params.h's KV cache):
    the caches after are copies of k_cache, v_cache (their dtype) with the new tokens k, v
    (b, seqlen_new, hk, d) written at rows cache_seqlens[b] .. + seqlen_new of sequence b; then
    sequence b attends to its first cache_seqlens[b] + seqlen_new keys with attention_numpy, in
    `compute_dtype`. Contiguous caches (b, cache_len, hk, d), or paged (num_pages, page_size,
    hk, d) with block_table (b, max_pages_per_seq): key j of sequence b is row j % page_size of
    page block_table[b, j // page_size]. cache_seqlens: (b) or an int for all. Only the
    block_table entries a sequence uses are read (the others may hold anything)."""
    q = np.asarray(q)
    batch = q.shape[0]
    k_after, v_after = np.array(k_cache, copy=True), np.array(v_cache, copy=True)
    lens = np.broadcast_to(np.asarray(cache_seqlens, dtype=np.int64), (batch,))
    seqlen_new = 0 if k is None else np.asarray(k).shape[1]
    table = None if block_table is None else np.asarray(block_table, dtype=np.int64)

    def rows(b, begin, end):
        """The cache index of keys [begin, end) of sequence b: cache[rows(...)] is (n, hk, d)."""
        j = np.arange(begin, end)
        if table is None:
            return b, j
        page_size = k_after.shape[1]
        return table[b, j // page_size], j % page_size

    for b in range(batch):
        if seqlen_new:
            at = rows(b, lens[b], lens[b] + seqlen_new)
            k_after[at], v_after[at] = np.asarray(k)[b], np.asarray(v)[b]
    slopes = None if alibi_slopes is None else np.asarray(alibi_slopes, np.float32)
    outs, lses = [], []
    for b in range(batch):
        at = rows(b, 0, lens[b] + seqlen_new)
        slope_b = None if slopes is None else (slopes[b] if slopes.ndim == 2 else slopes)
        out_b, lse_b = attention_numpy(q[b:b + 1], k_after[at][None], v_after[at][None],
                                       softmax_scale, causal, window_size=window_size,
                                       softcap=softcap, alibi_slopes=slope_b, sinks=sinks,
                                       compute_dtype=compute_dtype)
        outs.append(out_b)
        lses.append(lse_b)
    ct = np.dtype(compute_dtype)
    d = q.shape[3] if q.ndim == 4 else 0
    out = np.concatenate(outs) if outs else np.zeros((0,) + q.shape[1:3] + (d,), ct)
    lse = np.concatenate(lses) if lses else np.zeros((0, q.shape[2], q.shape[1]), ct)
    return out, lse, k_after, v_after


def combine_numpy(outs, lses) -> Tuple[np.ndarray, np.ndarray]:
    """combine()'s merge in float64 (include/flashattn/combine.h), outs[i] (b, sq, h, d), lses[i]
    (b, h, sq): LSE = m + log(sum_i exp(lse_i - m)) with m = max_i lse_i, O = sum_i
    exp(lse_i - LSE) O_i; a part with lse_i = -inf has weight 0 and its O_i is not read; rows
    where every part is -inf get O = 0, LSE = -inf."""
    lse = np.stack([np.asarray(x, np.float64) for x in lses])  # (n, b, h, sq)
    o = np.stack([np.asarray(x, np.float64) for x in outs])  # (n, b, sq, h, d)
    m = np.max(lse, axis=0, initial=-np.inf)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        total = np.sum(np.exp(lse - m_safe), axis=0)
        merged = np.where(np.isneginf(m), -np.inf, m_safe + np.log(total))
        weight = np.where(np.isneginf(lse), 0.0, np.exp(lse - merged))  # (n, b, h, sq)
    weight = weight.transpose(0, 1, 3, 2)[..., None]  # (n, b, sq, h, 1)
    # A weight-0 part's O is never read (it may be NaN); a NaN weight (an LSE of +inf) stays NaN.
    out = np.sum(weight * np.where(weight == 0, 0.0, o), axis=0)
    return out, merged


def _dense(q, k, v, scale, left, right, softcap, slopes, sinks):
    """The dense problem, q (b, sq, h, d), k, v (b, sk, hk, d), in q's dtype; slopes (h) or
    (b, h), sinks (h) or None."""
    ct = q.dtype.type
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    # (b, h, s, d) views; matmul, not einsum, so that BLAS does the work
    qh = q.transpose(0, 2, 1, 3)
    kh = np.repeat(k, h // hk, axis=2).transpose(0, 2, 1, 3)
    vh = np.repeat(v, h // hk, axis=2).transpose(0, 2, 1, 3)
    s = (qh @ kh.swapaxes(-1, -2)) * scale  # (b, h, sq, sk)
    if softcap > 0:
        s = softcap * np.tanh(s / softcap)
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    diag = sk - sq
    if slopes is not None:
        slope = slopes.reshape((1, h, 1, 1) if slopes.ndim == 1 else (b, h, 1, 1))
        s = s - slope * np.abs(i + diag - j).astype(ct)
    visible = np.ones((sq, sk), dtype=bool)
    if left >= 0:
        visible &= j >= i + diag - left
    if right >= 0:
        visible &= j <= i + diag + right
    s = np.where(visible, s, ct(-np.inf))
    row_max = np.max(s, axis=-1, keepdims=True, initial=ct(-np.inf))
    if sinks is not None:  # the sink is one more logit: finite, so every row has a finite max
        sink = sinks.reshape(1, h, 1, 1)
        row_max = np.maximum(row_max, sink)
    row_max = np.where(np.isfinite(row_max), row_max, ct(0))  # rows without keys
    p = np.exp(s - row_max)
    row_sum = p.sum(axis=-1, keepdims=True, dtype=ct)
    if sinks is not None:
        row_sum = row_sum + np.exp(sink - row_max)
    has_mass = row_sum > 0
    out = ((p / np.where(has_mass, row_sum, ct(1))) @ vh).transpose(0, 2, 1, 3)
    with np.errstate(divide="ignore"):
        lse = np.where(has_mass, row_max + np.log(row_sum), ct(-np.inf))[..., 0]
    return out, lse


def attention_torch(q, k, v, softmax_scale: Optional[float] = None, causal: bool = False,
                    head_chunk: int = 4):
    """float64 (out, lse) of the dense problem (causal or not; no other variant) computed with
    torch on q's device, `head_chunk` query heads at a time (S in float64 is 8 * seqlen_q *
    seqlen_k bytes per head). The same computation as attention_numpy's dense path."""
    import torch

    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    group = h // hk
    scale = default_scale(d) if softmax_scale is None else softmax_scale
    out = torch.empty((b, sq, h, d), dtype=torch.float64, device=q.device)
    lse = torch.empty((b, h, sq), dtype=torch.float64, device=q.device)
    mask = None
    if causal:
        i = torch.arange(sq, device=q.device)[:, None]
        j = torch.arange(sk, device=q.device)[None, :]
        mask = j > i + (sk - sq)
    for h0 in range(0, h, head_chunk):
        heads = torch.arange(h0, min(h, h0 + head_chunk), device=q.device)
        qc = q[:, :, heads].double()
        kc = k[:, :, heads // group].double()
        vc = v[:, :, heads // group].double()
        s = torch.einsum("bqhd,bkhd->bhqk", qc, kc) * scale
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        if sk > 0:
            row_max = s.amax(dim=-1, keepdim=True)
        else:
            row_max = s.new_full(s.shape[:-1] + (1,), float("-inf"))
        row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
        p = torch.exp(s - row_max)
        row_sum = p.sum(dim=-1, keepdim=True)
        has_keys = row_sum > 0
        out[:, :, heads] = torch.einsum(
            "bhqk,bkhd->bqhd", p / torch.where(has_keys, row_sum, torch.ones_like(row_sum)), vc)
        lse[:, heads] = torch.where(has_keys, row_max + torch.log(row_sum),
                                    torch.full_like(row_sum, float("-inf")))[..., 0]
    return out, lse
