// ptx::exp2_fma (cuda/primitives/exp2_fma.cuh), the softmax's 2^x on the FMA pipe. On the CPU:
// the host path against float64 exp2, degree 3 and 4, over every float32 in [-2, -1) (every
// fraction f on the 2^-23 grid: the polynomial checked exhaustively there), a dense grid and
// random points over [-126, 8] (8: the lazy rescaling's largest argument), tiny negatives down to
// the smallest denormal, and the exact values (1 at 0, +0 at -inf, NaN and <= -127, 2^k at
// integers). On the GPU (skipped without one): the device path, whose floor comes from an add
// rounded toward -inf, equals the host path bit for bit on all of those inputs.
// A coefficient off by 1e-4 fails MaxRelativeError (tried once, c1 + 1e-4: degree 3 measured
// 1.32e-4 against its bound 8.6e-5, degree 4 5.1e-5 against 3.0e-6).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/primitives/exp2_fma.cuh"
#if defined(FLASHATTN_HAVE_CUDA_KERNELS)
#include "cuda/common/runtime.h"
#include "exp2_fma_kernels.h"
#endif

namespace flashattn::testing {
namespace {

namespace ptx = cuda::ptx;

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

float exp2_fma_host(int degree, float x) {
  return degree == 3 ? ptx::exp2_fma<3>(x) : ptx::exp2_fma<4>(x);
}

double max_rel_error(int degree) {
  return degree == 3 ? ptx::Exp2FmaError<3>::kMaxRel : ptx::Exp2FmaError<4>::kMaxRel;
}

constexpr float kSmallestNormalExp = -126.0f;  // 2^-126, the smallest normal float
constexpr float kLargestArg = 8.0f;            // the softmax's lazy rescaling (fragment_ops.cuh)

// The inputs whose results are normal floats: [-126, 8].
std::vector<float> normal_range_inputs() {
  std::vector<float> x;
  // Every float32 in [-2, -1): f = x + 2 runs over every multiple of 2^-23 in (0, 1].
  for (std::uint32_t b = bits_of(-1.0f); b < bits_of(-2.0f); ++b) x.push_back(float_of(b));
  // A grid of step 2^-10 over [-126, 8] (both ends included).
  constexpr int kSteps = 1024;
  for (int k = static_cast<int>(kSmallestNormalExp) * kSteps;
       k <= static_cast<int>(kLargestArg) * kSteps; ++k) {
    x.push_back(static_cast<float>(k) / kSteps);
  }
  std::mt19937 gen(20260101);
  std::uniform_real_distribution<float> uniform(kSmallestNormalExp, kLargestArg);
  for (int i = 0; i < (1 << 20); ++i) x.push_back(uniform(gen));
  // Tiny negatives: -2^-k down to the smallest denormal (f = 1 - 2^-k rounds to 1.0f for
  // k > 24), and the neighbours of 0 and of -0.5, where x - floor(x) starts to round.
  for (int k = 1; k <= 149; ++k) x.push_back(-std::ldexp(1.0f, -k));
  for (float v : {-0.0f, -1e-7f, -0.5f, -std::nextafter(0.5f, 0.0f), -std::nextafter(0.5f, 1.0f),
                  -std::nextafter(1.0f, 0.0f), -std::nextafter(1.0f, 2.0f), kSmallestNormalExp,
                  std::nextafter(kSmallestNormalExp, 0.0f)}) {
    x.push_back(v);
  }
  return x;
}

// The inputs whose results are below 2^-126 or exactly 0: (-inf, -126), NaN.
std::vector<float> underflow_inputs() {
  std::vector<float> x = {-126.5f, -127.0f, -127.5f, -128.0f, -1000.0f,
                          -std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::nextafter(-127.0f, 0.0f), std::nextafter(-126.0f, -127.0f)};
  for (int k = 1; k < 1024; ++k) x.push_back(-126.0f - static_cast<float>(k) / 1024.0f);
  return x;
}

class Exp2Fma : public ::testing::TestWithParam<int> {};

TEST_P(Exp2Fma, ExactValues) {
  const int degree = GetParam();
  // 0 gives 1 exactly: the row max's own exponential contributes exactly 1.
  EXPECT_EQ(bits_of(exp2_fma_host(degree, 0.0f)), bits_of(1.0f));
  EXPECT_EQ(bits_of(exp2_fma_host(degree, -0.0f)), bits_of(1.0f));
  // -inf (masked scores), NaN and everything at or below -127 give +0.
  for (float x : {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  -127.0f, -128.0f, -1e30f, -std::numeric_limits<float>::max()}) {
    EXPECT_EQ(bits_of(exp2_fma_host(degree, x)), 0u) << x;
  }
  // Integers: p(0) = 1 times 2^k, exact.
  for (int k = -126; k <= 127; ++k) {
    EXPECT_EQ(exp2_fma_host(degree, static_cast<float>(k)), std::ldexp(1.0f, k)) << k;
  }
}

TEST_P(Exp2Fma, MaxRelativeError) {
  const int degree = GetParam();
  double worst = 0.0;
  float worst_x = 0.0f;
  for (float x : normal_range_inputs()) {
    const double ref = std::exp2(static_cast<double>(x));
    const double rel = std::fabs(static_cast<double>(exp2_fma_host(degree, x)) - ref) / ref;
    if (!(rel <= worst)) {  // NaN too
      worst = rel;
      worst_x = x;
    }
  }
  std::printf("exp2_fma degree %d: max relative error %.4g at x = %.9g (bound %.3g)\n", degree,
              worst, static_cast<double>(worst_x), max_rel_error(degree));
  EXPECT_LE(worst, max_rel_error(degree)) << "at x = " << worst_x;
  // The bound is tight: within 5% of what the polynomial reaches (a looser one would hide a
  // coefficient off by a few 1e-6 at degree 4).
  EXPECT_GE(worst, 0.95 * max_rel_error(degree));
}

// Below 2^-126 the result is a denormal or 0 within 2^-127 of 2^x, never negative (MUFU.EX2
// .ftz gives 0 there): next to a row max's 1 these are far below any rounding of P.
TEST_P(Exp2Fma, Underflow) {
  const int degree = GetParam();
  for (float x : underflow_inputs()) {
    const float y = exp2_fma_host(degree, x);
    const double ref = std::isnan(x) ? 0.0 : std::exp2(static_cast<double>(x));
    EXPECT_GE(y, 0.0f) << x;
    EXPECT_LE(std::fabs(static_cast<double>(y) - ref), std::ldexp(1.0, -127)) << x;
  }
}

#if defined(FLASHATTN_HAVE_CUDA_KERNELS)
TEST_P(Exp2Fma, DeviceEqualsHost) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "skipped: " << cuda::unavailable_reason();
  const int degree = GetParam();
  std::vector<float> x = normal_range_inputs();
  const std::vector<float> under = underflow_inputs();
  x.insert(x.end(), under.begin(), under.end());
  std::vector<float> y;
  const Status st = run_exp2_fma(degree, x, &y);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(y.size(), x.size());
  int mismatches = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::uint32_t host = bits_of(exp2_fma_host(degree, x[i]));
    if (bits_of(y[i]) != host && ++mismatches <= 10) {
      ADD_FAILURE() << "x = " << x[i] << " (0x" << std::hex << bits_of(x[i]) << "): device 0x"
                    << bits_of(y[i]) << ", host 0x" << host << std::dec;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << x.size() << " inputs";
}
#else
TEST_P(Exp2Fma, DeviceEqualsHost) { GTEST_SKIP() << "skipped: GPU kernels not built"; }
#endif

INSTANTIATE_TEST_SUITE_P(Degrees, Exp2Fma, ::testing::Values(3, 4),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return "Degree" + std::to_string(param_info.param);
                         });

}  // namespace
}  // namespace flashattn::testing
