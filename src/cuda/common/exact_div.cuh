// Divisions that skip slow code they do not need, with the same results as the plain operator.
#pragma once

#include <cstdint>

namespace flashattn::cuda {

// x / y rounded as IEEE division, for y > 0, without calling the division's slow path when x is
// zero. The compiled division checks its operands' range first (FCHK) and takes a ~100
// instruction subroutine, placed at the kernel's end, for any it cannot do on the fast path: a
// zero dividend is one of them. Called once per block or work tile, that subroutine's cold
// instruction fetch was 27% of flash-decode's warp-stall samples at batch 1 (ncu, H100,
// docs/performance.md flash-decode v8): no ALiBi is a zero slope, and a row without keys a zero
// rescale. For y > 0, x / y of a signed zero is that zero, so the result is the same bits.
__device__ __forceinline__ float div_zero_fast(float x, float y) {
  return x != 0.0f ? x / y : x;
}

// a / b and a % b for b > 0, on the 32-bit divider when a and b fit 32 unsigned bits (every
// realistic call: a block's packed rows and grid coordinates); else the 64-bit division, a
// subroutine of ~70 instructions that decode_mma_kernel called ~13 times per thread per block.
struct DivMod {
  std::int64_t q, r;
};
__device__ __forceinline__ DivMod divmod_fast(std::int64_t a, std::int64_t b) {
  if (((static_cast<std::uint64_t>(a) | static_cast<std::uint64_t>(b)) >> 32) == 0) {
    const std::uint32_t a32 = static_cast<std::uint32_t>(a), b32 = static_cast<std::uint32_t>(b);
    const std::uint32_t q32 = a32 / b32;
    return {q32, a32 - q32 * b32};
  }
  const std::int64_t q = a / b;
  return {q, a - q * b};
}

}  // namespace flashattn::cuda
