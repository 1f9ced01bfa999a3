// cpu-flash and cpu-reference against the float64 reference (cpu::reference_forward_f64), through
// the public forward(): fully masked rows, extreme scores (all below -5e4, up to 1e4, a large
// common offset), GQA, strided views, tails, head dims, dtypes, determinism. This is where an
// algorithm bug of the flash kernels (a broken -inf guard, a wrong causal tile bound, LSE in the
// wrong log base) is caught on a machine without a GPU. Results are judged by the verifier's
// tolerance rule (verify/compare.h, the project's only one) with the float32 naive baseline.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "common/random.h"
#include "cpu/reference.h"
#include "flashattn/flashattn.h"
#include "test_util.h"
#include "verify/compare.h"
#include "verify/verify.h"

namespace flashattn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::size_t kAlign = 64;
constexpr std::size_t kGuardBytes = 64;
constexpr std::uint8_t kGuardByte = 0xA5;

enum class Layout {
  kContiguous,   // plain BSHD
  kBHSD,         // BHSD storage seen through BSHD strides
  kPaddedHeads,  // heads [1, heads + 1) of a tensor with heads + 3 heads; LSE rows padded too
};

const char* layout_name(Layout l) {
  switch (l) {
    case Layout::kContiguous: return "contiguous";
    case Layout::kBHSD: return "bhsd";
    case Layout::kPaddedHeads: return "padded_heads";
  }
  return "?";
}

// An owning host tensor seen through a strided view, followed by guard bytes. Every byte that is
// not a logical element (padding, guard) must survive a run unchanged.
class HostTensor {
 public:
  HostTensor(DType dtype, std::vector<std::int64_t> shape, std::vector<std::int64_t> stride,
             std::int64_t offset, std::int64_t storage_elems)
      : shape_(std::move(shape)), stride_(std::move(stride)) {
    const std::size_t elem = dtype_size(dtype);
    storage_.assign(static_cast<std::size_t>(storage_elems) * elem + kAlign + kGuardBytes,
                    kGuardByte);
    const auto addr = reinterpret_cast<std::uintptr_t>(storage_.data());
    base_ = storage_.data() + (kAlign - addr % kAlign) % kAlign;
    view_.data = base_ + offset * static_cast<std::int64_t>(elem);
    view_.dtype = dtype;
    view_.device = Device::cpu();
    view_.rank = static_cast<int>(shape_.size());
    for (int d = 0; d < view_.rank; ++d) {
      view_.shape[d] = shape_[d];
      view_.stride[d] = stride_[d];
    }
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  // A (batch, seq, heads, head_dim) tensor in `layout`.
  static HostTensor bshd(DType dtype, std::int64_t b, std::int64_t s, std::int64_t h,
                         std::int64_t d, Layout layout) {
    switch (layout) {
      case Layout::kContiguous:
        return HostTensor(dtype, {b, s, h, d}, {s * h * d, h * d, d, 1}, 0, b * s * h * d);
      case Layout::kBHSD:
        return HostTensor(dtype, {b, s, h, d}, {h * s * d, d, s * d, 1}, 0, b * s * h * d);
      case Layout::kPaddedHeads: {
        const std::int64_t wide = h + 3;
        return HostTensor(dtype, {b, s, h, d}, {s * wide * d, wide * d, d, 1}, d,
                          b * s * wide * d);
      }
    }
    return HostTensor(dtype, {0, 0, 0, 0}, {1, 1, 1, 1}, 0, 0);
  }
  // The float32 (batch, heads, seqlen_q) LSE.
  static HostTensor lse(std::int64_t b, std::int64_t h, std::int64_t s, Layout layout) {
    if (layout == Layout::kContiguous) {
      return HostTensor(DType::kFP32, {b, h, s}, {h * s, s, 1}, 0, b * h * s);
    }
    const std::int64_t row = s + 5;  // a padded row: elements s..s+4 of every row are not LSE
    return HostTensor(DType::kFP32, {b, h, s}, {h * row, row, 1}, 0, b * h * row);
  }

  const TensorView& view() const { return view_; }
  std::int64_t numel() const { return view_.numel(); }

  // Calls fn(linear, idx) for every logical element in row-major order.
  void for_each(const std::function<void(std::int64_t, const std::int64_t*)>& fn) const {
    const int rank = view_.rank;
    std::int64_t idx[kMaxRank] = {0, 0, 0, 0};
    for (std::int64_t linear = 0; linear < numel(); ++linear) {
      std::int64_t rest = linear;
      for (int d = rank - 1; d >= 0; --d) {
        idx[d] = rest % shape_[d];
        rest /= shape_[d];
      }
      fn(linear, idx);
    }
  }
  std::int64_t offset(const std::int64_t* idx) const {
    std::int64_t off = 0;
    for (int d = 0; d < view_.rank; ++d) off += idx[d] * stride_[d];
    return off;
  }
  // Fills element (idx) with gen(linear, idx) rounded to the dtype.
  void fill(const std::function<float(std::int64_t, const std::int64_t*)>& gen) {
    for_each([&](std::int64_t linear, const std::int64_t* idx) {
      store_from_float(view_.data, view_.dtype, offset(idx), gen(linear, idx));
    });
  }
  // Every storage byte set to 0xFF (NaN in all three dtypes); the guard bytes reset to kGuardByte.
  void poison() {
    const auto begin = static_cast<std::size_t>(base_ - storage_.data());
    std::fill(storage_.begin() + static_cast<std::ptrdiff_t>(begin),
              storage_.end() - static_cast<std::ptrdiff_t>(kGuardBytes), 0xFF);
    std::fill(storage_.end() - static_cast<std::ptrdiff_t>(kGuardBytes), storage_.end(),
              kGuardByte);
  }
  // The logical elements as double, row-major.
  std::vector<double> to_double() const {
    std::vector<double> out(static_cast<std::size_t>(numel()));
    for_each([&](std::int64_t linear, const std::int64_t* idx) {
      out[static_cast<std::size_t>(linear)] = load_as_float(view_.data, view_.dtype, offset(idx));
    });
    return out;
  }
  // Every storage byte (elements, padding, guard), for the unchanged-inputs check.
  const std::vector<std::uint8_t>& storage() const { return storage_; }
  // Bytes that are not logical elements (padding and guard), for the untouched-bytes check.
  std::vector<std::uint8_t> non_element_bytes() const {
    std::vector<bool> element(storage_.size(), false);
    const auto first = static_cast<std::size_t>(static_cast<std::uint8_t*>(view_.data) -
                                                storage_.data());
    const std::size_t elem = dtype_size(view_.dtype);
    for_each([&](std::int64_t, const std::int64_t* idx) {
      const std::size_t at = first + static_cast<std::size_t>(offset(idx)) * elem;
      for (std::size_t i = 0; i < elem; ++i) element[at + i] = true;
    });
    std::vector<std::uint8_t> out;
    for (std::size_t i = 0; i < storage_.size(); ++i) {
      if (!element[i]) out.push_back(storage_[i]);
    }
    return out;
  }

 private:
  std::vector<std::int64_t> shape_, stride_;
  std::vector<std::uint8_t> storage_;
  std::uint8_t* base_ = nullptr;
  TensorView view_;
};

struct Config {
  std::int64_t batch = 1, heads = 2, kv_heads = 2, seqlen_q = 64, seqlen_k = 64, head_dim = 64;
  DType dtype = DType::kFP32;
  bool causal = false;
  std::optional<float> scale;
  Layout layout = Layout::kContiguous;
  std::uint64_t seed = testing::base_seed();

  std::string to_string() const {
    std::ostringstream os;
    os << "b=" << batch << " h=" << heads << "/" << kv_heads << " sq=" << seqlen_q
       << " sk=" << seqlen_k << " d=" << head_dim << " " << dtype_name(dtype)
       << (causal ? " causal" : "") << " layout=" << layout_name(layout);
    if (scale) os << " scale=" << *scale;
    os << " seed=" << seed;
    return os.str();
  }
};

using Generator = std::function<float(std::int64_t, const std::int64_t*)>;

// N(0.5, 1) from the counter-based generator: tensor `stream`, element `linear`.
Generator normal_inputs(std::uint64_t seed, std::uint64_t stream) {
  return [=](std::int64_t linear, const std::int64_t*) {
    return 0.5f + normal_at(seed, stream, static_cast<std::uint64_t>(linear));
  };
}

// N(0.5, 1) rounded to a multiple of 0.5 in [-4, 4]: exact in every dtype, and every dot product
// of such vectors (head_dim <= 256) is exact in float32, so extreme-score tests measure the
// softmax, not the rounding of Q K^T.
float quantized(std::uint64_t seed, std::uint64_t stream, std::int64_t linear) {
  const float x = 0.5f + normal_at(seed, stream, static_cast<std::uint64_t>(linear));
  return std::clamp(std::round(2.0f * x) / 2.0f, -4.0f, 4.0f);
}

struct Result {
  std::vector<double> o;    // row-major (batch, seqlen_q, heads, head_dim)
  std::vector<double> lse;  // (batch, heads, seqlen_q)
};

// Poisons `out` and `lse`, runs `runner`, checks that it succeeded, wrote no byte outside the
// outputs' elements and changed no input; returns the outputs' elements as double.
Result run_guarded(HostTensor& out, HostTensor& lse, const std::vector<const HostTensor*>& inputs,
                   const std::function<Status()>& runner, const std::string& what,
                   const std::string& context) {
  out.poison();
  lse.poison();
  const auto out_pad = out.non_element_bytes(), lse_pad = lse.non_element_bytes();
  std::vector<std::vector<std::uint8_t>> before;
  for (const HostTensor* t : inputs) before.push_back(t->storage());
  const Status st = runner();
  EXPECT_TRUE(st.ok()) << what << ": " << st.to_string() << " [" << context << "]";
  EXPECT_TRUE(out.non_element_bytes() == out_pad)
      << what << " wrote outside out's elements [" << context << "]";
  EXPECT_TRUE(lse.non_element_bytes() == lse_pad)
      << what << " wrote outside lse's elements [" << context << "]";
  bool same = true;
  std::size_t i = 0;
  for (const HostTensor* t : inputs) same = same && t->storage() == before[i++];
  EXPECT_TRUE(same) << what << " modified an input [" << context << "]";
  return {out.to_double(), lse.to_double()};
}

class Problem {
 public:
  explicit Problem(const Config& c)
      : config(c),
        q(HostTensor::bshd(c.dtype, c.batch, c.seqlen_q, c.heads, c.head_dim, c.layout)),
        k(HostTensor::bshd(c.dtype, c.batch, c.seqlen_k, c.kv_heads, c.head_dim, c.layout)),
        v(HostTensor::bshd(c.dtype, c.batch, c.seqlen_k, c.kv_heads, c.head_dim, c.layout)),
        out(HostTensor::bshd(c.dtype, c.batch, c.seqlen_q, c.heads, c.head_dim, c.layout)),
        lse(HostTensor::lse(c.batch, c.heads, c.seqlen_q, c.layout)) {
    q.fill(normal_inputs(c.seed, 0));
    k.fill(normal_inputs(c.seed, 1));
    v.fill(normal_inputs(c.seed, 2));
  }

  ForwardParams params() const {
    ForwardParams p;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.lse = lse.view();
    p.softmax_scale = config.scale;
    p.causal = config.causal;
    return p;
  }

  // Poisons the outputs, runs `backend` through forward(), checks padding and guards, reads back.
  Result run(const std::string& backend) {
    return run_with([&](const ForwardParams& p) { return forward(p, backend); }, backend);
  }
  Result run_with(const std::function<Status(const ForwardParams&)>& runner,
                  const std::string& what) {
    return run_guarded(out, lse, {&q, &k, &v}, [&] { return runner(params()); }, what,
                       config.to_string());
  }

  Result reference() const {
    Result r;
    r.o.assign(static_cast<std::size_t>(out.numel()), 0.0);
    r.lse.assign(static_cast<std::size_t>(lse.numel()), 0.0);
    const Status st = cpu::reference_forward_f64(params(), r.o.data(), r.lse.data());
    EXPECT_TRUE(st.ok()) << st.to_string();
    return r;
  }

  Config config;
  HostTensor q, k, v, out, lse;
};

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::fabs(e));
  return m;
}

ProblemShape shape_of(const Config& c) {
  ProblemShape s;
  s.batch = c.batch;
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.seqlen_q = c.seqlen_q;
  s.seqlen_k = c.seqlen_k;
  s.head_dim = c.head_dim;
  s.dtype = c.dtype;
  s.causal = c.causal;
  s.scale = c.scale;
  return s;
}

verifier::HostOutputs host_outputs(const Result& r) {
  // The outputs are dtype values (exact in float), the poison's NaN bits survive the round trip.
  verifier::HostOutputs h;
  h.out.assign(r.o.begin(), r.o.end());
  h.lse.assign(r.lse.begin(), r.lse.end());
  return h;
}

// The project's one tolerance rule (src/verify/compare.{h,cc}, docs/testing.md), as verify()
// applies it, on host results: `got` against the float64 `ref`, with the verifier's CPU baseline
// `base` (cpu::naive_forward<float> on the same problem), which the rule first checks against
// `ref` with its fixed bound. Rows without keys: one flag per output row in O's row order,
// from the mask rule (verifier::output_dims) unless given.
VerifyReport judge(const Config& c, const Result& got, const Result& ref, const Result& base,
                   const std::string& what, std::vector<std::uint8_t> rows_without_keys = {},
                   const std::string& reference = "cpu::reference_forward_f64 (float64)") {
  verifier::OutputDims dims = verifier::output_dims(shape_of(c));
  if (!rows_without_keys.empty()) dims.row_without_keys = std::move(rows_without_keys);
  verifier::ReferenceOutputs r;
  r.out = ref.o;
  r.lse = ref.lse;
  VerifyReport report;
  report.shape = shape_of(c);
  report.seed = c.seed;
  report.backend = what;
  report.reference = reference;
  report.baseline = "cpu naive (float32 accumulate, " + std::string(dtype_name(c.dtype)) + " out)";
  verifier::judge(dims, c.dtype, host_outputs(got), host_outputs(base), r, /*check_lse=*/true,
                  &report);
  return report;
}

::testing::AssertionResult passes(const VerifyReport& r, const std::string& context) {
  if (r.passed) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "[" << context << "]\n" << r.to_string();
}

// For inputs whose scores are exact in float32 (quantized() values with a large first column:
// every product and partial sum is a multiple of 1/16 below 2^20) the rule's float32 score-noise
// term has nothing to cover, and at |LSE| near 6e4 it would allow 1.4% of max|O_ref|: enough to
// hide a running-max rescale that loses the exponent's low bits (exp2(s * c - m * c) instead of
// exp2((s - m) * c) passes the rule here and fails this). These tests also require the max
// clause without that term:
// max|O - O_ref| <= 2 * max|O_base - O_ref| + (atol - score_noise). The same tightening as
// testing::expect_huge_scores_tight, where the term exceeds max|O_ref| itself.
::testing::AssertionResult within_bound_without_score_noise(const VerifyReport& r) {
  const double bound = 2.0 * r.baseline_error.max_abs + (r.atol - r.score_noise);
  if (r.error.max_abs <= bound) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << r.backend << ": max|O - O_ref| = " << r.error.max_abs
         << " > 2 * baseline + atol without the score noise = " << bound << "\n"
         << r.to_string();
}

// Both CPU backends against the float64 reference by the rule (the float32 naive as the
// baseline); with `without_score_noise` the max clause without the score noise too.
void check_backends(Problem& problem, bool without_score_noise = false) {
  const Result ref = problem.reference();
  const Result base = problem.run_with(cpu::naive_forward<float>, "cpu naive<float>");
  for (const char* backend : {"cpu-flash", "cpu-reference"}) {
    const VerifyReport r = judge(problem.config, problem.run(backend), ref, base, backend);
    EXPECT_TRUE(passes(r, problem.config.to_string()));
    if (without_score_noise) {
      EXPECT_TRUE(within_bound_without_score_noise(r));
    }
  }
}

// ---- fully masked rows ----

TEST(CpuBackends, FullyMaskedRowsGiveZeroAndMinusInf) {
  struct Lengths { std::int64_t q, k; };
  for (Lengths len : {Lengths{203, 113}, Lengths{17, 1}, Lengths{130, 64}, Lengths{5, 0}}) {
    for (DType dtype : {DType::kFP32, DType::kBF16}) {
      Config c;
      c.seqlen_q = len.q;
      c.seqlen_k = len.k;
      c.dtype = dtype;
      c.causal = len.k > 0;  // seqlen_k == 0 masks every row without causal
      SCOPED_TRACE(c.to_string());
      Problem problem(c);
      const Result ref = problem.reference();
      // Bottom-right alignment: rows below seqlen_q - seqlen_k see no key.
      for (std::int64_t s = 0; s < c.seqlen_q; ++s) {
        const bool expect_masked = s < c.seqlen_q - c.seqlen_k;
        ASSERT_EQ(ref.lse[static_cast<std::size_t>(s)] == -kInf, expect_masked) << "row " << s;
      }
      // The rule requires O = 0 exactly and LSE = -inf there, on rows the mask rule names.
      const Result base = problem.run_with(cpu::naive_forward<float>, "cpu naive<float>");
      for (const char* backend : {"cpu-flash", "cpu-reference"}) {
        const Result got = problem.run(backend);
        const VerifyReport r = judge(c, got, ref, base, backend);
        EXPECT_TRUE(passes(r, c.to_string()));
        EXPECT_EQ(r.error.masked_nonzero, 0);
        EXPECT_EQ(r.error.lse_mismatch_inf, 0);
        for (double o : got.o) ASSERT_FALSE(std::isnan(o)) << backend;
      }
    }
  }
}

// ---- extreme scores ----

// Every score of every row is near -6.25e4 (q = -c * k along the first dim, scale 1): far below a
// finite "-inf" sentinel such as -5e4 or -1e4, which would zero these rows.
TEST(CpuBackends, AllScoresBelowMinus5e4StillSoftmax) {
  for (DType dtype : {DType::kFP32, DType::kBF16}) {
    for (bool causal : {false, true}) {
      Config c;
      c.seqlen_q = 113;
      c.seqlen_k = 203;
      c.dtype = dtype;
      c.causal = causal;
      c.scale = 1.0f;
      SCOPED_TRACE(c.to_string());
      Problem problem(c);
      problem.q.fill([&](std::int64_t i, const std::int64_t* idx) {
        return idx[3] == 0 ? -250.0f : quantized(c.seed, 0, i);
      });
      problem.k.fill([&](std::int64_t i, const std::int64_t* idx) {
        return idx[3] == 0 ? 250.0f : quantized(c.seed, 1, i);
      });
      const Result ref = problem.reference();
      for (double l : ref.lse) ASSERT_LT(l, -5e4);  // the premise: every row's max is below -5e4
      check_backends(problem, /*without_score_noise=*/true);  // exact scores
    }
  }
}

// Scores spread up to ~1e4 that grow along the keys: the running max rises in every K tile, so
// the rescale factor alpha = exp2(m_old - m_new) ranges from moderate (e^-4) to exactly 0.
TEST(CpuBackends, LargeScoresRunningMaxRescale) {
  for (float slope : {0.125f, 2.0f, 50.0f}) {
    for (DType dtype : {DType::kFP32, DType::kBF16, DType::kFP16}) {
      Config c;
      c.seqlen_q = 97;
      c.seqlen_k = 203;
      c.dtype = dtype;
      c.causal = slope == 2.0f;
      c.scale = 1.0f;
      SCOPED_TRACE(c.to_string() + " slope " + std::to_string(slope));
      Problem problem(c);
      problem.q.fill([&](std::int64_t i, const std::int64_t* idx) {
        return idx[3] == 0 ? slope : quantized(c.seed, 0, i);
      });
      problem.k.fill([&](std::int64_t i, const std::int64_t* idx) {
        return idx[3] == 0 ? 0.5f * static_cast<float>(idx[1]) : quantized(c.seed, 1, i);
      });
      const Result ref = problem.reference();
      if (slope == 50.0f) {
        EXPECT_GT(max_abs(ref.lse), 4e3);
      }
      check_backends(problem, /*without_score_noise=*/true);  // exact scores
    }
  }
}

// Every score is 1e4 plus a spread of a few tens: the softmax is not one-hot, so O depends on the
// common offset cancelling exactly in exp(S - m).
TEST(CpuBackends, LargeCommonOffset) {
  for (DType dtype : {DType::kFP32, DType::kBF16}) {
    Config c;
    c.seqlen_q = 64;
    c.seqlen_k = 203;
    c.dtype = dtype;
    c.scale = 0.25f;
    SCOPED_TRACE(c.to_string());
    Problem problem(c);
    problem.q.fill([&](std::int64_t i, const std::int64_t* idx) {
      return idx[3] == 0 ? 200.0f : quantized(c.seed, 0, i);
    });
    problem.k.fill([&](std::int64_t i, const std::int64_t* idx) {
      return idx[3] == 0 ? 200.0f : quantized(c.seed, 1, i);
    });
    check_backends(problem, /*without_score_noise=*/true);  // exact scores
  }
}

// Unquantized N(0.5, 1) inputs with scores up to ~1e4: Q K^T itself rounds in float32 here, which
// the rule's score-noise term is for (2 * eps32 * |LSE| = 2.4e-3 of max|O_ref| at |LSE| = 1e4).
TEST(CpuBackends, LargeScoresWithinBaselineBound) {
  for (DType dtype : {DType::kFP32, DType::kBF16}) {
    Config c;
    c.seqlen_q = 113;
    c.seqlen_k = 203;
    c.dtype = dtype;
    c.scale = 400.0f;
    SCOPED_TRACE(c.to_string());
    Problem problem(c);
    const Result ref = problem.reference();
    EXPECT_GT(max_abs(ref.lse), 5e3);
    const Result base = problem.run_with(cpu::naive_forward<float>, "cpu naive<float>");
    const Result got = problem.run("cpu-flash");
    EXPECT_TRUE(passes(judge(c, got, ref, base, "cpu-flash"), c.to_string()));
  }
}

// Scaled scores near 2e10, finite in float32 (q = k = N(0.5, 1) * 1e5 at d64, scale 1/8): every
// row is one-hot, so O is the row of V at the largest score and LSE that score. A flash kernel
// whose exponent argument was fma(s, scale_log2, -round(max * scale_log2)) got NaN in about half
// of the outputs here and rows with LSE = -inf, O = 0 (the max's rounding, up to 512 in log2
// units, overflowed or underflowed exp2).
TEST(CpuBackends, HugeScoresStayFiniteAndOneHot) {
  for (DType dtype : {DType::kFP32, DType::kBF16, DType::kFP16}) {
    Config c;
    c.seqlen_q = 113;
    c.seqlen_k = 203;
    c.dtype = dtype;
    SCOPED_TRACE(c.to_string());
    Problem problem(c);
    // fp16 ends at 65504: 1e5 * N(0.5, 1) is clamped there.
    const float f = 1e5f, limit = dtype == DType::kFP16 ? 6e4f : 1e30f;
    problem.q.fill([&](std::int64_t i, const std::int64_t*) {
      return std::clamp(f * (0.5f + normal_at(c.seed, 0, static_cast<std::uint64_t>(i))), -limit,
                        limit);
    });
    problem.k.fill([&](std::int64_t i, const std::int64_t*) {
      return std::clamp(f * (0.5f + normal_at(c.seed, 1, static_cast<std::uint64_t>(i))), -limit,
                        limit);
    });
    const Result ref = problem.reference();
    EXPECT_GT(max_abs(ref.lse), 1e9);
    // LSE is the largest score, whose float32 dot product rounds by several float32 steps; the
    // baseline's dot products round alike, and the rule's LSE clause allows twice its error. The
    // score-noise term of atol (2.4e3 * max|O_ref| here) does not constrain O, so the max clause
    // is also checked without it: the rows are one-hot, O is a row of V.
    check_backends(problem, /*without_score_noise=*/true);
  }
}

// ---- GQA ----

// 6 query heads on 2 and on 1 kv heads equal the same problem with K and V heads repeated
// explicitly (head h reads kv head h / (heads / kv_heads)), bit for bit, and match float64.
TEST(CpuBackends, GroupedQueryHeadMapping) {
  for (std::int64_t kv_heads : {2, 1}) {
    for (DType dtype : {DType::kFP32, DType::kBF16}) {
      Config c;
      c.heads = 6;
      c.kv_heads = kv_heads;
      c.seqlen_q = 77;
      c.seqlen_k = 130;
      c.dtype = dtype;
      c.causal = kv_heads == 1;
      SCOPED_TRACE(c.to_string());
      Problem gqa(c);
      check_backends(gqa);

      Config mha_config = c;
      mha_config.kv_heads = c.heads;
      Problem mha(mha_config);
      const std::int64_t group = c.heads / kv_heads;
      const std::vector<double> k_small = gqa.k.to_double(), v_small = gqa.v.to_double();
      auto expand = [&](const std::vector<double>& small) {
        return [&, group](std::int64_t, const std::int64_t* idx) {
          const std::int64_t at = ((idx[0] * c.seqlen_k + idx[1]) * kv_heads + idx[2] / group) *
                                      c.head_dim + idx[3];
          return static_cast<float>(small[static_cast<std::size_t>(at)]);
        };
      };
      mha.k.fill(expand(k_small));
      mha.v.fill(expand(v_small));
      for (const char* backend : {"cpu-flash", "cpu-reference"}) {
        const Result a = gqa.run(backend), b = mha.run(backend);
        EXPECT_TRUE(a.o == b.o && a.lse == b.lse) << backend << ": GQA differs from expanded MHA";
      }
    }
  }
}

// ---- strided views ----

// BHSD storage seen through BSHD strides, and heads sliced out of a wider tensor (with a padded
// LSE), give bit-identical results to contiguous tensors and never write into the padding.
TEST(CpuBackends, StridedViewsMatchContiguous) {
  for (Layout layout : {Layout::kBHSD, Layout::kPaddedHeads}) {
    for (DType dtype : {DType::kFP32, DType::kFP16}) {
      Config c;
      c.batch = 2;
      c.heads = 4;
      c.kv_heads = 2;
      c.seqlen_q = 70;
      c.seqlen_k = 93;
      c.head_dim = 40;
      c.dtype = dtype;
      c.causal = layout == Layout::kBHSD;
      Problem contiguous(c);
      c.layout = layout;
      SCOPED_TRACE(c.to_string());
      Problem strided(c);  // same seed: the same logical values
      ASSERT_EQ(contiguous.q.to_double(), strided.q.to_double());
      check_backends(strided);
      for (const char* backend : {"cpu-flash", "cpu-reference"}) {
        const Result a = contiguous.run(backend), b = strided.run(backend);
        EXPECT_TRUE(a.o == b.o && a.lse == b.lse) << backend << ": strided differs from contiguous";
      }
    }
  }
}

// ---- tails and head dims (parameterized grid; FLASHATTN_TEST_TIER=full for the rest) ----

struct GridCase {
  std::int64_t seqlen_q, seqlen_k, head_dim;
  DType dtype;
  bool causal;
};

// For gtest's failure lines ("where GetParam() = ...").
void PrintTo(const GridCase& g, std::ostream* os) {
  *os << "sq=" << g.seqlen_q << " sk=" << g.seqlen_k << " d=" << g.head_dim << " "
      << dtype_name(g.dtype) << (g.causal ? " causal" : "");
}

std::string grid_name(const ::testing::TestParamInfo<GridCase>& info) {
  const GridCase& g = info.param;
  return "sq" + std::to_string(g.seqlen_q) + "_sk" + std::to_string(g.seqlen_k) + "_d" +
         std::to_string(g.head_dim) + "_" + std::string(dtype_name(g.dtype)) +
         (g.causal ? "_causal" : "");
}

// The grids come in two disjoint parts: the quick tier (suite prefix "Quick/", run by default)
// and the rest of the full grid ("Full/", run by `FLASHATTN_TEST_TIER=full scripts/test.sh`).
bool same_case(const GridCase& a, const GridCase& b) {
  return a.seqlen_q == b.seqlen_q && a.seqlen_k == b.seqlen_k && a.head_dim == b.head_dim &&
         a.dtype == b.dtype && a.causal == b.causal;
}

std::vector<GridCase> minus(const std::vector<GridCase>& all, const std::vector<GridCase>& quick) {
  std::vector<GridCase> rest;
  for (const GridCase& c : all) {
    bool in_quick = false;
    for (const GridCase& q : quick) in_quick = in_quick || same_case(c, q);
    if (!in_quick) rest.push_back(c);
  }
  return rest;
}

std::vector<GridCase> tail_cases(bool full) {
  struct Pair { std::int64_t q, k; };
  std::vector<Pair> pairs;
  std::vector<DType> dtypes = {DType::kFP32, DType::kBF16};
  if (!full) {
    pairs = {{1, 1}, {17, 17}, {113, 203}, {203, 113}, {1, 1023}, {1023, 17}, {64, 64}, {65, 127}};
  } else {
    const std::int64_t lengths[] = {1, 17, 113, 127, 203, 239, 1023, 1025};
    for (std::int64_t q : lengths) {
      for (std::int64_t k : lengths) pairs.push_back({q, k});
    }
    for (Pair p : {Pair{1, 4097}, Pair{4097, 1}, Pair{1023, 1024}, Pair{1024, 1023}}) {
      pairs.push_back(p);
    }
    dtypes.push_back(DType::kFP16);
  }
  std::vector<GridCase> cases;
  for (Pair p : pairs) {
    for (DType dtype : dtypes) {
      for (bool causal : {false, true}) cases.push_back({p.q, p.k, 64, dtype, causal});
    }
  }
  return full ? minus(cases, tail_cases(false)) : cases;
}

std::vector<GridCase> head_dim_cases(bool full) {
  std::vector<GridCase> cases;
  for (std::int64_t d : {8, 64, 72, 128, 256}) {
    for (DType dtype : {DType::kFP32, DType::kBF16, DType::kFP16}) {
      if (!full) {
        cases.push_back({113, 203, d, dtype, false});
      } else {
        cases.push_back({203, 113, d, dtype, true});
        cases.push_back({1023, 1023, d, dtype, true});
      }
    }
  }
  return cases;
}

class CpuBackendsGrid : public ::testing::TestWithParam<GridCase> {};

TEST_P(CpuBackendsGrid, MatchesFloat64Reference) {
  const GridCase& g = GetParam();
  Config c;
  c.seqlen_q = g.seqlen_q;
  c.seqlen_k = g.seqlen_k;
  c.head_dim = g.head_dim;
  c.dtype = g.dtype;
  c.causal = g.causal;
  c.heads = 2;
  c.kv_heads = 1;
  Problem problem(c);
  check_backends(problem);
}

INSTANTIATE_TEST_SUITE_P(QuickTails, CpuBackendsGrid, ::testing::ValuesIn(tail_cases(false)),
                         grid_name);
INSTANTIATE_TEST_SUITE_P(QuickHeadDims, CpuBackendsGrid,
                         ::testing::ValuesIn(head_dim_cases(false)), grid_name);
INSTANTIATE_TEST_SUITE_P(FullTails, CpuBackendsGrid, ::testing::ValuesIn(tail_cases(true)),
                         grid_name);
INSTANTIATE_TEST_SUITE_P(FullHeadDims, CpuBackendsGrid, ::testing::ValuesIn(head_dim_cases(true)),
                         grid_name);

// ---- the float32 baseline and determinism ----

// naive_forward<float> (the verifier's baseline) is float32 arithmetic rounded on store: within
// the rule's fixed baseline bound of float64 (one dtype step plus float32 noise), and, in bf16
// and fp16, no better than the output rounding (some element rounds by almost half a step).
TEST(CpuBackends, Float32BaselineNearReference) {
  for (DType dtype : {DType::kFP32, DType::kBF16, DType::kFP16}) {
    Config c;
    c.seqlen_q = 250;
    c.seqlen_k = 203;
    c.dtype = dtype;
    c.causal = true;
    SCOPED_TRACE(c.to_string());
    Problem problem(c);
    const Result ref = problem.reference();
    const Result base = problem.run_with(cpu::naive_forward<float>, "cpu naive<float>");
    const VerifyReport r = judge(c, base, ref, base, "cpu naive<float>");
    EXPECT_TRUE(r.baseline_passed) << r.to_string();
    EXPECT_TRUE(passes(r, c.to_string()));
    if (dtype != DType::kFP32) {
      EXPECT_GT(r.baseline_error.max_abs, 0.4 * (r.atol - r.score_noise)) << r.to_string();
    }
  }
}

TEST(CpuBackends, FlashIsDeterministic) {
  for (DType dtype : {DType::kFP32, DType::kBF16}) {
    Config c;
    c.batch = 2;
    c.heads = 3;
    c.kv_heads = 1;
    c.seqlen_q = 300;
    c.seqlen_k = 257;
    c.dtype = dtype;
    c.causal = true;
    SCOPED_TRACE(c.to_string());
    Problem problem(c);
    const Result first = problem.run("cpu-flash");
    for (int rerun = 0; rerun < 3; ++rerun) {
      const Result again = problem.run("cpu-flash");
      ASSERT_EQ(std::memcmp(first.o.data(), again.o.data(), first.o.size() * sizeof(double)), 0);
      ASSERT_EQ(std::memcmp(first.lse.data(), again.lse.data(), first.lse.size() * sizeof(double)),
                0);
    }
  }
}

// ---- the variants: window, softcap, ALiBi, sinks, varlen ----
//
// Every variant of params.h on both CPU backends and on the verifier's float32 baseline
// (naive_forward<float>), against brute_force() below: float64, written from params.h's
// definition and sharing no code with the backends (not MaskRule, not transform_score).

struct Variants {
  std::int64_t window_left = -1, window_right = -1;
  float softcap = 0.0f;
  std::vector<float> alibi;  // empty: none; (heads) values, or (batch, heads) with alibi_per_batch
  bool alibi_per_batch = false;
  std::vector<float> sinks;  // empty: none; (heads)
  // Varlen when lens_q is not empty: sequence b has lens_q[b] queries and lens_k[b] keys (of
  // which the first seqused_k[b] are used when seqused_k is given); Config's batch, seqlen_q and
  // seqlen_k are then ignored. The max lengths are the longest plus max_seqlen_extra.
  std::vector<std::int64_t> lens_q, lens_k;
  std::vector<std::int32_t> seqused_k;
  std::int64_t max_seqlen_extra = 0;
  std::int64_t unused_q_rows = 0;  // rows of q/out past the last sequence (never written)

  bool varlen() const { return !lens_q.empty(); }
  std::string to_string() const {
    std::ostringstream os;
    auto list = [&](const char* name, const auto& xs) {
      if (xs.empty()) return;
      os << " " << name << "=";
      for (std::size_t i = 0; i < xs.size(); ++i) os << (i ? "," : "") << xs[i];
    };
    if (window_left != -1 || window_right != -1) {
      os << " window=(" << window_left << "," << window_right << ")";
    }
    if (softcap > 0.0f) os << " softcap=" << softcap;
    list(alibi_per_batch ? "alibi(b,h)" : "alibi(h)", alibi);
    list("sinks", sinks);
    list("lens_q", lens_q);
    list("lens_k", lens_k);
    list("seqused_k", seqused_k);
    if (max_seqlen_extra) os << " max_seqlen+" << max_seqlen_extra;
    if (unused_q_rows) os << " unused_q_rows=" << unused_q_rows;
    return os.str();
  }
};

// HostTensor's factories, owned (HostTensor neither copies nor moves).
std::unique_ptr<HostTensor> bshd_ptr(DType dtype, std::int64_t b, std::int64_t s, std::int64_t h,
                                     std::int64_t d, Layout layout) {
  return std::unique_ptr<HostTensor>(new HostTensor(HostTensor::bshd(dtype, b, s, h, d, layout)));
}
std::unique_ptr<HostTensor> lse_ptr(std::int64_t b, std::int64_t h, std::int64_t s, Layout layout) {
  return std::unique_ptr<HostTensor>(new HostTensor(HostTensor::lse(b, h, s, layout)));
}

// A float32 (n) or (rows, n / rows) tensor holding `values`.
std::unique_ptr<HostTensor> side_tensor(const std::vector<float>& values, std::int64_t rows) {
  const auto n = static_cast<std::int64_t>(values.size());
  auto t = rows > 0 ? std::make_unique<HostTensor>(DType::kFP32,
                                                   std::vector<std::int64_t>{rows, n / rows},
                                                   std::vector<std::int64_t>{n / rows, 1}, 0, n)
                    : std::make_unique<HostTensor>(DType::kFP32, std::vector<std::int64_t>{n},
                                                   std::vector<std::int64_t>{1}, 0, n);
  for (std::int64_t i = 0; i < n; ++i) {
    static_cast<float*>(t->view().data)[i] = values[static_cast<std::size_t>(i)];
  }
  return t;
}
std::unique_ptr<HostTensor> int32_tensor(const std::vector<std::int32_t>& values) {
  const auto n = static_cast<std::int64_t>(values.size());
  auto t = std::make_unique<HostTensor>(DType::kInt32, std::vector<std::int64_t>{n},
                                        std::vector<std::int64_t>{1}, 0, n);
  std::memcpy(t->view().data, values.data(), values.size() * sizeof(std::int32_t));
  return t;
}

struct Expected {
  Result r;
  std::vector<bool> empty;  // per LSE element: the row sees no key
};

class VariantProblem {
 public:
  VariantProblem(const Config& c, const Variants& v) : config(c), variants(v) {
    const DType dt = c.dtype;
    if (!v.varlen()) {
      q = bshd_ptr(dt, c.batch, c.seqlen_q, c.heads, c.head_dim, c.layout);
      k = bshd_ptr(dt, c.batch, c.seqlen_k, c.kv_heads, c.head_dim, c.layout);
      vv = bshd_ptr(dt, c.batch, c.seqlen_k, c.kv_heads, c.head_dim, c.layout);
      out = bshd_ptr(dt, c.batch, c.seqlen_q, c.heads, c.head_dim, c.layout);
      lse = lse_ptr(c.batch, c.heads, c.seqlen_q, c.layout);
    } else {
      std::vector<std::int32_t> cu_q = {0}, cu_k = {0};
      for (std::size_t b = 0; b < v.lens_q.size(); ++b) {
        cu_q.push_back(cu_q.back() + static_cast<std::int32_t>(v.lens_q[b]));
        cu_k.push_back(cu_k.back() + static_cast<std::int32_t>(v.lens_k[b]));
      }
      total_q = cu_q.back() + v.unused_q_rows;
      total_k = cu_k.back();
      // (total, heads, head_dim): contiguous, or heads sliced out of a wider tensor (with a
      // padded (heads, total_q) LSE).
      auto packed = [&](std::int64_t rows, std::int64_t heads) {
        if (c.layout != Layout::kPaddedHeads) {
          return std::make_unique<HostTensor>(
              dt, std::vector<std::int64_t>{rows, heads, c.head_dim},
              std::vector<std::int64_t>{heads * c.head_dim, c.head_dim, 1}, 0,
              rows * heads * c.head_dim);
        }
        const std::int64_t wide = heads + 3;
        return std::make_unique<HostTensor>(
            dt, std::vector<std::int64_t>{rows, heads, c.head_dim},
            std::vector<std::int64_t>{wide * c.head_dim, c.head_dim, 1}, c.head_dim,
            rows * wide * c.head_dim);
      };
      q = packed(total_q, c.heads);
      k = packed(total_k, c.kv_heads);
      vv = packed(total_k, c.kv_heads);
      out = packed(total_q, c.heads);
      const std::int64_t lse_row = c.layout == Layout::kPaddedHeads ? total_q + 5 : total_q;
      lse =
          std::make_unique<HostTensor>(DType::kFP32, std::vector<std::int64_t>{c.heads, total_q},
                                       std::vector<std::int64_t>{lse_row, 1}, 0, c.heads * lse_row);
      cu_seqlens_q = int32_tensor(cu_q);
      cu_seqlens_k = int32_tensor(cu_k);
      if (!v.seqused_k.empty()) seqused_k = int32_tensor(v.seqused_k);
      for (std::size_t b = 0; b < v.lens_q.size(); ++b) {
        max_seqlen_q = std::max(max_seqlen_q, v.lens_q[b]);
        max_seqlen_k = std::max(max_seqlen_k, v.lens_k[b]);
      }
      max_seqlen_q += v.max_seqlen_extra;
      max_seqlen_k += v.max_seqlen_extra;
    }
    q->fill(normal_inputs(c.seed, 0));
    k->fill(normal_inputs(c.seed, 1));
    vv->fill(normal_inputs(c.seed, 2));
    if (!v.alibi.empty()) alibi = side_tensor(v.alibi, v.alibi_per_batch ? batch() : 0);
    if (!v.sinks.empty()) sinks = side_tensor(v.sinks, 0);
  }

  std::int64_t batch() const {
    return variants.varlen() ? static_cast<std::int64_t>(variants.lens_q.size()) : config.batch;
  }

  ForwardParams params() const {
    ForwardParams p;
    p.q = q->view();
    p.k = k->view();
    p.v = vv->view();
    p.out = out->view();
    p.lse = lse->view();
    p.softmax_scale = config.scale;
    p.causal = config.causal;
    p.window_left = variants.window_left;
    p.window_right = variants.window_right;
    p.softcap = variants.softcap;
    if (alibi) p.alibi_slopes = alibi->view();
    if (sinks) p.sinks = sinks->view();
    if (cu_seqlens_q) {
      p.cu_seqlens_q = cu_seqlens_q->view();
      p.cu_seqlens_k = cu_seqlens_k->view();
      p.max_seqlen_q = max_seqlen_q;
      p.max_seqlen_k = max_seqlen_k;
    }
    if (seqused_k) p.seqused_k = seqused_k->view();
    return p;
  }

  std::string to_string() const { return config.to_string() + variants.to_string(); }

  // The Config that judge() reads the results with: varlen outputs are one batch entry of
  // total_q rows ((total_q, heads, d) and (heads, total_q)).
  Config result_config() const {
    Config c = config;
    if (variants.varlen()) {
      c.batch = 1;
      c.seqlen_q = total_q;
    }
    return c;
  }

  Result run_with(const std::function<Status(const ForwardParams&)>& runner,
                  const std::string& what) {
    std::vector<const HostTensor*> inputs = {q.get(), k.get(), vv.get()};
    for (const auto* t : {&alibi, &sinks, &cu_seqlens_q, &cu_seqlens_k, &seqused_k}) {
      if (*t) inputs.push_back(t->get());
    }
    return run_guarded(*out, *lse, inputs, [&] { return runner(params()); }, what, to_string());
  }
  Result run(const std::string& backend) {
    return run_with([&](const ForwardParams& p) { return forward(p, backend); }, backend);
  }

  // The definition of params.h in float64, element by element.
  Expected brute_force() const {
    const Config& c = config;
    const std::vector<double> q_val = q->to_double(), k_val = k->to_double(),
                              v_val = vv->to_double();
    const std::int64_t heads = c.heads, kv_heads = c.kv_heads, d_n = c.head_dim;
    const double scale = params().scale();
    const bool varlen = variants.varlen();
    Expected e;
    e.r.o.assign(static_cast<std::size_t>(out->numel()), 0.0);
    e.r.lse.assign(static_cast<std::size_t>(lse->numel()), 0.0);
    e.empty.assign(e.r.lse.size(), false);
    std::vector<double> s;
    for (std::int64_t b = 0; b < batch(); ++b) {
      // The sequence: its first rows in the (batch * rows) x heads x d views, and its lengths.
      std::int64_t q0 = b * c.seqlen_q, k0 = b * c.seqlen_k, sq = c.seqlen_q, sk = c.seqlen_k;
      if (varlen) {
        q0 = k0 = 0;
        for (std::int64_t x = 0; x < b; ++x) {
          q0 += variants.lens_q[static_cast<std::size_t>(x)];
          k0 += variants.lens_k[static_cast<std::size_t>(x)];
        }
        sq = variants.lens_q[static_cast<std::size_t>(b)];
        sk = variants.seqused_k.empty() ? variants.lens_k[static_cast<std::size_t>(b)]
                                        : variants.seqused_k[static_cast<std::size_t>(b)];
      }
      for (std::int64_t h = 0; h < heads; ++h) {
        const std::int64_t kv_h = h / (heads / kv_heads);
        const double slope = variants.alibi.empty()
                                 ? 0.0
                                 : variants.alibi[static_cast<std::size_t>(
                                       variants.alibi_per_batch ? b * heads + h : h)];
        const bool has_sink = !variants.sinks.empty();
        const double sink = has_sink ? variants.sinks[static_cast<std::size_t>(h)] : 0.0;
        for (std::int64_t i = 0; i < sq; ++i) {
          // Query i sees key j iff 0 <= j < sk and i + sk - sq - left <= j <= i + sk - sq + right.
          const std::int64_t right = c.causal ? 0 : variants.window_right;
          std::vector<std::int64_t> keys;
          s.clear();
          for (std::int64_t j = 0; j < sk; ++j) {
            const std::int64_t from_diag = j - (i + sk - sq);
            if (variants.window_left >= 0 && -from_diag > variants.window_left) continue;
            if (right >= 0 && from_diag > right) continue;
            double dot = 0;
            for (std::int64_t d = 0; d < d_n; ++d) {
              dot += q_val[static_cast<std::size_t>(((q0 + i) * heads + h) * d_n + d)] *
                     k_val[static_cast<std::size_t>(((k0 + j) * kv_heads + kv_h) * d_n + d)];
            }
            double score = scale * dot;
            if (variants.softcap > 0.0f) {
              score = variants.softcap * std::tanh(score / variants.softcap);
            }
            score -= slope * static_cast<double>(std::llabs(from_diag));
            keys.push_back(j);
            s.push_back(score);
          }
          const std::int64_t out_row = q0 + i;  // dense: b * seqlen_q + i; varlen: the packed row
          const auto lse_at = static_cast<std::size_t>(varlen ? h * total_q + out_row
                                                              : (b * heads + h) * c.seqlen_q + i);
          double* o = &e.r.o[static_cast<std::size_t>((out_row * heads + h) * d_n)];
          if (keys.empty()) {
            e.r.lse[lse_at] = has_sink ? sink : -kInf;
            e.empty[lse_at] = true;
            continue;
          }
          double m = has_sink ? sink : -kInf;
          for (double x : s) m = std::max(m, x);
          double sum = has_sink ? std::exp(sink - m) : 0.0;
          for (std::size_t t = 0; t < keys.size(); ++t) {
            const double p = std::exp(s[t] - m);
            sum += p;
            for (std::int64_t d = 0; d < d_n; ++d) {
              o[d] +=
                  p * v_val[static_cast<std::size_t>(((k0 + keys[t]) * kv_heads + kv_h) * d_n + d)];
            }
          }
          for (std::int64_t d = 0; d < d_n; ++d) o[d] /= sum;
          e.r.lse[lse_at] = m + std::log(sum);
        }
      }
    }
    return e;
  }

  Config config;
  Variants variants;
  std::unique_ptr<HostTensor> q, k, vv, out, lse, alibi, sinks, cu_seqlens_q, cu_seqlens_k,
      seqused_k;
  std::int64_t total_q = 0, total_k = 0, max_seqlen_q = 0, max_seqlen_k = 0;
};

// Rows that see no key: O exactly 0 and LSE exactly the expected value (-inf, or the sink's
// logit with sinks), in every dtype.
::testing::AssertionResult empty_rows_exact(const VariantProblem& problem, const Result& got,
                                            const Expected& want, const std::string& what) {
  const std::int64_t heads = problem.config.heads, d_n = problem.config.head_dim;
  const bool varlen = problem.variants.varlen();
  const std::int64_t rows = varlen ? problem.total_q : problem.config.seqlen_q;
  const std::int64_t batch = varlen ? 1 : problem.config.batch;
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      for (std::int64_t i = 0; i < rows; ++i) {
        const auto at = static_cast<std::size_t>((b * heads + h) * rows + i);
        if (!want.empty[at]) continue;
        if (!(got.lse[at] == want.r.lse[at])) {
          return ::testing::AssertionFailure()
                 << what << " [" << problem.to_string() << "]: row (b=" << b << ", h=" << h
                 << ", s=" << i << ") sees no key: LSE = " << got.lse[at] << ", expected "
                 << want.r.lse[at];
        }
        for (std::int64_t d = 0; d < d_n; ++d) {
          const double o = got.o[static_cast<std::size_t>(((b * rows + i) * heads + h) * d_n + d)];
          if (!(o == 0.0)) {
            return ::testing::AssertionFailure()
                   << what << " [" << problem.to_string() << "]: row (b=" << b << ", h=" << h
                   << ", s=" << i << ") sees no key: O[" << d << "] = " << o << ", expected 0";
          }
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// One flag per output row (O's row order, as judge() reads the results) from brute force's flags
// per LSE element, head 0's: the mask does not depend on the head.
std::vector<std::uint8_t> rows_without_keys(const VariantProblem& problem, const Expected& want) {
  const Config rc = problem.result_config();
  std::vector<std::uint8_t> rows;
  for (std::int64_t b = 0; b < rc.batch; ++b) {
    for (std::int64_t s = 0; s < rc.seqlen_q; ++s) {
      rows.push_back(want.empty[static_cast<std::size_t>(b * rc.heads * rc.seqlen_q + s)] ? 1 : 0);
    }
  }
  return rows;
}

// reference_forward_f64 against brute force: two float64 computations of the same definition,
// so not the tolerance rule (which judges a result in the test dtype) but agreement to float64
// rounding, 1e-12 relative; -inf exactly where brute force has it.
::testing::AssertionResult agrees_in_float64(const Result& got, const Result& want,
                                             const std::string& what) {
  const double o_tol = 1e-12 * (1 + max_abs(want.o));
  for (std::size_t i = 0; i < want.o.size(); ++i) {
    if (!(std::fabs(got.o[i] - want.o[i]) <= o_tol)) {
      return ::testing::AssertionFailure() << what << ": O[" << i << "] = " << got.o[i]
                                           << ", brute force " << want.o[i];
    }
  }
  for (std::size_t i = 0; i < want.lse.size(); ++i) {
    const double lse_tol = 1e-12 * (1 + std::fabs(want.lse[i]));
    const bool same = want.lse[i] == -kInf ? got.lse[i] == -kInf
                                           : std::fabs(got.lse[i] - want.lse[i]) <= lse_tol;
    if (!same) {
      return ::testing::AssertionFailure() << what << ": LSE[" << i << "] = " << got.lse[i]
                                           << ", brute force " << want.lse[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Both CPU backends against brute force by the rule, with the float32 naive as the baseline
// (itself checked against brute force by the rule's fixed baseline bound, so a bug of the naive
// code that cpu-reference shares cannot hide); rows without keys exactly. Returns the number of
// rows without keys (a test's premise).
std::int64_t check_variants(VariantProblem& problem) {
  const Expected want = problem.brute_force();
  const Config rc = problem.result_config();
  const std::vector<std::uint8_t> empty_rows = rows_without_keys(problem, want);
  const std::string brute = "float64 brute force of params.h";
  const Result base = problem.run_with(cpu::naive_forward<float>, "cpu naive<float>");
  for (const char* backend : {"cpu-flash", "cpu-reference"}) {
    const Result got = problem.run(backend);
    EXPECT_TRUE(passes(judge(rc, got, want.r, base, backend, empty_rows, brute),
                       problem.to_string()));
    EXPECT_TRUE(empty_rows_exact(problem, got, want, backend));
  }
  const VerifyReport base_report =
      judge(rc, base, want.r, base, "cpu naive<float>", empty_rows, brute);
  EXPECT_TRUE(base_report.baseline_passed)
      << problem.to_string() << "\n" << base_report.to_string();
  EXPECT_TRUE(empty_rows_exact(problem, base, want, "cpu naive<float>"));
  // The verifier's float64 reference (its own buffer layout: out's and lse's shapes, row-major)
  // agrees with brute force to float64 rounding.
  Result f64;
  f64.o.assign(want.r.o.size(), 0.0);
  f64.lse.assign(want.r.lse.size(), 0.0);
  EXPECT_TRUE(cpu::reference_forward_f64(problem.params(), f64.o.data(), f64.lse.data()).ok());
  EXPECT_TRUE(agrees_in_float64(f64, want.r, "reference_forward_f64" + problem.to_string()));
  EXPECT_TRUE(empty_rows_exact(problem, f64, want, "reference_forward_f64"));
  return static_cast<std::int64_t>(std::count(want.empty.begin(), want.empty.end(), true));
}

struct Lengths {
  std::int64_t q, k;
};

// Sliding windows of every shape: the diagonal only, one side, both, wider than the sequence,
// causal with a left window; seqlen_q below, equal to and above seqlen_k (tile tails, rows that
// see nothing when the window passes every key).
TEST(CpuVariants, SlidingWindow) {
  struct Window {
    std::int64_t left, right;
    bool causal;
  };
  const Window windows[] = {{0, 0, false},   {3, 0, false},   {0, 5, false},       {17, 9, false},
                            {64, -1, false}, {-1, 64, false}, {1000, 1000, false}, {-1, 0, false},
                            {20, -1, true},  {70, 0, true},   {0, -1, true}};
  int n = 0;
  for (Lengths len : {Lengths{113, 203}, Lengths{203, 113}, Lengths{130, 130}}) {
    for (const Window& w : windows) {
      Config c;
      c.heads = 4;
      c.kv_heads = 2;
      c.seqlen_q = len.q;
      c.seqlen_k = len.k;
      c.dtype = (n++ % 2) ? DType::kBF16 : DType::kFP32;
      c.causal = w.causal;
      Variants v;
      v.window_left = w.left;
      v.window_right = w.right;
      VariantProblem problem(c, v);
      SCOPED_TRACE(problem.to_string());
      check_variants(problem);
    }
  }
}

// A window that passes every key of some rows: those rows see nothing (O = 0, LSE = -inf).
TEST(CpuVariants, WindowRowsWithoutKeys) {
  Config c;
  c.seqlen_q = 203;
  c.seqlen_k = 70;
  Variants v;
  v.window_left = 5;
  v.window_right = 2;
  VariantProblem problem(c, v);
  SCOPED_TRACE(problem.to_string());
  // Rows i < sq - sk - 2 end before key 0; every other row sees up to 8 keys.
  EXPECT_EQ(check_variants(problem), c.heads * (203 - 70 - 2));
}

// Softcap from 1 (every score squashed into (-1, 1), nearly uniform rows) to 1e4 (about the
// identity), with ordinary scores and scores up to ~1e4 (scale 400: softcap 30 saturates them
// at 30, softcap 1e4 leaves them one-hot); causal and not, GQA.
TEST(CpuVariants, Softcap) {
  int n = 0;
  for (float softcap : {1.0f, 5.0f, 30.0f, 1e4f}) {
    for (std::optional<float> scale : {std::optional<float>(), std::optional<float>(400.0f)}) {
      Config c;
      c.heads = 6;
      c.kv_heads = 2;
      c.seqlen_q = 97;
      c.seqlen_k = 203;
      c.scale = scale;
      c.dtype = std::array<DType, 3>{DType::kFP32, DType::kBF16, DType::kFP16}[n % 3];
      c.causal = n++ % 2 == 1;
      Variants v;
      v.softcap = softcap;
      VariantProblem problem(c, v);
      SCOPED_TRACE(problem.to_string());
      check_variants(problem);
    }
  }
}

// ALiBi slopes of one (heads) vector (BLOOM's 2^(-8 (h + 1) / heads), and large ones up to 8,
// which make each row nearly one-hot at its diagonal) and of a (batch, heads) matrix.
TEST(CpuVariants, Alibi) {
  const std::vector<float> bloom = {0.5f, 0.25f, 0.125f, 0.0625f};
  const std::vector<float> large = {8.0f, 2.0f, 0.75f, 0.01f};
  int n = 0;
  for (Lengths len : {Lengths{113, 203}, Lengths{203, 113}}) {
    for (int slopes = 0; slopes < 3; ++slopes) {
      Config c;
      c.batch = 2;
      c.heads = 4;
      c.kv_heads = len.q > len.k ? 1 : 2;
      c.seqlen_q = len.q;
      c.seqlen_k = len.k;
      c.dtype = (n % 2) ? DType::kBF16 : DType::kFP32;
      c.causal = n++ % 3 == 1;
      Variants v;
      if (slopes == 0) v.alibi = bloom;
      if (slopes == 1) v.alibi = large;
      if (slopes == 2) {
        v.alibi = bloom;
        v.alibi.insert(v.alibi.end(), large.begin(), large.end());  // batch 1: the large ones
        v.alibi_per_batch = true;
      }
      VariantProblem problem(c, v);
      SCOPED_TRACE(problem.to_string());
      check_variants(problem);
    }
  }
}

// Sinks: moderate logits (comparable to the rows' LSE, so they take a real share of the
// softmax), and extreme ones (1e4 takes it all, -1e4 and -inf nothing). Causal with
// seqlen_q > seqlen_k leaves rows without keys: there O = 0 and LSE = the sink exactly. Alone
// (raw scores: the sink enters as sinks[h] / scale) and with softcap or ALiBi (natural units).
TEST(CpuVariants, Sinks) {
  const std::vector<float> moderate = {-2.0f, 6.0f, 8.0f, 10.0f};
  const std::vector<float> extreme = {1e4f, -1e4f, 40.0f, -std::numeric_limits<float>::infinity()};
  int n = 0;
  for (const std::vector<float>& sinks : {moderate, extreme}) {
    for (int with = 0; with < 3; ++with) {  // alone, with softcap, with ALiBi
      for (bool causal : {false, true}) {
        Config c;
        c.heads = 4;
        c.kv_heads = 2;
        c.seqlen_q = 150;
        c.seqlen_k = causal ? 97 : 203;
        c.causal = causal;
        c.dtype = std::array<DType, 3>{DType::kFP32, DType::kBF16, DType::kFP16}[n++ % 3];
        Variants v;
        v.sinks = sinks;
        if (with == 1) v.softcap = 2.0f;
        if (with == 2) v.alibi = {0.5f, 0.03f, 1.0f, 0.125f};
        VariantProblem problem(c, v);
        SCOPED_TRACE(problem.to_string());
        const std::int64_t empty = check_variants(problem);
        EXPECT_EQ(empty, causal ? c.heads * (150 - 97) : 0);
      }
    }
  }
}

// A variable-length batch: odd lengths, tile multiples and tails, zero-length sequences (no
// queries; no keys: every row without keys), seqlen_q > seqlen_k, seqused_k, every other variant
// with it, and max_seqlen above the longest sequence.
struct VarlenCase {
  const char* name;
  Variants v;
  bool causal;
};

std::vector<VarlenCase> varlen_cases() {
  const std::vector<std::int64_t> lens_q = {17, 0, 64, 65, 1, 130, 33};
  const std::vector<std::int64_t> lens_k = {33, 5, 0, 64, 200, 129, 1};
  std::vector<VarlenCase> cases;
  auto add = [&](const char* name, bool causal, auto&& modify) {
    Variants v;
    v.lens_q = lens_q;
    v.lens_k = lens_k;
    modify(v);
    cases.push_back({name, v, causal});
  };
  add("plain", false, [](Variants&) {});
  add("causal", true, [](Variants&) {});
  add("seqused_k", true, [](Variants& v) { v.seqused_k = {10, 5, 0, 64, 1, 0, 1}; });
  add("max_seqlen_extra", false, [](Variants& v) { v.max_seqlen_extra = 70; });
  add("window", false, [](Variants& v) {
    v.window_left = 9;
    v.window_right = 3;
  });
  add("causal_window", true, [](Variants& v) { v.window_left = 40; });
  add("softcap", false, [](Variants& v) { v.softcap = 3.0f; });
  add("alibi_batch", true, [](Variants& v) {
    for (int b = 0; b < 7; ++b) {
      for (float s : {0.5f, 8.0f, 0.0625f, 0.25f, 1.0f, 0.0f}) v.alibi.push_back(s / (1.0f + b));
    }
    v.alibi_per_batch = true;
  });
  add("sinks", true, [](Variants& v) { v.sinks = {6.0f, -1.0f, 9.0f, 1e4f, -1e4f, 7.5f}; });
  add("everything", true, [](Variants& v) {
    v.seqused_k = {30, 2, 0, 60, 150, 129, 0};
    v.window_left = 50;
    v.softcap = 4.0f;
    v.alibi = {0.25f, 0.5f, 1.0f, 2.0f, 0.125f, 0.0625f};
    v.sinks = {7.0f, 5.0f, 3.0f, 6.0f, -3.0f, 8.0f};
    v.max_seqlen_extra = 1;
  });
  return cases;
}

// Each varlen case at 6 query heads on 2 kv heads (GQA), fp32 and bf16 (fp16 for one), and in
// the padded-heads layout (strided packed tensors, padded LSE rows).
TEST(CpuVariants, VarlenMatchesBruteForce) {
  int n = 0;
  for (const VarlenCase& vc : varlen_cases()) {
    Config c;
    c.heads = 6;
    c.kv_heads = 2;
    c.head_dim = 32;
    c.causal = vc.causal;
    c.dtype = std::array<DType, 3>{DType::kFP32, DType::kBF16, DType::kFP16}[n % 3];
    c.layout = n++ % 2 ? Layout::kPaddedHeads : Layout::kContiguous;
    VariantProblem problem(c, vc.v);
    SCOPED_TRACE(std::string(vc.name) + ": " + problem.to_string());
    const std::int64_t empty = check_variants(problem);
    EXPECT_GT(empty, 0);  // sequence 2 has no keys
  }
}

// A packed batch gives what each of its sequences gives alone (a dense batch of one with that
// sequence's rows, its used keys, its ALiBi row), bit for bit on both backends: every work item
// reads only its own sequence.
TEST(CpuVariants, VarlenEqualsEachSequenceAlone) {
  for (const VarlenCase& vc : varlen_cases()) {
    Config c;
    c.heads = 6;
    c.kv_heads = 2;
    c.head_dim = 32;
    c.causal = vc.causal;
    c.dtype = DType::kBF16;
    VariantProblem packed(c, vc.v);
    SCOPED_TRACE(std::string(vc.name) + ": " + packed.to_string());
    const std::vector<double> q_all = packed.q->to_double(), k_all = packed.k->to_double(),
                              v_all = packed.vv->to_double();
    for (const char* backend : {"cpu-flash", "cpu-reference"}) {
      const Result all = packed.run(backend);
      std::int64_t q0 = 0, k0 = 0;
      for (std::size_t b = 0; b < vc.v.lens_q.size(); ++b) {
        Config one = c;
        one.batch = 1;
        one.seqlen_q = vc.v.lens_q[b];
        one.seqlen_k = vc.v.seqused_k.empty() ? vc.v.lens_k[b] : vc.v.seqused_k[b];
        Variants v1 = vc.v;
        v1.lens_q.clear();
        v1.lens_k.clear();
        v1.seqused_k.clear();
        if (vc.v.alibi_per_batch) {
          v1.alibi.assign(vc.v.alibi.begin() + static_cast<std::ptrdiff_t>(b) * c.heads,
                          vc.v.alibi.begin() + static_cast<std::ptrdiff_t>(b + 1) * c.heads);
          v1.alibi_per_batch = false;
        }
        VariantProblem alone(one, v1);
        const std::int64_t hd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim;
        alone.q->fill([&](std::int64_t i, const std::int64_t*) {
          return static_cast<float>(q_all[static_cast<std::size_t>(q0 * hd + i)]);
        });
        alone.k->fill([&](std::int64_t i, const std::int64_t*) {
          return static_cast<float>(k_all[static_cast<std::size_t>(k0 * kvd + i)]);
        });
        alone.vv->fill([&](std::int64_t i, const std::int64_t*) {
          return static_cast<float>(v_all[static_cast<std::size_t>(k0 * kvd + i)]);
        });
        const Result seq = alone.run(backend);
        bool same = true;
        for (std::int64_t i = 0; i < one.seqlen_q * hd; ++i) {
          same = same &&
                 std::memcmp(&seq.o[static_cast<std::size_t>(i)],
                             &all.o[static_cast<std::size_t>(q0 * hd + i)], sizeof(double)) == 0;
        }
        for (std::int64_t h = 0; h < c.heads; ++h) {
          for (std::int64_t i = 0; i < one.seqlen_q; ++i) {
            same =
                same && std::memcmp(&seq.lse[static_cast<std::size_t>(h * one.seqlen_q + i)],
                                    &all.lse[static_cast<std::size_t>(h * packed.total_q + q0 + i)],
                                    sizeof(double)) == 0;
          }
        }
        EXPECT_TRUE(same) << backend << ": sequence " << b << " differs from it run alone";
        q0 += vc.v.lens_q[b];
        k0 += vc.v.lens_k[b];
      }
    }
  }
}

// Rows of q/out past cu_seqlens_q[batch] belong to no sequence and are never written (they keep
// the poison); the rest matches brute force.
TEST(CpuVariants, VarlenRowsPastTheLastSequenceUntouched) {
  Config c;
  c.heads = 2;
  c.kv_heads = 1;
  c.head_dim = 16;
  Variants v;
  v.lens_q = {5, 70};
  v.lens_k = {9, 3};
  v.sinks = {1.0f, 2.0f};
  v.unused_q_rows = 6;
  VariantProblem problem(c, v);
  SCOPED_TRACE(problem.to_string());
  const std::int64_t used = 75;
  for (const char* backend : {"cpu-flash", "cpu-reference"}) {
    const Result got = problem.run(backend);
    std::int64_t untouched = 0;
    for (std::int64_t row = used; row < problem.total_q; ++row) {
      for (std::int64_t e = 0; e < c.heads * c.head_dim; ++e) {
        untouched += std::isnan(got.o[static_cast<std::size_t>(row * c.heads * c.head_dim + e)]);
      }
      for (std::int64_t h = 0; h < c.heads; ++h) {
        untouched += std::isnan(got.lse[static_cast<std::size_t>(h * problem.total_q + row)]);
      }
    }
    EXPECT_EQ(untouched, 6 * c.heads * (c.head_dim + 1)) << backend;
    std::int64_t written = 0;
    for (double x : got.o) written += !std::isnan(x);
    EXPECT_EQ(written, used * c.heads * c.head_dim) << backend;
  }
}

}  // namespace
}  // namespace flashattn
