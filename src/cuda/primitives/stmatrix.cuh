// stmatrix (sm_90): the inverse of ldmatrix. A warp stores four 8x8 tiles of 16-bit elements
// from mma fragments to shared memory. Register k of lane l holds, of matrix k, row l / 4,
// elements 2 * (l % 4) (low 16 bits) and +1; lanes 8k..8k+7 supply the addresses of matrix k's
// 8 rows (16 bytes each, 16-byte aligned). With .trans each matrix is stored transposed: lane l's
// two elements go to column l / 4 of rows 2 * (l % 4) and +1 of the addressed rows.
// Accumulator to a row-major tile (wgmma_layout.h): per warp w and 16 columns j, the registers
// are pack(d[8j], d[8j+1]), pack(d[8j+2], d[8j+3]), pack(d[8j+4], d[8j+5]),
// pack(d[8j+6], d[8j+7]), and lane l addresses row 16 w + 8 ((l / 8) % 2) + l % 8, column
// 16 j + 8 (l / 16). A tile that TMA or wgmma reads next needs fence_proxy_async_shared() in
// every writing thread before the barrier.
#pragma once

#include <cstdint>

#include "cuda/primitives/arch.h"

namespace flashattn::cuda::ptx {

__device__ __forceinline__ void stmatrix_x4(std::uint32_t row_smem, const std::uint32_t (&r)[4]) {
#if defined(FA_SM90_PTX)
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row_smem),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void stmatrix_x4_trans(std::uint32_t row_smem,
                                                  const std::uint32_t (&r)[4]) {
#if defined(FA_SM90_PTX)
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(row_smem),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
#else
  __trap();
#endif
}

}  // namespace flashattn::cuda::ptx
