"""tolerance.py, the NumPy mirror of src/verify/compare.{h,cc}: its constants and worked examples
are the numbers tests/verify/verify_test.cc (CompareAtolTest.ConstantsAndWorkedExamples) asserts
for the C++ rule, computed by hand; it reproduces every number and verdict of the shared table
tests/verify/tolerance_cases.txt, which the C++ rule reproduces too (ToleranceTableTest); and
check_attention fails where the verifier's judge does (a baseline that is itself off, a row
without keys that is not 0)."""
import pathlib

import numpy as np
import pytest

import tolerance as tol

EPS = 2.0 ** -23


def test_constants_match_compare_h():
    assert tol.FLOAT32_EPSILON == 1.1920928955078125e-07
    assert tol.ATOL_FLOOR == 1e-6 and tol.ATOL_FLOOR_FP32_REF == 1e-5
    assert tol.SCORE_ULPS == 2.0 and tol.LSE_ULPS == 4.0 and tol.LSE_TOLERANCE == 1e-3
    assert tol.BASELINE_ROUNDING_ULPS == 1.0 and tol.BASELINE_SUM_ULPS == 512.0
    assert tol.BASELINE_SCORE_ULPS == 4.0 and tol.BASELINE_LSE_ULPS == 16.0


# max|O_ref| = 2.5 (bf16 step 2^-6, fp16 2^-9, fp32 2^-22), max|LSE_ref| = 12 (-inf skipped).
REF_OUT = np.array([2.5, -0.75, 0.0, 1.0])
REF_LSE = np.array([12.0, -3.0, -np.inf])


def test_worked_examples_match_the_cpp_ones():
    # score noise = 2 * eps * 12 * 2.5 = 60 eps
    assert tol.score_noise_atol(REF_OUT, REF_LSE) == pytest.approx(7.152557373046875e-06, rel=1e-15)
    assert tol.rounding_atol(REF_OUT, REF_LSE, "bf16") == pytest.approx(0.015632152557373047,
                                                                       rel=1e-15)
    assert tol.rounding_atol(REF_OUT, REF_LSE, "fp16") == pytest.approx(0.001960277557373047,
                                                                       rel=1e-15)
    # fp32: the floor 1e-6 * 2.5 (the step 2^-22 is below it); 1e-5 * 2.5 against float32
    assert tol.rounding_atol(REF_OUT, REF_LSE, "fp32") == pytest.approx(2.5e-6 + 60 * EPS,
                                                                       rel=1e-15)
    assert tol.rounding_atol(REF_OUT, REF_LSE, "fp32", ref_is_fp32=True) == pytest.approx(
        2.5e-5 + 60 * EPS, rel=1e-15)
    # LSE bound = 1e-3 + 2 * 2e-5 + 4 * eps * 12
    assert tol.lse_bound(REF_LSE, 2e-5) == pytest.approx(0.0010457220458984376, rel=1e-15)
    # baseline bound = 1 step + eps * 2.5 * (512 + 4 * 12) = step + 1400 eps
    assert tol.baseline_bound(REF_OUT, REF_LSE, "bf16") == pytest.approx(0.015791893005371094,
                                                                        rel=1e-15)
    assert tol.baseline_bound(REF_OUT, REF_LSE, "fp16") == pytest.approx(
        0.001953125 + 1400 * EPS, rel=1e-15)
    assert tol.baseline_bound(REF_OUT, REF_LSE, "fp32") == pytest.approx(1.671314239501953e-04,
                                                                        rel=1e-15)
    # baseline LSE bound = 1e-3 + 16 * eps * 12
    assert tol.baseline_lse_bound(REF_LSE) == pytest.approx(0.00102288818359375, rel=1e-15)
    # against a float32 reference the float32 terms double, the rounding step does not
    assert tol.baseline_bound(REF_OUT, REF_LSE, "bf16", ref_is_fp32=True) == pytest.approx(
        0.015625 + 2800 * EPS, rel=1e-15)
    assert tol.baseline_lse_bound(REF_LSE, ref_is_fp32=True) == pytest.approx(1e-3 + 384 * EPS,
                                                                             rel=1e-15)
    # no output: no atol, no baseline bound
    assert tol.rounding_atol(np.zeros(3), REF_LSE, "bf16") == 0.0
    assert tol.baseline_bound(np.zeros(3), REF_LSE, "bf16") == 0.0


def test_dtype_spacing():
    assert tol.dtype_spacing(1.0, "bf16") == 1 / 128
    assert tol.dtype_spacing(1.5, "fp16") == 1 / 1024
    assert tol.dtype_spacing(-0.75, "fp16") == 1 / 2048
    assert tol.dtype_spacing(1.0, "fp32") == EPS
    assert tol.dtype_spacing(6e4, "fp16") == 32.0
    assert tol.dtype_spacing(1e-7, "fp16") == 2.0 ** -24


def small_problem(seed=7, sq=5, rows_without_keys=2):
    """(b=2, s=5, h=3, d=8) outputs; the first rows see no key (O_ref = 0, LSE_ref = -inf)."""
    rng = np.random.default_rng(seed)
    ref_out = 0.5 + 0.3 * rng.standard_normal((2, sq, 3, 8))
    ref_out[:, :rows_without_keys] = 0.0
    ref_lse = 2.0 + rng.standard_normal((2, 3, sq))
    ref_lse[:, :, :rows_without_keys] = -np.inf
    good = tol.round_to(ref_out, "bf16").astype(np.float64)
    noise = 0.001 * rng.standard_normal(ref_out.shape)
    base = tol.round_to(np.where(ref_out == 0, 0, ref_out + noise), "bf16").astype(np.float64)
    lse = np.where(np.isfinite(ref_lse), ref_lse + 1e-5, ref_lse)
    return ref_out, ref_lse, good, base, lse


def test_rounded_result_passes():
    ref_out, ref_lse, good, base, lse = small_problem()
    tol.check_attention(good, lse, ref_out, ref_lse, base, lse, "bf16")


def test_baseline_off_fails_even_where_the_result_passes():
    ref_out, ref_lse, good, base, lse = small_problem()
    with pytest.raises(AssertionError, match=r"baseline naive \(bf16\) is itself off: "
                                             r"max\|O_base - O_ref\| = .* \(fixed\)"):
        tol.check_attention(good, lse, ref_out, ref_lse, base * 1.03, lse, "bf16",
                            baseline_name="naive (bf16)")
    # a result off as much as its baseline passes every clause of its own; only the baseline's
    # line fails it
    with pytest.raises(AssertionError) as e:
        tol.check_attention(base * 1.03, lse, ref_out, ref_lse, base * 1.03, lse, "bf16")
    assert str(e.value).count("is itself off") == 1 and "max|O - O_ref|" not in str(e.value)
    # its LSE off by a sink's worth
    base_lse = lse.copy()
    base_lse[0, 2, 3] += 0.05
    with pytest.raises(AssertionError, match=r"is itself off: max\|LSE_base - LSE_ref\|"):
        tol.check_attention(good, lse, ref_out, ref_lse, base, base_lse, "bf16")
    # not 0 on a row without keys
    nonzero = base.copy()
    nonzero[1, 0, 1, 2] = 1e-6
    with pytest.raises(AssertionError, match=r"is itself off: 1 outputs != 0 on rows without keys"):
        tol.check_attention(good, lse, ref_out, ref_lse, nonzero, lse, "bf16")


def test_result_clauses_fail():
    ref_out, ref_lse, good, base, lse = small_problem()
    bad = good.copy()
    bad[1, 3, 2, 5] += 0.25
    with pytest.raises(AssertionError, match=r"max\|O - O_ref\| = .* first at \(b, s, h, d\) = "
                                             r"\(1, 3, 2, 5\)"):
        tol.check_attention(bad, lse, ref_out, ref_lse, base, lse, "bf16")
    bad_lse = lse.copy()
    bad_lse[0, 2, 3] += 2e-3
    with pytest.raises(AssertionError, match=r"max\|LSE - LSE_ref\|"):
        tol.check_attention(good, bad_lse, ref_out, ref_lse, base, lse, "bf16")
    masked = good.copy()
    masked[1, 1, 2, 3] = 1e-6
    with pytest.raises(AssertionError, match=r"1 outputs != 0 on rows without keys"):
        tol.check_attention(masked, lse, ref_out, ref_lse, base, lse, "bf16")
    inf_lse = lse.copy()
    inf_lse[0, 1, 4] = -np.inf  # a row with keys taken for empty
    with pytest.raises(AssertionError, match=r"1 LSE rows where exactly one of LSE, LSE_ref"):
        tol.check_attention(good, inf_lse, ref_out, ref_lse, base, lse, "bf16")
    nan = good.copy()
    nan[0, 4, 0, 0] = np.nan
    with pytest.raises(AssertionError, match=r"1 non-finite outputs"):
        tol.check_attention(nan, lse, ref_out, ref_lse, base, lse, "bf16")


def test_rows_without_keys_come_from_the_caller():
    """With sinks a row without keys has a finite LSE_ref (the sink): only the rows given by the
    caller (the mask) find it, as in the C++ judge."""
    ref_out, ref_lse, good, base, lse = small_problem()
    sink_lse = np.where(np.isfinite(ref_lse), ref_lse, 1.5)
    sink_lse_got = np.where(np.isfinite(lse), lse, 1.5)
    bad = good.copy()
    bad[0, 1, 0, 0] = 1e-7  # far inside the max bound
    tol.check_attention(bad, sink_lse_got, ref_out, sink_lse, base, sink_lse_got, "bf16")
    rows = np.zeros((2, 5), bool)
    rows[:, :2] = True
    with pytest.raises(AssertionError, match=r"1 outputs != 0 on rows without keys"):
        tol.check_attention(bad, sink_lse_got, ref_out, sink_lse, base, sink_lse_got, "bf16",
                            rows_without_keys=rows)


def test_naive_float32_baseline_is_within_its_fixed_bound():
    """The CPU baseline itself, on an ordinary problem and on one with scores near 1e4."""
    from flashattn._reference import attention_numpy
    rng = np.random.default_rng(3)
    for scale, dtype in ((None, "bf16"), (None, "fp32"), (300.0, "fp16")):
        q, k, v = (tol.round_to(0.5 + rng.standard_normal(s), dtype).astype(np.float64)
                   for s in ((2, 113, 4, 64), (2, 203, 2, 64), (2, 203, 2, 64)))
        ref_out, ref_lse = attention_numpy(q, k, v, scale, True)
        base_out, base_lse = tol.naive_float32(q, k, v, scale, True, dtype)
        tol.check_attention(base_out, base_lse, ref_out, ref_lse, base_out, base_lse, dtype)
        base = tol.error_stats(base_out, base_lse, ref_out, ref_lse)
        assert base["max_abs"] <= tol.baseline_bound(ref_out, ref_lse, dtype)
        assert base["lse_max_abs"] <= tol.baseline_lse_bound(ref_lse)


# ---- the shared table (tests/verify/tolerance_cases.txt), which the C++ rule reproduces too ----

TABLE = pathlib.Path(__file__).resolve().parent.parent / "verify" / "tolerance_cases.txt"


def read_table():
    cases, case = [], None
    for raw in TABLE.read_text().splitlines():
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        key, values = words[0], words[1:]
        if key in ("bounds", "judge"):
            assert case is None, f"case {case['name']} has no end"
            case = {"kind": key, "name": values[0] if values else ""}
        elif key == "end":
            cases.append(case)
            case = None
        else:
            assert case is not None, f"'{key}' outside a case"
            case[key] = values
    assert case is None, "the last case has no end"
    return cases


def numbers(case, key):
    return np.array([float(x) for x in case[key]], dtype=np.float64)


def clause_name(line: str) -> str:
    """The clause a failure line reports, named as the table names it (as verify_test.cc does)."""
    prefix = "baseline-" if line.startswith("baseline") else ""
    for needle, name in (("max|O", "max"), ("mean|O", "mean"), ("non-finite", "nonfinite"),
                         ("!= 0 on rows without keys", "masked"), ("max|LSE", "lse"),
                         ("is -inf", "lse-inf")):
        if needle in line:
            return prefix + name
    return "unknown: " + line


CASES = read_table()


def test_the_table_is_read_whole():
    kinds = [c["kind"] for c in CASES]
    assert kinds.count("bounds") >= 10 and kinds.count("judge") >= 15
    assert len({c["name"] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "bounds"],
                         ids=lambda c: c["name"])
def test_table_bounds(case):
    ref_out, ref_lse = numbers(case, "ref_out"), numbers(case, "ref_lse")
    dtype, fp32 = case["dtype"][0], case["ref_is_fp32"][0] == "1"
    got = {
        "expect_score_noise": tol.score_noise_atol(ref_out, ref_lse),
        "expect_atol": tol.rounding_atol(ref_out, ref_lse, dtype, fp32),
        "expect_lse_bound": tol.lse_bound(ref_lse, float(case["baseline_lse_error"][0])),
        "expect_baseline_bound": tol.baseline_bound(ref_out, ref_lse, dtype, fp32),
        "expect_baseline_lse_bound": tol.baseline_lse_bound(ref_lse, fp32),
    }
    for key, value in got.items():
        assert value == pytest.approx(float(case[key][0]), rel=1e-14, abs=0), key


@pytest.mark.parametrize("case", [c for c in CASES if c["kind"] == "judge"],
                         ids=lambda c: c["name"])
def test_table_judge(case):
    b, s, h, d = (int(x) for x in case["dims"])
    rows = None
    if case["rows_without_keys"] != ["-"]:
        rows = numbers(case, "rows_without_keys").reshape(b, s) != 0

    def f32(key, shape):  # the result and the baseline are float32, as the verifier reads them
        return numbers(case, key).astype(np.float32).astype(np.float64).reshape(shape)

    o_shape, l_shape = (b, s, h, d), (b, h, s)
    check_lse = case["check_lse"][0] == "1"
    failures, _, _ = tol.judge(f32("out", o_shape), f32("lse", l_shape) if check_lse else None,
                               numbers(case, "ref_out").reshape(o_shape),
                               numbers(case, "ref_lse").reshape(l_shape),
                               f32("base_out", o_shape), f32("base_lse", l_shape),
                               case["dtype"][0], ref_is_fp32=case["ref_is_fp32"][0] == "1",
                               rows_without_keys=rows)
    want = [] if case["expect"] == ["pass"] else case["expect"]
    assert [clause_name(f) for f in failures] == want, failures
