// Counter-based normal random numbers: element i of a tensor drawn with seed s is the same on the
// host and on the device, whatever the launch shape, so inputs generated on the GPU for a large
// benchmark and on the CPU for a verification agree bit for bit.
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

// Uniform in (0, 1], 24 random bits.
FA_HOST_DEVICE float uniform01(std::uint64_t bits) {
  return (static_cast<float>(bits >> 40) + 1.0f) * (1.0f / 16777216.0f);
}

// Standard normal for (seed, stream, index) by Box-Muller on two hashed uniforms.
// `stream` separates tensors drawn with one seed (q = 0, k = 1, v = 2, ...).
FA_HOST_DEVICE float normal_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const std::uint64_t key = splitmix64(seed ^ splitmix64(stream + 0x632be59bd9b4e019ull));
  const std::uint64_t a = splitmix64(key ^ (2 * index));
  const std::uint64_t b = splitmix64(key ^ (2 * index + 1));
  const float u1 = uniform01(a), u2 = uniform01(b);
  constexpr float kTwoPi = 6.28318530717958647692f;
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace flashattn
