// The wgmma layouts of cuda/primitives/wgmma_layout.h, checked on the CPU: descriptor bit fields
// against the constant that hopper.md records from an H200 run, the 128B swizzle against the
// hardware's address-bit rule, and the register fragments as exact covers of their tiles whose
// accumulator-to-A repacking (P of S = Q K^T as the A of P V) needs no data movement.
// The GPU tests (sm90_wgmma_test.cc, sm90_tma_test.cc) check the same formulas against the
// hardware.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <utility>

#include "cuda/primitives/wgmma_layout.h"

namespace flashattn::cuda::ptx {
namespace {

TEST(Sm90Layout, KMajorDescriptorBits) {
  // A 1024-aligned tile: LBO 16 B (encoded 1), SBO 1024 B (64), 128B swizzle (1 at bit 62).
  for (std::uint32_t addr : {0x0u, 0x400u, 0x8000u, 0x3fc00u}) {
    EXPECT_EQ(sw128_k_major_desc(addr), 0x4000004000010000ull | (addr >> 4)) << addr;
  }
  // The start field drops the address's low 4 bits and keeps 14 bits (256 KB).
  EXPECT_EQ(make_smem_desc(0x40000 + 0x1230, 0, 0, DescSwizzle::kNone), 0x123ull);
  EXPECT_EQ(desc_advance(sw128_k_major_desc(0x400), 32), sw128_k_major_desc(0x420));
}

TEST(Sm90Layout, MnMajorDescriptorBits) {
  for (int k_rows : {16, 64, 128}) {
    const std::uint64_t d = sw128_mn_major_desc(0x2000, k_rows);
    EXPECT_EQ(d & 0x3fff, 0x2000u >> 4);
    EXPECT_EQ((d >> 16) & 0x3fff, static_cast<std::uint64_t>(k_rows * 128 / 16)) << "LBO";
    EXPECT_EQ((d >> 32) & 0x3fff, 1024u / 16) << "SBO";
    EXPECT_EQ((d >> 49) & 0x7, 0u) << "base offset";
    EXPECT_EQ(d >> 62, 1u) << "128B swizzle";
  }
}

TEST(Sm90Layout, StepOffsets) {
  // K-major: 32 bytes per k16 step inside a 128-byte row, the next 64-column block after 4.
  EXPECT_EQ(sw128_k_major_step_bytes(64, 0), 0u);
  EXPECT_EQ(sw128_k_major_step_bytes(64, 3), 96u);
  EXPECT_EQ(sw128_k_major_step_bytes(64, 4), 8192u);
  EXPECT_EQ(sw128_k_major_step_bytes(256, 5), 256u * 128 + 32);
  // MN-major: 16 rows of 128 bytes per step.
  EXPECT_EQ(sw128_mn_major_step_bytes(3), 3u * 2048);
  // A step start is where the step's first element sits in the unswizzled row 0.
  for (int j = 0; j < 8; ++j) {
    EXPECT_EQ(sw128_k_major_step_bytes(64, j), sw128_offset(64, 0, 16 * j)) << j;
    EXPECT_EQ(sw128_mn_major_step_bytes(j), sw128_offset(128, 16 * j, 0)) << j;
  }
}

// The 128B swizzle as hardware applies it (address bits [6:4] ^= bits [9:7]) to the
// unswizzled offset of a 1024-aligned tile.
std::uint32_t hw_swizzle(std::uint32_t plain) { return plain ^ (((plain >> 7) & 7u) << 4); }

TEST(Sm90Layout, Sw128OffsetIsTheHardwareSwizzleAndABijection) {
  for (int rows : {8, 64, 176, 256}) {
    for (int cols : {64, 128, 256}) {
      std::set<std::uint32_t> seen;
      for (int r = 0; r < rows; ++r) {
        for (int c = 0; c < cols; ++c) {
          const std::uint32_t off = sw128_offset(rows, r, c);
          const std::uint32_t plain =
              static_cast<std::uint32_t>((c / 64) * rows * 128 + r * 128 + (c % 64) * 2);
          ASSERT_EQ(off, hw_swizzle(plain))
              << rows << " x " << cols << " (" << r << ", " << c << ")";
          ASSERT_LT(off, static_cast<std::uint32_t>(sw128_tile_bytes(rows, cols)));
          seen.insert(off);
        }
      }
      EXPECT_EQ(seen.size(), static_cast<std::size_t>(rows) * cols);
    }
  }
  EXPECT_EQ(sw128_tile_bytes(64, 16), 64 * 128);  // a k16 K-major operand: whole 128-byte rows
  EXPECT_EQ(sw128_tile_bytes(64, 128), 2 * 64 * 128);
}

TEST(Sm90Layout, AccumulatorCoversTheTileOnce) {
  for (int n : {16, 64, 128, 256}) {
    std::set<std::pair<int, int>> seen;
    for (int t = 0; t < 128; ++t) {
      for (int i = 0; i < n / 2; ++i) {
        const int row = acc_row(t, i), col = acc_col(t, i);
        ASSERT_TRUE(row >= 0 && row < 64 && col >= 0 && col < n);
        ASSERT_EQ(row / 16, t / 32) << "warp w owns rows 16w..16w+15";
        seen.insert({row, col});
      }
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(64) * n);
  }
  // Per 8-column slab, a warp's 4 registers are mma.sync's m16n8 C fragment.
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, q = l % 4;
    EXPECT_EQ(acc_row(l, 0), g);
    EXPECT_EQ(acc_row(l, 2), g + 8);
    EXPECT_EQ(acc_col(l, 1), 2 * q + 1);
    EXPECT_EQ(acc_col(l, 4 * 5 + 3), 8 * 5 + 2 * q + 1);
  }
}

// CUTLASS writes the same fragments as CuTe layouts from (thread, value) to the column-major
// index m + 64 n of the tile (cute/atom/mma_traits_sm90_gmma.hpp): CLayout_64xN =
// ((4,8,4),(2,2,N/8)):((128,1,16),(64,8,512)) and ALayout_64x16 =
// ((4,8,4),(2,2,2)):((128,1,16),(64,8,512)). Evaluated here independently of our formulas.
int cute_index(int t, int v) {
  const int t0 = t % 4, t1 = (t / 4) % 8, t2 = t / 32;
  const int v0 = v % 2, v1 = (v / 2) % 2, v2 = v / 4;
  return 128 * t0 + 1 * t1 + 16 * t2 + 64 * v0 + 8 * v1 + 512 * v2;
}

TEST(Sm90Layout, FragmentsMatchCutlassLayouts) {
  for (int t = 0; t < 128; ++t) {
    for (int i = 0; i < 128; ++i) {  // N = 256
      const int idx = cute_index(t, i);
      ASSERT_EQ(acc_row(t, i), idx % 64) << t << " " << i;
      ASSERT_EQ(acc_col(t, i), idx / 64) << t << " " << i;
    }
    for (int r = 0; r < 4; ++r) {
      for (int half = 0; half < 2; ++half) {
        const int idx = cute_index(t, 2 * r + half);  // value (half, r % 2, r / 2)
        ASSERT_EQ(a_frag_row(t, r), idx % 64) << t << " " << r;
        ASSERT_EQ(a_frag_col(t, r, half), idx / 64) << t << " " << r << " " << half;
      }
    }
  }
}

TEST(Sm90Layout, RegisterACoversTheStepOnce) {
  std::set<std::pair<int, int>> seen;
  for (int t = 0; t < 128; ++t) {
    for (int r = 0; r < 4; ++r) {
      for (int half = 0; half < 2; ++half) seen.insert({a_frag_row(t, r), a_frag_col(t, r, half)});
    }
  }
  EXPECT_EQ(seen.size(), 64u * 16);
  EXPECT_EQ(*seen.rbegin(), std::make_pair(63, 15));
}

TEST(Sm90Layout, AccumulatorRepacksAsRegisterAInPlace) {
  // P[row][16 j + k] held by the accumulator of S is exactly what the A fragment of PV step j
  // needs, in the same thread.
  for (int t = 0; t < 128; ++t) {
    for (int j = 0; j < 8; ++j) {
      for (int r = 0; r < 4; ++r) {
        for (int half = 0; half < 2; ++half) {
          const int i = acc_index_of_a(j, r, half);
          ASSERT_EQ(acc_row(t, i), a_frag_row(t, r)) << t << " " << j << " " << r << " " << half;
          ASSERT_EQ(acc_col(t, i), 16 * j + a_frag_col(t, r, half))
              << t << " " << j << " " << r << " " << half;
        }
      }
    }
  }
}

}  // namespace
}  // namespace flashattn::cuda::ptx
