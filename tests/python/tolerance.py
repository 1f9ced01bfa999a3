"""docs/testing.md's tolerance rule in NumPy, mirroring src/verify/compare.{h,cc}:

  atol        one dtype ulp at max|O_ref| (the largest spacing over the finite reference),
              floored at 1e-6 * max|O_ref|, plus the float32 score noise
              2 * eps32 * max|LSE_ref| * max|O_ref|
  max clause  max|O - O_ref|  <= 2 * max|O_base - O_ref| + atol
  mean clause mean|O - O_ref| <= 1.5 * mean|O_base - O_ref| + atol / 4
  LSE clause  max|LSE - LSE_ref| <= 1e-3 + 2 * max|LSE_base - LSE_ref| + 4 * eps32 * max|LSE_ref|
  rows without keys (LSE_ref = -inf): LSE exactly -inf and O exactly 0; nothing non-finite where
  the reference is finite.

The baseline is the naive algorithm in the test dtype: on the CPU the float32 naive computation
below (as the C++ verifier's cpu::naive_forward<float>), on the GPU the "naive" backend.
"""
from __future__ import annotations

import numpy as np

from flashattn._reference import attention_numpy

FLOAT32_EPSILON = 2.0 ** -23
ATOL_FLOOR = 1e-6
SCORE_ULPS = 2.0
LSE_ULPS = 4.0
LSE_TOLERANCE = 1e-3

# Explicit mantissa bits and the exponent of the smallest (subnormal) spacing.
_SPACING = {"bf16": (7, -133), "fp16": (10, -24), "fp32": (23, -149)}


def dtype_spacing(x: np.ndarray, dtype: str) -> np.ndarray:
    """The distance between neighbouring `dtype` values around |x| (subnormal spacing at 0)."""
    mantissa_bits, min_exponent = _SPACING[dtype]
    x = np.abs(np.asarray(x, dtype=np.float64))
    _, e = np.frexp(np.where(np.isfinite(x), x, 0.0))
    exponent = np.where((x == 0) | ~np.isfinite(x), min_exponent,
                        np.maximum(e - 1 - mantissa_bits, min_exponent))
    return np.ldexp(1.0, exponent)


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """x rounded to `dtype` (nearest even), returned as float32."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    if dtype == "fp32":
        return x
    if dtype == "fp16":
        return x.astype(np.float16).astype(np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def _max_abs_finite(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    finite = x[np.isfinite(x)]
    return float(np.abs(finite).max()) if finite.size else 0.0


def rounding_atol(ref_out: np.ndarray, ref_lse: np.ndarray, dtype: str) -> float:
    max_ref = _max_abs_finite(ref_out)
    if max_ref == 0.0:
        return 0.0
    finite = ref_out[np.isfinite(ref_out)]
    max_spacing = float(dtype_spacing(finite, dtype).max())
    score_noise = SCORE_ULPS * FLOAT32_EPSILON * _max_abs_finite(ref_lse) * max_ref
    return max(max_spacing, ATOL_FLOOR * max_ref) + score_noise


def naive_float32(q, k, v, softmax_scale, causal, dtype: str, **variants):
    """The CPU baseline: S, softmax and PV in float32 from the (already rounded) inputs; O rounded
    to `dtype`, LSE float32. `variants`: attention_numpy's keyword options (window_size, softcap,
    alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, seqused_k)."""
    out, lse = attention_numpy(q, k, v, softmax_scale, causal, compute_dtype=np.float32,
                               **variants)
    return round_to(out, dtype), lse.astype(np.float32)


def error_stats(out, lse, ref_out, ref_lse) -> dict:
    """max/mean abs and relative L2 of O over finite reference elements, the LSE error over rows
    with finite reference LSE, and the counts of the exact clauses."""
    out = np.asarray(out, dtype=np.float64)
    lse = np.asarray(lse, dtype=np.float64)
    finite_ref = np.isfinite(ref_out)
    nonfinite = finite_ref & ~np.isfinite(out)
    ok = finite_ref & np.isfinite(out)
    err = np.where(ok, np.abs(out - np.where(finite_ref, ref_out, 0.0)), 0.0)
    masked_rows = np.isneginf(ref_lse)  # (b, h, sq)
    finite_lse = np.isfinite(ref_lse)
    lse_ok = finite_lse & np.isfinite(lse)
    lse_err = np.abs(lse[lse_ok] - ref_lse[lse_ok])
    ref_sq = float(np.sum(ref_out[ok] ** 2))
    worst = None
    if nonfinite.any():
        worst = tuple(int(i) for i in np.argwhere(nonfinite)[0])
    elif ok.any():
        worst = tuple(int(i) for i in np.unravel_index(np.argmax(err), err.shape))
    return {
        "max_abs": float(err.max()) if ok.any() else 0.0,
        "mean_abs": float(err[ok].mean()) if ok.any() else 0.0,
        "rel_l2": float(np.sqrt(np.sum(err ** 2) / ref_sq)) if ref_sq > 0 else 0.0,
        "nonfinite": int(nonfinite.sum()) + int(np.sum(finite_lse & ~np.isfinite(lse))),
        # O (b, s, h, d) against the rows (b, h, s) that see no key
        "masked_nonzero": int(np.sum(np.transpose(masked_rows, (0, 2, 1))[..., None] & (out != 0))),
        "lse_max_abs": float(lse_err.max()) if lse_err.size else 0.0,
        "lse_inf_mismatch": int(np.sum(masked_rows != np.isneginf(lse))),
        "worst": worst,
    }


def check_attention(out, lse, ref_out, ref_lse, base_out, base_lse, dtype: str,
                    context: str = "") -> None:
    """Asserts the rule; the message carries the errors, the bounds and `context` (shape, seed)."""
    ref_out = np.asarray(ref_out, dtype=np.float64)
    ref_lse = np.asarray(ref_lse, dtype=np.float64)
    atol = rounding_atol(ref_out, ref_lse, dtype)
    base = error_stats(base_out, base_lse, ref_out, ref_lse)
    got = error_stats(out, lse, ref_out, ref_lse)
    max_bound = 2.0 * base["max_abs"] + atol
    mean_bound = 1.5 * base["mean_abs"] + atol / 4.0
    lse_bound = (LSE_TOLERANCE + 2.0 * base["lse_max_abs"]
                 + LSE_ULPS * FLOAT32_EPSILON * _max_abs_finite(ref_lse))
    failures = []
    if got["max_abs"] > max_bound:
        failures.append(f"max|O - O_ref| = {got['max_abs']:.4g} > {max_bound:.4g} (2 * baseline "
                        f"{base['max_abs']:.4g} + atol {atol:.4g}), worst at (b, s, h, d) = "
                        f"{got['worst']}")
    if got["mean_abs"] > mean_bound:
        failures.append(f"mean|O - O_ref| = {got['mean_abs']:.4g} > {mean_bound:.4g}")
    if got["nonfinite"]:
        failures.append(f"{got['nonfinite']} non-finite values where the reference is finite")
    if got["masked_nonzero"]:
        failures.append(f"{got['masked_nonzero']} outputs != 0 on rows without keys")
    if got["lse_max_abs"] > lse_bound:
        failures.append(f"max|LSE - LSE_ref| = {got['lse_max_abs']:.4g} > {lse_bound:.4g}")
    if got["lse_inf_mismatch"]:
        failures.append(f"{got['lse_inf_mismatch']} LSE rows where exactly one of LSE, LSE_ref "
                        "is -inf")
    assert not failures, (f"{context}: " + "; ".join(failures)
                          + f" | rel_l2 {got['rel_l2']:.3g} (baseline {base['rel_l2']:.3g})")
