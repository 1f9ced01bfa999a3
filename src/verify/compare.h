// The tolerance rule of docs/testing.md, on host copies of the outputs.
//
//   atol       = the dtype's spacing (one ulp) at max|O_ref|, i.e. 2 * the largest rounding
//                error the dtype allows there: docs/testing.md's 2 * max|round(O_ref) - O_ref|
//                taken as the worst case over the binade rather than as observed. They agree on
//                ordinary outputs (some element always rounds by almost half a step); they differ
//                where O_ref is exactly representable, e.g. one-hot softmax rows (kLargeScores)
//                give O_ref = a row of V: the observed rounding is 0, yet a flash kernel, which
//                feeds P rounded to the dtype into PV while l sums the unrounded P, may land one
//                step away.
//                Floored at kAtolFloor * max|O_ref| (kAtolFloorFp32Ref when the reference is itself
//                float32): with a float32 test dtype one ulp is ~1e-7 * |O| and would fail on
//                summation-order noise.
//                Plus the float32 score noise kScoreUlps * eps32 * max|LSE_ref| * max|O_ref|: scores
//                are float32 in every backend, so a score near 1e4 (|LSE| tracks the largest
//                scores) carries ~1e-3 of rounding, which moves P, hence O, by that fraction. For
//                ordinary inputs (|LSE| ~ 10) this is ~1e-6 * max|O|, far below a bf16/fp16 step;
//                with float32 outputs and InputKind::kLargeScores / kVeryNegative it is what float32
//                can deliver at all (with 2x the baseline alone, about one such case in 200
//                failed, depending on how a few near-tied rows happened to round).
//   max clause  max|O - O_ref|  <= 2 * max|O_base - O_ref| + atol
//   mean clause mean|O - O_ref| <= 1.5 * mean|O_base - O_ref| + atol / 4
//                The atol / 4 term keeps the clause meaningful where the baseline's mean error is
//                itself at the noise floor (float32, or outputs that round exactly); for bf16/fp16
//                it is a quarter of one rounding step of the largest output.
//   LSE clause  max|LSE - LSE_ref| <= 1e-3 + 2 * max|LSE_base - LSE_ref|
//                                      + kLseUlps * eps32 * max|LSE_ref|
//                over rows with finite LSE_ref. The last two terms only matter where |LSE| is so
//                large (1e4 and more: InputKind::kLargeScores, kVeryNegative) that float32 cannot
//                hold 1e-3: one float32 step at 6e4 is 0.0039, and kernels that fold log2(e) into
//                the scale round the running max at 8.7e4 (step 0.0078) before converting back.
//   rows without keys: O exactly 0; LSE exactly -inf, or with sinks the sink's logit (LSE_ref,
//                judged by the LSE clause). Which rows those are comes from the shape, not from
//                the reference's numbers (OutputDims::row_without_keys, filled by output_dims()
//                from the mask rule of common/mask_rule.h): with sinks, LSE_ref is finite on them,
//                so "LSE_ref = -inf" no longer finds them; and "O_ref exactly 0" is not a test
//                either, since a row with keys gives O_ref = 0 where V is 0 there (a user's
//                `run` inputs, or softcap and ALiBi steering all weight onto a zero row), while a
//                reference bug that zeroed a row with keys would silently excuse the backend
//                from the max clause there. The mask rule is exact integer arithmetic on the
//                shape, the same one every backend applies.
//   no non-finite output where the reference is finite; no element left unwritten (still holding
//   the NaN poison); guard bytes intact.
//
// The baseline is checked first, against the reference, with a fixed bound that does not depend
// on the baseline (a baseline 3% off would otherwise let a backend 6% off pass):
//   baseline O   max|O_base - O_ref| <= kBaselineRoundingUlps * ulp_dtype(max|O_ref|)
//                  + c * eps32 * max|O_ref| * (kBaselineSumUlps + kBaselineScoreUlps * max|LSE_ref|)
//   baseline LSE max|LSE_base - LSE_ref| <= 1e-3 + c * kBaselineLseUlps * eps32 * max|LSE_ref|
//   and the exact clauses (rows without keys, -inf only there, nothing non-finite),
// with c = 1 against the float64 reference and c = 2 against the float32 GPU one (both sides
// then carry float32 noise). Each term is what the naive algorithm makes: it computes S, P and
// O in float32 and rounds only O to the dtype (at most half a step; one allowed); it sums P V
// over the keys in float32; its scores are float32. Measured (cpu::naive_forward<float> against
// float64 over tests/verify's quick and full grids, the variant cases, and seqlen_k 4097 /
// 16384 / 65536 at d8 and d256 in every dtype and input kind):
//   - rounding: max|O_base - O_ref| beyond the score term is at most 0.506 ulp of the dtype
//     over the grids (0.505 in fp16 at 65536 keys);
//   - float32 sums (fp32 outputs, where one ulp is eps32): 23 eps32 * max|O_ref| at 1023 keys,
//     33 at 4097, 79 at 16384, 169 at 65536 (about 0.7 sqrt(seqlen_k)): 512 holds to ~5e5 keys;
//   - scores: at most 1.11x the atol's score noise, i.e. 2.23 eps32 * max|LSE_ref| * max|O_ref|
//     (fp16, InputKind::kVeryNegative, |LSE| = 6e4, d128): 4 allowed;
//   - LSE: 8.7e-3 at |LSE| = 1.2e4 (kLargeScores, d256: 6.0 eps32 * max|LSE_ref|) and 8.7e3 at
//     1.5e10 (kHugeScores, d128: 4.9); ordinary inputs 1e-5, far inside the 1e-3: 16 allowed.
//     The backend clause's kLseUlps = 4 would not do: the float32 naive itself exceeds it.
// With kHugeScores the score term, like atol's, exceeds max|O_ref| and does not constrain O;
// kVeryNegative's (|LSE| = 6e4) is 2.9% of max|O_ref|. A failed baseline fails the
// verification with its own line ("baseline naive (bf16) is itself off: ..."); the backend's
// clauses are still evaluated and reported.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/reference.h"
#include "verify/verify.h"

namespace flashattn::verifier {

constexpr double kAtolFloor = 1e-6;
constexpr double kAtolFloorFp32Ref = 1e-5;
constexpr double kFloat32Epsilon = 1.1920928955078125e-7;  // 2^-23
constexpr double kScoreUlps = 2.0;
constexpr double kLseUlps = 4.0;
// The baseline's fixed bound (see above).
constexpr double kBaselineRoundingUlps = 1.0;
constexpr double kBaselineSumUlps = 512.0;
constexpr double kBaselineScoreUlps = 4.0;
constexpr double kBaselineLseUlps = 16.0;

// Logical output sizes: O is (batch, seqlen_q, heads, head_dim), LSE (batch, heads, seqlen_q),
// both row-major; with varlen O is (total_q, heads, head_dim) and LSE (heads, total_q).
struct OutputDims {
  std::int64_t batch = 0, seqlen_q = 0, heads = 0, head_dim = 0;
  // Varlen: sequence b holds the rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) (batch + 1
  // offsets); empty for dense outputs.
  std::vector<std::int64_t> cu_seqlens_q;
  // One flag per output row in O's row order ((b, s) dense, the packed token varlen): 1 where the
  // mask leaves the row no key. Empty: the rows whose LSE_ref is -inf are taken for them (exactly
  // those without sinks; verify() always fills it).
  std::vector<std::uint8_t> row_without_keys;

  bool varlen() const { return !cu_seqlens_q.empty(); }
  std::int64_t rows() const { return varlen() ? cu_seqlens_q.back() : batch * seqlen_q; }
  std::int64_t out_numel() const { return rows() * heads * head_dim; }
  std::int64_t lse_numel() const { return heads * rows(); }
};

// The output dims of `shape`, row_without_keys included.
OutputDims output_dims(const ProblemShape& shape);

// The reference, unrounded.
struct ReferenceOutputs {
  std::vector<double> out;
  std::vector<double> lse;
  bool is_fp32 = false;  // the GPU naive kernel in float32 rather than the float64 CPU reference
};

// One result read back to the host (OwnedTensor::to_host_float).
struct HostOutputs {
  std::vector<float> out;
  std::vector<float> lse;  // empty: no LSE to check
};

// The distance between neighbouring `dtype` values around |x| (one ulp; subnormal spacing at 0).
double dtype_spacing(double x, DType dtype);

// atol for outputs of `dtype` against `ref` (see above), and its float32 score-noise term alone.
// The score-noise term is a first-order bound: once it reaches max|O_ref| (|LSE| beyond ~4e6,
// InputKind::kHugeScores) it no longer constrains O, and the tests of such inputs also check
// the bound without it.
double rounding_atol(const ReferenceOutputs& ref, DType dtype);
double score_noise_atol(const ReferenceOutputs& ref);
// The LSE bound (see above) given the baseline's max LSE error.
double lse_bound(const ReferenceOutputs& ref, double baseline_lse_error);
// The baseline's fixed bounds (see above): on max|O_base - O_ref| for a baseline of `dtype`, and
// on max|LSE_base - LSE_ref|.
double baseline_bound(const ReferenceOutputs& ref, DType dtype);
double baseline_lse_bound(const ReferenceOutputs& ref);

// Errors of `result` against `ref`. Elements with |O - O_ref| > elem_bound, non-finite where
// O_ref is finite, or non-zero on a row without keys count as bad; the first one's (b, s, h, d)
// goes to first_bad (likewise LSE rows over lse_bound to first_bad_lse, as (b, h, s); varlen: s
// within sequence b). Pass +inf bounds for the baseline. LSE is compared when both result.lse and
// ref.lse are present.
ErrorStats error_stats(const OutputDims& dims, const HostOutputs& result,
                       const ReferenceOutputs& ref, double elem_bound, double lse_bound);

// Elements (of O and LSE) still holding the poison of OwnedTensor::fill_nan: never written.
std::int64_t count_unwritten(const HostOutputs& result, DType out_dtype);

// The sampled check of verify() with the float32 GPU reference (shapes above
// cpu_reference_limit, where the float64 reference of the whole problem is unaffordable): the
// baseline, and the float32 reference itself, against the float64 CPU reference on a sample of
// rows, by the baseline bound above (c = 1; the reference as a float32 baseline, its dtype fp32).
// Without it the baseline there is only compared with the float32 reference, which is the GPU
// naive kernel again: a naive kernel 3% off would be off alike in both and pass.
//   The sample: up to kSampleSlices (batch, head) items, spread evenly over b * heads + h (the
// first and the last included); in each, rows spread evenly over the sequence's rows (its first
// and last included), as many as macs_budget / (slices * seqlen_k(b) * head_dim) allows, at least
// kSampleMinRows (or every row of a shorter sequence). A row costs at most seqlen_k * head_dim
// multiply-adds, so the float64 rows cost about macs_budget (more only where kSampleMinRows rows
// exceed it), plus converting K and V once per item.
constexpr std::int64_t kSampleSlices = 16;
constexpr std::int64_t kSampleMinRows = 2;
std::vector<cpu::RowId> sample_rows(const ProblemShape& shape, double macs_budget);

// Fills report->sample_rows, baseline_sample_error, reference_sample_error, the sample bounds,
// reference_sampled, sample_baseline_passed and sample_reference_passed, and adds the failure lines of the sampled
// check in front of judge()'s (call it after judge()), updating passed. `sample_ref`: the float64 reference of
// the sampled rows, compact (row n's O at [n * head_dim, +head_dim), its LSE at n: what
// cpu::reference_rows_f64 writes); `baseline`: the whole problem's baseline, as judge() takes it;
// `fp32_ref`: the whole float32 reference, checked too when given. `check_lse` false skips the
// LSE clauses.
void judge_sample(const OutputDims& dims, DType dtype, const std::vector<cpu::RowId>& sample,
                  const ReferenceOutputs& sample_ref, const HostOutputs& baseline,
                  const ReferenceOutputs* fp32_ref, bool check_lse, VerifyReport* report);

// Fills report->error, baseline_error, atol, the bounds (the baseline's included),
// baseline_passed, unwritten, passed and failures from the host results. report->shape,
// guards_intact and the names are the caller's (report->baseline names the baseline in its
// failure line); `check_lse` false skips the LSE clauses, the baseline's included.
void judge(const OutputDims& dims, DType dtype, const HostOutputs& result,
           const HostOutputs& baseline, const ReferenceOutputs& ref, bool check_lse,
           VerifyReport* report);

}  // namespace flashattn::verifier
