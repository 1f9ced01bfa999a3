// The CPU verification grid (cpu-flash against the float64 reference through verify()) and tests
// of the verifier itself: fed a wrong result, it must fail with the right failure line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "common/random.h"
#include "test_util.h"
#include "variant_cases.h"
#include "verify/compare.h"
#include "verify/inputs.h"
#include "verify/verify.h"

namespace flashattn {
namespace {

// ---------------------------------------------------------------------------------------------
// The grid.

struct GridCase {
  ProblemShape shape;
  InputLayout layout = InputLayout::kContiguous;
  InputKind kind = InputKind::kNormal;
};

std::string case_name(const GridCase& c) {
  const ProblemShape& s = c.shape;
  std::ostringstream os;
  os << dtype_name(s.dtype) << "_b" << s.batch << "_h" << s.heads << "kv" << s.kv_heads << "_sq"
     << s.seqlen_q << "_sk" << s.seqlen_k << "_d" << s.head_dim << (s.causal ? "_causal" : "");
  if (c.layout == InputLayout::kStridedBHSD) os << "_bhsd";
  if (c.layout == InputLayout::kPaddedHeads) os << "_paddedheads";
  if (c.kind == InputKind::kLargeScores) os << "_largescores";
  if (c.kind == InputKind::kVeryNegative) os << "_verynegative";
  if (c.kind == InputKind::kLargeMagnitude) os << "_largemagnitude";
  if (c.kind == InputKind::kHugeScores) os << "_hugescores";
  return os.str();
}

using LengthPair = std::pair<std::int64_t, std::int64_t>;

// Length pairs of docs/testing.md that the CPU affords: equal lengths, then seqlen_q != seqlen_k
// both ways (causal with seqlen_q > seqlen_k leaves the first rows without any key).
const std::vector<LengthPair>& length_pairs() {
  static const std::vector<LengthPair> kPairs = {
      {1, 1},     {17, 17},   {113, 113}, {203, 203},  {1023, 1023}, {113, 203},
      {203, 113}, {1, 1023},  {1023, 1},  {17, 1023},  {1023, 17}};
  return kPairs;
}

const std::vector<std::int64_t> kHeadDims = {8, 16, 64, 72, 128, 256};
const std::vector<DType> kDtypes = {DType::kBF16, DType::kFP16, DType::kFP32};

// Full grid (the "Full/" suite holds what the quick one does not):
//   every length pair x head dim x dtype x causal (b=1, h=2 on 1 kv head), 396 cases;
//   GQA 6/2 and MQA 6/1 over every length pair x dtype x causal at d=64 (b=2, b=1 at
//   1023 x 1023 to stay under the float64 reference limit), 132 cases;
//   every layout x input kind x dtype x causal on two shapes, 144 cases;
//   every layout x distortion x causal on every length pair (dtype rotating), 198 cases.
// Quick tier (the default), 89 cases: every length pair x head dim with dtype and causal
// rotating, GQA/MQA on every length pair, every layout x input kind once.
std::vector<GridCase> full_grid() {
  std::vector<GridCase> cases;
  for (auto [sq, sk] : length_pairs()) {
    for (std::int64_t d : kHeadDims) {
      for (DType dt : kDtypes) {
        for (bool causal : {false, true}) {
          cases.push_back({testing::dense(1, 2, 1, sq, sk, d, dt, causal)});
        }
      }
    }
  }
  for (auto [h, kv] : {LengthPair{6, 2}, LengthPair{6, 1}}) {
    for (auto [sq, sk] : length_pairs()) {
      for (DType dt : kDtypes) {
        for (bool causal : {false, true}) {
          cases.push_back({testing::dense(sq * sk > 500000 ? 1 : 2, h, kv, sq, sk, 64, dt, causal)});
        }
      }
    }
  }
  for (const ProblemShape& base : {testing::dense(2, 6, 2, 113, 203, 64, DType::kBF16, false),
                                   testing::dense(1, 4, 2, 203, 113, 128, DType::kBF16, false)}) {
    for (InputLayout layout :
         {InputLayout::kContiguous, InputLayout::kStridedBHSD, InputLayout::kPaddedHeads}) {
      for (InputKind kind : {InputKind::kNormal, InputKind::kLargeScores,
                             InputKind::kVeryNegative, InputKind::kLargeMagnitude,
                             InputKind::kHugeScores}) {
        for (DType dt : kDtypes) {
          for (bool causal : {false, true}) {
            ProblemShape s = base;
            s.dtype = dt;
            s.causal = causal;
            cases.push_back({s, layout, kind});
          }
        }
      }
    }
  }
  // Layouts x input kinds on every length pair: masking edge cases meet strides and distortions.
  int i = 0;
  for (auto [sq, sk] : length_pairs()) {
    for (InputLayout layout :
         {InputLayout::kContiguous, InputLayout::kStridedBHSD, InputLayout::kPaddedHeads}) {
      for (InputKind kind : {InputKind::kLargeScores, InputKind::kVeryNegative,
                             InputKind::kLargeMagnitude, InputKind::kHugeScores}) {
        for (bool causal : {false, true}) {
          cases.push_back({testing::dense(1, 4, 2, sq, sk, 64, kDtypes[i++ % 3], causal), layout, kind});
        }
      }
    }
  }
  return cases;
}

std::vector<GridCase> quick_grid() {
  std::vector<GridCase> cases;
  // Every length pair with every head dim; dtype and causal rotate (so each dtype meets each
  // length pair, and causal meets each head dim).
  const auto& pairs = length_pairs();
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    for (std::size_t j = 0; j < kHeadDims.size(); ++j) {
      const auto [sq, sk] = pairs[i];
      cases.push_back(
          {testing::dense(1, 2, 1, sq, sk, kHeadDims[j], kDtypes[(i + j) % 3], (i + j) % 2 == 1)});
    }
  }
  // GQA and MQA over every length pair, dtype and causal rotating.
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    const auto [sq, sk] = pairs[i];
    cases.push_back({testing::dense(1, 6, i % 2 == 0 ? 2 : 1, sq, sk, 64, kDtypes[i % 3], i % 4 < 2)});
  }
  // Layouts x input kinds, dtypes rotating, causal with seqlen_q > seqlen_k on every other one.
  int i = 0;
  for (InputLayout layout :
       {InputLayout::kContiguous, InputLayout::kStridedBHSD, InputLayout::kPaddedHeads}) {
    for (InputKind kind : {InputKind::kNormal, InputKind::kLargeScores, InputKind::kVeryNegative,
                           InputKind::kLargeMagnitude, InputKind::kHugeScores}) {
      const bool flip = i % 2 == 0;
      ProblemShape s = testing::dense(2, 4, 2, flip ? 203 : 113, flip ? 113 : 203, i % 3 == 0 ? 128 : 64,
                                  kDtypes[i % 3], flip);
      cases.push_back({s, layout, kind});
      ++i;
    }
  }
  return cases;
}

// Each name once (the lists overlap). The quick tier is the "Quick/" instantiation below; the
// "Full/" one holds the rest of the full grid (scripts/test.sh runs it when
// FLASHATTN_TEST_TIER=full).
std::vector<GridCase> unique_cases(const std::vector<GridCase>& cases,
                                   const std::vector<GridCase>& exclude = {}) {
  std::set<std::string> names;
  for (const GridCase& c : exclude) names.insert(case_name(c));
  std::vector<GridCase> out;
  for (const GridCase& c : cases) {
    if (names.insert(case_name(c)).second) out.push_back(c);
  }
  return out;
}

std::uint64_t case_seed(const GridCase& c) {
  // Distinct per case, stable across runs and tiers: hash of the name mixed with the base seed.
  std::uint64_t h = testing::base_seed();
  for (char ch : case_name(c)) h = splitmix64(h ^ static_cast<unsigned char>(ch));
  return h;
}

// For gtest's listing and failure lines.
void PrintTo(const GridCase& c, std::ostream* os) { *os << case_name(c); }

class CpuFlashGridTest : public ::testing::TestWithParam<GridCase> {};

TEST_P(CpuFlashGridTest, MatchesReference) {
  const GridCase& c = GetParam();
  VerifyOptions options;
  options.backend = "cpu-flash";
  options.device = Device::cpu();
  options.seed = case_seed(c);
  options.layout = c.layout;
  options.kind = c.kind;
  VerifyReport report;
  const Status st = verify(c.shape, options, &report);
  ASSERT_TRUE(st.ok()) << st.to_string() << " (seed " << options.seed << ")";
  EXPECT_TRUE(report.passed) << report.to_string();
  EXPECT_EQ(report.backend, "cpu-flash");
  EXPECT_EQ(report.reference, "cpu-reference (float64)");
  EXPECT_TRUE(report.guards_intact);
  EXPECT_EQ(report.unwritten, 0);
  // Causal with seqlen_q > seqlen_k: rows without keys exist and were checked.
  if (c.shape.causal && c.shape.seqlen_q > c.shape.seqlen_k) {
    EXPECT_EQ(report.error.masked_nonzero, 0) << report.to_string();
    EXPECT_EQ(report.error.lse_mismatch_inf, 0) << report.to_string();
  }
  testing::expect_huge_scores_tight(c.kind, report);
}

std::string param_name(const ::testing::TestParamInfo<GridCase>& param_info) {
  return case_name(param_info.param);
}

INSTANTIATE_TEST_SUITE_P(Quick, CpuFlashGridTest, ::testing::ValuesIn(unique_cases(quick_grid())),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Full, CpuFlashGridTest,
                         ::testing::ValuesIn(unique_cases(full_grid(), quick_grid())), param_name);

// The reference checked against itself through the verifier: zero error.
TEST(VerifyTest, ReferenceAgainstItselfIsExact) {
  VerifyOptions options;
  options.backend = "cpu-reference";
  options.seed = testing::base_seed();
  VerifyReport report;
  const ProblemShape s = testing::dense(1, 2, 1, 33, 47, 64, DType::kFP32, true);
  ASSERT_TRUE(verify(s, options, &report).ok());
  EXPECT_TRUE(report.passed) << report.to_string();
  // cpu-reference computes in float64 and stores float32: only the output rounding remains.
  EXPECT_LE(report.error.max_abs, report.atol);
}

TEST(VerifyTest, AutoResolvesToCpuFlashOnHost) {
  VerifyOptions options;
  options.seed = testing::base_seed();
  VerifyReport report;
  ASSERT_TRUE(verify(testing::dense(1, 1, 1, 5, 9, 16, DType::kBF16, false), options, &report).ok());
  EXPECT_EQ(report.backend, "cpu-flash");
  EXPECT_TRUE(report.passed) << report.to_string();
}

TEST(VerifyTest, EmptyShapesAreDefined) {
  VerifyOptions options;
  options.backend = "cpu-flash";
  options.seed = testing::base_seed();
  // seqlen_k = 0: every row sees no key, O = 0 and LSE = -inf.
  for (const ProblemShape& s : {testing::dense(1, 2, 1, 7, 0, 64, DType::kBF16, false),
                                testing::dense(1, 2, 1, 0, 7, 64, DType::kBF16, false),
                                testing::dense(0, 2, 1, 7, 7, 64, DType::kFP16, true)}) {
    VerifyReport report;
    const Status st = verify(s, options, &report);
    ASSERT_TRUE(st.ok()) << s.to_string() << ": " << st.to_string();
    EXPECT_TRUE(report.passed) << report.to_string();
  }
}

TEST(VerifyTest, BadShapeIsAStatusNotAFailedReport) {
  VerifyOptions options;
  options.backend = "cpu-flash";
  VerifyReport report;
  const Status st = verify(testing::dense(1, 6, 4, 8, 8, 64, DType::kBF16, false), options, &report);
  EXPECT_EQ(st.code(), StatusCode::kInvalidShape) << st.to_string();
  const Status st2 = verify(testing::dense(1, 2, 1, 8, 8, 20, DType::kBF16, false), options, &report);
  EXPECT_EQ(st2.code(), StatusCode::kUnsupportedHeadDim) << st2.to_string();
}

TEST(VerifyTest, TooLargeForCpuReferenceWithoutCudaIsAnError) {
  VerifyOptions options;
  options.backend = "cpu-flash";
  options.cpu_reference_limit = 1000;
  VerifyReport report;
  const Status st = verify(testing::dense(1, 1, 1, 16, 16, 64, DType::kBF16, false), options, &report);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("cpu_reference_limit"), std::string::npos) << st.message();
}

// The limit is checked before the inputs are allocated: q here would be 2^56 * 8 fp32 values
// (2^61 bytes, more than any host holds), so a late check would report out_of_memory instead.
TEST(VerifyTest, CpuReferenceLimitIsCheckedBeforeAllocating) {
  VerifyOptions options;
  options.backend = "cpu-flash";
  VerifyReport report;
  const ProblemShape s = testing::dense(1, 1, 1, std::int64_t{1} << 56, 1, 8, DType::kFP32, false);
  const Status st = verify(s, options, &report);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
  EXPECT_NE(st.message().find("= 576460752303423488 multiply-adds exceeds cpu_reference_limit = "
                              "6e+08"),
            std::string::npos)
      << st.message();
  // The limit is inclusive: 1*1*16*16*64 = 16384 multiply-adds pass at 16384, not at 16383.
  const ProblemShape small = testing::dense(1, 1, 1, 16, 16, 64, DType::kFP32, false);
  options.cpu_reference_limit = 16383;
  EXPECT_EQ(verify(small, options, &report).code(), StatusCode::kUnsupported);
  options.cpu_reference_limit = 16384;
  const Status at_limit = verify(small, options, &report);
  ASSERT_TRUE(at_limit.ok()) << at_limit.to_string();
  EXPECT_EQ(report.reference, "cpu-reference (float64)");
}

// Sizes whose products overflow int64 are an invalid shape naming the fields, before anything is
// allocated (not "host allocation of 18446744073.71 GB failed").
TEST(VerifyTest, SizesThatOverflowAreAnInvalidShape) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  VerifyOptions options;
  options.backend = "cpu-flash";
  VerifyReport report;
  const Status st = verify(testing::dense(kMax, 8, 8, 512, 512, 128, DType::kFP32, false), options,
                           &report);
  EXPECT_EQ(st.code(), StatusCode::kInvalidShape) << st.to_string();
  EXPECT_NE(st.message().find("batch * seqlen_q * heads * head_dim * 4 bytes (q in fp32) = " +
                              std::to_string(kMax) + " * 512 * 8 * 128 * 4 does not fit in 64 bits"),
            std::string::npos)
      << st.message();

  // The caller's names: the CLI's flags.
  ShapeFieldNames flags;
  flags.batch = "--batch";
  flags.seqlen_q = flags.seqlen_k = "--seqlens";
  flags.heads = "--heads";
  flags.head_dim = "--head-dim";
  ShapeSizes sizes;
  // 2^45 * 512 * 4 * 64 fp32 elements: 2^64 bytes, which wrapped to 0.
  const Status bytes = shape_sizes(testing::dense(std::int64_t{1} << 45, 4, 4, 512, 512, 64,
                                              DType::kFP32, false),
                                   &sizes, flags);
  EXPECT_EQ(bytes.code(), StatusCode::kInvalidShape);
  EXPECT_NE(bytes.message().find("--batch * --seqlens * --heads * --head-dim * 4 bytes"),
            std::string::npos)
      << bytes.message();
  // Only the multiply-adds overflow: 2^25 queries and keys, 2^10 heads, d = 2^5 (2^65).
  const Status macs = shape_sizes(testing::dense(1, 1 << 10, 1, 1 << 25, 1 << 25, 32, DType::kBF16,
                                             false),
                                  &sizes);
  EXPECT_NE(macs.message().find("(multiply-adds)"), std::string::npos) << macs.to_string();

  // In range: exact sizes; a zero batch makes everything 0 whatever the rest.
  ASSERT_TRUE(shape_sizes(testing::dense(2, 8, 2, 100, 300, 64, DType::kBF16, false), &sizes).ok());
  EXPECT_EQ(sizes.q_bytes, 2 * 100 * 8 * 64 * 2);
  EXPECT_EQ(sizes.kv_bytes, 2 * 300 * 2 * 64 * 2);
  EXPECT_EQ(sizes.lse_bytes, 2 * 8 * 100 * 4);
  EXPECT_EQ(sizes.io_bytes, 2 * sizes.q_bytes + 2 * sizes.kv_bytes + sizes.lse_bytes);
  EXPECT_EQ(sizes.macs, 2 * 8 * 100 * 300 * 64);
  ASSERT_TRUE(shape_sizes(testing::dense(0, kMax, kMax, kMax, kMax, 64, DType::kFP32, false), &sizes)
                  .ok());
  EXPECT_EQ(sizes.macs, 0);
  EXPECT_EQ(sizes.io_bytes, 0);
}

// all_input_kinds() lists every kind once, by name, so the CLI's --inputs choices need no edit
// when a kind is added (the enum's first four are these, in order).
TEST(VerifyTest, AllInputKindsAreListedOnceByName) {
  const std::vector<InputKind> kinds = verifier::all_input_kinds();
  ASSERT_GE(kinds.size(), 4u);
  EXPECT_EQ(kinds[0], InputKind::kNormal);
  EXPECT_EQ(kinds[1], InputKind::kLargeScores);
  EXPECT_EQ(kinds[2], InputKind::kVeryNegative);
  EXPECT_EQ(kinds[3], InputKind::kLargeMagnitude);
  std::set<std::string> names;
  for (InputKind k : kinds) {
    const std::string name(verifier::kind_name(k));
    EXPECT_NE(name, "?");
    EXPECT_TRUE(names.insert(name).second) << name << " twice";
  }
}

TEST(VerifyTest, CudaBackendOnHostTensorsIsAnError) {
  VerifyOptions options;
  options.backend = "flash";  // a CUDA backend, host tensors
  VerifyReport report;
  const Status st = verify(testing::dense(1, 1, 1, 16, 16, 64, DType::kBF16, false), options, &report);
  EXPECT_FALSE(st.ok());
}

TEST(VerifyTest, ReportNamesEverything) {
  VerifyOptions options;
  options.backend = "cpu-flash";
  options.seed = 4242;
  options.layout = InputLayout::kPaddedHeads;
  VerifyReport report;
  const ProblemShape s = testing::dense(2, 6, 2, 113, 203, 64, DType::kBF16, true);
  ASSERT_TRUE(verify(s, options, &report).ok());
  const std::string text = report.to_string();
  for (const char* needle : {"PASS", "b=2 h=6/2 sq=113 sk=203 d=64 bf16 causal", "cpu-flash",
                             "cpu-reference (float64)", "cpu naive (float32 accumulate, bf16 out)",
                             "seed 4242", "padded-heads", "max_abs", "mean_abs", "rel_l2",
                             "lse_max_abs", "bound", "atol", "guards intact"}) {
    EXPECT_NE(text.find(needle), std::string::npos) << "missing \"" << needle << "\" in\n" << text;
  }
  // At the rounding floor of bf16 (docs/testing.md: rel-L2 about 1.8e-3 for randn + 0.5).
  EXPECT_LT(report.error.rel_l2, 5e-3) << text;
  EXPECT_EQ(s.to_string(), "b=2 h=6/2 sq=113 sk=203 d=64 bf16 causal");
}

// ---------------------------------------------------------------------------------------------
// The verifier can fail: the compare stage fed deliberately wrong results.

class CompareTest : public ::testing::Test {
 protected:
  // b=2, sq=5, h=3, d=8; rows s = 0, 1 of every (b, h) have no keys (LSE_ref = -inf, O_ref = 0).
  void SetUp() override {
    dims_ = {2, 5, 3, 8};
    ref_.out.resize(static_cast<std::size_t>(dims_.out_numel()));
    ref_.lse.resize(static_cast<std::size_t>(dims_.lse_numel()));
    for (std::int64_t i = 0; i < dims_.out_numel(); ++i) {
      const std::int64_t s = (i / (dims_.head_dim * dims_.heads)) % dims_.seqlen_q;
      ref_.out[static_cast<std::size_t>(i)] = s < 2 ? 0.0 : 0.5 + 0.3 * normal_at(7, 0, i);
    }
    for (std::int64_t i = 0; i < dims_.lse_numel(); ++i) {
      const std::int64_t s = i % dims_.seqlen_q;
      ref_.lse[static_cast<std::size_t>(i)] =
          s < 2 ? -std::numeric_limits<double>::infinity() : 2.0 + normal_at(7, 1, i);
    }
    // Baseline: the reference rounded to bf16 plus a little noise; good: rounded only.
    baseline_ = rounded(0.001);
    good_ = rounded(0.0);
  }

  verifier::HostOutputs rounded(double noise) const {
    verifier::HostOutputs h;
    for (std::size_t i = 0; i < ref_.out.size(); ++i) {
      const double r = ref_.out[i];
      h.out.push_back(r == 0.0 ? 0.0f
                               : round_to_dtype(static_cast<float>(r + noise * normal_at(9, 0, i)),
                                                DType::kBF16));
    }
    for (std::size_t i = 0; i < ref_.lse.size(); ++i) {
      h.lse.push_back(static_cast<float>(ref_.lse[i] + (std::isfinite(ref_.lse[i]) ? 1e-5 : 0.0)));
    }
    return h;
  }

  // Index of (b, s, h, d) in the row-major output.
  std::size_t at(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>(((b * dims_.seqlen_q + s) * dims_.heads + h) * dims_.head_dim +
                                     d);
  }

  VerifyReport judge(const verifier::HostOutputs& result, bool guards = true) const {
    VerifyReport r;
    r.guards_intact = guards;
    verifier::judge(dims_, DType::kBF16, result, baseline_, ref_, /*check_lse=*/true, &r);
    return r;
  }

  double baseline_error_max() const {
    return verifier::error_stats(dims_, baseline_, ref_, 1e30, 1e30).max_abs;
  }

  static bool has_failure(const VerifyReport& r, const std::string& needle) {
    for (const std::string& f : r.failures) {
      if (f.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  verifier::OutputDims dims_;
  verifier::ReferenceOutputs ref_;
  verifier::HostOutputs baseline_, good_;
};

TEST_F(CompareTest, RoundedResultPasses) {
  const VerifyReport r = judge(good_);
  EXPECT_TRUE(r.passed) << r.to_string();
  EXPECT_TRUE(r.failures.empty());
  EXPECT_GT(r.atol, 0.0);
  EXPECT_LE(r.error.max_abs, r.atol / 2 + 1e-12);
  EXPECT_GT(r.baseline_error.max_abs, r.error.max_abs);
  EXPECT_TRUE(r.baseline_passed);
  EXPECT_LE(r.baseline_error.max_abs, r.baseline_bound);
  EXPECT_NE(r.to_string().find("base bound"), std::string::npos) << r.to_string();
}

// The baseline 3% off: every clause of the result passes against it (the result is the rounded
// reference), yet the verification fails on the baseline's own line, naming it; so does a
// baseline whose LSE is off, or that is not 0 on a row without keys.
TEST_F(CompareTest, BaselineOffFailsTheVerification) {
  verifier::HostOutputs scaled = baseline_;
  for (float& o : scaled.out) o *= 1.03f;
  VerifyReport r;
  r.baseline = "naive (bf16)";
  verifier::judge(dims_, DType::kBF16, good_, scaled, ref_, /*check_lse=*/true, &r);
  EXPECT_FALSE(r.passed);
  EXPECT_FALSE(r.baseline_passed);
  ASSERT_EQ(r.failures.size(), 1u) << r.to_string();
  EXPECT_EQ(r.failures[0].find("baseline naive (bf16) is itself off: max|O_base - O_ref| = "), 0u)
      << r.failures[0];
  EXPECT_NE(r.failures[0].find("(fixed)"), std::string::npos) << r.failures[0];
  EXPECT_LE(r.error.max_abs, r.max_abs_bound);  // the result's clauses alone would pass
  EXPECT_NE(r.to_string().find("FAILED)"), std::string::npos) << r.to_string();

  // A result 3% off as well passes every clause of its own against that baseline: the failure
  // the baseline check exists for.
  VerifyReport both;
  verifier::judge(dims_, DType::kBF16, scaled, scaled, ref_, true, &both);
  EXPECT_FALSE(both.passed);
  EXPECT_EQ(both.failures.size(), 1u) << both.to_string();
  EXPECT_LE(both.error.max_abs, both.max_abs_bound);

  verifier::HostOutputs lse_off = baseline_;
  lse_off.lse[2 * dims_.seqlen_q + 3] += 0.05f;  // a sink's worth of LSE on (b=0, h=2, s=3)
  VerifyReport rl;
  verifier::judge(dims_, DType::kBF16, good_, lse_off, ref_, true, &rl);
  EXPECT_FALSE(rl.passed);
  ASSERT_FALSE(rl.failures.empty());
  EXPECT_NE(rl.failures[0].find("is itself off: max|LSE_base - LSE_ref|"), std::string::npos)
      << rl.to_string();
  EXPECT_NE(rl.failures[0].find("first at (b=0, h=2, s=3)"), std::string::npos) << rl.failures[0];
  // Not checked without LSE.
  VerifyReport rn;
  verifier::judge(dims_, DType::kBF16, good_, lse_off, ref_, /*check_lse=*/false, &rn);
  EXPECT_TRUE(rn.passed) << rn.to_string();

  verifier::HostOutputs nonzero = baseline_;
  nonzero.out[at(1, 0, 1, 2)] = 1e-6f;  // row s = 0 has no key
  VerifyReport rz;
  verifier::judge(dims_, DType::kBF16, good_, nonzero, ref_, true, &rz);
  EXPECT_FALSE(rz.passed);
  EXPECT_NE(rz.to_string().find("is itself off: 1 outputs != 0 on rows without keys"),
            std::string::npos)
      << rz.to_string();
}

TEST_F(CompareTest, PerturbedElementFailsMaxClauseWithIndex) {
  verifier::HostOutputs bad = good_;
  bad.out[at(1, 3, 2, 5)] += 0.25f;
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_TRUE(has_failure(r, "max|O - O_ref|")) << r.to_string();
  EXPECT_FALSE(has_failure(r, "mean|O - O_ref|")) << r.to_string();
  EXPECT_EQ(r.error.first_bad, (std::vector<std::int64_t>{1, 3, 2, 5}));
  EXPECT_NE(r.to_string().find("b=1 s=3 h=2 d=5"), std::string::npos) << r.to_string();
  EXPECT_NE(r.to_string().find("FAIL"), std::string::npos);
}

TEST_F(CompareTest, SmallWidespreadErrorFailsMeanClause) {
  // Every element off by about the baseline's largest error: within the max bound, but the mean
  // error is several times the baseline's.
  verifier::HostOutputs bad = good_;
  const double shift = 1.5 * baseline_error_max();
  for (std::size_t i = 0; i < bad.out.size(); ++i) {
    if (ref_.out[i] != 0.0) bad.out[i] = static_cast<float>(ref_.out[i] + shift);
  }
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_TRUE(has_failure(r, "mean|O - O_ref|")) << r.to_string();
  EXPECT_FALSE(has_failure(r, "max|O - O_ref|")) << r.to_string();
}

TEST_F(CompareTest, UnwrittenElementFails) {
  verifier::HostOutputs bad = good_;
  // What OwnedTensor::fill_nan leaves in a bf16 element (0xFFFF), read back as float.
  bad.out[at(0, 4, 1, 7)] = bf16_bits_to_float(0xFFFF);
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.unwritten, 1);
  EXPECT_TRUE(has_failure(r, "never written")) << r.to_string();
  EXPECT_TRUE(has_failure(r, "non-finite")) << r.to_string();
  EXPECT_EQ(r.error.first_bad, (std::vector<std::int64_t>{0, 4, 1, 7}));
}

TEST_F(CompareTest, ComputedNanFailsAsNonFiniteButNotUnwritten) {
  verifier::HostOutputs bad = good_;
  bad.out[at(1, 2, 0, 0)] = std::numeric_limits<float>::quiet_NaN();
  bad.out[at(1, 2, 0, 1)] = std::numeric_limits<float>::infinity();
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.error.nonfinite, 2);
  EXPECT_EQ(r.unwritten, 0);
  EXPECT_TRUE(has_failure(r, "2 non-finite outputs")) << r.to_string();
}

TEST_F(CompareTest, UnwrittenLseFails) {
  verifier::HostOutputs bad = good_;
  bad.lse[7] = bits_float(0xFFFFFFFFu);
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.unwritten, 1);
  EXPECT_TRUE(has_failure(r, "never written")) << r.to_string();
}

TEST_F(CompareTest, CorruptedGuardFails) {
  const VerifyReport r = judge(good_, /*guards=*/false);
  EXPECT_FALSE(r.passed);
  EXPECT_TRUE(has_failure(r, "guard bytes")) << r.to_string();
  EXPECT_NE(r.to_string().find("OVERWRITTEN"), std::string::npos);
}

TEST_F(CompareTest, WrongLseFails) {
  verifier::HostOutputs bad = good_;
  bad.lse[2 * dims_.seqlen_q + 3] += 2e-3f;  // (b=0, h=2, s=3)
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_TRUE(has_failure(r, "max|LSE - LSE_ref|")) << r.to_string();
  EXPECT_EQ(r.error.first_bad_lse, (std::vector<std::int64_t>{0, 2, 3}));
}

TEST_F(CompareTest, LseInWrongLogBaseFails) {
  // log2 instead of ln: every finite row off by a factor 1.44.
  verifier::HostOutputs bad = good_;
  for (std::size_t i = 0; i < bad.lse.size(); ++i) {
    if (std::isfinite(ref_.lse[i])) bad.lse[i] = static_cast<float>(ref_.lse[i] / std::log(2.0));
  }
  EXPECT_FALSE(judge(bad).passed);
}

TEST_F(CompareTest, FiniteLseOnRowWithoutKeysFails) {
  // A finite "-inf" sentinel: LSE = -1e4 where it must be -inf.
  verifier::HostOutputs bad = good_;
  bad.lse[dims_.seqlen_q * 4 + 0] = -1e4f;
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.error.lse_mismatch_inf, 1);
  EXPECT_TRUE(has_failure(r, "-inf")) << r.to_string();
}

TEST_F(CompareTest, MinusInfLseOnRowWithKeysFails) {
  verifier::HostOutputs bad = good_;
  bad.lse[dims_.seqlen_q * 5 + 4] = -std::numeric_limits<float>::infinity();
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.error.lse_mismatch_inf, 1);
}

TEST_F(CompareTest, NonZeroOutputOnRowWithoutKeysFails) {
  // Tiny, far inside the max bound, but a row without keys must give O = 0 exactly.
  verifier::HostOutputs bad = good_;
  bad.out[at(1, 1, 2, 3)] = 1e-6f;
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.error.masked_nonzero, 1);
  EXPECT_TRUE(has_failure(r, "rows without keys")) << r.to_string();
  EXPECT_EQ(r.error.first_bad, (std::vector<std::int64_t>{1, 1, 2, 3}));
}

TEST_F(CompareTest, NanOnRowWithoutKeysFails) {
  verifier::HostOutputs bad = good_;
  bad.out[at(0, 0, 0, 0)] = std::numeric_limits<float>::quiet_NaN();
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.error.masked_nonzero, 1);
}

TEST_F(CompareTest, LseNotCheckedWhenDisabled) {
  verifier::HostOutputs bad = good_;
  bad.lse[10] += 1.0f;
  VerifyReport r;
  verifier::judge(dims_, DType::kBF16, bad, baseline_, ref_, /*check_lse=*/false, &r);
  EXPECT_TRUE(r.passed) << r.to_string();
}

TEST_F(CompareTest, RelL2AndMeanAreComputed) {
  verifier::HostOutputs shifted = good_;
  double sum_sq_ref = 0.0;
  for (std::size_t i = 0; i < shifted.out.size(); ++i) {
    shifted.out[i] = static_cast<float>(ref_.out[i] + 0.125);  // exact in float
    sum_sq_ref += ref_.out[i] * ref_.out[i];
  }
  const ErrorStats e = verifier::error_stats(dims_, shifted, ref_, 1e30, 1e30);
  EXPECT_NEAR(e.max_abs, 0.125, 1e-6);
  EXPECT_NEAR(e.mean_abs, 0.125, 1e-6);
  const double expected_rel =
      std::sqrt(0.125 * 0.125 * static_cast<double>(shifted.out.size()) / sum_sq_ref);
  EXPECT_NEAR(e.rel_l2, expected_rel, 1e-6);
}

TEST(CompareAtolTest, RoundingAtolIsOneStepAtTheLargestOutput) {
  verifier::ReferenceOutputs ref;
  ref.out = {1.0 + 1.0 / 1024.0, 0.3, -2.7};
  // |O| < 4: one step is 2^(1-7) in bf16 and 2^(1-10) in fp16.
  EXPECT_DOUBLE_EQ(verifier::rounding_atol(ref, DType::kBF16), 1.0 / 64.0);
  EXPECT_DOUBLE_EQ(verifier::rounding_atol(ref, DType::kFP16), 1.0 / 512.0);
  // fp32: one step (2^-22) is below the floor kAtolFloor * max|O_ref|.
  EXPECT_DOUBLE_EQ(verifier::rounding_atol(ref, DType::kFP32), verifier::kAtolFloor * 2.7);
  ref.is_fp32 = true;
  EXPECT_DOUBLE_EQ(verifier::rounding_atol(ref, DType::kFP32), verifier::kAtolFloorFp32Ref * 2.7);
  // Exactly representable outputs keep their step (a one-hot row of V still gets one ulp).
  ref.out = {2.0, -0.5, 0.0};
  ref.is_fp32 = false;
  EXPECT_DOUBLE_EQ(verifier::rounding_atol(ref, DType::kBF16), 2.0 / 128.0);
  ref.out = {0.0, 0.0};
  EXPECT_EQ(verifier::rounding_atol(ref, DType::kBF16), 0.0);
}

// The rule's numbers worked by hand; tests/python/test_tolerance.py asserts the same numbers
// for tolerance.py, so the two copies of the rule cannot drift apart unnoticed.
TEST(CompareAtolTest, ConstantsAndWorkedExamples) {
  EXPECT_EQ(verifier::kAtolFloor, 1e-6);
  EXPECT_EQ(verifier::kAtolFloorFp32Ref, 1e-5);
  EXPECT_EQ(verifier::kFloat32Epsilon, std::ldexp(1.0, -23));
  EXPECT_EQ(verifier::kScoreUlps, 2.0);
  EXPECT_EQ(verifier::kLseUlps, 4.0);
  EXPECT_EQ(VerifyReport::kLseTolerance, 1e-3);
  EXPECT_EQ(verifier::kBaselineRoundingUlps, 1.0);
  EXPECT_EQ(verifier::kBaselineSumUlps, 512.0);
  EXPECT_EQ(verifier::kBaselineScoreUlps, 4.0);
  EXPECT_EQ(verifier::kBaselineLseUlps, 16.0);

  // max|O_ref| = 2.5 (bf16 step 2^-6, fp16 2^-9), max|LSE_ref| = 12 (the -inf is skipped).
  verifier::ReferenceOutputs ref;
  ref.out = {2.5, -0.75, 0.0, 1.0};
  ref.lse = {12.0, -3.0, -std::numeric_limits<double>::infinity()};
  const double eps = std::ldexp(1.0, -23);
  // score noise = 2 * eps * 12 * 2.5 = 60 eps = 7.152557373046875e-06
  EXPECT_DOUBLE_EQ(verifier::score_noise_atol(ref), 7.152557373046875e-06);
  EXPECT_DOUBLE_EQ(verifier::score_noise_atol(ref), 60 * eps);
  // atol = step + score noise: bf16 0.015625 + 60 eps, fp16 0.001953125 + 60 eps; fp32: the
  // floor 1e-6 * 2.5 (the step, 2^-22, is below it), 1e-5 * 2.5 against a float32 reference.
  EXPECT_DOUBLE_EQ(verifier::rounding_atol(ref, DType::kBF16), 0.015632152557373047);
  EXPECT_DOUBLE_EQ(verifier::rounding_atol(ref, DType::kFP16), 0.001960277557373047);
  EXPECT_DOUBLE_EQ(verifier::rounding_atol(ref, DType::kFP32), 2.5e-6 + 60 * eps);
  // LSE bound = 1e-3 + 2 * baseline + 4 * eps * 12 = 1e-3 + 2 * 2e-5 + 48 eps
  EXPECT_DOUBLE_EQ(verifier::lse_bound(ref, 2e-5), 0.0010457220458984376);
  // Baseline bound = 1 step + eps * 2.5 * (512 + 4 * 12) = step + 1400 eps
  //   bf16 0.015625 + 1400 eps = 0.015625 + 1.6689300537109375e-04
  //   fp32 2^-22 + 1400 eps = 1402 eps = 1.671314239501953e-04
  EXPECT_DOUBLE_EQ(verifier::baseline_bound(ref, DType::kBF16), 0.015791893005371094);
  EXPECT_DOUBLE_EQ(verifier::baseline_bound(ref, DType::kFP16), 0.001953125 + 1400 * eps);
  EXPECT_DOUBLE_EQ(verifier::baseline_bound(ref, DType::kFP32), 1.671314239501953e-04);
  // Baseline LSE bound = 1e-3 + 16 * eps * 12 = 1e-3 + 192 eps
  EXPECT_DOUBLE_EQ(verifier::baseline_lse_bound(ref), 0.00102288818359375);
  // Against a float32 reference the float32 terms double (both sides carry them); the rounding
  // step does not: bf16 0.015625 + 2800 eps, LSE 1e-3 + 384 eps.
  ref.is_fp32 = true;
  EXPECT_DOUBLE_EQ(verifier::baseline_bound(ref, DType::kBF16), 0.015625 + 2800 * eps);
  EXPECT_DOUBLE_EQ(verifier::baseline_lse_bound(ref), 1e-3 + 384 * eps);
  EXPECT_DOUBLE_EQ(verifier::rounding_atol(ref, DType::kFP32), 2.5e-5 + 60 * eps);
}

// ---------------------------------------------------------------------------------------------
// The shared table (tests/verify/tolerance_cases.txt): the C++ rule must reproduce every number
// and verdict in it; tests/python/test_tolerance.py holds tolerance.py to the same table.

struct TableCase {
  std::string kind, name;  // "bounds" / "judge"
  std::map<std::string, std::vector<std::string>> fields;

  const std::vector<std::string>& at(const std::string& key) const {
    static const std::vector<std::string> kNone;
    const auto it = fields.find(key);
    EXPECT_NE(it, fields.end()) << name << ": no " << key;
    return it == fields.end() ? kNone : it->second;
  }
  std::vector<double> numbers(const std::string& key) const {
    std::vector<double> v;
    for (const std::string& x : at(key)) v.push_back(std::strtod(x.c_str(), nullptr));
    return v;
  }
  double number(const std::string& key) const {
    const std::vector<double> v = numbers(key);
    EXPECT_EQ(v.size(), 1u) << name << ": " << key;
    return v.empty() ? 0.0 : v[0];
  }
  std::string word(const std::string& key) const {
    const std::vector<std::string>& v = at(key);
    return v.empty() ? "" : v[0];
  }
};

std::vector<TableCase> read_table() {
  const std::string path = std::string(FLASHATTN_TESTS_DIR) + "/verify/tolerance_cases.txt";
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "cannot read " << path;
  std::vector<TableCase> cases;
  std::string line;
  bool open = false;
  while (std::getline(file, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string key;
    if (!(words >> key)) continue;
    std::vector<std::string> values;
    for (std::string w; words >> w;) values.push_back(w);
    if (key == "bounds" || key == "judge") {
      EXPECT_FALSE(open) << "case " << cases.back().name << " has no end";
      cases.push_back({key, values.empty() ? "" : values[0], {}});
      open = true;
    } else if (key == "end") {
      open = false;
    } else {
      EXPECT_TRUE(open) << "'" << key << "' outside a case";
      if (open) cases.back().fields[key] = values;
    }
  }
  EXPECT_FALSE(open) << "the last case has no end";
  return cases;
}

DType table_dtype(const std::string& name) {
  if (name == "fp16") return DType::kFP16;
  if (name == "fp32") return DType::kFP32;
  EXPECT_EQ(name, "bf16");
  return DType::kBF16;
}

std::vector<float> as_floats(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// The clause a failure line reports, named as the table names it.
std::string clause_name(const std::string& line) {
  const std::string prefix = line.rfind("baseline", 0) == 0 ? "baseline-" : "";
  auto has = [&line](const char* s) { return line.find(s) != std::string::npos; };
  if (has("max|O")) return prefix + "max";
  if (has("mean|O")) return prefix + "mean";
  if (has("non-finite")) return prefix + "nonfinite";
  if (has("!= 0 on rows without keys")) return prefix + "masked";
  if (has("max|LSE")) return prefix + "lse";
  if (has("is -inf")) return prefix + "lse-inf";
  return "unknown: " + line;
}

::testing::AssertionResult close(double got, double want) {
  if (got == want || std::fabs(got - want) <= 1e-14 * std::fabs(want)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << std::setprecision(17) << got << " != " << want;
}

TEST(ToleranceTableTest, TheCppRuleReproducesTheSharedTable) {
  const std::vector<TableCase> cases = read_table();
  std::int64_t bounds = 0, judged = 0;
  for (const TableCase& c : cases) {
    SCOPED_TRACE(c.kind + " " + c.name);
    verifier::ReferenceOutputs ref;
    ref.out = c.numbers("ref_out");
    ref.lse = c.numbers("ref_lse");
    ref.is_fp32 = c.number("ref_is_fp32") != 0;
    const DType dtype = table_dtype(c.word("dtype"));
    if (c.kind == "bounds") {
      ++bounds;
      EXPECT_TRUE(close(verifier::score_noise_atol(ref), c.number("expect_score_noise")));
      EXPECT_TRUE(close(verifier::rounding_atol(ref, dtype), c.number("expect_atol")));
      EXPECT_TRUE(close(verifier::lse_bound(ref, c.number("baseline_lse_error")),
                        c.number("expect_lse_bound")));
      EXPECT_TRUE(close(verifier::baseline_bound(ref, dtype), c.number("expect_baseline_bound")));
      EXPECT_TRUE(
          close(verifier::baseline_lse_bound(ref), c.number("expect_baseline_lse_bound")));
      continue;
    }
    ASSERT_EQ(c.kind, "judge");
    ++judged;
    const std::vector<double> dims4 = c.numbers("dims");
    ASSERT_EQ(dims4.size(), 4u);
    verifier::OutputDims dims;
    dims.batch = static_cast<std::int64_t>(dims4[0]);
    dims.seqlen_q = static_cast<std::int64_t>(dims4[1]);
    dims.heads = static_cast<std::int64_t>(dims4[2]);
    dims.head_dim = static_cast<std::int64_t>(dims4[3]);
    if (c.word("rows_without_keys") != "-") {
      for (double f : c.numbers("rows_without_keys")) {
        dims.row_without_keys.push_back(f != 0 ? 1 : 0);
      }
    }
    ASSERT_EQ(static_cast<std::int64_t>(ref.out.size()), dims.out_numel());
    ASSERT_EQ(static_cast<std::int64_t>(ref.lse.size()), dims.lse_numel());
    const verifier::HostOutputs result{as_floats(c.numbers("out")), as_floats(c.numbers("lse"))};
    const verifier::HostOutputs base{as_floats(c.numbers("base_out")),
                                     as_floats(c.numbers("base_lse"))};
    VerifyReport r;
    verifier::judge(dims, dtype, result, base, ref, c.number("check_lse") != 0, &r);
    std::vector<std::string> got;
    for (const std::string& f : r.failures) got.push_back(clause_name(f));
    std::vector<std::string> want = c.at("expect");
    if (want == std::vector<std::string>{"pass"}) want.clear();
    EXPECT_EQ(got, want) << r.to_string();
    EXPECT_EQ(r.passed, want.empty());
  }
  // The table is read whole: a parse that found nothing would pass vacuously.
  EXPECT_GE(bounds, 10);
  EXPECT_GE(judged, 15);
}

TEST(CompareAtolTest, DtypeSpacing) {
  EXPECT_DOUBLE_EQ(verifier::dtype_spacing(1.0, DType::kBF16), 1.0 / 128.0);
  EXPECT_DOUBLE_EQ(verifier::dtype_spacing(1.5, DType::kFP16), 1.0 / 1024.0);
  EXPECT_DOUBLE_EQ(verifier::dtype_spacing(-0.75, DType::kFP16), 1.0 / 2048.0);
  EXPECT_DOUBLE_EQ(verifier::dtype_spacing(1.0, DType::kFP32), std::ldexp(1.0, -23));
  EXPECT_DOUBLE_EQ(verifier::dtype_spacing(6e4, DType::kFP16), 32.0);
  EXPECT_DOUBLE_EQ(verifier::dtype_spacing(1e-7, DType::kFP16), std::ldexp(1.0, -24));
  // Round-to-nearest error is at most half a step, for every dtype.
  for (DType dt : kDtypes) {
    for (double x : {0.3, 1.7, -2.2, 1234.5, 1.3e5}) {
      if (dt == DType::kFP16 && x > 65504) continue;
      const double rounded = round_to_dtype(static_cast<float>(x), dt);
      EXPECT_LE(std::fabs(rounded - x), verifier::dtype_spacing(x, dt) / 2 * (1 + 1e-6))
          << x << " " << dtype_name(dt);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Inputs.

TEST(VerifyInputsTest, LayoutsHoldTheSameLogicalValues) {
  const ProblemShape s = testing::dense(2, 3, 3, 5, 7, 16, DType::kBF16, false);
  std::vector<float> want_q, want_k;
  for (InputLayout layout :
       {InputLayout::kContiguous, InputLayout::kStridedBHSD, InputLayout::kPaddedHeads}) {
    verifier::Inputs in;
    ASSERT_TRUE(verifier::make_inputs(s, layout, InputKind::kNormal, Device::cpu(), 11, &in).ok());
    std::vector<float> q, k;
    ASSERT_TRUE(in.q.to_host_float(&q).ok());
    ASSERT_TRUE(in.k.to_host_float(&k).ok());
    if (layout == InputLayout::kContiguous) {
      want_q = q;
      want_k = k;
      EXPECT_TRUE(in.q.contiguous());
    } else {
      EXPECT_FALSE(in.q.contiguous());
      EXPECT_EQ(q, want_q) << verifier::layout_name(layout);
      EXPECT_EQ(k, want_k) << verifier::layout_name(layout);
    }
    EXPECT_EQ(in.q.view().stride[3], 1);
    verifier::Outputs outs;
    ASSERT_TRUE(verifier::make_outputs(s, layout, s.dtype, Device::cpu(), true, &outs).ok());
    const Status st = validate(verifier::make_params(s, in, outs));
    EXPECT_TRUE(st.ok()) << verifier::layout_name(layout) << ": " << st.to_string();
  }
}

TEST(VerifyInputsTest, StridesOfEachLayout) {
  OwnedTensor t;
  ASSERT_TRUE(
      verifier::create_bshd(DType::kFP16, Device::cpu(), 2, 5, 3, 8, InputLayout::kStridedBHSD, 0, &t)
          .ok());
  EXPECT_EQ(std::vector<std::int64_t>(t.view().stride, t.view().stride + 4),
            (std::vector<std::int64_t>{3 * 5 * 8, 8, 5 * 8, 1}));
  ASSERT_TRUE(
      verifier::create_bshd(DType::kFP16, Device::cpu(), 2, 5, 3, 8, InputLayout::kPaddedHeads, 0, &t)
          .ok());
  const std::int64_t row = (3 + verifier::kPadHeads) * 8;
  EXPECT_EQ(std::vector<std::int64_t>(t.view().stride, t.view().stride + 4),
            (std::vector<std::int64_t>{5 * row, row, 8, 1}));
}

TEST(VerifyInputsTest, InputsAreNormalAroundHalf) {
  const ProblemShape s = testing::dense(1, 4, 4, 256, 256, 64, DType::kFP32, false);
  verifier::Inputs in;
  ASSERT_TRUE(
      verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kNormal, Device::cpu(), 3, &in)
          .ok());
  for (const OwnedTensor* t : {&in.q, &in.k, &in.v}) {
    std::vector<float> x;
    ASSERT_TRUE(t->to_host_float(&x).ok());
    double sum = 0, sum_sq = 0;
    for (float f : x) {
      sum += f;
      sum_sq += static_cast<double>(f) * f;
    }
    const double mean = sum / static_cast<double>(x.size());
    const double var = sum_sq / static_cast<double>(x.size()) - mean * mean;
    EXPECT_NEAR(mean, 0.5, 0.01);
    EXPECT_NEAR(var, 1.0, 0.02);
  }
  // q, k, v are different draws.
  std::vector<float> q, k;
  ASSERT_TRUE(in.q.to_host_float(&q).ok());
  ASSERT_TRUE(in.k.to_host_float(&k).ok());
  EXPECT_NE(q, k);
}

// Scores of one (b=0, h=0) head, computed from the host inputs in double.
std::vector<double> head_scores(const ProblemShape& s, const verifier::Inputs& in) {
  std::vector<float> q, k;
  EXPECT_TRUE(in.q.to_host_float(&q).ok());
  EXPECT_TRUE(in.k.to_host_float(&k).ok());
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  std::vector<double> out;
  for (std::int64_t i = 0; i < s.seqlen_q; ++i) {
    for (std::int64_t j = 0; j < s.seqlen_k; ++j) {
      double dot = 0;
      for (std::int64_t d = 0; d < s.head_dim; ++d) {
        dot += static_cast<double>(q[static_cast<std::size_t>((i * s.heads) * s.head_dim + d)]) *
               k[static_cast<std::size_t>((j * s.kv_heads) * s.head_dim + d)];
      }
      out.push_back(scale * dot);
    }
  }
  return out;
}

TEST(VerifyInputsTest, LargeScoresReachTenThousand) {
  for (std::int64_t d : {8, 64, 256}) {
    const ProblemShape s = testing::dense(1, 1, 1, 64, 64, d, DType::kBF16, false);
    verifier::Inputs in;
    ASSERT_TRUE(verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kLargeScores,
                                      Device::cpu(), 5, &in)
                    .ok());
    double max_abs = 0;
    for (double x : head_scores(s, in)) max_abs = std::max(max_abs, std::fabs(x));
    EXPECT_GT(max_abs, 8e3) << "d=" << d;
    EXPECT_LT(max_abs, 1e5) << "d=" << d;
  }
}

TEST(VerifyInputsTest, VeryNegativeRowsStayBelowSentinels) {
  for (DType dt : kDtypes) {
    for (std::int64_t d : {8, 64, 256}) {
      const ProblemShape s = testing::dense(1, 1, 1, 16, 40, d, dt, false);
      verifier::Inputs in;
      ASSERT_TRUE(verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kVeryNegative,
                                        Device::cpu(), 5, &in)
                      .ok());
      const std::vector<double> scores = head_scores(s, in);
      for (std::int64_t i = 0; i < s.seqlen_q; ++i) {
        double row_max = -1e300, row_min = 1e300;
        for (std::int64_t j = 0; j < s.seqlen_k; ++j) {
          row_max = std::max(row_max, scores[static_cast<std::size_t>(i * s.seqlen_k + j)]);
          row_min = std::min(row_min, scores[static_cast<std::size_t>(i * s.seqlen_k + j)]);
        }
        if (i % 4 == 1) {
          EXPECT_LT(row_max, -5e4) << "row " << i << " d=" << d;
        }
        if (i % 4 == 3) {
          EXPECT_LT(row_max, -200) << "row " << i << " d=" << d;
        }
        if (i % 2 == 0) {
          EXPECT_GT(row_min, -200) << "row " << i << " d=" << d;
        }
        // The spread within a row stays ordinary: the softmax is not one-hot.
        EXPECT_LT(row_max - row_min, 100) << "row " << i << " d=" << d;
      }
    }
  }
}

TEST(VerifyInputsTest, LargeMagnitudeValues) {
  for (DType dt : kDtypes) {
    const ProblemShape s = testing::dense(1, 2, 2, 64, 64, 64, dt, false);
    verifier::Inputs in;
    ASSERT_TRUE(verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kLargeMagnitude,
                                      Device::cpu(), 5, &in)
                    .ok());
    std::vector<float> v;
    ASSERT_TRUE(in.v.to_host_float(&v).ok());
    float max_abs = 0;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x));
      max_abs = std::max(max_abs, std::fabs(x));
    }
    if (dt == DType::kFP16) {
      EXPECT_GT(max_abs, 5.9e4f);
      EXPECT_LE(max_abs, 65504.0f);
    } else {
      EXPECT_GT(max_abs, 1.29e5f);
    }
  }
}

TEST(VerifyInputsTest, OutputsArePoisonedAndGuarded) {
  const ProblemShape s = testing::dense(1, 2, 1, 5, 7, 8, DType::kFP16, false);
  verifier::Outputs outs;
  ASSERT_TRUE(verifier::make_outputs(s, InputLayout::kContiguous, s.dtype, Device::cpu(), true,
                                     &outs)
                  .ok());
  verifier::HostOutputs host;
  ASSERT_TRUE(outs.out.to_host_float(&host.out).ok());
  ASSERT_TRUE(outs.lse.to_host_float(&host.lse).ok());
  EXPECT_EQ(verifier::count_unwritten(host, s.dtype),
            static_cast<std::int64_t>(host.out.size() + host.lse.size()));
  EXPECT_EQ(outs.out.guard_bytes(), verifier::kOutputGuardBytes);
  bool intact = false;
  ASSERT_TRUE(outs.out.guard_intact(&intact).ok());
  EXPECT_TRUE(intact);
}

}  // namespace
}  // namespace flashattn
