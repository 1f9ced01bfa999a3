// The verifier: runs one shape through a backend on fresh seeded inputs and judges the output by
// the rule of docs/testing.md. Shared by the tests, `flashattn verify` and the Python package.
// The shape carries the variants (window, softcap, ALiBi, sinks, varlen); their side inputs are
// generated from the seed (verify/inputs.h) and go to the backend, the reference and the baseline
// alike.
//
//   reference = float64 CPU (cpu-reference) when affordable, else the GPU naive kernel in float32,
//               from the same inputs already rounded to the test dtype;
//   baseline  = the naive algorithm in the test dtype (GPU naive for CUDA, a float32 CPU naive for
//               CPU backends): its error is what reordering and rounding cost at this shape;
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

namespace flashattn {

// The ALiBi slopes verify() generates (verifier::alibi_slopes in verify/inputs.h gives the values).
enum class AlibiMode {
  kNone,
  kHeads,       // float32 (heads): one slope per head
  kBatchHeads,  // float32 (batch, heads): the per-head slopes scaled differently per batch entry
};

struct ProblemShape {
  std::int64_t batch = 1, heads = 1, kv_heads = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 64;
  DType dtype = DType::kBF16;
  bool causal = false;
  std::optional<float> scale;

  // The variants; flashattn/params.h gives their semantics.
  std::int64_t window_left = -1, window_right = -1;  // -1: unbounded on that side
  float softcap = 0.0f;                              // 0: off
  AlibiMode alibi = AlibiMode::kNone;
  bool sinks = false;  // one generated sink logit per head
  // Variable length when seqlens_q is non-empty: sequence b has seqlens_q[b] queries and
  // seqlens_k[b] keys, of which the first seqused_k[b] are used when seqused_k is non-empty.
  // batch is then seqlens_q.size() and seqlen_q / seqlen_k are max_seqlen_q / max_seqlen_k (at
  // least every length); set_varlen() keeps them so. (A varlen batch of 0 sequences cannot be
  // written: an empty seqlens_q means dense.)
  std::vector<std::int64_t> seqlens_q, seqlens_k, seqused_k;

  bool varlen() const { return !seqlens_q.empty(); }
  // Sets the lengths, batch = their count, seqlen_q / seqlen_k = the longest of each.
  void set_varlen(std::vector<std::int64_t> q, std::vector<std::int64_t> k,
                  std::vector<std::int64_t> used_k = {});
  // Sequence b's query count and key count (seqused_k applied); seqlen_q / seqlen_k when dense.
  std::int64_t seqlen_q_of(std::int64_t b) const;
  std::int64_t seqlen_k_of(std::int64_t b) const;
  // Rows of the packed q / k tensors (the sums of seqlens_q / seqlens_k); dense: batch * seqlen.
  std::int64_t total_q() const;
  std::int64_t total_k() const;
  // A window beyond causal's (as api/registry.cc counts the window variant): a left edge, or a
  // right edge without causal (causal is window_right = 0 already).
  bool has_window() const { return window_left != -1 || (window_right != -1 && !causal); }
  bool any_variant() const;
  // The variants in use as to_string() shows them: " window=64,0 softcap=30 alibi=heads sinks
  // varlen q=... k=..." ("" for none).
  std::string variants_string() const;
  // "b=2 h=8/2 sq=113 sk=203 d=64 bf16 causal", then each variant in use:
  // " window=64,0 softcap=30 alibi=heads sinks varlen q=17,0,113 k=17,0,113 seqused_k=..."
  std::string to_string() const;
};

// The name of an AlibiMode as the CLI spells it: "none", "heads", "batch-heads".
std::string_view alibi_mode_name(AlibiMode mode);

// How messages call the fields of a ProblemShape: the library's names by default; the CLI passes
// its flags ("--batch", ...), bench "--seqlens" for both sequence lengths.
struct ShapeFieldNames {
  std::string batch = "batch", heads = "heads", kv_heads = "kv_heads", seqlen_q = "seqlen_q",
              seqlen_k = "seqlen_k", head_dim = "head_dim";
  std::string seqlens_q = "seqlens_q", seqlens_k = "seqlens_k", seqused_k = "seqused_k";
};

// The sizes a shape implies, each an overflow-checked product (common/checked_math.h). With
// varlen, "batch * seqlen_q" below is total_q and "batch * seqlen_q * seqlen_k" the sum over
// sequences of seqlen_q(b) * seqlen_k(b).
struct ShapeSizes {
  std::int64_t q_bytes = 0;    // batch * seqlen_q * heads * head_dim * dtype size (q, and out)
  std::int64_t kv_bytes = 0;   // batch * seqlen_k * kv_heads * head_dim * dtype size (k, and v)
  std::int64_t lse_bytes = 0;  // batch * heads * seqlen_q * 4 (float32)
  std::int64_t io_bytes = 0;   // q, k, v, out and LSE together
  std::int64_t macs = 0;       // batch * heads * seqlen_q * seqlen_k * head_dim: the multiply-adds
                               // of S = Q K^T (and again of O = P V)
  // The (query, key) pairs the mask keeps (causal, window and per-sequence lengths applied),
  // summed over the batch, and heads * head_dim times that; both 0 when macs is 0.
  std::int64_t visible_pairs = 0;
  std::int64_t visible_macs = 0;
  // What cpu_reference_limit is compared with: macs for a dense shape without a window (the
  // documented rule, causal counted in full), visible_macs with a window or varlen, where the
  // full product says nothing about the work: a window of 64 keys at seqlen 1e5 keeps 0.07% of
  // the pairs, and a varlen batch has no single seqlen_q * seqlen_k.
  std::int64_t reference_macs = 0;
};

// Fills *sizes; kInvalidShape naming the fields (as `names` spells them), their values and the
// limit when a size does not fit int64 or a field is negative, or when the varlen lengths are
// inconsistent (counts differ from batch, a length above seqlen_q / seqlen_k, seqused_k beyond
// its sequence, a total past int32, the type of cu_seqlens).
Status shape_sizes(const ProblemShape& shape, ShapeSizes* sizes, const ShapeFieldNames& names = {});
// The varlen part of those checks alone (ok for a dense shape).
Status check_varlen_lengths(const ProblemShape& shape, const ShapeFieldNames& names = {});

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
  ProblemShape shape;
  std::uint64_t seed = 0;
  InputLayout layout = InputLayout::kContiguous;  // with shape and seed: enough to replay
  InputKind kind = InputKind::kNormal;
  ErrorStats error;              // backend vs reference
  ErrorStats baseline_error;     // baseline vs reference
  double atol = 0;
  double score_noise = 0;        // the float32 score-noise part of atol (verify/compare.h)
  double max_abs_bound = 0, mean_abs_bound = 0;
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
