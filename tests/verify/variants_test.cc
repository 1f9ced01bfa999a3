// The verifier with the problem variants (window, softcap, ALiBi, sinks, varlen): the shapes'
// sizes and the CPU reference limit, the generated side inputs, the judge on packed outputs and on
// rows without keys, every variant through verify() on cpu-flash and cpu-reference against the
// float64 reference, and planted errors (a backend that drops the sinks, flips the ALiBi sign,
// ignores the window, ...; a baseline 3% off or without its sinks) that the verifier must catch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "common/mask_rule.h"
#include "common/owned_tensor.h"
#include "common/random.h"
#include "cpu/reference.h"
#include "test_util.h"
#include "variant_cases.h"
#include "verify/compare.h"
#include "verify/inputs.h"
#include "verify/verify.h"

namespace flashattn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using testing::dense;
using testing::packed;

// Visible pairs by brute force from the mask rule.
std::int64_t brute_pairs(std::int64_t sq, std::int64_t sk, std::int64_t left, std::int64_t right,
                         bool causal) {
  const MaskRule rule = MaskRule::make(sq, sk, left, right, causal);
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < sq; ++i) {
    for (std::int64_t j = 0; j < sk; ++j) n += rule.visible(i, j) ? 1 : 0;
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// Shapes: sizes, the reference limit, to_string.

TEST(VariantShapeTest, VisiblePairsMatchBruteForce) {
  // Every window side from unbounded to past the sequence, both causal settings, lengths 0..9.
  for (std::int64_t sq = 0; sq <= 9; ++sq) {
    for (std::int64_t sk = 0; sk <= 9; ++sk) {
      for (std::int64_t left : {-1, 0, 1, 3, 8, 12}) {
        for (std::int64_t right : {-1, 0, 1, 3, 8, 12}) {
          for (bool causal : {false, true}) {
            ProblemShape s = dense(3, 2, 1, sq, sk, 8, DType::kFP32, causal);
            s.window_left = left;
            s.window_right = right;
            ShapeSizes z;
            ASSERT_TRUE(shape_sizes(s, &z).ok());
            const std::int64_t want = 3 * brute_pairs(sq, sk, left, right, causal);
            ASSERT_EQ(z.visible_pairs, sq * sk == 0 ? 0 : want)
                << "sq=" << sq << " sk=" << sk << " window " << left << "," << right
                << (causal ? " causal" : "");
            ASSERT_EQ(z.visible_macs, z.visible_pairs * 2 * 8);
          }
        }
      }
    }
  }
}

TEST(VariantShapeTest, HugeWindowsAndLengthsDoNotOverflow) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  ProblemShape s = dense(1, 1, 1, std::int64_t{1} << 40, 1 << 10, 8, DType::kFP32, false);
  s.window_left = kMax;
  s.window_right = kMax;
  ShapeSizes z;
  ASSERT_TRUE(shape_sizes(s, &z).ok());
  EXPECT_EQ(z.visible_pairs, (std::int64_t{1} << 40) * (1 << 10));  // a window wider than all
  s.window_left = 64;
  s.window_right = 0;
  ASSERT_TRUE(shape_sizes(s, &z).ok());
  // Rows see min(65, keys up to the diagonal): sq >> sk puts the diagonal past the keys for the
  // first sq - sk rows (they see none), then the last 1024 rows see a window.
  EXPECT_EQ(z.visible_pairs, brute_pairs(2000, 1024, 64, 0, false) -
                                 brute_pairs(2000 - 1024, 0, 64, 0, false));
}

TEST(VariantShapeTest, ReferenceLimitCountsThePairsAWindowKeeps) {
  // Dense, no window: the documented rule, the full product (causal counted in full).
  ProblemShape s = dense(2, 8, 8, 512, 512, 128, DType::kFP32, true);
  ShapeSizes z;
  ASSERT_TRUE(shape_sizes(s, &z).ok());
  EXPECT_EQ(z.reference_macs, z.macs);
  EXPECT_EQ(z.macs, 2 * 8 * 512 * 512 * 128);
  // Causal written as the window (-1, 0) is no window (api/registry.cc counts it so too).
  s.window_right = 0;
  EXPECT_FALSE(s.has_window());
  ASSERT_TRUE(shape_sizes(s, &z).ok());
  EXPECT_EQ(z.reference_macs, z.macs);
  s.causal = false;
  EXPECT_TRUE(s.has_window());
  ASSERT_TRUE(shape_sizes(s, &z).ok());
  EXPECT_EQ(z.reference_macs, z.visible_macs);
  EXPECT_EQ(z.visible_pairs, 2 * brute_pairs(512, 512, -1, 0, false));
  // A window of 64 keys at seqlen 1e5: 0.07% of the product, affordable on the CPU.
  s = dense(1, 1, 1, 100000, 100000, 64, DType::kFP32, false);
  s.window_left = 64;
  s.window_right = 0;
  ASSERT_TRUE(shape_sizes(s, &z).ok());
  EXPECT_EQ(z.visible_pairs, 100000 * 65 - 64 * 65 / 2);
  EXPECT_EQ(z.reference_macs, z.visible_pairs * 64);
  EXPECT_LT(static_cast<double>(z.reference_macs), kDefaultCpuReferenceLimit);
  const std::string refusal = cpu_reference_refusal(s, z, 1000.0);
  EXPECT_NE(refusal.find("heads * head_dim * (query, key) pairs the mask keeps = 1 * 64 * " +
                         std::to_string(z.visible_pairs) + " = " +
                         std::to_string(z.reference_macs) + " multiply-adds exceeds "
                         "cpu_reference_limit = 1000"),
            std::string::npos)
      << refusal;
  // verify() applies it: refused under a small limit, before anything is allocated.
  VerifyOptions options;
  options.backend = "cpu-flash";
  options.cpu_reference_limit = 1000;
  VerifyReport report;
  const Status st = verify(s, options, &report);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
  EXPECT_NE(st.message().find("(query, key) pairs the mask keeps"), std::string::npos)
      << st.message();
}

TEST(VariantShapeTest, VarlenSizes) {
  const ProblemShape s = packed(4, 2, {17, 0, 113}, {33, 5, 0}, 64, DType::kBF16, true, {20, 5, 0});
  EXPECT_EQ(s.batch, 3);
  EXPECT_EQ(s.seqlen_q, 113);
  EXPECT_EQ(s.seqlen_k, 33);
  EXPECT_EQ(s.total_q(), 130);
  EXPECT_EQ(s.total_k(), 38);
  EXPECT_EQ(s.seqlen_k_of(0), 20);  // seqused_k
  ShapeSizes z;
  ASSERT_TRUE(shape_sizes(s, &z).ok());
  EXPECT_EQ(z.q_bytes, 130 * 4 * 64 * 2);
  EXPECT_EQ(z.kv_bytes, 38 * 2 * 64 * 2);
  EXPECT_EQ(z.lse_bytes, 4 * 130 * 4);
  EXPECT_EQ(z.macs, 4 * 64 * (17 * 20 + 0 + 113 * 0));
  // Causal, bottom-right: sequence 0 (17 queries, 20 used keys) sees 4 + i keys in row i.
  EXPECT_EQ(z.visible_pairs, brute_pairs(17, 20, -1, -1, true));
  EXPECT_EQ(z.reference_macs, z.visible_macs);
  EXPECT_EQ(s.to_string(),
            "b=3 h=4/2 sq=113 sk=33 d=64 bf16 causal varlen q=17,0,113 k=33,5,0 seqused_k=20,5,0");
}

TEST(VariantShapeTest, InconsistentVarlenLengthsAreInvalidShapes) {
  struct Case {
    ProblemShape shape;
    std::string expected;
  };
  std::vector<Case> cases;
  ProblemShape s = packed(2, 2, {3, 4}, {3, 4}, 8, DType::kFP32, false);
  s.seqlens_k = {3};
  cases.push_back({s, "seqlens_k has 1 lengths, expected 2 (one per sequence of seqlens_q)"});
  s = packed(2, 2, {3, 4}, {3, 4}, 8, DType::kFP32, false, {1});
  cases.push_back({s, "seqused_k has 1 entries, expected 2"});
  s = packed(2, 2, {3, 4}, {3, 4}, 8, DType::kFP32, false);
  s.batch = 3;
  cases.push_back({s, "batch = 3 but seqlens_q has 2 sequences"});
  s = packed(2, 2, {3, 4}, {3, 4}, 8, DType::kFP32, false);
  s.seqlens_q[1] = -1;
  cases.push_back({s, "seqlens_q[1] = -1, expected >= 0"});
  s = packed(2, 2, {3, 4}, {3, 4}, 8, DType::kFP32, false);
  s.seqlen_k = 3;
  cases.push_back({s, "seqlen_k = 3 (max_seqlen_k) is below seqlens_k[1] = 4"});
  s = packed(2, 2, {3, 4}, {3, 4}, 8, DType::kFP32, false, {3, 5});
  cases.push_back({s, "seqused_k[1] = 5, expected 0 to seqlens_k[1] = 4"});
  s = packed(2, 2, {std::int64_t{1} << 30, std::int64_t{1} << 30}, {3, 4}, 8, DType::kFP32, false);
  cases.push_back({s, "the sum of seqlens_q exceeds 2147483647 (cu_seqlens_q is int32)"});
  for (const Case& c : cases) {
    ShapeSizes z;
    const Status st = shape_sizes(c.shape, &z);
    EXPECT_EQ(st.code(), StatusCode::kInvalidShape) << c.expected;
    EXPECT_NE(st.message().find(c.expected), std::string::npos) << st.message();
  }
  // The caller's names (the CLI's flags).
  ShapeFieldNames names;
  names.seqlens_q = "--varlen";
  names.seqlens_k = "--varlen-k";
  ShapeSizes z;
  s = packed(2, 2, {3, 4}, {3, 4}, 8, DType::kFP32, false);
  s.seqlens_k = {3};
  EXPECT_NE(shape_sizes(s, &z, names).message().find("--varlen-k has 1 lengths"),
            std::string::npos);
}

TEST(VariantShapeTest, ToStringShowsEveryVariant) {
  ProblemShape s = dense(2, 8, 2, 113, 203, 64, DType::kBF16, true);
  EXPECT_EQ(s.to_string(), "b=2 h=8/2 sq=113 sk=203 d=64 bf16 causal");
  EXPECT_FALSE(s.any_variant());
  s.window_left = 64;
  s.window_right = 0;
  s.softcap = 30.0f;
  s.alibi = AlibiMode::kBatchHeads;
  s.sinks = true;
  EXPECT_TRUE(s.any_variant());
  EXPECT_EQ(s.to_string(),
            "b=2 h=8/2 sq=113 sk=203 d=64 bf16 causal window=64,0 softcap=30 alibi=batch-heads "
            "sinks");
  EXPECT_EQ(alibi_mode_name(AlibiMode::kHeads), "heads");
  EXPECT_EQ(alibi_mode_name(AlibiMode::kNone), "none");
}

// ---------------------------------------------------------------------------------------------
// Generated side inputs.

TEST(VariantInputsTest, AlibiSlopesAreTheGeometricSequence) {
  ProblemShape s = dense(3, 8, 8, 4, 4, 8, DType::kFP32, false);
  s.alibi = AlibiMode::kHeads;
  const std::vector<float> slopes = verifier::alibi_slopes(s);
  ASSERT_EQ(slopes.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(slopes[h], std::ldexp(1.0f, -(h + 1))) << h;  // 2^-1..2^-8
  // Other head counts: the same formula, 2^(-8 (h + 1) / heads).
  s.heads = s.kv_heads = 6;
  const std::vector<float> six = verifier::alibi_slopes(s);
  ASSERT_EQ(six.size(), 6u);
  for (int h = 0; h < 6; ++h) EXPECT_FLOAT_EQ(six[h], std::exp2(-8.0f * (h + 1) / 6.0f)) << h;
  // (batch, heads): every batch entry its own, slope_h * (1 + b / batch).
  s.alibi = AlibiMode::kBatchHeads;
  const std::vector<float> bh = verifier::alibi_slopes(s);
  ASSERT_EQ(bh.size(), 18u);
  for (int b = 0; b < 3; ++b) {
    for (int h = 0; h < 6; ++h) {
      EXPECT_FLOAT_EQ(bh[b * 6 + h], six[h] * (1.0f + b / 3.0f)) << b << " " << h;
    }
  }
  s.alibi = AlibiMode::kNone;
  EXPECT_TRUE(verifier::alibi_slopes(s).empty());
}

// Sink logits come from the seed, and with ordinary inputs some exceed their rows' maxima and
// some lie far below (the two regimes of the sink in the softmax).
TEST(VariantInputsTest, SinksComeFromTheSeedOnBothSidesOfTheRowMax) {
  EXPECT_EQ(verifier::sink_logits(7, 16), verifier::sink_logits(7, 16));
  EXPECT_NE(verifier::sink_logits(7, 16), verifier::sink_logits(8, 16));
  for (std::int64_t d : {64, 128}) {
    ProblemShape s = dense(1, 32, 32, 64, 64, d, DType::kFP32, false);
    s.sinks = true;
    verifier::Inputs in;
    ASSERT_TRUE(verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kNormal,
                                      Device::cpu(), testing::base_seed(), &in)
                    .ok());
    std::vector<float> q, k, sinks;
    ASSERT_TRUE(in.q.to_host_float(&q).ok());
    ASSERT_TRUE(in.k.to_host_float(&k).ok());
    ASSERT_TRUE(in.sinks.to_host_float(&sinks).ok());
    EXPECT_EQ(sinks, verifier::sink_logits(testing::base_seed(), 32));
    std::int64_t above = 0, below = 0, rows = 0;  // (head, row) pairs
    for (std::int64_t h = 0; h < s.heads; ++h) {
      for (std::int64_t i = 0; i < s.seqlen_q; ++i, ++rows) {
        double row_max = -kInf;
        for (std::int64_t j = 0; j < s.seqlen_k; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c) {
            dot += static_cast<double>(q[static_cast<std::size_t>((i * s.heads + h) * d + c)]) *
                   k[static_cast<std::size_t>((j * s.heads + h) * d + c)];
          }
          row_max = std::max(row_max, dot / std::sqrt(static_cast<double>(d)));
        }
        const double sink = sinks[static_cast<std::size_t>(h)];
        above += sink > row_max ? 1 : 0;
        below += sink < row_max - 3.0 ? 1 : 0;
      }
    }
    EXPECT_GT(above, rows / 10) << "d=" << d << ": " << above << " of " << rows;
    EXPECT_GT(below, rows / 10) << "d=" << d << ": " << below << " of " << rows;
  }
}

TEST(VariantInputsTest, RandomVarlenLengths) {
  for (std::uint64_t seed : {0ull, 1ull, 20261129ull}) {
    for (std::int64_t batch : {1, 2, 3, 8}) {
      const verifier::VarlenLengths v = verifier::random_varlen(seed, batch, 100, 37);
      ASSERT_EQ(v.q.size(), static_cast<std::size_t>(batch));
      ASSERT_EQ(v.k.size(), static_cast<std::size_t>(batch));
      EXPECT_EQ(std::accumulate(v.q.begin(), v.q.end(), std::int64_t{0}), batch * 100);
      EXPECT_EQ(std::accumulate(v.k.begin(), v.k.end(), std::int64_t{0}), batch * 37);
      int empty = 0, keyless = 0;
      for (std::size_t b = 0; b < v.q.size(); ++b) {
        empty += v.q[b] == 0 && v.k[b] == 0 ? 1 : 0;
        keyless += v.q[b] > 0 && v.k[b] == 0 ? 1 : 0;
      }
      EXPECT_EQ(empty, batch >= 2 ? 1 : 0) << "seed " << seed << " batch " << batch;
      EXPECT_EQ(keyless, batch >= 3 ? 1 : 0) << "seed " << seed << " batch " << batch;
      const verifier::VarlenLengths again = verifier::random_varlen(seed, batch, 100, 37);
      EXPECT_EQ(again.q, v.q);
      EXPECT_EQ(again.k, v.k);
    }
  }
  // Lengths vary (not an even split) and differ between seeds.
  const verifier::VarlenLengths a = verifier::random_varlen(1, 8, 100, 100);
  const verifier::VarlenLengths b = verifier::random_varlen(2, 8, 100, 100);
  EXPECT_NE(a.q, b.q);
  EXPECT_GT(*std::max_element(a.q.begin(), a.q.end()), 120);
  EXPECT_TRUE(verifier::random_varlen(1, 0, 100, 100).q.empty());
}

TEST(VariantInputsTest, PackedInputsOffsetsAndOutputs) {
  const ProblemShape s =
      packed(4, 2, {17, 0, 113}, {33, 5, 0}, 16, DType::kFP16, false, {20, 5, 0});
  std::vector<float> want_q, want_k;
  for (InputLayout layout :
       {InputLayout::kContiguous, InputLayout::kStridedBHSD, InputLayout::kPaddedHeads}) {
    verifier::Inputs in;
    ASSERT_TRUE(verifier::make_inputs(s, layout, InputKind::kNormal, Device::cpu(), 5, &in).ok());
    EXPECT_EQ(std::vector<std::int64_t>(in.q.view().shape, in.q.view().shape + in.q.view().rank),
              (std::vector<std::int64_t>{130, 4, 16}));
    EXPECT_EQ(std::vector<std::int64_t>(in.k.view().shape, in.k.view().shape + in.k.view().rank),
              (std::vector<std::int64_t>{38, 2, 16}));
    std::vector<float> q, k;
    ASSERT_TRUE(in.q.to_host_float(&q).ok());
    ASSERT_TRUE(in.k.to_host_float(&k).ok());
    if (layout == InputLayout::kContiguous) {
      want_q = q;
      want_k = k;
    } else {
      EXPECT_FALSE(in.q.contiguous()) << verifier::layout_name(layout);
      EXPECT_EQ(q, want_q) << verifier::layout_name(layout);
      EXPECT_EQ(k, want_k) << verifier::layout_name(layout);
    }
    std::vector<std::int32_t> cu_q, cu_k, used;
    ASSERT_TRUE(in.cu_seqlens_q.to_host_int32(&cu_q).ok());
    ASSERT_TRUE(in.cu_seqlens_k.to_host_int32(&cu_k).ok());
    ASSERT_TRUE(in.seqused_k.to_host_int32(&used).ok());
    EXPECT_EQ(cu_q, (std::vector<std::int32_t>{0, 17, 17, 130}));
    EXPECT_EQ(cu_k, (std::vector<std::int32_t>{0, 33, 38, 38}));
    EXPECT_EQ(used, (std::vector<std::int32_t>{20, 5, 0}));
    EXPECT_FALSE(in.alibi_slopes.view().defined());
    EXPECT_FALSE(in.sinks.view().defined());

    verifier::Outputs outs;
    ASSERT_TRUE(verifier::make_outputs(s, layout, s.dtype, Device::cpu(), true, &outs).ok());
    EXPECT_EQ(outs.out.view().rank, 3);
    EXPECT_EQ(outs.out.view().shape[0], 130);
    EXPECT_EQ(std::vector<std::int64_t>(outs.lse.view().shape, outs.lse.view().shape + 2),
              (std::vector<std::int64_t>{4, 130}));
    const ForwardParams p = verifier::make_params(s, in, outs);
    EXPECT_TRUE(p.varlen());
    EXPECT_EQ(p.max_seqlen_q, 113);
    EXPECT_EQ(p.max_seqlen_k, 33);
    EXPECT_EQ(p.batch(), 3);
    const Status st = validate(p);
    EXPECT_TRUE(st.ok()) << verifier::layout_name(layout) << ": " << st.to_string();
  }
}

TEST(VariantInputsTest, ParamsCarryEveryVariant) {
  ProblemShape s = dense(2, 4, 2, 9, 11, 16, DType::kBF16, false);
  s.window_left = 3;
  s.window_right = 1;
  s.softcap = 12.5f;
  s.alibi = AlibiMode::kBatchHeads;
  s.sinks = true;
  verifier::Inputs in;
  ASSERT_TRUE(
      verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kNormal, Device::cpu(), 3, &in)
          .ok());
  verifier::Outputs outs;
  ASSERT_TRUE(verifier::make_outputs(s, InputLayout::kContiguous, s.dtype, Device::cpu(), true,
                                     &outs)
                  .ok());
  const ForwardParams p = verifier::make_params(s, in, outs);
  EXPECT_EQ(p.window_left, 3);
  EXPECT_EQ(p.window_right, 1);
  EXPECT_EQ(p.softcap, 12.5f);
  ASSERT_EQ(p.alibi_slopes.rank, 2);
  EXPECT_EQ(p.alibi_slopes.shape[0], 2);
  EXPECT_EQ(p.alibi_slopes.shape[1], 4);
  ASSERT_EQ(p.sinks.rank, 1);
  EXPECT_EQ(p.sinks.dtype, DType::kFP32);
  EXPECT_FALSE(p.varlen());
  EXPECT_TRUE(validate(p).ok()) << validate(p).to_string();
  std::vector<float> slopes;
  ASSERT_TRUE(in.alibi_slopes.to_host_float(&slopes).ok());
  EXPECT_EQ(slopes, verifier::alibi_slopes(s));
}

// ---------------------------------------------------------------------------------------------
// The judge on packed outputs and rows without keys.

// Three sequences of 2, 0 and 3 query rows, 2 heads, head_dim 4; row 0 of sequence 0 and every
// row of sequence 2 but its last have no key (O_ref = 0); with sinks their LSE_ref is the sink.
class PackedCompareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dims_.batch = 3;
    dims_.seqlen_q = 3;
    dims_.heads = 2;
    dims_.head_dim = 4;
    dims_.cu_seqlens_q = {0, 2, 2, 5};
    dims_.row_without_keys = {1, 0, 1, 1, 0};
    const std::int64_t rows = dims_.rows();
    ASSERT_EQ(rows, 5);
    for (std::int64_t i = 0; i < dims_.out_numel(); ++i) {
      const std::int64_t t = i / (dims_.heads * dims_.head_dim);
      ref_.out.push_back(dims_.row_without_keys[t] ? 0.0 : 0.5 + 0.3 * normal_at(3, 0, i));
    }
    for (std::int64_t i = 0; i < dims_.lse_numel(); ++i) {  // (heads, total_q)
      const std::int64_t h = i / rows, t = i % rows;
      ref_.lse.push_back(dims_.row_without_keys[t] ? kSink[h] : 2.0 + normal_at(3, 1, i));
    }
    good_ = rounded(0.0);
    baseline_ = rounded(0.001);
  }

  verifier::HostOutputs rounded(double noise) const {
    verifier::HostOutputs h;
    for (std::size_t i = 0; i < ref_.out.size(); ++i) {
      const double r = ref_.out[i];
      h.out.push_back(r == 0.0 ? 0.0f
                               : round_to_dtype(static_cast<float>(r + noise * normal_at(9, 0, i)),
                                                DType::kBF16));
    }
    for (double l : ref_.lse) h.lse.push_back(static_cast<float>(l + 1e-5));
    return h;
  }

  // Index of (token t, head h, d) in the packed output.
  std::size_t at(std::int64_t t, std::int64_t h, std::int64_t d) const {
    return static_cast<std::size_t>((t * dims_.heads + h) * dims_.head_dim + d);
  }

  VerifyReport judge(const verifier::HostOutputs& result) const {
    VerifyReport r;
    verifier::judge(dims_, DType::kBF16, result, baseline_, ref_, /*check_lse=*/true, &r);
    return r;
  }

  static constexpr double kSink[2] = {1.5, -4.0};
  verifier::OutputDims dims_;
  verifier::ReferenceOutputs ref_;
  verifier::HostOutputs good_, baseline_;
};

TEST_F(PackedCompareTest, RoundedResultPasses) {
  const VerifyReport r = judge(good_);
  EXPECT_TRUE(r.passed) << r.to_string();
}

TEST_F(PackedCompareTest, FirstBadIsTheSequenceAndItsRow) {
  verifier::HostOutputs bad = good_;
  bad.out[at(4, 1, 2)] += 0.5f;  // token 4 = sequence 2, row 2
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.error.first_bad, (std::vector<std::int64_t>{2, 2, 1, 2}));
  verifier::HostOutputs bad_lse = good_;
  bad_lse.lse[1 * 5 + 1] += 0.1f;  // head 1, token 1 = sequence 0, row 1
  const VerifyReport rl = judge(bad_lse);
  EXPECT_FALSE(rl.passed);
  EXPECT_EQ(rl.error.first_bad_lse, (std::vector<std::int64_t>{0, 1, 1}));
}

// With sinks a row without keys has a finite LSE_ref (the sink): the "O = 0 exactly" clause
// still finds it, because the rows come from the mask, not from LSE_ref = -inf.
TEST_F(PackedCompareTest, NonZeroOutputOnSinkRowWithoutKeysFails) {
  verifier::HostOutputs bad = good_;
  bad.out[at(3, 0, 1)] = 1e-7f;  // far inside the max bound
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.error.masked_nonzero, 1);
  EXPECT_EQ(r.error.first_bad, (std::vector<std::int64_t>{2, 1, 0, 1}));
  // Keyed off LSE_ref = -inf instead (no row_without_keys), the same error would pass: that is
  // what the explicit rows fix.
  verifier::OutputDims implicit = dims_;
  implicit.row_without_keys.clear();
  VerifyReport ri;
  verifier::judge(implicit, DType::kBF16, bad, baseline_, ref_, true, &ri);
  EXPECT_TRUE(ri.passed) << ri.to_string();
}

TEST_F(PackedCompareTest, MinusInfLseOnSinkRowFails) {
  verifier::HostOutputs bad = good_;
  bad.lse[0] = -std::numeric_limits<float>::infinity();  // head 0, token 0: the sink was dropped
  const VerifyReport r = judge(bad);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.error.lse_mismatch_inf, 1);
  verifier::HostOutputs off = good_;
  off.lse[5 + 2] = static_cast<float>(kSink[1] + 0.01);  // head 1, token 2: not the sink
  EXPECT_FALSE(judge(off).passed);
}

// A row with keys whose O_ref is exactly 0 (V zero there) is judged by the max clause, not as a
// row without keys: a tiny output there passes.
TEST_F(PackedCompareTest, ZeroReferenceOnRowWithKeysIsNotARowWithoutKeys) {
  verifier::ReferenceOutputs ref = ref_;
  verifier::HostOutputs result = good_, baseline = baseline_;
  for (std::int64_t h = 0; h < 2; ++h) {
    for (std::int64_t d = 0; d < 4; ++d) {
      ref.out[at(1, h, d)] = 0.0;
      result.out[at(1, h, d)] = 0.0f;
      baseline.out[at(1, h, d)] = 0.0f;
    }
  }
  result.out[at(1, 0, 0)] = 1e-6f;
  VerifyReport r;
  verifier::judge(dims_, DType::kBF16, result, baseline, ref, true, &r);
  EXPECT_TRUE(r.passed) << r.to_string();
  EXPECT_EQ(r.error.masked_nonzero, 0);
}

TEST(OutputDimsTest, RowsWithoutKeysComeFromTheMask) {
  // Dense causal 5 x 3: rows 0, 1 see nothing.
  verifier::OutputDims d = verifier::output_dims(dense(2, 1, 1, 5, 3, 8, DType::kFP32, true));
  EXPECT_FALSE(d.varlen());
  EXPECT_EQ(d.row_without_keys, (std::vector<std::uint8_t>{1, 1, 0, 0, 0, 1, 1, 0, 0, 0}));
  // A window that leaves the first rows nothing: 3 queries on 6 keys, window (0, 0) keeps the
  // diagonal j = i + 3 only, which exists for every row.
  ProblemShape s = dense(1, 1, 1, 3, 6, 8, DType::kFP32, false);
  s.window_left = 0;
  s.window_right = 0;
  EXPECT_EQ(verifier::output_dims(s).row_without_keys, (std::vector<std::uint8_t>{0, 0, 0}));
  s = dense(1, 1, 1, 6, 3, 8, DType::kFP32, false);  // diagonal j = i - 3: rows 0..2 see none
  s.window_left = 1;
  s.window_right = 0;
  EXPECT_EQ(verifier::output_dims(s).row_without_keys,
            (std::vector<std::uint8_t>{1, 1, 1, 0, 0, 0}));
  // Varlen: the offsets, and per sequence its own lengths (seqused_k applied).
  d = verifier::output_dims(packed(2, 1, {2, 0, 3}, {4, 4, 0}, 8, DType::kFP32, true, {1, 4, 0}));
  EXPECT_EQ(d.cu_seqlens_q, (std::vector<std::int64_t>{0, 2, 2, 5}));
  EXPECT_EQ(d.rows(), 5);
  EXPECT_EQ(d.lse_numel(), 10);
  // Sequence 0: 2 queries on 1 used key, causal: row 0 sees none. Sequence 2: no keys.
  EXPECT_EQ(d.row_without_keys, (std::vector<std::uint8_t>{1, 0, 1, 1, 1}));
}

// ---------------------------------------------------------------------------------------------
// Every variant through verify(), against the float64 reference.

using testing::VariantCase;
using testing::variant_cases;
using testing::with_alibi;
using testing::with_sinks;
using testing::with_softcap;
using testing::with_window;

struct BackendCase {
  std::string backend;
  VariantCase variant;
};

std::vector<BackendCase> backend_cases() {
  std::vector<BackendCase> out;
  for (const char* backend : {"cpu-flash", "cpu-reference"}) {
    for (const VariantCase& v : variant_cases()) out.push_back({backend, v});
  }
  return out;
}

std::string backend_case_name(const ::testing::TestParamInfo<BackendCase>& info) {
  std::string b = info.param.backend == "cpu-flash" ? "cpuflash" : "cpureference";
  return b + "_" + info.param.variant.name;
}

void PrintTo(const BackendCase& c, std::ostream* os) {
  *os << c.backend << " " << c.variant.name << " (" << c.variant.shape.to_string() << ")";
}

std::int64_t keyless_rows(const ProblemShape& s) {
  const verifier::OutputDims d = verifier::output_dims(s);
  return std::count(d.row_without_keys.begin(), d.row_without_keys.end(), std::uint8_t{1});
}

class VariantVerifyTest : public ::testing::TestWithParam<BackendCase> {};

TEST_P(VariantVerifyTest, MatchesReference) {
  const BackendCase& c = GetParam();
  VerifyOptions options;
  options.backend = c.backend;
  options.seed = testing::variant_seed(c.variant.name);
  options.layout = c.variant.layout;
  options.kind = c.variant.kind;
  // The sampled check of the large shapes too, so that it meets every variant (the full float64
  // reference judges the baseline as well).
  options.sample_check_always = true;
  VerifyReport report;
  const Status st = verify(c.variant.shape, options, &report);
  ASSERT_TRUE(st.ok()) << st.to_string() << " (seed " << options.seed << ")";
  EXPECT_TRUE(report.passed) << report.to_string();
  EXPECT_GT(report.sample_rows, 0);
  EXPECT_TRUE(report.baseline_passed);
  EXPECT_TRUE(report.sample_baseline_passed);
  EXPECT_EQ(report.reference, "cpu-reference (float64)");
  EXPECT_EQ(report.unwritten, 0);
  EXPECT_TRUE(report.guards_intact);
  EXPECT_EQ(report.error.masked_nonzero, 0) << report.to_string();
  EXPECT_EQ(report.error.lse_mismatch_inf, 0) << report.to_string();
  EXPECT_NE(report.to_string().find(c.variant.shape.to_string()), std::string::npos);
  if (c.backend == "cpu-reference") {
    // float64 computed, stored in the dtype: only the output rounding remains.
    EXPECT_LE(report.error.max_abs, report.atol) << report.to_string();
  }
}

INSTANTIATE_TEST_SUITE_P(Quick, VariantVerifyTest, ::testing::ValuesIn(backend_cases()),
                         backend_case_name);

// The cases that promise rows without keys have them (so the clauses above were exercised), and
// the varlen ones hold zero-length sequences.
TEST(VariantVerifyCasesTest, RowsWithoutKeysAndEmptySequencesExist) {
  std::set<std::string> names;
  for (const VariantCase& v : variant_cases()) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " twice";
    EXPECT_EQ(keyless_rows(v.shape) > 0, v.keyless) << v.name << ": " << v.shape.to_string();
    if (v.shape.varlen() && v.name != "varlen_one_sequence") {
      bool empty = false;  // a sequence without queries or without (used) keys
      for (std::int64_t b = 0; b < v.shape.batch; ++b) {
        empty = empty || v.shape.seqlen_q_of(b) == 0 || v.shape.seqlen_k_of(b) == 0;
      }
      EXPECT_TRUE(empty) << v.name;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Planted errors: a tiny fake backend (VerifyOptions::run_backend) wrong in one variant; the
// verifier must fail it, naming the clause.

Status run_cpu_flash(const ForwardParams& p) { return forward(p, "cpu-flash"); }

VerifyReport verify_with(const ProblemShape& shape,
                         const std::function<Status(const ForwardParams&)>& backend,
                         std::uint64_t seed = 0) {
  VerifyOptions options;
  options.backend = "planted";
  options.seed = seed == 0 ? testing::base_seed() : seed;
  options.run_backend = backend;
  VerifyReport report;
  const Status st = verify(shape, options, &report);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(report.backend, "planted");
  return report;
}

bool has_failure(const VerifyReport& r, const std::string& needle) {
  for (const std::string& f : r.failures) {
    if (f.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(PlantedErrorTest, TheFakeBackendRunningCpuFlashPasses) {
  ProblemShape s = with_sinks(with_alibi(with_window(dense(2, 4, 2, 113, 203, 64, DType::kBF16,
                                                           true), 48, 0), AlibiMode::kHeads));
  s.softcap = 20.0f;
  const VerifyReport r = verify_with(s, run_cpu_flash);
  EXPECT_TRUE(r.passed) << r.to_string();
}

TEST(PlantedErrorTest, DroppedSinksFail) {
  const ProblemShape s = with_sinks(dense(2, 4, 2, 203, 113, 64, DType::kBF16, true));
  const VerifyReport r = verify_with(s, [](const ForwardParams& p) {
    ForwardParams q = p;
    q.sinks = TensorView{};
    return run_cpu_flash(q);
  });
  EXPECT_FALSE(r.passed) << r.to_string();
  EXPECT_TRUE(has_failure(r, "max|LSE - LSE_ref|")) << r.to_string();
  // Its rows without keys give LSE = -inf instead of the sink.
  EXPECT_GT(r.error.lse_mismatch_inf, 0) << r.to_string();
}

TEST(PlantedErrorTest, FlippedAlibiSignFails) {
  for (AlibiMode mode : {AlibiMode::kHeads, AlibiMode::kBatchHeads}) {
    const ProblemShape s = with_alibi(dense(2, 4, 2, 113, 203, 64, DType::kBF16, false), mode);
    const VerifyReport r = verify_with(s, [](const ForwardParams& p) {
      OwnedTensor flipped;
      std::vector<std::int64_t> dims(p.alibi_slopes.shape, p.alibi_slopes.shape + p.alibi_slopes.rank);
      Status st = OwnedTensor::create(DType::kFP32, Device::cpu(), dims, &flipped);
      const auto* src = static_cast<const float*>(p.alibi_slopes.data);
      std::vector<float> negated(src, src + p.alibi_slopes.numel());
      for (float& x : negated) x = -x;
      if (st.ok()) st = flipped.from_host_float(negated);
      if (!st.ok()) return st;
      ForwardParams q = p;
      q.alibi_slopes = flipped.view();
      return run_cpu_flash(q);
    });
    EXPECT_FALSE(r.passed) << r.to_string();
    EXPECT_TRUE(has_failure(r, "max|O - O_ref|")) << r.to_string();
  }
}

TEST(PlantedErrorTest, BatchSlopesReadPerHeadFail) {
  // A backend that takes the (batch, heads) slopes for (heads) ones: right for batch 0 only.
  const ProblemShape s =
      with_alibi(dense(3, 4, 2, 77, 99, 64, DType::kFP32, false), AlibiMode::kBatchHeads);
  const VerifyReport r = verify_with(s, [](const ForwardParams& p) {
    ForwardParams q = p;
    q.alibi_slopes = TensorView::contiguous(p.alibi_slopes.data, DType::kFP32, Device::cpu(),
                                            {p.alibi_slopes.shape[1]});
    return run_cpu_flash(q);
  });
  EXPECT_FALSE(r.passed) << r.to_string();
  ASSERT_FALSE(r.error.first_bad.empty());
  EXPECT_GE(r.error.first_bad[0], 1) << r.to_string();  // batch 0 is right
}

TEST(PlantedErrorTest, IgnoredWindowFails) {
  const ProblemShape s = with_window(dense(1, 4, 2, 203, 203, 64, DType::kBF16, false), 32, 0);
  const VerifyReport r = verify_with(s, [](const ForwardParams& p) {
    ForwardParams q = p;
    q.window_left = q.window_right = -1;
    return run_cpu_flash(q);
  });
  EXPECT_FALSE(r.passed) << r.to_string();
}

TEST(PlantedErrorTest, WindowOffByOneFails) {
  const ProblemShape s = with_window(dense(1, 4, 2, 203, 203, 64, DType::kFP32, false), 8, 2);
  for (int side = 0; side < 2; ++side) {
    const VerifyReport r = verify_with(s, [side](const ForwardParams& p) {
      ForwardParams q = p;
      (side == 0 ? q.window_left : q.window_right) += 1;
      return run_cpu_flash(q);
    });
    EXPECT_FALSE(r.passed) << "side " << side << "\n" << r.to_string();
  }
}

TEST(PlantedErrorTest, IgnoredSoftcapFails) {
  const ProblemShape s = with_softcap(dense(1, 4, 2, 113, 203, 64, DType::kBF16, false), 2.0f);
  const VerifyReport r = verify_with(s, [](const ForwardParams& p) {
    ForwardParams q = p;
    q.softcap = 0.0f;
    return run_cpu_flash(q);
  });
  EXPECT_FALSE(r.passed) << r.to_string();
}

TEST(PlantedErrorTest, IgnoredSequsedKFails) {
  const ProblemShape s = packed(2, 1, {50, 30, 7}, {80, 30, 9}, 32, DType::kFP32, false, {40, 0, 9});
  const VerifyReport r = verify_with(s, [](const ForwardParams& p) {
    ForwardParams q = p;
    q.seqused_k = TensorView{};
    return run_cpu_flash(q);
  });
  EXPECT_FALSE(r.passed) << r.to_string();
  // Sequence 1 uses no key: its rows must be O = 0, LSE = -inf.
  EXPECT_GT(r.error.masked_nonzero, 0) << r.to_string();
}

TEST(PlantedErrorTest, KeysAtTheQueryOffsetsFail) {
  // A backend that reads the keys of sequence b at cu_seqlens_q[b] instead of cu_seqlens_k[b].
  const ProblemShape s = packed(2, 2, {40, 40, 40}, {50, 50, 50}, 32, DType::kBF16, false);
  const VerifyReport r = verify_with(s, [](const ForwardParams& p) {
    ForwardParams q = p;
    q.cu_seqlens_k = p.cu_seqlens_q;
    return run_cpu_flash(q);
  });
  EXPECT_FALSE(r.passed) << r.to_string();
  ASSERT_FALSE(r.error.first_bad.empty());
}

// Rows without keys with sinks: O must be exactly 0 and LSE the sink.
TEST(PlantedErrorTest, SinkRowsWithoutKeysThatAreNotZeroFail) {
  const ProblemShape s = with_sinks(dense(1, 2, 1, 40, 13, 32, DType::kBF16, true));
  ASSERT_GT(keyless_rows(s), 0);
  const VerifyReport r = verify_with(s, [](const ForwardParams& p) {
    const Status st = run_cpu_flash(p);
    if (!st.ok()) return st;
    // Row 0 of every head sees no key: write a tiny value there, as a kernel that normalizes by
    // the sink's weight alone would (1e-3 of V).
    for (std::int64_t h = 0; h < p.q.shape[2]; ++h) {
      static_cast<std::uint16_t*>(p.out.data)[h * p.out.stride[2]] = 0x3a83;  // bf16 1e-3
    }
    return Status::Ok();
  });
  EXPECT_FALSE(r.passed) << r.to_string();
  EXPECT_TRUE(has_failure(r, "rows without keys")) << r.to_string();
  EXPECT_EQ(r.error.masked_nonzero, 2);
}

// ---------------------------------------------------------------------------------------------
// Planted errors in the baseline (VerifyOptions::run_baseline). The baseline is checked against
// the reference with a fixed bound before its error is used: a broken baseline fails the
// verification, even where the backend measured against it would pass.

using Runner = std::function<Status(const ForwardParams&)>;

// O (contiguous, as verify() allocates the baseline's; a contiguous-layout backend's too)
// multiplied by `factor` after `run`: a kernel with a wrong normalization.
Runner scaled(Runner run, float factor) {
  return [run, factor](const ForwardParams& p) {
    const Status st = run(p);
    if (!st.ok()) return st;
    for (std::int64_t i = 0; i < p.out.numel(); ++i) {
      store_from_float(p.out.data, p.out.dtype, i,
                       factor * load_as_float(p.out.data, p.out.dtype, i));
    }
    return Status::Ok();
  };
}

Status cpu_naive(const ForwardParams& p) { return cpu::naive_forward<float>(p); }

VerifyReport verify_planted_baseline(const ProblemShape& shape, const Runner& baseline,
                                     const Runner& backend = run_cpu_flash) {
  VerifyOptions options;
  options.backend = "planted";
  options.seed = testing::base_seed();
  options.run_backend = backend;
  options.run_baseline = baseline;
  VerifyReport report;
  const Status st = verify(shape, options, &report);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return report;
}

TEST(PlantedBaselineTest, TheHookRunningTheNaiveAlgorithmPasses) {
  const ProblemShape s = with_sinks(dense(2, 4, 2, 113, 203, 64, DType::kBF16, true));
  const VerifyReport r = verify_planted_baseline(s, cpu_naive);
  EXPECT_TRUE(r.passed) << r.to_string();
  EXPECT_TRUE(r.baseline_passed);
  EXPECT_EQ(r.baseline, "cpu naive (float32 accumulate, bf16 out) (replaced by a test hook)");
}

// A baseline 3% off (1e-4 in fp32, whose bound is 1 + 512 + 4 * |LSE| float32 steps, about
// 6.5e-5 relative here) against a correct backend: the verification fails on the baseline's
// line alone; the backend's own clauses pass.
TEST(PlantedBaselineTest, ScaledBaselineFails) {
  for (DType dt : {DType::kBF16, DType::kFP16, DType::kFP32}) {
    const ProblemShape s = dense(2, 4, 2, 113, 203, 64, dt, false);
    const float factor = dt == DType::kFP32 ? 1.0001f : 1.03f;
    const VerifyReport r = verify_planted_baseline(s, scaled(cpu_naive, factor));
    EXPECT_FALSE(r.passed) << r.to_string();
    EXPECT_FALSE(r.baseline_passed) << r.to_string();
    ASSERT_EQ(r.failures.size(), 1u) << r.to_string();
    EXPECT_EQ(r.failures[0].find("baseline cpu naive (float32 accumulate, " +
                                 std::string(dtype_name(dt)) +
                                 " out) (replaced by a test hook) is itself off: max|O_base - "
                                 "O_ref| = "),
              0u)
        << r.failures[0];
    EXPECT_LE(r.error.max_abs, r.max_abs_bound) << r.to_string();
    EXPECT_NE(r.to_string().find("FAIL "), std::string::npos);
  }
}

// The case: the naive algorithm with a 3% scale error as the backend, measured against
// itself as the baseline. Its error is its baseline's, so every backend clause passes; the
// baseline's fixed bound is what fails it.
TEST(PlantedBaselineTest, BackendAndBaselineOffAlikeFail) {
  const ProblemShape s = dense(2, 4, 2, 203, 113, 64, DType::kBF16, true);
  const Runner off = scaled(cpu_naive, 1.03f);
  const VerifyReport r = verify_planted_baseline(s, off, off);
  EXPECT_FALSE(r.passed) << r.to_string();
  ASSERT_EQ(r.failures.size(), 1u) << r.to_string();
  EXPECT_NE(r.failures[0].find("is itself off: max|O_base - O_ref|"), std::string::npos)
      << r.failures[0];
  EXPECT_EQ(r.error.max_abs, r.baseline_error.max_abs);
}

// A baseline that drops the sinks: its LSE misses the sink's term (-inf on the rows without
// keys, which must hold the sink's logit) and its O the sink's share.
TEST(PlantedBaselineTest, BaselineWithoutSinksFails) {
  const ProblemShape s = with_sinks(dense(2, 4, 2, 203, 113, 64, DType::kBF16, true));
  const VerifyReport r = verify_planted_baseline(s, [](const ForwardParams& p) {
    ForwardParams q = p;
    q.sinks = TensorView{};
    return cpu_naive(q);
  });
  EXPECT_FALSE(r.passed) << r.to_string();
  EXPECT_FALSE(r.baseline_passed);
  bool lse_line = false, inf_line = false;
  for (const std::string& f : r.failures) {
    lse_line = lse_line || f.find("is itself off: max|LSE_base - LSE_ref|") != std::string::npos;
    inf_line = inf_line || f.find("LSE_base, LSE_ref is -inf") != std::string::npos;
  }
  EXPECT_TRUE(lse_line) << r.to_string();
  EXPECT_TRUE(inf_line) << r.to_string();
}


// ---------------------------------------------------------------------------------------------
// The sampled check. Above cpu_reference_limit the reference is the float32 GPU naive kernel,
// the same kernel as the GPU baseline: a naive kernel 3% off is off alike in both, and judged
// against each other they agree. verify() then also holds the baseline (and that reference) to
// the fixed bound against the float64 CPU reference on a sample of rows (verifier::sample_rows,
// cpu::reference_rows_f64, verifier::judge_sample). The GPU path itself runs in tests/cuda; here
// the same steps run on the CPU: through verify() with VerifyOptions::sample_check_always, and
// as judge() + judge_sample() on a float32 "GPU reference" stand-in that is 3% off.

TEST(SampledCheckTest, SampleRowsSpreadOverItemsAndRows) {
  const ProblemShape s = dense(3, 8, 2, 1000, 4000, 64, DType::kBF16, true);
  const std::vector<cpu::RowId> rows = verifier::sample_rows(s, 1e8);
  // 24 (batch, head) items: 16 of them, the first and the last included; per item
  // floor(1e8 / 16 / (4000 * 64)) = 24 rows, the first and the last row included.
  std::set<std::int64_t> items;
  std::map<std::int64_t, std::vector<std::int64_t>> rows_of;
  double macs = 0;
  for (const cpu::RowId& r : rows) {
    ASSERT_GE(r.batch, 0);
    ASSERT_LT(r.batch, 3);
    ASSERT_GE(r.head, 0);
    ASSERT_LT(r.head, 8);
    ASSERT_GE(r.row, 0);
    ASSERT_LT(r.row, 1000);
    items.insert(r.batch * 8 + r.head);
    rows_of[r.batch * 8 + r.head].push_back(r.row);
    macs += 4000.0 * 64;
  }
  EXPECT_EQ(items.size(), 16u);
  EXPECT_EQ(*items.begin(), 0);
  EXPECT_EQ(*items.rbegin(), 23);
  EXPECT_LE(macs, 1e8);
  for (const auto& [item, r] : rows_of) {
    ASSERT_EQ(r.size(), 24u) << "item " << item;
    EXPECT_EQ(r.front(), 0);
    EXPECT_EQ(r.back(), 999);
    EXPECT_TRUE(std::is_sorted(r.begin(), r.end()));
    EXPECT_EQ(std::adjacent_find(r.begin(), r.end()), r.end()) << "a row twice";
  }
  // A budget too small for two rows still takes the first and the last of each item; one that
  // covers everything takes every row; fewer items than kSampleSlices: all of them.
  const std::vector<cpu::RowId> two = verifier::sample_rows(s, 1.0);
  ASSERT_EQ(two.size(), 32u);
  EXPECT_EQ(two[0].row, 0);
  EXPECT_EQ(two[1].row, 999);
  const ProblemShape small = dense(1, 3, 1, 7, 5, 8, DType::kFP16, false);
  EXPECT_EQ(verifier::sample_rows(small, 1e9).size(), 21u);
  EXPECT_EQ(verifier::sample_rows(dense(0, 3, 1, 7, 5, 8, DType::kFP16, false), 1e9).size(), 0u);
  // Varlen: rows within each sequence; sequences without queries give none, without keys some.
  const ProblemShape v = packed(2, 1, {5, 0, 9}, {4, 3, 0}, 16, DType::kBF16, false);
  for (const cpu::RowId& r : verifier::sample_rows(v, 1e9)) {
    EXPECT_NE(r.batch, 1);
    EXPECT_LT(r.row, v.seqlen_q_of(r.batch));
  }
  EXPECT_EQ(verifier::sample_rows(v, 1e9).size(), 2u * (5 + 9));
}

// reference_rows_f64 gives the sampled rows exactly what the full float64 reference gives them,
// on every variant case (varlen, sinks, ALiBi per batch entry, windows, GQA, layouts).
TEST(SampledCheckTest, SampledRowsAreTheFullReferenceBitForBit) {
  for (const VariantCase& c : variant_cases()) {
    verifier::Inputs in;
    ASSERT_TRUE(verifier::make_inputs(c.shape, c.layout, c.kind, Device::cpu(), 11, &in).ok());
    verifier::Outputs outs;
    ASSERT_TRUE(verifier::make_outputs(c.shape, c.layout, c.shape.dtype, Device::cpu(), true,
                                       &outs).ok());
    const ForwardParams p = verifier::make_params(c.shape, in, outs);
    std::vector<double> out(static_cast<std::size_t>(p.out.numel())),
        lse(static_cast<std::size_t>(p.lse.numel()));
    ASSERT_TRUE(cpu::reference_forward_f64(p, out.data(), lse.data()).ok());
    // A budget of about 3 rows per item: a strict subset where the sequences are long.
    const std::vector<cpu::RowId> sample = verifier::sample_rows(
        c.shape, 3.0 * verifier::kSampleSlices * c.shape.seqlen_k * c.shape.head_dim);
    ASSERT_FALSE(sample.empty()) << c.name;
    std::vector<double> out_rows(sample.size() * static_cast<std::size_t>(c.shape.head_dim)),
        lse_rows(sample.size());
    ASSERT_TRUE(cpu::reference_rows_f64(p, sample, out_rows.data(), lse_rows.data()).ok());
    const verifier::OutputDims dims = verifier::output_dims(c.shape);
    const std::int64_t D = c.shape.head_dim, H = c.shape.heads;
    for (std::size_t n = 0; n < sample.size(); ++n) {
      const cpu::RowId& r = sample[n];
      const std::int64_t t = dims.varlen()
                                 ? dims.cu_seqlens_q[static_cast<std::size_t>(r.batch)] + r.row
                                 : r.batch * c.shape.seqlen_q + r.row;
      const std::int64_t l = dims.varlen() ? r.head * dims.rows() + t
                                           : (r.batch * H + r.head) * c.shape.seqlen_q + r.row;
      for (std::int64_t d = 0; d < D; ++d) {
        ASSERT_EQ(out_rows[n * D + d], out[static_cast<std::size_t>((t * H + r.head) * D + d)])
            << c.name << " row " << n;
      }
      ASSERT_EQ(lse_rows[n], lse[static_cast<std::size_t>(l)]) << c.name << " row " << n;
    }
  }
  // A row outside the problem is refused, naming it.
  const ProblemShape s = dense(1, 2, 1, 5, 5, 8, DType::kFP32, false);
  verifier::Inputs in;
  ASSERT_TRUE(verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kNormal,
                                    Device::cpu(), 1, &in).ok());
  verifier::Outputs outs;
  ASSERT_TRUE(verifier::make_outputs(s, InputLayout::kContiguous, s.dtype, Device::cpu(), true,
                                     &outs).ok());
  std::vector<double> o(8), l(1);
  const Status st =
      cpu::reference_rows_f64(verifier::make_params(s, in, outs), {{0, 2, 0}}, o.data(), l.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("(b=0, h=2, s=0) is outside the problem"), std::string::npos)
      << st.message();
}

VerifyReport verify_sampled(const ProblemShape& shape, const Runner& baseline,
                            const Runner& backend = run_cpu_flash) {
  VerifyOptions options;
  options.backend = "planted";
  options.seed = testing::base_seed();
  options.run_backend = backend;
  options.run_baseline = baseline;
  options.sample_check_always = true;
  options.sample_limit = 2e6;  // a subset: 1 or 2 rows of some items, more of others
  VerifyReport report;
  const Status st = verify(shape, options, &report);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return report;
}

// Through verify(): the sampled check runs on the baseline verify() uses, the test hook's
// included, with its own failure line; a correct baseline passes it, variants included.
TEST(SampledCheckTest, ThroughVerifyTheSampledCheckHoldsTheBaseline) {
  ProblemShape s = with_sinks(with_alibi(dense(2, 4, 2, 203, 113, 64, DType::kBF16, true),
                                         AlibiMode::kBatchHeads));
  const VerifyReport good = verify_sampled(s, cpu_naive);
  EXPECT_TRUE(good.passed) << good.to_string();
  EXPECT_GT(good.sample_rows, 0);
  EXPECT_LT(good.sample_rows, 2 * 4 * 203);
  EXPECT_FALSE(good.reference_sampled);  // the float64 reference is not checked against itself
  EXPECT_LE(good.baseline_sample_error.max_abs, good.sample_bound);
  EXPECT_LE(good.baseline_sample_error.max_abs, good.baseline_error.max_abs);  // a subset of it
  EXPECT_TRUE(good.sample_baseline_passed);
  EXPECT_NE(good.to_string().find("(the baseline against float64 on " +
                                  std::to_string(good.sample_rows) + " rows"),
            std::string::npos)
      << good.to_string();

  for (DType dt : {DType::kBF16, DType::kFP16, DType::kFP32}) {
    s.dtype = dt;
    const float factor = dt == DType::kFP32 ? 1.0001f : 1.03f;
    const VerifyReport r = verify_sampled(s, scaled(cpu_naive, factor));
    EXPECT_FALSE(r.passed);
    EXPECT_FALSE(r.baseline_passed);  // the float64 reference judges the whole baseline too
    EXPECT_FALSE(r.sample_baseline_passed);
    EXPECT_TRUE(has_failure(r, "baseline cpu naive (float32 accumulate, " +
                                   std::string(dtype_name(dt)) +
                                   " out) (replaced by a test hook) is itself off (float64 on " +
                                   std::to_string(r.sample_rows) +
                                   " sampled rows): max|O_base - O_f64| = "))
        << r.to_string();
    EXPECT_GT(r.baseline_sample_error.max_abs, r.sample_bound) << r.to_string();
  }
}

// The large-shape path on the CPU: the "GPU naive kernel" is a float32 naive 3% off, run in
// float32 (the reference) and in the dtype (the baseline); the backend is off alike. Against
// that reference everything agrees and judge() passes it all; the sampled check against float64
// fails the baseline and the reference, each on its own line.
TEST(SampledCheckTest, A3PercentNaiveKernelPassesJudgeAloneAndFailsTheSampledCheck) {
  for (DType dt : {DType::kBF16, DType::kFP16}) {
    const ProblemShape s = with_window(dense(2, 4, 2, 203, 339, 64, dt, true), 100, 0);
    verifier::Inputs in;
    ASSERT_TRUE(verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kNormal,
                                      Device::cpu(), 5, &in).ok());
    const Runner off = scaled(cpu_naive, 1.03f);
    auto run = [&](const verifier::Inputs& inputs, DType out_dtype, verifier::HostOutputs* h) {
      verifier::Outputs outs;
      ASSERT_TRUE(verifier::make_outputs(s, InputLayout::kContiguous, out_dtype, Device::cpu(),
                                         true, &outs).ok());
      ASSERT_TRUE(off(verifier::make_params(s, inputs, outs)).ok());
      ASSERT_TRUE(outs.out.to_host_float(&h->out).ok());
      ASSERT_TRUE(outs.lse.to_host_float(&h->lse).ok());
    };
    verifier::Inputs in32 = in;
    ASSERT_TRUE(in.q.convert_to(DType::kFP32, &in32.q).ok());
    ASSERT_TRUE(in.k.convert_to(DType::kFP32, &in32.k).ok());
    ASSERT_TRUE(in.v.convert_to(DType::kFP32, &in32.v).ok());
    verifier::HostOutputs ref32, baseline;
    run(in32, DType::kFP32, &ref32);
    run(in, dt, &baseline);
    verifier::ReferenceOutputs ref;
    ref.out.assign(ref32.out.begin(), ref32.out.end());
    ref.lse.assign(ref32.lse.begin(), ref32.lse.end());
    ref.is_fp32 = true;

    const verifier::OutputDims dims = verifier::output_dims(s);
    VerifyReport r;
    r.shape = s;
    r.baseline = "naive (" + std::string(dtype_name(dt)) + ")";
    r.reference = "naive (float32)";
    verifier::judge(dims, dt, baseline, baseline, ref, /*check_lse=*/true, &r);
    ASSERT_TRUE(r.passed) << "the premise: judged against itself the kernel passes\n"
                          << r.to_string();

    const std::vector<cpu::RowId> sample = verifier::sample_rows(s, 2e6);
    verifier::ReferenceOutputs f64;
    f64.out.resize(sample.size() * static_cast<std::size_t>(s.head_dim));
    f64.lse.resize(sample.size());
    verifier::Outputs scratch;
    ASSERT_TRUE(verifier::make_outputs(s, InputLayout::kContiguous, dt, Device::cpu(), true,
                                       &scratch).ok());
    ASSERT_TRUE(cpu::reference_rows_f64(verifier::make_params(s, in, scratch), sample,
                                        f64.out.data(), f64.lse.data()).ok());
    verifier::judge_sample(dims, dt, sample, f64, baseline, &ref, true, &r);
    EXPECT_FALSE(r.passed);
    EXPECT_TRUE(r.baseline_passed);  // against the float32 reference, the same kernel
    EXPECT_FALSE(r.sample_baseline_passed);
    EXPECT_FALSE(r.sample_reference_passed);
    EXPECT_TRUE(r.reference_sampled);
    EXPECT_NE(r.to_string().find("the reference against float64 there"), std::string::npos)
        << r.to_string();
    ASSERT_EQ(r.failures.size(), 2u) << r.to_string();
    const std::string where = "(float64 on " + std::to_string(sample.size()) + " sampled rows)";
    EXPECT_EQ(r.failures[0].find("baseline naive (" + std::string(dtype_name(dt)) +
                                 ") is itself off " + where + ": max|O_base - O_f64| = "),
              0u)
        << r.failures[0];
    EXPECT_EQ(r.failures[1].find("reference naive (float32) is itself off " + where +
                                 ": max|O_ref - O_f64| = "),
              0u)
        << r.failures[1];
    EXPECT_NE(r.failures[0].find(" first at (b="), std::string::npos) << r.failures[0];

    // The same kernel without the scale error passes the sampled check.
    const Runner good = cpu_naive;
    auto run_good = [&](const verifier::Inputs& inputs, DType out_dtype, verifier::HostOutputs* h) {
      verifier::Outputs outs;
      ASSERT_TRUE(verifier::make_outputs(s, InputLayout::kContiguous, out_dtype, Device::cpu(),
                                         true, &outs).ok());
      ASSERT_TRUE(good(verifier::make_params(s, inputs, outs)).ok());
      ASSERT_TRUE(outs.out.to_host_float(&h->out).ok());
      ASSERT_TRUE(outs.lse.to_host_float(&h->lse).ok());
    };
    run_good(in32, DType::kFP32, &ref32);
    run_good(in, dt, &baseline);
    ref.out.assign(ref32.out.begin(), ref32.out.end());
    ref.lse.assign(ref32.lse.begin(), ref32.lse.end());
    VerifyReport ok;
    ok.reference = "naive (float32)";
    verifier::judge(dims, dt, baseline, baseline, ref, true, &ok);
    verifier::judge_sample(dims, dt, sample, f64, baseline, &ref, true, &ok);
    EXPECT_TRUE(ok.passed) << ok.to_string();
    EXPECT_LE(ok.reference_sample_error.max_abs, ok.sample_reference_bound);
  }
}

}  // namespace
}  // namespace flashattn
