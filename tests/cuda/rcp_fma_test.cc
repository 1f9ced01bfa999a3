// Softcap's FMA-pipe reciprocal (cuda/primitives/rcp_fma.h) and the tanh built on it
// (cuda/attention/softcap_fma.h), checked on the CPU against float64: the functions are plain
// float arithmetic with fmaf, which rounds once here as on the GPU, so these are the GPU's bits.
// The exponential before them is the GPU's MUFU.EX2 (ex2.approx.ftz.f32, within 2 ulp), modelled
// here as exp2 rounded to float and then moved 2 ulp either way.
//
// The bounds. P's relative error from a softcapped score is softcap * delta, delta the error of
// cap * tanh in units of cap (raw and scaled scores share it: raw = scaled / scale). ex2's 2 ulp
// alone move tanh by up to 2 * 2 * 2^-24 = 2.4e-7; the roundings of 1 + e, of the reciprocal
// (within 1 ulp) and of the result add a few 1e-8: delta <= 3e-7 for both forms, the MUFU one
// (ScoreMod::apply_softcap) measured here as 2.4-2.7e-7, and the FMA form at most 3e-8 (half an
// ulp of 1) above it. At softcap 30 that is 9e-6 in a logit, 0.5% of bf16's 2^-9 rounding of P;
// at softcap 1e4 both forms reach 3e-3 (the cancellation in 2 / (1 + e) - 1 near 0).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/attention_args.h"
#include "cuda/attention/softcap_fma.h"
#include "cuda/primitives/rcp_fma.h"
#include "flashattn/params.h"

namespace flashattn::cuda {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Every float y in [1, 2]: within 1 ulp of 1 / y (relative 2^-23 at most, as ulps of r in
// [0.5, 1] are 2^-24 and r's true value lies between two of them).
TEST(RcpFma, EveryFloatInOneToTwo) {
  double max_rel = 0.0;
  std::int64_t off_by_one = 0;
  for (std::uint32_t u = to_bits(1.0f); u <= to_bits(2.0f); ++u) {
    const float y = from_bits(u);
    const float r = rcp_fma_1to2(y);
    const double exact = 1.0 / static_cast<double>(y);
    max_rel = std::max(max_rel, std::abs(static_cast<double>(r) - exact) / exact);
    const std::int64_t ulps = static_cast<std::int64_t>(to_bits(r)) -
                              static_cast<std::int64_t>(to_bits(static_cast<float>(exact)));
    ASSERT_LE(std::abs(ulps), 1) << "y = " << y;
    off_by_one += ulps != 0;
  }
  EXPECT_LE(max_rel, 0x1p-23) << max_rel;
  std::printf("rcp_fma_1to2: max relative error %.3g (2^%.2f), %lld of 2^23 + 1 off by 1 ulp\n",
              max_rel, std::log2(max_rel), static_cast<long long>(off_by_one));
}

// The softcap constants as the host derives them for the kernels (make_attention_args).
AttentionArgs args_for(float softcap, float scale) {
  static float dummy[8] = {};
  ForwardParams p;
  const Device cpu = Device::cpu();
  p.q = TensorView::contiguous(dummy, DType::kFP32, cpu, {1, 1, 1, 8});
  p.k = p.q;
  p.v = p.q;
  p.out = TensorView::contiguous(dummy, DType::kFP32, cpu, {1, 1, 1, 8});
  p.softmax_scale = scale;
  p.softcap = softcap;
  return make_attention_args(p);
}

// The float with `ulps` more (or fewer) ulps than x >= 0.
float step_ulps(float x, int ulps) {
  if (x == 0.0f && ulps < 0) return 0.0f;
  return from_bits(static_cast<std::uint32_t>(static_cast<std::int64_t>(to_bits(x)) + ulps));
}

struct SoftcapErrors {
  double fma = 0.0, mufu = 0.0;  // max |out - cap tanh(s / cap)| / cap
};

// Raw scores s from 1e-7 cap to 1e7 cap (both signs), 0, +-inf: the FMA form (softcap_from_exp_fma
// after ex2 within 2 ulp) and the MUFU form (rcp correctly rounded, which MUFU.RCP is within
// 1 ulp of) against float64.
SoftcapErrors softcap_errors(float softcap, float scale) {
  const AttentionArgs a = args_for(softcap, scale);
  const double cap = static_cast<double>(softcap) / static_cast<double>(scale);
  std::vector<float> scores = {0.0f, -0.0f, INFINITY, -INFINITY};
  for (double m = 1e-7; m < 1e7; m *= 1.0007) {
    scores.push_back(static_cast<float>(m * cap));
    scores.push_back(static_cast<float>(-m * cap));
  }
  SoftcapErrors err;
  for (const float s : scores) {
    const double ref = std::isinf(s) ? std::copysign(cap, s)
                                     : cap * std::tanh(static_cast<double>(s) / cap);
    // FMA form: ex2(|s| * -tanh_in), the product rounded to float as FMUL does.
    const float arg = std::fabs(s) * -a.softcap_tanh_in;
    const float e = static_cast<float>(std::exp2(static_cast<double>(arg)));
    for (int ulps = -2; ulps <= 2; ++ulps) {
      const float out = softcap_from_exp_fma(step_ulps(e, ulps), s, a.softcap_neg_two_raw,
                                             a.softcap_raw);
      err.fma = std::max(err.fma, std::abs(static_cast<double>(out) - ref) / cap);
    }
    // MUFU form: fma(neg_two_cap, rcp(ex2(s * tanh_in) + 1), cap), e^{2x} overflowing to inf.
    const float arg2 = s * a.softcap_tanh_in;
    const float e2 = static_cast<float>(std::exp2(static_cast<double>(arg2)));
    for (int ulps = -2; ulps <= 2; ++ulps) {
      const float y = std::isinf(e2) ? e2 : step_ulps(e2, ulps) + 1.0f;
      const float out = std::fmaf(a.softcap_neg_two_raw, 1.0f / y, a.softcap_raw);
      err.mufu = std::max(err.mufu, std::abs(static_cast<double>(out) - ref) / cap);
    }
  }
  return err;
}

TEST(SoftcapFma, MatchesFloat64OverEveryScoreRange) {
  constexpr double kBound = 3e-7, kOverMufu = 3e-8;  // file comment
  for (const float softcap : {0.5f, 1.0f, 5.0f, 30.0f, 50.0f, 1e4f}) {
    for (const float scale : {0.125f, 0.0883883476f, 0.0625f, 1.0f}) {
      const SoftcapErrors err = softcap_errors(softcap, scale);
      EXPECT_LE(err.fma, kBound) << "softcap " << softcap << " scale " << scale;
      EXPECT_LE(err.mufu, kBound) << "softcap " << softcap << " scale " << scale;
      EXPECT_LE(err.fma, err.mufu + kOverMufu) << "softcap " << softcap << " scale " << scale;
      std::printf("softcap %g scale %g: max error / cap: FMA form %.3g, MUFU form %.3g\n",
                  softcap, scale, err.fma, err.mufu);
    }
  }
}

// Values outside the score range keep their meaning: the sign of zero, NaN.
TEST(SoftcapFma, SpecialValues) {
  const AttentionArgs a = args_for(30.0f, 0.125f);
  auto softcap = [&](float s) {
    const float e = static_cast<float>(std::exp2(std::fabs(s) * -a.softcap_tanh_in));
    return softcap_from_exp_fma(e, s, a.softcap_neg_two_raw, a.softcap_raw);
  };
  EXPECT_EQ(softcap(INFINITY), a.softcap_raw);
  EXPECT_EQ(softcap(-INFINITY), -a.softcap_raw);
  EXPECT_TRUE(std::isnan(softcap(NAN)));
  EXPECT_LE(std::abs(softcap(0.0f)), 1e-7f * a.softcap_raw);
  EXPECT_FALSE(std::signbit(softcap(1e-30f)));
  EXPECT_TRUE(std::signbit(softcap(-1e-30f)));
}

// The host's constants: softcap / scale, -2 softcap / scale, 2 log2(e) scale / softcap; 0
// without softcap.
TEST(SoftcapFma, HostConstants) {
  const AttentionArgs a = args_for(30.0f, 0.125f);
  EXPECT_EQ(a.softcap_raw, 240.0f);
  EXPECT_EQ(a.softcap_neg_two_raw, -480.0f);
  EXPECT_NEAR(a.softcap_tanh_in, 2.0 * 1.4426950408889634 * 0.125 / 30.0, 1e-9);
  const AttentionArgs none = args_for(0.0f, 0.125f);
  EXPECT_EQ(none.softcap_raw, 0.0f);
  EXPECT_EQ(none.softcap_neg_two_raw, 0.0f);
  EXPECT_EQ(none.softcap_tanh_in, 0.0f);
}

}  // namespace
}  // namespace flashattn::cuda
