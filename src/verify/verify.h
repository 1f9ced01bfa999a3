// The verifier: runs one shape through a backend on fresh seeded inputs and judges the output by
// the rule of docs/testing.md. Shared by the tests, `flashattn verify` and the Python package.
// The shape carries the variants (window, softcap, ALiBi, sinks, varlen); their side inputs are
// generated from the seed (verify/inputs.h) and go to the backend, the reference and the baseline
// alike.
//
//   reference = float64 CPU (cpu-reference) when affordable, else the GPU naive kernel in float32,
//               from the same inputs already rounded to the test dtype;
//   baseline  = the naive algorithm in the test dtype (GPU naive for CUDA backends, a float32 CPU
//               naive for CPU backends and for the GPU naive backend itself, which would otherwise
//               be judged against its own error): its error is what reordering and rounding cost
//               at this shape, once it is itself within a fixed bound of the reference (a broken
//               baseline fails the verification); with the float32 GPU reference, the baseline and
//               that reference are also held to the bound against the float64 CPU reference on a
//               sample of rows (verifier::sample_rows), so the GPU naive kernel is never judged
//               by itself alone;
//   pass iff  max|O - O_ref| <= 2 * max|O_base - O_ref| + atol
//             (atol = one dtype step at max|O_ref| = 2 * the worst rounding of O_ref, plus the
//             float32 score noise; verify/compare.h gives the exact terms and why)
//             and mean|O - O_ref| <= 1.5 * mean|O_base - O_ref| + atol / 4
//             and max|LSE - LSE_ref| <= 1e-3 (+ 2x the baseline's LSE error + 4 float32 ulps of
//             |LSE_ref|, which only count where |LSE| ~ 1e4 puts 1e-3 below float32 resolution)
//             and O = 0 exactly on rows without keys (the mask rule says which), LSE = -inf
//             there (the sink's logit with sinks)
//             and nothing non-finite where the reference is finite
//             and every output element was written (outputs are NaN-poisoned before the run)
//             and the guard bytes after each output are untouched.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashattn/forward.h"
#include "verify/shape.h"

namespace flashattn {

enum class InputLayout {
  kContiguous,   // plain BSHD
  kStridedBHSD,  // BHSD storage seen through BSHD strides
  kPaddedHeads,  // heads sliced out of a wider tensor (row stride > heads * head_dim)
};

// Optional input distortions for the edge-case tests.
enum class InputKind {
  kNormal,         // N(0.5, 1)
  kLargeScores,    // q and k scaled so scores reach ~1e4 (exercises the running-max rescale)
  kVeryNegative,   // an added column bias keeps every score of some rows below -5e4
  kLargeMagnitude, // bf16 values near 1.3e5 / fp16 V near 6e4
  kHugeScores,     // q and k scaled so scaled scores reach ~1e10 (finite in float32)
};

constexpr double kDefaultCpuReferenceLimit = 6e8;
constexpr double kDefaultSampleLimit = 1e8;

struct VerifyOptions {
  std::string backend = "auto";
  Device device = Device::cpu();
  std::uint64_t seed = 0;
  InputLayout layout = InputLayout::kContiguous;  // of q, k, v and out (LSE is contiguous)
  InputKind kind = InputKind::kNormal;
  bool check_lse = true;
  // The backend under test, called instead of forward(params, backend) when set; `backend` is
  // then only its name in the report. The tests plant errors through it (a backend that drops the
  // sinks, flips the ALiBi sign, ...) to prove the verifier catches them.
  std::function<Status(const ForwardParams&)> run_backend;
  // Test only: the baseline, called instead of the naive algorithm verify() picks (on the params
  // it would give that one: outputs in the dtype, contiguous, on the host for the CPU baseline).
  // The tests plant errors through it (a 3% scale, a dropped sink) to prove that a broken
  // baseline fails the verification; the report's baseline then says "(replaced by a test hook)".
  std::function<Status(const ForwardParams&)> run_baseline;
  // The float64 rows of the sampled check with the float32 GPU reference (verify/compare.h,
  // sample_rows): their multiply-adds, about 0.2 s on 2 cores at the default.
  double sample_limit = kDefaultSampleLimit;
  // Test only: run the sampled check even where the float64 reference judges the whole problem,
  // so that the CPU tests exercise the path of the GPU's large shapes (the sampled check then
  // holds the baseline to the same bound on a subset of the same reference).
  bool sample_check_always = false;
  // float64 CPU reference when batch*heads*seqlen_q*seqlen_k*head_dim (ShapeSizes::macs; with a
  // window or varlen the multiply-adds of the pairs the mask keeps, ShapeSizes::reference_macs)
  // is at most this; above it CUDA backends are judged against the float32 GPU naive kernel and CPU
  // backends cannot be verified. verify() decides before allocating anything. 6e8 takes about
  // 1 s on 2 cores (the CLI's default shape, 2*8*512*512*128 = 5.4e8, verifies in 2.2 s).
  double cpu_reference_limit = kDefaultCpuReferenceLimit;
};

struct ErrorStats {
  double max_abs = 0, mean_abs = 0, rel_l2 = 0;
  double lse_max_abs = 0;                  // over rows with finite reference LSE
  std::int64_t nonfinite = 0;              // non-finite outputs where the reference is finite
  std::int64_t lse_mismatch_inf = 0;       // rows where exactly one of LSE, LSE_ref is -inf
  std::int64_t masked_nonzero = 0;         // outputs != 0 on rows without keys (LSE_ref = -inf)
  std::vector<std::int64_t> first_bad;     // (b, s, h, d) of the first element over the bound
  std::vector<std::int64_t> first_bad_lse; // (b, h, s) of the first LSE over its bound
                                           // (varlen: s counts within sequence b)
};

struct VerifyReport {
  bool passed = false;
  std::string backend;           // resolved name
  std::string reference;         // "cpu-reference (float64)" or "naive (float32)"
  std::string baseline;          // "naive (bf16)" / "cpu naive (float32 accumulate, bf16 out)"
                                 // (the latter for CPU backends and the GPU naive backend)
  ProblemShape shape;
  std::uint64_t seed = 0;
  InputLayout layout = InputLayout::kContiguous;  // with shape and seed: enough to replay
  InputKind kind = InputKind::kNormal;
  ErrorStats error;              // backend vs reference
  ErrorStats baseline_error;     // baseline vs reference
  double atol = 0;
  double score_noise = 0;        // the float32 score-noise part of atol (verify/compare.h)
  double max_abs_bound = 0, mean_abs_bound = 0;
  // The baseline's own fixed bounds against the reference (verify/compare.h), checked before its
  // error is used; baseline_passed false fails the verification (as do the sampled check's
  // flags below).
  double baseline_bound = 0, baseline_lse_bound = 0;
  bool baseline_passed = false;
  // The sampled check (float32 GPU reference, or VerifyOptions::sample_check_always): the
  // baseline and that reference against the float64 CPU reference on sample_rows rows, by the
  // fixed bound (sample_reference_bound is the reference's, as a float32 result). sample_rows 0:
  // no sampled check ran (the flags then stay true).
  std::int64_t sample_rows = 0;
  ErrorStats baseline_sample_error, reference_sample_error;
  double sample_bound = 0, sample_reference_bound = 0, sample_lse_bound = 0;
  bool sample_baseline_passed = true;
  bool reference_sampled = false;  // the float32 reference was in the sampled check
  bool sample_reference_passed = true;
  static constexpr double kLseTolerance = 1e-3;
  double lse_bound = kLseTolerance;  // kLseTolerance + the float32 terms of verify/compare.h
  std::int64_t unwritten = 0;    // O and LSE elements still holding the NaN poison
  bool guards_intact = true;
  std::vector<std::string> failures;  // one line per failed clause
  std::string to_string() const;      // the multi-line report the CLI prints
};

// Why a CPU verification of `shape` (of `sizes`, from shape_sizes) is refused under `limit`:
// "batch * heads * seqlen_q * seqlen_k * head_dim = 1 * 8 * ... multiply-adds exceeds
// cpu_reference_limit = 6e+08 ..." (with a window or varlen: "heads * head_dim * (query, key)
// pairs the mask keeps = 8 * 128 * 665600 = ..."). verify() returns it; the CLI checks first,
// naming its flag as `limit_name`.
std::string cpu_reference_refusal(const ProblemShape& shape, const ShapeSizes& sizes,
                                  double limit,
                                  const std::string& limit_name = "cpu_reference_limit");

// Runs the whole procedure. A non-ok Status means the verification could not run (bad shape,
// backend unusable, out of memory); a completed verification that failed returns ok with
// report->passed == false.
Status verify(const ProblemShape& shape, const VerifyOptions& options, VerifyReport* report);

}  // namespace flashattn
