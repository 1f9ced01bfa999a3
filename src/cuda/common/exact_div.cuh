// x / y rounded as IEEE division, for y > 0, without calling the division's slow path when x is
// zero. The compiled division checks its operands' range first (FCHK) and takes a ~100
// instruction subroutine, placed at the kernel's end, for any it cannot do on the fast path: a
// zero dividend is one of them. Called once per block or work tile, that subroutine's cold
// instruction fetch was 27% of flash-decode's warp-stall samples at batch 1 (ncu, H100,
// docs/performance.md flash-decode v8): no ALiBi is a zero slope, and a row without keys a zero
// rescale. For y > 0, x / y of a signed zero is that zero, so the result is the same bits.
#pragma once

namespace flashattn::cuda {

__device__ __forceinline__ float div_zero_fast(float x, float y) {
  return x != 0.0f ? x / y : x;
}

}  // namespace flashattn::cuda
