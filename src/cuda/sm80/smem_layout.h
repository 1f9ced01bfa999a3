// The shared-memory layout of the flash-sm80 kernel's tiles, in plain host/device arithmetic so
// tests can check it on the CPU (tests/cuda/sm80_layout_test.cc proves every hot-loop access
// bank-conflict free for each shipped configuration).
//
// A tile row is Cfg::kRowBytes (a whole number of 128-byte groups). It is XOR-swizzled by 16-byte
// chunk: chunk c of row r lives at chunk c ^ (r % 8). An ldmatrix phase reads one chunk column of
// 8 consecutive rows; the swizzle puts those 8 chunks in 8 different 16-byte bank groups, i.e. on
// all 32 banks once.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn::cuda::sm80 {

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of Cfg rows.
template <class Cfg>
FA_HOST_DEVICE std::uint32_t swizzle(int row, int chunk) {
  return static_cast<std::uint32_t>(row * Cfg::kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// A lane's ldmatrix addresses in a swizzled tile. The lane reads row lane_row + 16 * row16 and
// chunk 2 * pair + lane_chunk. Written as pair = 4a + i, the swizzled chunk is
// 8a + ((2i + lane_chunk) ^ (lane_row % 8)): four per-lane offsets (i = 0..3) plus a compile-time
// constant, which ptxas folds into the instruction's immediate. Computing the XOR per access
// instead lets the compiler hoist one address per (row16, pair): 64 registers at d128, and spills.
template <class Cfg>
struct LaneOffsets {
  std::uint32_t off[4];

  FA_HOST_DEVICE LaneOffsets(int lane_row, int lane_chunk) {
    for (int i = 0; i < 4; ++i) {
      off[i] = static_cast<std::uint32_t>(lane_row * Cfg::kRowBytes +
                                          (((2 * i + lane_chunk) ^ (lane_row & 7)) << 4));
    }
  }
  FA_HOST_DEVICE std::uint32_t at(std::uint32_t tile_smem, int row16, int pair) const {
    return tile_smem + off[pair % 4] + row16 * 16 * Cfg::kRowBytes + (pair / 4) * 128;
  }
};

// The lane's row and chunk for each ldmatrix operand (ldmatrix.cuh: lanes 8i..8i+7 address the
// rows of matrix i):
//   Q, A fragments:          matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15), rows first
//   K, B fragments of QK^T:  (keys 0-7, k 0-7), (keys 0-7, k 8-15), (keys 8-15, k 0-7), ...
//   V, B fragments of PV:    (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15), ...
FA_HOST_DEVICE int q_lane_row(int lane) { return lane % 16; }
FA_HOST_DEVICE int q_lane_chunk(int lane) { return lane / 16; }
FA_HOST_DEVICE int k_lane_row(int lane) { return lane % 8 + 8 * (lane / 16); }
FA_HOST_DEVICE int k_lane_chunk(int lane) { return (lane / 8) % 2; }
FA_HOST_DEVICE int v_lane_row(int lane) { return lane % 8 + 8 * ((lane / 8) % 2); }
FA_HOST_DEVICE int v_lane_chunk(int lane) { return lane / 16; }

// The cp.async copy grid of a tile load (flash_sm80_warp.cuh, load_tile_async) from kLoaders
// threads. Thread i always copies chunk i % kSlots of rows i / kSlots + k * kStep (kSlots: the
// chunks of a row rounded up to a power of two; threads past the last chunk idle, 25% of the copy
// issue at d96 and d192). Both sizes are powers of two and the starting row is below kStep, so
// row % 8 of copy k is (i / kSlots) % 8 ^ (k * kStep) % 8: the swizzle needs no per-copy
// arithmetic, and the addresses are one base plus compile-time offsets (per-copy index math
// hoisted out of the key loop cost ~40 registers and spilled).
template <class Cfg, int kLoaders>
struct CopyGrid {
  static constexpr int kSlots = Cfg::kChunks <= 8 ? 8 : Cfg::kChunks <= 16 ? 16 : 32;
  static constexpr int kStep = kLoaders / kSlots;
  static_assert(kLoaders % kSlots == 0, "copy grid must tile the rows");

  FA_HOST_DEVICE static int chunk(int tid) { return tid % kSlots; }
  FA_HOST_DEVICE static int first_row(int tid) { return tid / kSlots; }
  FA_HOST_DEVICE static bool active(int tid) { return chunk(tid) < Cfg::kChunks; }
  // Byte offset of the thread's first row, and of copy k's chunk within row first_row + k * kStep
  // (k is a compile-time constant in the kernel: one XOR with a constant).
  FA_HOST_DEVICE static std::uint32_t base(int tid) {
    return static_cast<std::uint32_t>(first_row(tid) * Cfg::kRowBytes);
  }
  FA_HOST_DEVICE static std::uint32_t chunk_offset(int tid, int k) {
    const int key = chunk(tid) ^ (first_row(tid) & 7);
    return static_cast<std::uint32_t>(key ^ ((k * kStep) & 7)) << 4;
  }
  // The whole offset of copy k: base + k * kStep rows + chunk_offset.
  FA_HOST_DEVICE static std::uint32_t offset(int tid, int k) {
    return base(tid) + k * kStep * Cfg::kRowBytes + chunk_offset(tid, k);
  }
};

}  // namespace flashattn::cuda::sm80
