// mma.sync.m16n8k16 (sm_80+): one warp multiplies a 16x16 A tile by a 16x8 B tile of bf16 or fp16
// and accumulates into a 16x8 float32 tile, all operands in registers. Fragment layouts, for lane
// l, g = l / 4 and t = l % 4 (each 32-bit register holds two consecutive 16-bit elements):
//   A (row-major 16x16): a[0] = A[g][2t..2t+1],     a[1] = A[g+8][2t..2t+1],
//                        a[2] = A[g][2t+8..2t+9],   a[3] = A[g+8][2t+8..2t+9]
//   B (16x8, "col"):     b[0] = B[2t..2t+1][g],     b[1] = B[2t+8..2t+9][g]
//   C/D (16x8 float):    c[0..1] = C[g][2t..2t+1],  c[2..3] = C[g+8][2t..2t+1]
// The C layout of two adjacent n-tiles is exactly the A layout of one k16 step, which is what lets
// a softmax output P feed the next product straight from registers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda::ptx {

template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const std::uint32_t (&a)[4],
                                             std::uint32_t b0, std::uint32_t b1);

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&c)[4],
                                                            const std::uint32_t (&a)[4],
                                                            std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&c)[4], const std::uint32_t (&a)[4],
                                                     std::uint32_t b0, std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to nearest into one register of two 16-bit elements (lo first), the element
// order of the fragments above.
template <typename T>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi);

template <>
__device__ __forceinline__ std::uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

template <>
__device__ __forceinline__ std::uint32_t pack2<__half>(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

}  // namespace flashattn::cuda::ptx
