// 2^x on the FMA and ALU pipes instead of the MUFU unit, for the softmax's exponentials where
// MUFU.EX2 (16 per clock per SM) is the bottleneck: at head dim 64 the tensor cores need 1/16
// clock per score, as much as its exponential (fragment_ops.cuh softmax_update, kPolyEvery).
//
//   x = j + f, j = floor(x), f in [0, 1]:   2^x = 2^f 2^j,   2^f ~ p(f) = 1 + c1 f + ... in [1, 2]
//
// and 2^j goes into p's exponent field by an integer add of j << 23. Degree 3 costs 8 SASS
// instructions (FMNMX clamp, FADD.RM and 2 FADDs, 3 FFMAs, one IMAD for the shift-add; sm_90a,
// flash-sm90 d64) against MUFU's 1, degree 4 one FFMA more. The coefficients minimize the
// largest relative error |p(f) / 2^f - 1| over [0, 1] with p(0) = 1 held exactly
// (tools/fit_exp2_poly.py: a linear program on a dense grid, then rounded to float32); the errors
// below are of the float32 evaluation, measured against float64 exp2 by
// tests/cuda/exp2_fma_test.cc.
//
// Domain: x < 128 (the softmax's arguments are <= 8: its lazy rescaling lets P reach 2^8 above a
// stale row max). Exact values: x = 0 gives 1.0f (p(0) = 1; a row's max contributes
// exactly 1, as with MUFU), x <= -127, -inf and NaN give +0.0f (clamped to -127: p(0) = 1 is the
// bits 127 << 23, and j = -127 subtracts them to 0). x in (-127, -126), whose 2^x lies in
// (2^-127, 2^-126), gives a denormal within 2^-127 of it (MUFU.EX2 with .ftz gives 0 there);
// below 2^-126 neither matters next to the row max's 1. NaN giving 0 differs from MUFU's NaN: a
// NaN score's exponential through this path drops it from the row instead of poisoning it.
//
// The device splits x with one add rounded toward -inf: x + 1.5 * 2^23 has a unit ulp, so the
// sum rounded down is 1.5 * 2^23 + floor(x), and its low mantissa bits hold floor(x) itself
// (shifted left by 23, the constant's bits leave the word). The host uses std::floor and
// computes the same bits (the GPU test, tests/cuda/exp2_fma_test.cc, compares them).
// x - floor(x) is exact except for x in (-0.5, 0), where f in (0.5, 1) is rounded to 2^-24
// (at most 2^-25 * ln 2 relative in the result; x = -2^-30 gives f = 1.0f, hence [0, 1]).
#pragma once

#include <cstdint>

#include "common/host_device.h"

#if !defined(__CUDA_ARCH__)
#include <cmath>
#include <cstring>
#endif

namespace flashattn::cuda::ptx {

#if defined(__CUDACC__)
// x + y rounded toward -inf (add.rm.f32: sm_20 and later).
__device__ __forceinline__ float add_rm(float x, float y) {
  float z;
  asm("add.rm.f32 %0, %1, %2;\n" : "=f"(z) : "f"(x), "f"(y));
  return z;
}
#endif

// The max relative error of exp2_fma<kDegree> for results >= 2^-126, rounded up from the
// measured 8.568e-5 (degree 3) and 2.962e-6 (degree 4); the test asserts it and that it is tight.
template <int kDegree>
struct Exp2FmaError;
template <> struct Exp2FmaError<3> { static constexpr double kMaxRel = 8.6e-5; };
template <> struct Exp2FmaError<4> { static constexpr double kMaxRel = 3.0e-6; };

// p(f) ~ 2^f on [0, 1], p(0) = 1, Horner's rule from the top coefficient (fmaf: FFMA).
template <int kDegree>
FA_HOST_DEVICE float exp2_fraction_poly(float f);

template <>
FA_HOST_DEVICE float exp2_fraction_poly<3>(float f) {
  constexpr float kC1 = 6.951173e-01f, kC2 = 2.2764353e-01f, kC3 = 7.706803e-02f;
  return fmaf(fmaf(fmaf(kC3, f, kC2), f, kC1), f, 1.0f);
}

template <>
FA_HOST_DEVICE float exp2_fraction_poly<4>(float f) {
  constexpr float kC1 = 6.9304466e-01f, kC2 = 2.4128109e-01f, kC3 = 5.2241072e-02f,
                  kC4 = 1.3427376e-02f;
  return fmaf(fmaf(fmaf(fmaf(kC4, f, kC3), f, kC2), f, kC1), f, 1.0f);
}

// 2^x for x < 128 through a degree-kDegree polynomial (3 or 4; file comment for the exact
// values and the error).
template <int kDegree>
FA_HOST_DEVICE float exp2_fma(float x) {
  constexpr float kFloor = -127.0f;  // 2^-127 becomes exactly +0 (file comment)
  constexpr int kMantissaBits = 23;
  x = fmaxf(x, kFloor);  // -inf and NaN too
#if defined(__CUDA_ARCH__)
  constexpr float kRoundShift = 12582912.0f;  // 1.5 * 2^23: floor(x) in the low mantissa bits
  const float shifted = add_rm(x, kRoundShift);
  const float j = shifted - kRoundShift;
  const std::uint32_t scale_bits = __float_as_uint(shifted) << kMantissaBits;
  return __uint_as_float(__float_as_uint(exp2_fraction_poly<kDegree>(x - j)) + scale_bits);
#else
  const float j = std::floor(x);
  const std::uint32_t scale_bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(j))
                                   << kMantissaBits;
  const float p = exp2_fraction_poly<kDegree>(x - j);
  std::uint32_t bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += scale_bits;
  float y;
  std::memcpy(&y, &bits, sizeof y);
  return y;
#endif
}

}  // namespace flashattn::cuda::ptx
