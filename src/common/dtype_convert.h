// Bit-exact float <-> bf16 / fp16 conversion usable on the host and in kernels (round to nearest
// even, NaN and infinity preserved, fp16 subnormals handled). The CPU backends and the verifier
// use it to read and write 16-bit tensors without any CUDA header.
#pragma once

#include <cstdint>
#include <cstring>

#include "common/host_device.h"
#include "flashattn/tensor.h"

namespace flashattn {

FA_HOST_DEVICE std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

FA_HOST_DEVICE float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

FA_HOST_DEVICE std::uint16_t float_to_bf16_bits(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<std::uint16_t>(u >> 16);
}

FA_HOST_DEVICE float bf16_bits_to_float(std::uint16_t h) {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}

FA_HOST_DEVICE std::uint16_t float_to_fp16_bits(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  std::uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value = abs_float * 2^24 rounded to an integer.
    if (abs < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the min subnormal
    const std::uint32_t exp = abs >> 23;
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    // value / 2^-24 = mant * 2^(exp - 126): drop (126 - exp) bits, 14..24 of them here.
    const std::uint32_t drop = 126u - exp;
    std::uint32_t q = mant >> drop;
    const std::uint32_t rem = mant & ((1u << drop) - 1u);
    const std::uint32_t half = 1u << (drop - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<std::uint16_t>(sign | q);
  }
  // Normal: rebias the exponent (127 -> 15) and round the mantissa from 23 to 10 bits.
  abs -= 0x38000000u;  // (127 - 15) << 23
  abs += 0xfffu + ((abs >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (abs >> 13));
}

FA_HOST_DEVICE float fp16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // Subnormal: value = mant * 2^-24.
    float f = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Reads element `offset` (in elements) of a tensor of `dtype` as float.
FA_HOST_DEVICE float load_as_float(const void* base, DType dtype, std::int64_t offset) {
  if (dtype == DType::kFP32) return static_cast<const float*>(base)[offset];
  const std::uint16_t h = static_cast<const std::uint16_t*>(base)[offset];
  return dtype == DType::kBF16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
}

// Writes `value` rounded to `dtype` at element `offset`.
FA_HOST_DEVICE void store_from_float(void* base, DType dtype, std::int64_t offset, float value) {
  if (dtype == DType::kFP32) {
    static_cast<float*>(base)[offset] = value;
  } else {
    static_cast<std::uint16_t*>(base)[offset] =
        dtype == DType::kBF16 ? float_to_bf16_bits(value) : float_to_fp16_bits(value);
  }
}

// value rounded to `dtype` and back (what storing it would keep).
FA_HOST_DEVICE float round_to_dtype(float value, DType dtype) {
  if (dtype == DType::kFP32) return value;
  return dtype == DType::kBF16 ? bf16_bits_to_float(float_to_bf16_bits(value))
                               : fp16_bits_to_float(float_to_fp16_bits(value));
}

}  // namespace flashattn
