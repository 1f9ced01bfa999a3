"""Writes tests/verify/tolerance_cases.txt, the tolerance rule's cases shared by the C++ test
(verify_test.cc, ToleranceTableTest) and the Python one (test_tolerance.py). The numbers come from
tolerance.py; each judge case's verdict is written here by intent and asserted against
tolerance.py before it is written. Run it with the project's Python after changing the rule on
both sides (then the C++ test says whether compare.cc agrees):
    python tests/python/make_tolerance_cases.py"""
import pathlib
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import tolerance as tol  # noqa: E402

def f32(x): return np.asarray(x, dtype=np.float32).astype(np.float64)
def fmt(v):
    v = float(v)
    if np.isnan(v): return "nan"
    if np.isinf(v): return "inf" if v > 0 else "-inf"
    return repr(v)
def line(key, arr): return key + " " + " ".join(fmt(x) for x in np.ravel(arr))

out = []
out.append(
    """# The tolerance rule's shared cases. tests/verify/verify_test.cc (ToleranceTableTest) runs them
# through the C++ rule (verifier::rounding_atol, score_noise_atol, lse_bound, baseline_bound,
# baseline_lse_bound, judge in src/verify/compare.cc) and tests/python/test_tolerance.py through
# its NumPy mirror (tests/python/tolerance.py): both must reproduce every expected number (to
# 1e-14 relative) and every verdict, so the two copies of the rule cannot drift apart. Change a
# constant or a clause in one and this table, and the other's test fails.
#
# Format: one case per block, "bounds NAME" or "judge NAME" ... "end"; "#" starts a comment.
# Numbers are decimal (inf, -inf, nan allowed), arrays flat and row-major.
#
# bounds: ref_out, ref_lse (the reference, float64), dtype (bf16 / fp16 / fp32), ref_is_fp32
#   (0 / 1), baseline_lse_error; expect_score_noise, expect_atol, expect_lse_bound,
#   expect_baseline_bound, expect_baseline_lse_bound. tests/python/make_tolerance_cases.py wrote
#   this file, the numbers from tolerance.py; the first case is also worked by hand in
#   CompareAtolTest.ConstantsAndWorkedExamples and test_worked_examples_match_the_cpp_ones.
# judge: dims B S H D (O is (B, S, H, D), LSE (B, H, S)); rows_without_keys (B * S flags, or
#   "-": the rows whose LSE_ref is -inf); dtype; ref_is_fp32; check_lse; ref_out, ref_lse
#   (float64); out, lse, base_out, base_lse (the result and the baseline, float32 as the
#   verifier reads them back); expect: the failed clauses in the order judge() reports them, or
#   "pass". Clause names (from the failure lines' wording): max, mean, nonfinite, masked, lse,
#   lse-inf; baseline-max, baseline-nonfinite, baseline-masked, baseline-lse, baseline-lse-inf
#   for the baseline's own fixed bound.
""")

def bounds(name, ref_out, ref_lse, dtype, fp32, base_lse_err, note=""):
    ro, rl = np.array(ref_out, float), np.array(ref_lse, float)
    out.append(f"bounds {name}" + (f"  # {note}" if note else ""))
    out.append(line("ref_out", ro)); out.append(line("ref_lse", rl))
    out.append(f"dtype {dtype}"); out.append(f"ref_is_fp32 {int(fp32)}")
    out.append(f"baseline_lse_error {fmt(base_lse_err)}")
    out.append(f"expect_score_noise {fmt(tol.score_noise_atol(ro, rl))}")
    out.append(f"expect_atol {fmt(tol.rounding_atol(ro, rl, dtype, fp32))}")
    out.append(f"expect_lse_bound {fmt(tol.lse_bound(rl, base_lse_err))}")
    out.append(f"expect_baseline_bound {fmt(tol.baseline_bound(ro, rl, dtype, fp32))}")
    out.append(f"expect_baseline_lse_bound {fmt(tol.baseline_lse_bound(rl, fp32))}")
    out.append("end\n")

W_OUT = [2.5, -0.75, 0.0, 1.0]; W_LSE = [12.0, -3.0, -np.inf]
for dt in ("bf16", "fp16", "fp32"):
    bounds(f"worked_{dt}", W_OUT, W_LSE, dt, False, 2e-5, "max|O_ref| 2.5, max|LSE_ref| 12")
    bounds(f"worked_{dt}_fp32_reference", W_OUT, W_LSE, dt, True, 2e-5)
bounds("no_output", [0.0, 0.0, 0.0], [-np.inf, -np.inf], "bf16", False, 0.0,
       "every row without keys: no atol, no baseline bound")
bounds("fp16_near_its_range", [6.0e4, -3.1e4, 17.0], [6.2e4, 5.0e4], "fp16", False, 3e-3,
       "|LSE| 6e4 (very-negative inputs), fp16 step 32 at 6e4")
bounds("bf16_large_magnitude", [1.3e5, -7.5e4, 0.25], [9.5, 3.25], "bf16", False, 1e-6)
bounds("fp32_floor", [0.8125, -0.3, 1e-3], [4.0, 2.0], "fp32", False, 1e-7,
       "fp32: the 1e-6 floor is above one step")
bounds("fp32_floor_fp32_reference", [0.8125, -0.3, 1e-3], [4.0, 2.0], "fp32", True, 1e-7)
bounds("tiny_outputs", [3e-8, -1e-9, 0.0], [0.5, -0.5], "bf16", False, 0.0,
       "the step at 3e-8 in bf16")
bounds("subnormal_fp16", [5e-8, 1e-8], [0.5], "fp16", False, 0.0, "fp16 subnormal spacing 2^-24")
bounds("huge_scores", [1.75, -0.5], [1.5e10, 2.0e9], "bf16", False, 850.0,
       "|LSE| 1.5e10: the score-noise term exceeds max|O_ref|")
bounds("nonfinite_reference_skipped", [np.nan, np.inf, 0.5], [np.inf, np.nan, 3.0], "fp16", True,
       np.inf, "non-finite reference values and an infinite baseline LSE error are skipped")

# ---- judge cases ----
B, S, H, D = 1, 3, 2, 2
rng = np.random.default_rng(20261201)
ref_out = 0.5 + rng.standard_normal((B, S, H, D))
ref_out[:, 0] = 0.0                              # row s = 0 has no key
ref_lse = 2.0 + rng.standard_normal((B, H, S))
ref_lse[:, :, 0] = -np.inf
rows = np.zeros((B, S), bool); rows[:, 0] = True
good = f32(tol.round_to(ref_out, "bf16"))
signs = np.array([1, -1, 1, -1, -1, 1, 1, -1, 1, 1, -1, -1]).reshape(ref_out.shape)
noise = np.where(ref_out == 0, 0.0, 0.004 * signs)
base = f32(tol.round_to(ref_out + noise, "bf16"))
lse = f32(np.where(np.isfinite(ref_lse), ref_lse + 1e-5, ref_lse))

def names(lines):
    res = []
    for f in lines:
        pre = "baseline-" if f.startswith("baseline") else ""
        if "max|O" in f: k = "max"
        elif "mean|O" in f: k = "mean"
        elif "non-finite" in f: k = "nonfinite"
        elif "!= 0 on rows without keys" in f: k = "masked"
        elif "max|LSE" in f: k = "lse"
        elif "is -inf" in f: k = "lse-inf"
        else: raise ValueError(f)
        res.append(pre + k)
    return res

def judge(name, expect, out_=None, lse_=None, base_out=None, base_lse=None, dtype="bf16",
          rows_=rows, check_lse=True, ref_out_=None, ref_lse_=None, fp32=False, note=""):
    o = good if out_ is None else f32(out_)
    l = lse if lse_ is None else f32(lse_)
    bo = base if base_out is None else f32(base_out)
    bl = lse if base_lse is None else f32(base_lse)
    ro = ref_out if ref_out_ is None else ref_out_
    rl = ref_lse if ref_lse_ is None else ref_lse_
    fails, _, _ = tol.judge(o, l if check_lse else None, ro, rl, bo, bl, dtype,
                            ref_is_fp32=fp32, rows_without_keys=rows_)
    got = names(fails)
    assert got == expect, (name, got, expect, fails)
    out.append(f"judge {name}" + (f"  # {note}" if note else ""))
    out.append(f"dims {B} {S} {H} {D}")
    out.append("rows_without_keys " + ("-" if rows_ is None
                                       else " ".join(str(int(x)) for x in np.ravel(rows_))))
    out.append(f"dtype {dtype}")
    out.append(f"ref_is_fp32 {int(fp32)}")
    out.append(f"check_lse {int(check_lse)}")
    out.append(line("ref_out", ro)); out.append(line("ref_lse", rl))
    out.append(line("out", o)); out.append(line("lse", l))
    out.append(line("base_out", bo)); out.append(line("base_lse", bl))
    out.append("expect " + (" ".join(expect) if expect else "pass"))
    out.append("end\n")

judge("rounded_result_passes", [])
judge("baseline_3pct_off", ["baseline-max"], base_out=base * 1.03,
      note="a correct result against a baseline 3% off")
judge("result_and_baseline_3pct_off", ["baseline-max"], out_=base * 1.03, base_out=base * 1.03,
      note="off alike: only the baseline's fixed bound catches it")
bad = good.copy(); bad[0, 2, 1, 0] += 0.04
judge("one_element_off", ["max"], out_=bad)
spread = np.where(ref_out == 0, 0.0, good + 0.0065 * np.sign(good - ref_out + 1e-30))
judge("widespread_error", ["mean"], out_=f32(spread), base_out=f32(ref_out),
      note="every element a little off: under the max bound, over the mean's")
nan = good.copy(); nan[0, 1, 0, 1] = np.nan
judge("nan_output", ["nonfinite"], out_=nan)
masked = good.copy(); masked[0, 0, 1, 0] = 1e-6
judge("nonzero_on_row_without_keys", ["masked"], out_=masked)
lse_off = lse.copy(); lse_off[0, 1, 2] += 2e-3
judge("lse_off", ["lse"], lse_=lse_off)
judge("lse_off_not_checked", [], lse_=lse_off, check_lse=False)
inf = lse.copy(); inf[0, 0, 1] = -np.inf
judge("minus_inf_lse_on_row_with_keys", ["lse-inf"], lse_=inf)
fin = lse.copy(); fin[0, 1, 0] = 1.0
judge("finite_lse_on_row_without_keys", ["lse-inf"], lse_=fin)
plus = lse.copy(); plus[0, 0, 2] = np.inf
judge("plus_inf_lse", ["nonfinite", "lse"], lse_=plus)
judge("baseline_lse_off", ["baseline-lse"], base_lse=lse_off)
bnan = base.copy(); bnan[0, 2, 0, 0] = np.nan
judge("baseline_nan", ["baseline-nonfinite"], base_out=bnan)
bmask = base.copy(); bmask[0, 0, 0, 1] = 1e-6
judge("baseline_nonzero_on_row_without_keys", ["baseline-masked"], base_out=bmask)
judge("baseline_minus_inf_lse", ["baseline-lse-inf"], base_lse=inf)
# sinks: rows without keys have a finite LSE_ref (the sink's logit); only the given rows find them
sink_ref = np.where(np.isfinite(ref_lse), ref_lse, 1.5)
sink_lse = f32(np.where(np.isfinite(lse), lse, 1.5))
judge("sink_row_nonzero_found_by_the_mask", ["masked"], out_=masked, lse_=sink_lse,
      base_lse=sink_lse, ref_lse_=sink_ref)
judge("sink_row_nonzero_missed_without_the_mask", [], out_=masked, lse_=sink_lse,
      base_lse=sink_lse, ref_lse_=sink_ref, rows_=None,
      note="the fallback (LSE_ref = -inf) cannot see sink rows: why the mask gives them")
# fp32 against a float32 reference: the floor and the baseline bound's doubled noise
ro32 = f32(ref_out)
g32 = f32(ref_out * (1 + 4e-7))
b32 = f32(ref_out * (1 - 4e-7))
judge("fp32_against_fp32_reference", [], out_=g32, base_out=b32, dtype="fp32", ref_out_=ro32,
      fp32=True)
judge("fp32_baseline_3e-4_off", ["baseline-max"], out_=g32, base_out=f32(ref_out * 1.0003),
      dtype="fp32", ref_out_=ro32, fp32=True)
judge("everything_wrong", ["baseline-max", "baseline-lse", "nonfinite", "masked", "lse-inf"],
      out_=np.where(np.isnan(nan), np.nan, masked + (bad - good)), lse_=inf, base_out=base * 1.05,
      base_lse=lse_off, note="the result's 0.04 error passes the max clause only because the "
      "broken baseline widens it")
# Borderline cases: each bound's factors and terms decide the verdict (2% either side).
atol_ = tol.rounding_atol(ref_out, ref_lse, "bf16")
bstats = tol.error_stats(base, lse, ref_out, ref_lse, rows)
sgn = np.sign(ref_out[0, 2, 1, 0])
for f, expect in ((1.02, ["max"]), (0.98, [])):
    o = good.copy()
    o[0, 2, 1, 0] = ref_out[0, 2, 1, 0] + sgn * f * (2.0 * bstats["max_abs"] + atol_)
    judge(f"max_bound_times_{f}", expect, out_=o, note="2 * baseline + atol, 2% either side")
for f, expect in ((1.02, ["mean"]), (0.98, [])):
    target = f * (1.5 * bstats["mean_abs"] + atol_ / 4.0)
    o = np.where(ref_out == 0, 0.0, ref_out + np.sign(ref_out) * target * 12 / 8)
    judge(f"mean_bound_times_{f}", expect, out_=o, note="1.5 * baseline + atol / 4, 2% either side")
bl = lse.copy(); bl[0, 0, 2] = ref_lse[0, 0, 2] + 9e-4
for f, expect in ((1.02, ["lse"]), (0.98, [])):
    base_lse_error = tol.error_stats(base, f32(bl), ref_out, ref_lse, rows)["lse_max_abs"]
    lb = tol.lse_bound(ref_lse, base_lse_error)
    l = lse.copy(); l[0, 1, 1] = ref_lse[0, 1, 1] - f * lb
    judge(f"lse_bound_times_{f}", expect, lse_=l, base_lse=bl,
          note="1e-3 + 2 * baseline + 4 eps32 |LSE|, 2% either side")
bb = tol.baseline_bound(ref_out, ref_lse, "bf16")
for f, expect in ((1.02, ["baseline-max"]), (0.98, [])):
    b_ = base.copy(); b_[0, 1, 0, 1] = ref_out[0, 1, 0, 1] + f * bb
    judge(f"baseline_bound_times_{f}", expect, base_out=b_, note="the fixed bound, 2% either side")
blb = tol.baseline_lse_bound(ref_lse)
for f, expect in ((1.02, ["baseline-lse"]), (0.98, [])):
    b_ = lse.copy(); b_[0, 1, 2] = ref_lse[0, 1, 2] + f * blb
    judge(f"baseline_lse_bound_times_{f}", expect, base_lse=b_,
          note="the fixed LSE bound, 2% either side")
bf = tol.baseline_bound(ro32, ref_lse, "fp32", True)
for f, expect in ((1.02, ["baseline-max"]), (0.98, [])):
    b_ = b32.copy(); b_[0, 2, 1, 1] = ro32[0, 2, 1, 1] + f * bf
    judge(f"fp32_reference_baseline_bound_times_{f}", expect, out_=g32, base_out=b_, dtype="fp32",
          ref_out_=ro32, fp32=True, note="doubled float32 noise against a float32 reference")

(HERE.parent / "verify" / "tolerance_cases.txt").write_text("\n".join(out))
