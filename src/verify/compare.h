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
#pragma once

#include <cstdint>
#include <vector>

#include "verify/verify.h"

namespace flashattn::verifier {

constexpr double kAtolFloor = 1e-6;
constexpr double kAtolFloorFp32Ref = 1e-5;
constexpr double kFloat32Epsilon = 1.1920928955078125e-7;  // 2^-23
constexpr double kScoreUlps = 2.0;
constexpr double kLseUlps = 4.0;

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

// Errors of `result` against `ref`. Elements with |O - O_ref| > elem_bound, non-finite where
// O_ref is finite, or non-zero on a row without keys count as bad; the first one's (b, s, h, d)
// goes to first_bad (likewise LSE rows over lse_bound to first_bad_lse, as (b, h, s); varlen: s
// within sequence b). Pass +inf bounds for the baseline. LSE is compared when both result.lse and
// ref.lse are present.
ErrorStats error_stats(const OutputDims& dims, const HostOutputs& result,
                       const ReferenceOutputs& ref, double elem_bound, double lse_bound);

// Elements (of O and LSE) still holding the poison of OwnedTensor::fill_nan: never written.
std::int64_t count_unwritten(const HostOutputs& result, DType out_dtype);

// Fills report->error, baseline_error, atol, the bounds, unwritten, passed and failures from the
// host results. report->shape, guards_intact and the names are the caller's; `check_lse` false
// skips the LSE clauses.
void judge(const OutputDims& dims, DType dtype, const HostOutputs& result,
           const HostOutputs& baseline, const ReferenceOutputs& ref, bool check_lse,
           VerifyReport* report);

}  // namespace flashattn::verifier
