"""docs/testing.md's tolerance rule in NumPy: the one mirror of src/verify/compare.{h,cc}, clause
for clause and constant for constant (test_tolerance.py and the C++ ToleranceTableTest hold both
to the shared table tests/verify/tolerance_cases.txt, numbers and verdicts):

  baseline    checked first, with a fixed bound that does not depend on it (c = 1 against the
              float64 reference, 2 against a float32 one):
              max|O_base - O_ref|     <= 1 * ulp_dtype(max|O_ref|)
                                         + c * eps32 * max|O_ref| * (512 + 4 * max|LSE_ref|)
              max|LSE_base - LSE_ref| <= 1e-3 + c * 16 * eps32 * max|LSE_ref|
              and the exact clauses below; a baseline that fails them fails the check
  atol        one dtype ulp at max|O_ref| (the largest spacing over the finite reference),
              floored at 1e-6 * max|O_ref| (1e-5 against a float32 reference), plus the float32
              score noise 2 * eps32 * max|LSE_ref| * max|O_ref| (score_noise_atol)
  max clause  max|O - O_ref|  <= 2 * max|O_base - O_ref| + atol
  mean clause mean|O - O_ref| <= 1.5 * mean|O_base - O_ref| + atol / 4
  LSE clause  max|LSE - LSE_ref| <= 1e-3 + 2 * max|LSE_base - LSE_ref| + 4 * eps32 * max|LSE_ref|
              over rows with finite LSE_ref
  rows without keys (given per (b, s) row, as the C++ verifier takes them from the mask rule;
  by default the rows whose LSE_ref is -inf, its fallback): O exactly 0, LSE exactly -inf where
  LSE_ref is (with sinks LSE_ref is the sink's logit, judged by the LSE clause); LSE = -inf on a
  row with finite LSE_ref fails; nothing non-finite where the reference is finite.

Not mirrored: the C++ "never written" clause tells the 0xFF poison from a computed NaN; the
Python tests poison with NaN, which fails here as non-finite. Guard bytes are C++ only.

The baseline is the naive algorithm in the test dtype: on the CPU the float32 naive computation
below (as the C++ verifier's cpu::naive_forward<float>), on the GPU the "naive" backend, except
for the naive backend itself, which gets the float32 CPU one.
"""
from __future__ import annotations

import numpy as np

from flashattn._reference import attention_numpy

FLOAT32_EPSILON = 2.0 ** -23
ATOL_FLOOR = 1e-6
ATOL_FLOOR_FP32_REF = 1e-5
SCORE_ULPS = 2.0
LSE_ULPS = 4.0
LSE_TOLERANCE = 1e-3
BASELINE_ROUNDING_ULPS = 1.0
BASELINE_SUM_ULPS = 512.0
BASELINE_SCORE_ULPS = 4.0
BASELINE_LSE_ULPS = 16.0

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


def _max_abs_finite(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    finite = x[np.isfinite(x)]
    return float(np.abs(finite).max()) if finite.size else 0.0


def _max_spacing(ref_out: np.ndarray, dtype: str) -> float:
    finite = ref_out[np.isfinite(ref_out)]
    return float(dtype_spacing(finite, dtype).max()) if finite.size else 0.0


def score_noise_atol(ref_out, ref_lse) -> float:
    """atol's float32 score-noise term alone (compare.cc's score_noise_atol)."""
    return SCORE_ULPS * FLOAT32_EPSILON * _max_abs_finite(ref_lse) * _max_abs_finite(ref_out)


def rounding_atol(ref_out, ref_lse, dtype: str, ref_is_fp32: bool = False) -> float:
    ref_out = np.asarray(ref_out, dtype=np.float64)
    max_ref = _max_abs_finite(ref_out)
    if max_ref == 0.0:
        return 0.0
    floor = (ATOL_FLOOR_FP32_REF if ref_is_fp32 else ATOL_FLOOR) * max_ref
    return max(_max_spacing(ref_out, dtype), floor) + score_noise_atol(ref_out, ref_lse)


def lse_bound(ref_lse, baseline_lse_error: float) -> float:
    baseline = 2.0 * baseline_lse_error if np.isfinite(baseline_lse_error) else 0.0
    return LSE_TOLERANCE + baseline + LSE_ULPS * FLOAT32_EPSILON * _max_abs_finite(ref_lse)


def baseline_bound(ref_out, ref_lse, dtype: str, ref_is_fp32: bool = False) -> float:
    """The fixed bound on max|O_base - O_ref| (compare.cc's baseline_bound)."""
    ref_out = np.asarray(ref_out, dtype=np.float64)
    max_ref = _max_abs_finite(ref_out)
    if max_ref == 0.0:
        return 0.0
    sides = 2.0 if ref_is_fp32 else 1.0
    noise = FLOAT32_EPSILON * max_ref * (BASELINE_SUM_ULPS
                                         + BASELINE_SCORE_ULPS * _max_abs_finite(ref_lse))
    return BASELINE_ROUNDING_ULPS * _max_spacing(ref_out, dtype) + sides * noise


def baseline_lse_bound(ref_lse, ref_is_fp32: bool = False) -> float:
    """The fixed bound on max|LSE_base - LSE_ref| (compare.cc's baseline_lse_bound)."""
    sides = 2.0 if ref_is_fp32 else 1.0
    return LSE_TOLERANCE + sides * BASELINE_LSE_ULPS * FLOAT32_EPSILON * _max_abs_finite(ref_lse)


def naive_float32(q, k, v, softmax_scale, causal, dtype: str, **variants):
    """The CPU baseline: S, softmax and PV in float32 from the (already rounded) inputs; O rounded
    to `dtype`, LSE float32. `variants`: attention_numpy's keyword options (window_size, softcap,
    alibi_slopes, sinks, cu_seqlens_q, cu_seqlens_k, seqused_k)."""
    out, lse = attention_numpy(q, k, v, softmax_scale, causal, compute_dtype=np.float32,
                               **variants)
    return round_to(out, dtype), lse.astype(np.float32)


def error_stats(out, lse, ref_out, ref_lse, rows_without_keys=None) -> dict:
    """compare.cc's error_stats: max/mean abs and relative L2 of O over the elements whose
    reference is finite (a non-finite O there is counted, not measured); on rows without keys O
    must be exactly 0 (NaN counts); LSE over rows with finite LSE_ref (-inf there is a mismatch,
    another non-finite value counts as non-finite and makes the LSE error inf), and -inf rows of
    LSE_ref must be -inf. O is (b, s, h, d), LSE (b, h, s), rows_without_keys (b, s) or None (the
    rows whose LSE_ref is -inf, per head). lse None: no LSE compared."""
    out = np.asarray(out, dtype=np.float64)
    ref_out = np.asarray(ref_out, dtype=np.float64)
    ref_lse = np.asarray(ref_lse, dtype=np.float64)
    finite_ref = np.isfinite(ref_out)
    if rows_without_keys is not None:
        masked = np.asarray(rows_without_keys, dtype=bool)[:, :, None, None]
    else:
        masked = np.transpose(np.isneginf(ref_lse), (0, 2, 1))[..., None]
    masked = np.broadcast_to(masked, out.shape)
    ok = finite_ref & np.isfinite(out)
    err = np.where(ok, np.abs(out - np.where(finite_ref, ref_out, 0.0)), 0.0)
    bad_masked = finite_ref & masked & (out != 0)  # NaN != 0 too
    nonfinite = int(np.sum(finite_ref & ~np.isfinite(out)))
    sum_sq, ref_sq = float(np.sum(err ** 2)), float(np.sum(np.where(ok, ref_out, 0.0) ** 2))
    stats = {
        "max_abs": float(err.max()) if ok.any() else 0.0,
        "mean_abs": float(err[ok].mean()) if ok.any() else 0.0,
        "rel_l2": (float(np.sqrt(sum_sq / ref_sq)) if ref_sq > 0
                   else (float("inf") if sum_sq > 0 else 0.0)),
        "masked_nonzero": int(bad_masked.sum()),
        "lse_max_abs": 0.0,
        "lse_inf_mismatch": 0,
        "nonfinite": nonfinite,
        "err": err,
    }
    if lse is not None:
        lse = np.asarray(lse, dtype=np.float64)
        finite_lse = np.isfinite(ref_lse)
        stats["lse_inf_mismatch"] = int(np.sum(np.isneginf(ref_lse) & ~np.isneginf(lse))
                                        + np.sum(finite_lse & np.isneginf(lse)))
        lse_nonfinite = finite_lse & ~np.isfinite(lse) & ~np.isneginf(lse)
        stats["nonfinite"] += int(lse_nonfinite.sum())
        lse_ok = finite_lse & np.isfinite(lse)
        lse_err = np.abs(lse[lse_ok] - ref_lse[lse_ok])
        stats["lse_max_abs"] = (float("inf") if lse_nonfinite.any()
                                else float(lse_err.max()) if lse_err.size else 0.0)
        stats["lse_err"] = np.where(lse_ok, np.abs(lse - np.where(lse_ok, ref_lse, 0.0)), 0.0)
    stats["bad_o"] = (finite_ref & ~np.isfinite(out)) | bad_masked
    return stats


def _first(mask) -> tuple | None:
    hits = np.argwhere(mask)
    return tuple(int(i) for i in hits[0]) if hits.size else None


def judge(out, lse, ref_out, ref_lse, base_out, base_lse, dtype: str, *,
          ref_is_fp32: bool = False, rows_without_keys=None,
          baseline_name: str = "") -> tuple[list[str], dict, dict]:
    """compare.cc's judge: the failure lines (empty: pass), in its order and with its clause
    wording, and the result's and the baseline's error_stats. lse None skips the LSE clauses,
    the baseline's included."""
    ref_out = np.asarray(ref_out, dtype=np.float64)
    ref_lse = np.asarray(ref_lse, dtype=np.float64)
    check_lse = lse is not None
    atol = rounding_atol(ref_out, ref_lse, dtype, ref_is_fp32)
    fixed_o = baseline_bound(ref_out, ref_lse, dtype, ref_is_fp32)
    fixed_lse = baseline_lse_bound(ref_lse, ref_is_fp32)
    base = error_stats(base_out, base_lse if check_lse else None, ref_out, ref_lse,
                       rows_without_keys)
    got = error_stats(out, lse, ref_out, ref_lse, rows_without_keys)
    max_bound = 2.0 * base["max_abs"] + atol
    mean_bound = 1.5 * base["mean_abs"] + atol / 4.0
    lse_limit = lse_bound(ref_lse, base["lse_max_abs"])

    failures = []
    name = f"baseline {baseline_name} " if baseline_name else "baseline "
    if base["max_abs"] > fixed_o:
        failures.append(f"{name}is itself off: max|O_base - O_ref| = {base['max_abs']:.4g} > "
                        f"bound {fixed_o:.4g} (fixed), first at (b, s, h, d) = "
                        f"{_first((base['err'] > fixed_o) | base['bad_o'])}")
    if base["nonfinite"]:
        failures.append(f"{name}is itself off: {base['nonfinite']} non-finite outputs where the "
                        "reference is finite")
    if base["masked_nonzero"]:
        failures.append(f"{name}is itself off: {base['masked_nonzero']} outputs != 0 on rows "
                        "without keys")
    if check_lse and base["lse_max_abs"] > fixed_lse:
        failures.append(f"{name}is itself off: max|LSE_base - LSE_ref| = "
                        f"{base['lse_max_abs']:.4g} > bound {fixed_lse:.4g} (fixed)")
    if check_lse and base["lse_inf_mismatch"]:
        failures.append(f"{name}is itself off: {base['lse_inf_mismatch']} LSE rows where exactly "
                        "one of LSE_base, LSE_ref is -inf")

    if got["max_abs"] > max_bound:
        failures.append(f"max|O - O_ref| = {got['max_abs']:.4g} > bound {max_bound:.4g} "
                        f"(2 * baseline {base['max_abs']:.4g} + atol {atol:.4g}), first at "
                        f"(b, s, h, d) = {_first((got['err'] > max_bound) | got['bad_o'])}")
    if got["mean_abs"] > mean_bound:
        failures.append(f"mean|O - O_ref| = {got['mean_abs']:.4g} > bound {mean_bound:.4g} "
                        f"(1.5 * baseline {base['mean_abs']:.4g} + atol/4 {atol / 4:.4g})")
    if got["nonfinite"]:
        failures.append(f"{got['nonfinite']} non-finite outputs where the reference is finite")
    if got["masked_nonzero"]:
        failures.append(f"{got['masked_nonzero']} outputs != 0 on rows without keys (expected "
                        "O = 0 exactly)")
    if check_lse and got["lse_max_abs"] > lse_limit:
        failures.append(f"max|LSE - LSE_ref| = {got['lse_max_abs']:.4g} > bound {lse_limit:.4g}"
                        f" first at (b, h, s) = {_first(got['lse_err'] > lse_limit)}")
    if check_lse and got["lse_inf_mismatch"]:
        failures.append(f"{got['lse_inf_mismatch']} LSE rows where exactly one of LSE, LSE_ref "
                        "is -inf")
    return failures, got, base


def check_attention(out, lse, ref_out, ref_lse, base_out, base_lse, dtype: str,
                    context: str = "", *, ref_is_fp32: bool = False, rows_without_keys=None,
                    baseline_name: str = "") -> None:
    """Asserts the rule (judge above); the message carries the errors, the bounds and `context`
    (shape, seed). lse None skips the LSE clauses, the baseline's included."""
    failures, got, base = judge(out, lse, ref_out, ref_lse, base_out, base_lse, dtype,
                                ref_is_fp32=ref_is_fp32, rows_without_keys=rows_without_keys,
                                baseline_name=baseline_name)
    assert not failures, (f"{context}: " + "; ".join(failures)
                          + f" | rel_l2 {got['rel_l2']:.3g} (baseline {base['rel_l2']:.3g})")
