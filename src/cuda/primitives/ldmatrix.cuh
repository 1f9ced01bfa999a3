// ldmatrix (sm_75+): a warp loads 8x8 tiles of 16-bit elements from shared memory straight into
// the register layout of mma.sync fragments. Each of the 32 lanes supplies the address of one
// 16-byte row: lanes 0-7 the rows of matrix 0, 8-15 of matrix 1, 16-23 of 2, 24-31 of 3.
// Afterwards lane l holds, of matrix i, row l / 4, elements 2 * (l % 4) and +1 (one 32-bit
// register r[i]); with .trans it holds the transposed tile's, i.e. column l / 4.
#pragma once

#include <cstdint>

namespace flashattn::cuda::ptx {

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], std::uint32_t row_smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row_smem));
}

__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], std::uint32_t row_smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(row_smem));
}

}  // namespace flashattn::cuda::ptx
