// The layouts wgmma (sm_90a) reads and writes, in plain host/device arithmetic so that the tests
// check them on the CPU and every kernel shares one definition: the 128-byte-swizzled shared-memory
// tile (what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B), the 64-bit shared-memory matrix
// descriptor that points wgmma at such a tile, and the per-thread register fragments of
// m64nNk16 with 16-bit inputs (the accumulator D and the register operand A).
// Sources: PTX ISA "Matrix Descriptor Format", "Shared Memory Matrix Layout", "Matrix Fragments
// for wgmma.mma_async.m64nNk16"; the checked summary is /work/shared/docs/hopper.md sections 1-2.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn::cuda::ptx {

// Which dimension of an operand is contiguous in shared memory; the value is wgmma's
// imm-trans-a / imm-trans-b.
//   kK:  K contiguous ("K-major"). S = Q K^T: A = Q [m][d], B = K [n][d], both kK.
//   kMN: M or N contiguous. O = P V: B = V [key][d] has K = key and N = d, d contiguous: kMN.
// A from registers (the RS form) is always K-major.
enum class Major : int { kK = 0, kMN = 1 };

// ---- 128B-swizzled tiles of 16-bit elements --------------------------------------------------
// A tile of `rows` rows (a multiple of 8) and a multiple of 64 columns is stored as column blocks
// of 64 elements, 128 bytes per row; block b starts at b * rows * 128 bytes. That is what TMA
// writes for one box of {64 elements, rows} per block. Inside a block, 16-byte chunk c of row r
// lives at chunk c ^ (r % 8) (address bits [6:4] ^= bits [9:7]); the pattern repeats every 8 rows
// (1024 bytes), and the hardware applies it to absolute addresses, so tile bases must be
// 1024-byte aligned (the descriptors below then need no base offset).
constexpr int kSw128RowBytes = 128;
constexpr int kSw128AtomBytes = 1024;  // 8 rows: the swizzle period and the alignment
constexpr int kSw128BlockCols = 64;    // 16-bit elements per 128-byte row

// Byte offset of element (row, col) in such a tile.
FA_HOST_DEVICE constexpr std::uint32_t sw128_offset(int rows, int row, int col) {
  const int block = col / kSw128BlockCols, c = col % kSw128BlockCols;
  const int chunk = (c / 8) ^ (row % 8);
  return static_cast<std::uint32_t>(block * rows * kSw128RowBytes + row * kSw128RowBytes +
                                    chunk * 16 + (c % 8) * 2);
}

// Bytes of such a tile: whole 64-column blocks, so a K-major operand with K = 16 or 32 still
// takes 128-byte rows (the columns past K are never read).
FA_HOST_DEVICE constexpr int sw128_tile_bytes(int rows, int cols) {
  return rows * kSw128RowBytes * ((cols + kSw128BlockCols - 1) / kSw128BlockCols);
}

// ---- Shared-memory matrix descriptor (64 bits) -------------------------------------------------
//   [13:0]  start address >> 4        [29:16] leading byte offset (LBO) >> 4
//   [45:32] stride byte offset (SBO) >> 4   [51:49] base offset (0: atoms 1024-aligned)
//   [63:62] swizzle: 0 none, 1 = 128B, 2 = 64B, 3 = 32B
// (TMA's CU_TENSOR_MAP_SWIZZLE_128B is 3 and Blackwell's tcgen05 descriptor uses other bits:
// do not mix the encodings.) 14-bit fields of 16-byte units reach 256 KB, all of shared memory.
// The descriptor must be the same in all 128 threads of the warpgroup.
enum class DescSwizzle : std::uint64_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

FA_HOST_DEVICE constexpr std::uint64_t make_smem_desc(std::uint32_t addr_smem, std::uint32_t lbo,
                                                      std::uint32_t sbo, DescSwizzle swizzle) {
  return static_cast<std::uint64_t>((addr_smem & 0x3FFFF) >> 4) |
         (static_cast<std::uint64_t>((lbo & 0x3FFFF) >> 4) << 16) |
         (static_cast<std::uint64_t>((sbo & 0x3FFFF) >> 4) << 32) |
         (static_cast<std::uint64_t>(swizzle) << 62);
}

// Moves a descriptor's start address by `bytes` (a multiple of 16; the field cannot overflow into
// LBO for addresses inside shared memory).
FA_HOST_DEVICE constexpr std::uint64_t desc_advance(std::uint64_t desc, std::uint32_t bytes) {
  return desc + (bytes >> 4);
}

// K-major operand in a 128B-swizzled tile (Q or K: one row per m or n, K along the row).
// Rows of 128 bytes, 8-row groups 1024 bytes apart (SBO); LBO is unused with swizzling (PTX:
// "assumed 1"), 16 bytes encodes that 1. For a tile at a 1024-aligned address the descriptor is
// 0x4000004000010000 | (addr >> 4).
FA_HOST_DEVICE constexpr std::uint64_t sw128_k_major_desc(std::uint32_t tile_smem) {
  return make_smem_desc(tile_smem, 16, kSw128AtomBytes, DescSwizzle::k128B);
}
// Where k16 step j starts in a K-major tile of `rows` rows: +32 bytes per step inside a 128-byte
// row (no base offset needed inside an atom), the next 64-column block after 4 steps.
FA_HOST_DEVICE constexpr std::uint32_t sw128_k_major_step_bytes(int rows, int j) {
  return static_cast<std::uint32_t>((j % 4) * 32 + (j / 4) * rows * kSw128RowBytes);
}

// MN-major operand in a 128B-swizzled tile of `k_rows` rows (V: one row per key, d along the
// row). Each row holds 64 consecutive N elements; LBO = the distance between 64-column blocks
// (k_rows * 128 bytes), SBO = 1024 bytes between groups of 8 rows along K. N = 64 uses one block,
// N = 128 and 256 walk LBO.
FA_HOST_DEVICE constexpr std::uint64_t sw128_mn_major_desc(std::uint32_t tile_smem, int k_rows) {
  return make_smem_desc(tile_smem, static_cast<std::uint32_t>(k_rows * kSw128RowBytes),
                        kSw128AtomBytes, DescSwizzle::k128B);
}
// Where k16 step j starts in an MN-major tile: 16 rows of 128 bytes further.
FA_HOST_DEVICE constexpr std::uint32_t sw128_mn_major_step_bytes(int j) {
  return static_cast<std::uint32_t>(j * 16 * kSw128RowBytes);
}

// ---- Register fragments of m64nNk16, 16-bit inputs --------------------------------------------
// Thread t of the warpgroup (0..127), warp w = t / 32, lane l = t % 32.
// Accumulator D (float32, N / 2 registers): register i holds
//   row = 16 w + l / 4 + 8 ((i / 2) % 2),   col = 8 (i / 4) + 2 (l % 4) + i % 2.
// Warp w owns rows 16w..16w+15, and per 8-column slab i / 4 the 4 registers are the mma.sync
// m16n8 C fragment (c0, c1 on row g; c2, c3 on row g + 8): each thread holds 2 rows, and row
// reductions are quad shuffles (xor 1, 2) as on sm_80.
FA_HOST_DEVICE constexpr int acc_row(int t, int i) {
  return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2);
}
FA_HOST_DEVICE constexpr int acc_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }

// Register operand A of one k16 step (4 x 32 bits): register r holds two elements, the first in
// the low 16 bits (half 0): row = 16 w + l / 4 + 8 (r % 2), k = 2 (l % 4) + 8 (r / 2) + half.
// Per warp this is the mma.sync m16n8k16 A fragment.
FA_HOST_DEVICE constexpr int a_frag_row(int t, int r) {
  return 16 * (t / 32) + (t % 32) / 4 + 8 * (r % 2);
}
FA_HOST_DEVICE constexpr int a_frag_col(int t, int r, int half) {
  return 2 * (t % 4) + 8 * (r / 2) + half;
}

// When one product's accumulator is the next one's A operand (P = softmax(S) of S = Q K^T as the
// A of O = P V): the accumulator register that holds element (r, half) of k16 step j. Both
// layouts put it in the same thread, so no shuffles: a[r] = pack(lo = acc[8j + 2r],
// hi = acc[8j + 2r + 1]).
FA_HOST_DEVICE constexpr int acc_index_of_a(int j, int r, int half) { return 8 * j + 2 * r + half; }

}  // namespace flashattn::cuda::ptx
