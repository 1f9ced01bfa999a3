// FastDivmod (src/common/fast_divmod.h) against the plain division, on the host (the device's
// __umulhi gives the same high word): every divisor 1 .. 4096 with the dividends at and around
// each multiple's edge and at the top of the range, powers of two and their neighbours, and
// seeded random pairs across 1 .. 2^31 - 1.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/fast_divmod.h"

namespace flashattn {
namespace {

void expect_divides(std::uint32_t d, std::uint32_t n) {
  const FastDivmod f = FastDivmod::make(d);
  std::uint32_t q = 0, r = 0;
  f.divmod(n, &q, &r);
  ASSERT_EQ(q, n / d) << n << " / " << d;
  ASSERT_EQ(r, n % d) << n << " % " << d;
}

TEST(FastDivmod, MatchesDivision) {
  constexpr std::uint32_t kTop = 0x7fffffffu;
  std::vector<std::uint32_t> divisors;
  for (std::uint32_t d = 1; d <= 4096; ++d) divisors.push_back(d);
  for (int k = 1; k < 31; ++k) {
    const std::uint32_t p = 1u << k;
    divisors.insert(divisors.end(), {p - 1, p, p + 1});
  }
  divisors.push_back(kTop);
  for (std::uint32_t d : divisors) {
    for (std::uint32_t n : {0u, 1u, d - 1, d, d + 1, 2 * d - 1, kTop, kTop - 1, kTop / d * d,
                            kTop / d * d - 1}) {
      if (n <= kTop) expect_divides(d, n);
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any(1, kTop);
  for (int i = 0; i < 200000; ++i) expect_divides(any(rng), any(rng) - 1);
}

TEST(FastDivmod, DivisorBelowOneIsOne) {
  EXPECT_EQ(FastDivmod::make(0).div(1234), 1234u);
  EXPECT_EQ(FastDivmod::make(-5).d, 1u);
}

}  // namespace
}  // namespace flashattn
