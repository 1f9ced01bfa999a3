// float <-> bf16 / fp16 conversion (common/dtype_convert.h) and the counter-based normal random
// numbers (common/random.h): known values, every 16-bit pattern, and an independent rounding model.
#include "common/dtype_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/random.h"
#include "test_util.h"

namespace flashattn {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The value a 16-bit pattern encodes, computed from the format definition in double:
// 1 sign bit, `exp_bits` exponent bits, `mant_bits` mantissa bits, IEEE subnormals.
double decode_model(std::uint16_t h, int exp_bits, int mant_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const std::uint32_t mant = h & ((1u << mant_bits) - 1u);
  const std::uint32_t exp = (h >> mant_bits) & ((1u << exp_bits) - 1u);
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  if (exp == (1u << exp_bits) - 1u) {
    return mant == 0 ? sign * std::numeric_limits<double>::infinity()
                     : std::numeric_limits<double>::quiet_NaN();
  }
  if (exp == 0) return sign * std::ldexp(static_cast<double>(mant), 1 - bias - mant_bits);
  return sign * std::ldexp(static_cast<double>(mant + (1u << mant_bits)),
                           static_cast<int>(exp) - bias - mant_bits);
}

// Round-to-nearest-even of finite `f` to a format with `mant_bits` mantissa bits and minimum
// normal exponent `min_exp`, overflowing to infinity at `overflow` (the first value that rounds
// past the largest finite one). Independent of the bit tricks under test.
double round_model(float f, int mant_bits, int min_exp, double overflow) {
  const double x = f;
  if (x == 0.0) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, min_exp);
  const double quantum = std::ldexp(1.0, exponent - mant_bits);
  const double rounded = std::nearbyint(x / quantum) * quantum;  // default mode: ties to even
  if (std::fabs(rounded) >= overflow) {
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  }
  return rounded == 0.0 ? std::copysign(0.0, x) : rounded;
}

TEST(DtypeConvert, Fp16KnownValues) {
  EXPECT_EQ(float_to_fp16_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_fp16_bits(65504.0f), 0x7bff);  // largest finite fp16
  EXPECT_EQ(float_to_fp16_bits(65519.996f), 0x7bff);  // just below the tie: stays finite
  EXPECT_EQ(float_to_fp16_bits(65520.0f), 0x7c00);  // the tie rounds to even = infinity
  EXPECT_EQ(float_to_fp16_bits(-65520.0f), 0xfc00);
  EXPECT_EQ(float_to_fp16_bits(1e6f), 0x7c00);
  EXPECT_EQ(float_to_fp16_bits(kInf), 0x7c00);
  EXPECT_EQ(float_to_fp16_bits(-kInf), 0xfc00);
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24: even
  EXPECT_EQ(float_to_fp16_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_fp16_bits(-std::ldexp(1.0f, -25)), 0x8000);
  EXPECT_EQ(float_to_fp16_bits(3.0f * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 * 2^-24 -> 2 * 2^-24
  EXPECT_EQ(float_to_fp16_bits(5.0f * std::ldexp(1.0f, -25)), 0x0002);  // 2.5 * 2^-24 -> 2 * 2^-24
  // The largest subnormal plus half a step ties to the smallest normal (even mantissa).
  EXPECT_EQ(float_to_fp16_bits(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)), 0x0400);
  EXPECT_EQ(float_to_fp16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);        // tie -> even
  EXPECT_EQ(float_to_fp16_bits(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even
  EXPECT_EQ(float_to_fp16_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_fp16_bits(-0.0f), 0x8000);

  EXPECT_EQ(fp16_bits_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_bits_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_bits_to_float(0x7c00), kInf);
  EXPECT_EQ(fp16_bits_to_float(0xfc00), -kInf);
  const float neg_zero = fp16_bits_to_float(0x8000);
  EXPECT_EQ(neg_zero, 0.0f);
  EXPECT_TRUE(std::signbit(neg_zero));

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::uint16_t nan_bits = float_to_fp16_bits(nan);
  EXPECT_EQ(nan_bits & 0x7c00, 0x7c00);
  EXPECT_NE(nan_bits & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(fp16_bits_to_float(nan_bits)));
  EXPECT_TRUE(std::isnan(round_to_dtype(nan, DType::kFP16)));
  EXPECT_TRUE(std::isnan(fp16_bits_to_float(0x7c01)));  // a signaling pattern reads as NaN too
}

TEST(DtypeConvert, Bf16KnownValues) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);        // tie -> even
  EXPECT_EQ(float_to_bf16_bits(1.0f + 3.0f * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even
  EXPECT_EQ(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7f80);  // rounds to infinity
  EXPECT_EQ(float_to_bf16_bits(bf16_bits_to_float(0x7f7f)), 0x7f7f);  // largest finite bf16
  EXPECT_EQ(float_to_bf16_bits(kInf), 0x7f80);
  EXPECT_EQ(float_to_bf16_bits(-kInf), 0xff80);
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::denorm_min()), 0x0000);  // tie -> 0
  EXPECT_EQ(float_to_bf16_bits(std::ldexp(1.0f, -133)), 0x0001);  // smallest bf16 subnormal
  EXPECT_EQ(float_to_bf16_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(130000.0f), 0x47fe);  // nearest multiple of 2^9: 130048
  EXPECT_EQ(bf16_bits_to_float(0x47fe), 130048.0f);

  EXPECT_EQ(bf16_bits_to_float(0x3f80), 1.0f);
  const float neg_zero = bf16_bits_to_float(0x8000);
  EXPECT_EQ(neg_zero, 0.0f);
  EXPECT_TRUE(std::signbit(neg_zero));

  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(nan))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(-nan))));
  // A NaN whose payload sits only in the low 16 bits must not truncate to infinity.
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(bits_float(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(round_to_dtype(nan, DType::kBF16)));
}

// Every fp16 pattern decodes to the value the format defines, and every non-NaN one survives
// fp16 -> float -> fp16 bit for bit (signed zeros and infinities included).
TEST(DtypeConvert, Fp16EveryPatternRoundTrips) {
  int nan_patterns = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = fp16_bits_to_float(h);
    const double expected = decode_model(h, 5, 10);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << "pattern 0x" << std::hex << bits;
      ASSERT_TRUE(std::isnan(fp16_bits_to_float(float_to_fp16_bits(f))));
      ++nan_patterns;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), expected) << "pattern 0x" << std::hex << bits;
    ASSERT_EQ(std::signbit(f), (bits & 0x8000u) != 0) << "pattern 0x" << std::hex << bits;
    ASSERT_EQ(float_to_fp16_bits(f), h) << "pattern 0x" << std::hex << bits;
  }
  EXPECT_EQ(nan_patterns, 2 * 1023);
}

TEST(DtypeConvert, Bf16EveryPatternRoundTrips) {
  int nan_patterns = 0;
  for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = bf16_bits_to_float(h);
    const double expected = decode_model(h, 8, 7);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << "pattern 0x" << std::hex << bits;
      ASSERT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(f))));
      ++nan_patterns;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), expected) << "pattern 0x" << std::hex << bits;
    ASSERT_EQ(std::signbit(f), (bits & 0x8000u) != 0) << "pattern 0x" << std::hex << bits;
    ASSERT_EQ(float_to_bf16_bits(f), h) << "pattern 0x" << std::hex << bits;
  }
  EXPECT_EQ(nan_patterns, 2 * 127);
}

// float -> 16-bit rounding against the independent model, on floats spread over every exponent
// that matters (deep subnormal to overflow) with random mantissas, plus exact ties.
TEST(DtypeConvert, RoundingMatchesModel) {
  const std::uint64_t seed = testing::base_seed();
  const int n = testing::full_tier() ? 4'000'000 : 400'000;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t r = splitmix64(seed ^ static_cast<std::uint64_t>(i));
    std::uint32_t mant = static_cast<std::uint32_t>(r) & 0x7fffffu;
    if ((r >> 40) % 4 == 0) mant &= ~0x1fffu;  // often a tie or an exact fp16 value
    const int fp16_exp = -30 + static_cast<int>((r >> 32) % 48);    // 2^-30 .. 2^17
    const int bf16_exp = -140 + static_cast<int>((r >> 48) % 270);  // deep subnormal .. overflow
    const bool negative = (r >> 63) != 0;
    const float fp16_in = bits_float((negative ? 0x80000000u : 0u) |
                                     (static_cast<std::uint32_t>(fp16_exp + 127) << 23) | mant);
    float bf16_in = std::ldexp(1.0f + static_cast<float>(mant) * std::ldexp(1.0f, -23), bf16_exp);
    if (negative) bf16_in = -bf16_in;
    if (!std::isfinite(bf16_in)) continue;

    const double fp16_want = round_model(fp16_in, 10, -14, 65520.0);
    const float fp16_got = fp16_bits_to_float(float_to_fp16_bits(fp16_in));
    ASSERT_EQ(static_cast<double>(fp16_got), fp16_want) << "fp16 of " << fp16_in;
    ASSERT_EQ(std::signbit(fp16_got), std::signbit(fp16_in)) << "fp16 of " << fp16_in;

    // bf16 overflows at 2^128 - 2^119 (half an ulp past the largest finite 0x7f7f).
    const double bf16_overflow = std::ldexp(1.0, 128) - std::ldexp(1.0, 119);
    const double bf16_want = round_model(bf16_in, 7, -126, bf16_overflow);
    const float bf16_got = bf16_bits_to_float(float_to_bf16_bits(bf16_in));
    ASSERT_EQ(static_cast<double>(bf16_got), bf16_want) << "bf16 of " << bf16_in;
    ASSERT_EQ(std::signbit(bf16_got), std::signbit(bf16_in)) << "bf16 of " << bf16_in;
  }
}

// load_as_float / store_from_float address elements by offset and round through the dtype.
TEST(DtypeConvert, LoadStoreThroughBuffers) {
  std::vector<std::uint16_t> half(4, 0);
  store_from_float(half.data(), DType::kFP16, 2, 1.0f + std::ldexp(1.0f, -11));
  EXPECT_EQ(half[2], 0x3c00);
  EXPECT_EQ(half[1], 0);
  EXPECT_EQ(load_as_float(half.data(), DType::kFP16, 2), 1.0f);
  store_from_float(half.data(), DType::kBF16, 3, -3.0f);
  EXPECT_EQ(half[3], 0xc040);
  EXPECT_EQ(load_as_float(half.data(), DType::kBF16, 3), -3.0f);
  std::vector<float> full(3, 0.0f);
  store_from_float(full.data(), DType::kFP32, 1, 0.1f);
  EXPECT_EQ(full[1], 0.1f);
  EXPECT_EQ(load_as_float(full.data(), DType::kFP32, 1), 0.1f);
  EXPECT_EQ(round_to_dtype(0.1f, DType::kFP32), 0.1f);
  EXPECT_EQ(round_to_dtype(0.1f, DType::kBF16), bf16_bits_to_float(float_to_bf16_bits(0.1f)));
  EXPECT_EQ(round_to_dtype(0.1f, DType::kFP16), fp16_bits_to_float(float_to_fp16_bits(0.1f)));
}

TEST(Random, NormalStatistics) {
  const std::uint64_t seed = testing::base_seed();
  constexpr int kDraws = 100'000;
  double sum = 0, sum_sq = 0;
  int beyond_two_sigma = 0;
  for (int i = 0; i < kDraws; ++i) {
    const double x = normal_at(seed, 0, static_cast<std::uint64_t>(i));
    ASSERT_TRUE(std::isfinite(x)) << "index " << i << " seed " << seed;
    sum += x;
    sum_sq += x * x;
    beyond_two_sigma += std::fabs(x) > 2.0;
  }
  const double mean = sum / kDraws;
  const double std_dev = std::sqrt(sum_sq / kDraws - mean * mean);
  // Standard errors at 1e5 draws: 0.0032 for the mean, 0.0022 for the std; allow about 5 of them.
  EXPECT_NEAR(mean, 0.0, 0.016) << "seed " << seed;
  EXPECT_NEAR(std_dev, 1.0, 0.011) << "seed " << seed;
  // P(|x| > 2) = 4.55% for a normal.
  EXPECT_NEAR(beyond_two_sigma / static_cast<double>(kDraws), 0.0455, 0.004) << "seed " << seed;
}

TEST(Random, SameCounterSameValue) {
  const std::uint64_t seed = testing::base_seed();
  int same_across_streams = 0, same_across_seeds = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    const float a = normal_at(seed, 1, i);
    ASSERT_EQ(float_bits(a), float_bits(normal_at(seed, 1, i)));  // pure function of the counter
    same_across_streams += a == normal_at(seed, 2, i);
    same_across_seeds += a == normal_at(seed + 1, 1, i);
  }
  EXPECT_EQ(same_across_streams, 0);
  EXPECT_EQ(same_across_seeds, 0);
  EXPECT_NE(normal_at(seed, 0, 0), normal_at(seed, 0, 1));
}

}  // namespace
}  // namespace flashattn
