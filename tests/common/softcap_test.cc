// Softcap's constants and its FMA-pipe tanh (common/softcap.h), checked on the CPU in the float32
// steps flash-sm80 and flash-sm90 take (fragment_ops.cuh score_mod_fragment):
// - the polynomial s P(s^2) against float64 cap tanh(s / cap) over every |s| <= poly_limit, for
//   caps from 1 to 2000 raw: its absolute error in units of the cap (= of tanh) stays at the
//   exact form's, far below P's rounding to 16 bits;
// - the exact form's constants, and poly_limit 0 (the exact form everywhere) where folding the
//   coefficients would leave float's range.
#include "common/softcap.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "common/math_constants.h"

namespace flashattn {
namespace {

// The largest |s P(s^2) - cap tanh(s / cap)| / cap over n + 1 evenly spaced float s in
// [-poly_limit, poly_limit] (both ends included).
double poly_error(const SoftcapConsts& c, int n) {
  double worst = 0.0;
  for (int i = 0; i <= n; ++i) {
    const float s = static_cast<float>(-c.poly_limit + 2.0 * c.poly_limit * i / n);
    const double want = c.cap * std::tanh(static_cast<double>(s) / c.cap);
    worst = std::fmax(worst, std::fabs(static_cast<double>(c.apply_poly(s)) - want) / c.cap);
  }
  return worst;
}

// The exact form's float32 steps (score_mod.cuh apply_softcap, with exact ex2 and rcp: the MUFU
// ops' own error comes on top), the same measure over [-3 cap, 3 cap].
double exact_form_error(const SoftcapConsts& c, int n) {
  double worst = 0.0;
  for (int i = 0; i <= n; ++i) {
    const float s = static_cast<float>(-3.0 * c.cap + 6.0 * c.cap * i / n);
    const float e = static_cast<float>(std::exp2(static_cast<double>(s * c.tanh_in)));
    const float r = static_cast<float>(1.0 / static_cast<double>(e + 1.0f));
    const float got = std::fma(c.neg_two_cap, r, c.cap);
    const double want = c.cap * std::tanh(static_cast<double>(s) / c.cap);
    worst = std::fmax(worst, std::fabs(static_cast<double>(got) - want) / c.cap);
  }
  return worst;
}

struct CapCase {
  float softcap, scale;
};

TEST(Softcap, PolynomialMatchesTanhAtTheExactFormsError) {
  // Caps (softcap / scale) from 1 to 2000: Gemma 2's 50 at d256 (scale 1/16) is 800.
  const CapCase cases[] = {{1.0f, 1.0f},      {3.7f, 1.0f},         {30.0f, 0.08838835f},
                           {50.0f, 0.0625f},  {50.0f, 0.125f},      {20.0f, 0.15811388f},
                           {5.0f, 0.08838835f}, {125.0f, 0.0625f}};
  const double exact = exact_form_error(make_softcap_consts(30.0f, 0.08838835f), 400000);
  std::printf("exact form's float32 error: %.3g of the cap\n", exact);
  EXPECT_LT(exact, 3e-7);
  for (const CapCase& k : cases) {
    const SoftcapConsts c = make_softcap_consts(k.softcap, k.scale);
    ASSERT_GT(c.poly_limit, 0.0f) << "softcap " << k.softcap << " scale " << k.scale;
    EXPECT_FLOAT_EQ(c.poly_limit, 0.75f * c.cap);  // logits up to 3/4 of softcap
    const double err = poly_error(c, 400000);
    std::printf("cap %8.2f: polynomial's float32 error %.3g of the cap\n", c.cap, err);
    // 2.4e-7 to 2.7e-7 measured for the caps here; P's rounding to bf16 is 2^-9 = 2e-3.
    EXPECT_LT(err, 3e-7) << "cap " << c.cap;
    EXPECT_LT(err, 1.5 * exact) << "cap " << c.cap;
  }
}

TEST(Softcap, PolynomialIsOddAndMonotoneOverItsRange) {
  const SoftcapConsts c = make_softcap_consts(30.0f, 0.08838835f);
  float prev = -INFINITY;
  for (int i = 0; i <= 100000; ++i) {
    const float s = static_cast<float>(c.poly_limit * i / 100000.0);
    EXPECT_EQ(c.apply_poly(-s), -c.apply_poly(s)) << s;
    const float y = c.apply_poly(s);
    EXPECT_GE(y, prev) << s;  // a softmax over capped logits keeps the scores' order
    prev = y;
  }
  EXPECT_EQ(c.apply_poly(0.0f), 0.0f);
}

TEST(Softcap, ExactFormConstants) {
  const SoftcapConsts c = make_softcap_consts(30.0f, 0.125f);
  EXPECT_FLOAT_EQ(c.cap, 240.0f);
  EXPECT_FLOAT_EQ(c.neg_two_cap, -480.0f);
  EXPECT_FLOAT_EQ(c.tanh_in, 2.0f * kLog2e / 240.0f);
  const SoftcapConsts off = make_softcap_consts(0.0f, 0.125f);
  EXPECT_EQ(off.cap, 0.0f);
  EXPECT_EQ(off.poly_limit, 0.0f);
}

TEST(Softcap, NoPolynomialWhereFoldingLeavesFloatsRange) {
  // cap 1e6: the last coefficient c4 / cap^8 ~ 1e-50 is no float; cap 1e-6: c4 * 1e48 overflows.
  for (const CapCase& k : {CapCase{1e4f, 0.01f}, CapCase{1e-6f, 1.0f}}) {
    const SoftcapConsts c = make_softcap_consts(k.softcap, k.scale);
    EXPECT_EQ(c.poly_limit, 0.0f) << "softcap " << k.softcap << " scale " << k.scale;
    EXPECT_GT(c.cap, 0.0f);  // softcap still on: the exact form
    EXPECT_FLOAT_EQ(c.cap, k.softcap / k.scale);
  }
  // Inside: cap 2000 folds into normal floats (c4 / 2000^8 = 5e-29).
  EXPECT_GT(make_softcap_consts(2000.0f, 1.0f).poly_limit, 0.0f);
}

}  // namespace
}  // namespace flashattn
