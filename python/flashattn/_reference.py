"""float64 attention references with the library's semantics, for tests and `bench --check`.

Layout BSHD; GQA (query head h reads kv head h // (heads // kv_heads)); causal aligned
bottom-right (query row i sees key j iff j <= i + seqlen_k - seqlen_q); a row that sees no key
gives O = 0 and LSE = -inf. The NumPy and torch versions are the same computation, side by side so
they stay the same.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def attention_numpy(q, k, v, softmax_scale: Optional[float] = None, causal: bool = False,
                    compute_dtype=np.float64) -> Tuple[np.ndarray, np.ndarray]:
    """(out (b, sq, h, d), lse (b, h, sq)) from NumPy-convertible BSHD arrays, every step in
    `compute_dtype`: float64 for the reference, float32 for the tests' CPU baseline (the naive
    algorithm as the C++ verifier's cpu::naive_forward<float> runs it)."""
    ct = np.dtype(compute_dtype).type
    q, k, v = (np.asarray(x, dtype=ct) for x in (q, k, v))
    b, sq, h, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    scale = ct(default_scale(d) if softmax_scale is None else softmax_scale)
    # (b, h, s, d) views; matmul, not einsum, so that BLAS does the work
    qh = q.transpose(0, 2, 1, 3)
    kh = np.repeat(k, h // hk, axis=2).transpose(0, 2, 1, 3)
    vh = np.repeat(v, h // hk, axis=2).transpose(0, 2, 1, 3)
    s = (qh @ kh.swapaxes(-1, -2)) * scale
    if causal:
        i = np.arange(sq)[:, None]
        j = np.arange(sk)[None, :]
        s = np.where(j > i + (sk - sq), ct(-np.inf), s)
    row_max = np.max(s, axis=-1, keepdims=True, initial=ct(-np.inf))
    row_max = np.where(np.isfinite(row_max), row_max, ct(0))  # rows without keys
    p = np.exp(s - row_max)
    row_sum = p.sum(axis=-1, keepdims=True, dtype=ct)
    has_keys = row_sum > 0
    out = ((p / np.where(has_keys, row_sum, ct(1))) @ vh).transpose(0, 2, 1, 3)
    with np.errstate(divide="ignore"):
        lse = np.where(has_keys, row_max + np.log(row_sum), ct(-np.inf))[..., 0]
    return out, lse


def attention_torch(q, k, v, softmax_scale: Optional[float] = None, causal: bool = False,
                    head_chunk: int = 4):
    """float64 (out, lse) computed with torch on q's device, `head_chunk` query heads at a time
    (S in float64 is 8 * seqlen_q * seqlen_k bytes per head)."""
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
