// Counter-based random numbers: element i of a tensor drawn with seed s is the same on the host
// and on the device, whatever the launch shape, so inputs generated on the GPU for a large
// benchmark and on the CPU for a verification agree bit for bit.
//
// Bit-identity rules out transcendental functions (logf and cosf differ by an ulp between glibc
// and CUDA), so the normal is Irwin-Hall: the sum of 12 uniform 16-bit integers, centred and
// scaled by 2^-16. That sum is exact in integers and in float, has mean 0 and variance 1, and is
// bounded by +-6: close enough to N(0, 1) for test data and free of rare outliers.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

FA_HOST_DEVICE std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Approximately standard normal for (seed, stream, index); `stream` separates tensors drawn with
// one seed (q = 0, k = 1, v = 2, ...).
FA_HOST_DEVICE float normal_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  constexpr int kTerms = 12;  // variance of one uniform is 1/12, so 12 terms give variance 1
  const std::uint64_t key = splitmix64(seed ^ splitmix64(stream + 0x632be59bd9b4e019ull));
  std::int64_t sum = 0;
  for (int word = 0; word < kTerms / 4; ++word) {
    const std::uint64_t bits = splitmix64(key ^ (index * (kTerms / 4) + word));
    for (int part = 0; part < 4; ++part) sum += static_cast<std::int64_t>((bits >> (16 * part)) & 0xffff);
  }
  // Each term is uniform on {0..65535}/65536 with mean 32767.5/65536: centre the sum exactly.
  constexpr std::int64_t kTwiceMean = kTerms * 65535;  // 2 * sum of term means, in 2^-16 units
  return static_cast<float>(2 * sum - kTwiceMean) * (1.0f / 131072.0f);
}

// mean + std * x with one rounding (fmaf is correctly rounded on the host and the device).
FA_HOST_DEVICE float affine(float std, float x, float mean) { return std::fma(std, x, mean); }

}  // namespace flashattn
