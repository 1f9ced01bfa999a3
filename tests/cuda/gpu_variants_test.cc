// The problem variants (window, softcap, ALiBi, sinks, varlen) on the GPU backends "naive",
// "flash", "flash-sm80" and "flash-sm90", through verify() as tests/verify/variants_test.cc runs
// them on the CPU backends: the shared variant_cases() (tests/variant_cases.h), then larger cases
// only a GPU runs in test time (4097-token windows, 20 random sequences, causal windows on unequal
// lengths, softcap on large scores, ALiBi over many key tiles). The verifier's baseline on CUDA is
// the naive GPU kernel; its reference is the float64 CPU one where affordable, else naive in
// float32.
// Every test reports skipped, not passed, on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "test_util.h"
#include "variant_cases.h"
#include "verify/compare.h"
#include "verify/inputs.h"
#include "verify/verify.h"

namespace flashattn {
namespace {

using testing::dense;
using testing::packed;
using testing::VariantCase;
using testing::variant_cases;
using testing::with_alibi;
using testing::with_sinks;
using testing::with_softcap;
using testing::with_window;

struct GpuVariantCase {
  std::string backend;
  VariantCase variant;
  bool small = true;  // a variant_cases() case: judged against the float64 CPU reference
};

// flash-sm80 and flash-sm90 take bf16 / fp16 and head dims 64, 96, 128, 192, 256 only: a float32
// case runs in bf16 and a d32 case at d64 (the shape otherwise as given).
ProblemShape for_backend(const std::string& backend, ProblemShape s) {
  if (backend != "flash-sm80" && backend != "flash-sm90") return s;
  if (s.dtype == DType::kFP32) s.dtype = DType::kBF16;
  if (s.head_dim == 32) s.head_dim = 64;
  return s;
}

// Larger cases: long windows, many sequences, causal windows on unequal lengths, softcap on
// large scores, ALiBi over many key tiles. Above the CPU reference limit the verifier judges
// against naive in float32.
std::vector<VariantCase> large_cases() {
  std::vector<VariantCase> c;
  auto add = [&c](const std::string& name, const ProblemShape& shape, bool keyless,
                  InputKind kind = InputKind::kNormal) {
    c.push_back({name, shape, InputLayout::kContiguous, kind, keyless});
  };
  add("window_1024_0_4097", with_window(dense(1, 4, 2, 4097, 4097, 64, DType::kBF16, false), 1024, 0),
      false);
  add("window_256_256_4097",
      with_window(dense(1, 4, 2, 4097, 4097, 128, DType::kFP16, false), 256, 256), false);
  const verifier::VarlenLengths v = verifier::random_varlen(testing::base_seed(), 20, 300, 400);
  add("varlen_20_random_causal", packed(4, 2, v.q, v.k, 64, DType::kBF16, true), true);
  add("varlen_20_random_window_sinks",
      with_sinks(with_window(packed(4, 1, v.q, v.k, 128, DType::kFP16, false), 64, 32)), true);
  // Causal windows, bottom-right aligned: more keys than queries, then more queries than keys
  // (the first 723 rows see no key).
  add("causal_window_q777_k1500",
      with_window(dense(2, 4, 2, 777, 1500, 64, DType::kBF16, true), 200, -1), false);
  add("causal_window_q1500_k777",
      with_window(dense(1, 4, 2, 1500, 777, 128, DType::kBF16, true), 100, 0), true);
  add("softcap_30_largescores_1023",
      with_softcap(dense(1, 4, 2, 1023, 1023, 128, DType::kBF16, false), 30.0f), false,
      InputKind::kLargeScores);
  add("softcap_50_largescores_causal_2049",
      with_softcap(dense(1, 4, 4, 2049, 2049, 64, DType::kFP16, true), 50.0f), false,
      InputKind::kLargeScores);
  // Softcap with both of flash-sm80's and flash-sm90's forms in one launch (fragment_ops.cuh
  // score_mod_fragment): a warp's tile takes the FMA-pipe polynomial when every score is within
  // 3/4 of the cap and the exact form otherwise. With N(0.5, 1) inputs the scaled scores of a row
  // spread about 1.1 around 2 to 3, and 0.04% (d128, softcap 9.5) and 0.03% (d64, softcap 8.5)
  // of them pass 3/4 of the cap: modelled, 52% of d128's 16 x 128 warp tiles and 46% of d64's
  // 16 x 192 take the exact form.
  add("softcap_9p5_both_forms_2049",
      with_softcap(dense(1, 4, 2, 2049, 2049, 128, DType::kBF16, false), 9.5f), false);
  add("softcap_8p5_both_forms_causal_1500_fp16",
      with_softcap(dense(2, 4, 2, 1500, 1500, 64, DType::kFP16, true), 8.5f), false);
  // ALiBi over many key tiles, where flash-sm80 and flash-sm90 take the one-FFMA form on tiles
  // wholly left or right of a warp's diagonals and the general form across them (fragment_ops.cuh
  // score_mod_fragment): 8 and 16 heads for slopes up to 2^-1 and 2^-0.5; more keys than queries
  // (causal: every tile left or across), more queries than keys (non-causal, diag -1900: the
  // first rows' keys all right of the diagonal), with a window and sinks, with everything, and
  // varlen.
  add("alibi_causal_q1500_k4000",
      with_alibi(dense(1, 8, 2, 1500, 4000, 128, DType::kBF16, true), AlibiMode::kHeads), false);
  add("alibi_q3000_k1100_fp16",
      with_alibi(dense(1, 8, 8, 3000, 1100, 64, DType::kFP16, false), AlibiMode::kHeads), false);
  add("alibi_batchheads_window_sinks_2049",
      with_sinks(with_window(with_alibi(dense(2, 4, 2, 2049, 2049, 256, DType::kBF16, false),
                                        AlibiMode::kBatchHeads),
                             700, 300)),
      false);
  add("alibi_softcap_window_sinks_causal_4097_fp16",
      with_sinks(with_window(
          with_softcap(with_alibi(dense(1, 16, 4, 4097, 4097, 64, DType::kFP16, true),
                                  AlibiMode::kHeads),
                       30.0f),
          1000, -1)),
      false);
  add("alibi_varlen_20_random_causal",
      with_alibi(packed(8, 2, v.q, v.k, 128, DType::kBF16, true), AlibiMode::kHeads), true);
  return c;
}

std::vector<GpuVariantCase> gpu_cases() {
  std::vector<GpuVariantCase> out;
  for (const char* backend : {"naive", "flash", "flash-sm80", "flash-sm90"}) {
    for (VariantCase v : variant_cases()) {
      v.shape = for_backend(backend, v.shape);
      out.push_back({backend, v, true});
    }
    for (VariantCase v : large_cases()) {
      v.shape = for_backend(backend, v.shape);
      out.push_back({backend, v, false});
    }
  }
  return out;
}

std::string gpu_case_name(const ::testing::TestParamInfo<GpuVariantCase>& info) {
  std::string b = info.param.backend;
  for (char& ch : b) ch = ch == '-' ? '_' : ch;
  return b + "_" + info.param.variant.name;
}

void PrintTo(const GpuVariantCase& c, std::ostream* os) {
  *os << c.backend << " " << c.variant.name << " (" << c.variant.shape.to_string() << ")";
}

class GpuVariantTest : public ::testing::TestWithParam<GpuVariantCase> {};

TEST_P(GpuVariantTest, MatchesReference) {
  FA_SKIP_WITHOUT_CUDA();
  const GpuVariantCase& c = GetParam();
  FA_SKIP_UNLESS_BACKEND_USABLE(c.backend);
  VerifyOptions options;
  options.backend = c.backend;
  options.device = Device::cuda(0);
  options.seed = testing::variant_seed(c.variant.name);
  options.layout = c.variant.layout;
  options.kind = c.variant.kind;
  VerifyReport report;
  const Status st = verify(c.variant.shape, options, &report);
  ASSERT_TRUE(st.ok()) << st.to_string() << " (seed " << options.seed << ")";
  EXPECT_TRUE(report.passed) << report.to_string();
  if (c.small) {
    EXPECT_EQ(report.reference, "cpu-reference (float64)");
  }
  EXPECT_EQ(report.unwritten, 0);
  EXPECT_TRUE(report.guards_intact);
  EXPECT_EQ(report.error.masked_nonzero, 0) << report.to_string();
  EXPECT_EQ(report.error.lse_mismatch_inf, 0) << report.to_string();
  EXPECT_NE(report.to_string().find(c.variant.shape.to_string()), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Quick, GpuVariantTest, ::testing::ValuesIn(gpu_cases()), gpu_case_name);

// The large cases keep what they promise: rows without keys where said, and the 20 sequences
// include an empty one and one without keys (verifier::random_varlen).
TEST(GpuVariantCasesTest, LargeCasesHaveWhatTheyClaim) {
  for (const VariantCase& v : large_cases()) {
    const verifier::OutputDims d = verifier::output_dims(v.shape);
    bool keyless = false;
    for (std::uint8_t r : d.row_without_keys) keyless = keyless || r != 0;
    EXPECT_EQ(keyless, v.keyless) << v.name << ": " << v.shape.to_string();
    if (v.shape.varlen()) {
      EXPECT_EQ(v.shape.batch, 20) << v.name;
      bool empty = false;
      for (std::int64_t b = 0; b < v.shape.batch; ++b) {
        empty = empty || v.shape.seqlen_q_of(b) == 0 || v.shape.seqlen_k_of(b) == 0;
      }
      EXPECT_TRUE(empty) << v.name;
    }
  }
}

}  // namespace
}  // namespace flashattn
