// flash-sm90's layout assumptions, checked on the CPU: the wgmma accumulator viewed as the
// fragment_ops layout (the kernel reinterprets float[N / 2] as Fragment<1, N / 8>), the tile
// configurations (alignment, budgets, TMA boxes), and the staging of O over Q's rows.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "cuda/primitives/wgmma_layout.h"
#include "cuda/sm90/flash_sm90_config.h"

namespace flashattn::cuda {
namespace {

// fragment_ops.cuh: lane l (g = l / 4, t = l % 4) of a warp whose rows start at row0 holds
// frag[0][nt][e] at row row0 + g + 8 (e / 2), column 8 nt + 2 t + e % 2. Flattened row-major,
// frag[0][nt][e] is register 4 nt + e: it must be where wgmma puts that element (warp w of the
// warpgroup: row0 = 16 w).
TEST(Sm90FlashLayout, AccumulatorIsTheFragmentLayout) {
  for (int n : {64, 96, 128, 256}) {
    for (int t = 0; t < 128; ++t) {
      const int w = t / 32, l = t % 32, g = l / 4, tq = l % 4;
      for (int nt = 0; nt < n / 8; ++nt) {
        for (int e = 0; e < 4; ++e) {
          const int i = 4 * nt + e;
          EXPECT_EQ(ptx::acc_row(t, i), 16 * w + g + 8 * (e / 2)) << n << " " << t << " " << i;
          EXPECT_EQ(ptx::acc_col(t, i), 8 * nt + 2 * tq + e % 2) << n << " " << t << " " << i;
        }
      }
    }
  }
}

// P's A fragment for PV k-step ks (keys 16 ks..16 ks + 15) packs registers
// acc_index_of_a(ks, r, half) of S: those hold rows and keys the A layout asks for.
TEST(Sm90FlashLayout, ProbabilitiesPackAsPvOperand) {
  for (int t = 0; t < 128; ++t) {
    for (int ks = 0; ks < 8; ++ks) {
      for (int r = 0; r < 4; ++r) {
        for (int half = 0; half < 2; ++half) {
          const int i = ptx::acc_index_of_a(ks, r, half);
          EXPECT_EQ(ptx::acc_row(t, i), ptx::a_frag_row(t, r));
          EXPECT_EQ(ptx::acc_col(t, i), 16 * ks + ptx::a_frag_col(t, r, half));
        }
      }
    }
  }
}

template <class Cfg>
void check_config() {
  SCOPED_TRACE(Cfg::kHeadDim);
  EXPECT_EQ(Cfg::kKOffset % 1024, 0);
  EXPECT_EQ(Cfg::kVOffset % 1024, 0);
  EXPECT_EQ(Cfg::kBarOffset % 8, 0);
  EXPECT_LE(Cfg::kSmemBytes, 227 * 1024);
  EXPECT_EQ(Cfg::kKvTileBytes, Cfg::kColBlocks * 64 * Cfg::kBlockN * 2);  // whole TMA boxes
  EXPECT_EQ(Cfg::kQBytes, Cfg::kColBlocks * 64 * Cfg::kBlockM * 2);
  EXPECT_LE(Cfg::kBlockM, 256);  // TMA box rows
  EXPECT_LE(Cfg::kBlockN, 256);
  EXPECT_GE(Cfg::kHeadDimPad, Cfg::kHeadDim);
  EXPECT_EQ(Cfg::kHeadDimPad % 64, 0);
  EXPECT_EQ(Cfg::kConsumerRows, 64);  // one wgmma m64 per consumer warpgroup
  // Each later consumer's Q rows start on a swizzle atom (its descriptor has no base offset).
  EXPECT_EQ(Cfg::kConsumerRows * 128 % 1024, 0);
  // Registers a consumer thread keeps across the key loop: S, P and O, under its setmaxnreg cap
  // (240 with two consumers, 160 with three) with 32 to spare for addresses and the softmax.
  EXPECT_LE(Cfg::kBlockN / 2 + Cfg::kBlockN / 4 + Cfg::kHeadDimPad / 2, Cfg::kConsumerRegs - 32);
  // The budget split: producer + consumers within the 65536 registers of one block.
  EXPECT_LE(Cfg::kWarpgroup * (Cfg::kProducerRegs + Cfg::kConsumers * Cfg::kConsumerRegs), 65536);
  // Every warpgroup's start share (65536 / threads, rounded down to 8) can reach its cap:
  // setmaxnreg only moves registers between warpgroups of the block.
  const int start = 65536 / Cfg::kThreads / 8 * 8;
  EXPECT_LE(Cfg::kProducerRegs, start);
  EXPECT_GE(Cfg::kConsumerRegs, start);
  EXPECT_EQ(Cfg::kConsumerRegs % 8, 0);
  EXPECT_EQ(Cfg::kBlockM, 64 * Cfg::kConsumers);
  // O staged over Q: every (row, column) of the output lands on its own 2 bytes of Q's tile.
  std::set<std::uint32_t> seen;
  for (int row = 0; row < Cfg::kBlockM; ++row) {
    for (int col = 0; col < Cfg::kHeadDim; ++col) {
      const std::uint32_t off = ptx::sw128_offset(Cfg::kBlockM, row, col);
      EXPECT_LT(off + 2, static_cast<std::uint32_t>(Cfg::kQBytes) + 1);
      EXPECT_TRUE(seen.insert(off).second) << row << " " << col;
    }
  }
}

TEST(Sm90FlashLayout, ConfigsFit) {
  check_config<Sm90ConfigFor<64>::type>();
  check_config<Sm90ConfigFor<96>::type>();
  check_config<Sm90ConfigFor<128>::type>();
  check_config<Sm90ConfigFor<192>::type>();
  check_config<Sm90Config<256, 64, 2>>();
  check_config<Sm90ShortConfigFor<64>::type>();
  check_config<Sm90ShortConfigFor<128>::type>();
}

// Two consumers at N192 against N128: the short tile wins where N192's last tile is mostly
// empty, not at 4k and up (the kTileCost fit).
TEST(Sm90FlashLayout, ShortTilesForShortKeyRanges) {
  const Sm90TileShape n192{128, 192, 100}, n128{128, 128, 100};
  auto pays = [](long long sq, long long sk, Sm90TileShape a, Sm90TileShape b) {
    return sm90_short_tiles_pay(sq, sk, -1, -1, a, b);
  };
  for (long long sk : {128, 512, 1024}) EXPECT_TRUE(pays(sk, sk, n192, n128)) << sk;
  for (long long sk : {192, 384, 2048, 4096, 16384, 65536}) {
    EXPECT_FALSE(pays(sk, sk, n192, n128)) << sk;
  }
  EXPECT_FALSE(pays(1024, 1024, n128, n128));  // one shape: nothing to pick
  EXPECT_FALSE(pays(0, 1024, n192, n128));     // no rows or keys: nothing to weigh
  EXPECT_FALSE(pays(1024, 0, n192, n128));
}

// d64: three consumers (M192) for dense problems from 384 and long causal ones, two (M128)
// where M192's diagonal blocks and partial last block cost more than its rate gains (the
// tuner's causal 1k), and for single-query decode steps.
TEST(Sm90FlashLayout, ThreeConsumersAtD64) {
  using Long = Sm90ConfigFor<64>::type;
  using Short = Sm90ShortConfigFor<64>::type;
  ASSERT_EQ(Long::kBlockM, 192);
  ASSERT_EQ(Long::kConsumerRegs, 160);
  ASSERT_EQ(Short::kBlockM, 128);
  auto pays = [](long long sq, long long sk, long long left, long long right) {
    return sm90_short_tiles_pay(sq, sk, left, right, sm90_tile_shape<Long>(),
                                sm90_tile_shape<Short>());
  };
  for (long long sk : {384, 1024, 4096, 16384, 65536}) EXPECT_FALSE(pays(sk, sk, -1, -1)) << sk;
  for (long long sk : {4096, 16384}) EXPECT_FALSE(pays(sk, sk, -1, 0)) << sk;
  EXPECT_TRUE(pays(1024, 1024, -1, 0));
  EXPECT_TRUE(pays(128, 128, -1, -1));  // one block either way: M192 wastes 64 rows
  EXPECT_TRUE(pays(1, 8192, -1, 0));
}

// d128: N128 for short causal problems and narrow windows (the tuner's causal 512 and 1k), N176
// for dense ones at 2k and up and for long causal ones. Tiles start at a block's first key, so
// a window (1024, 0) block's 1152 keys are 9 tiles of 128 (1332 cost) against 7 of 176 (1372).
TEST(Sm90FlashLayout, ShortTilesForCausalAndWindowsAtD128) {
  using Long = Sm90ConfigFor<128>::type;
  using Short = Sm90ShortConfigFor<128>::type;
  ASSERT_EQ(Long::kBlockN, 176);
  ASSERT_EQ(Short::kBlockN, 128);
  auto pays = [](long long sq, long long sk, long long left, long long right) {
    return sm90_short_tiles_pay(sq, sk, left, right, sm90_tile_shape<Long>(),
                                sm90_tile_shape<Short>());
  };
  EXPECT_TRUE(pays(512, 512, -1, 0));
  EXPECT_TRUE(pays(1024, 1024, -1, 0));
  EXPECT_FALSE(pays(16384, 16384, -1, 0));
  EXPECT_FALSE(pays(2048, 2048, -1, -1));
  EXPECT_FALSE(pays(16384, 16384, -1, -1));
  EXPECT_TRUE(pays(16384, 16384, 1024, 0));
  // Sampling long sequences keeps the choice: 64 of 8192 blocks decide like all of them.
  EXPECT_FALSE(pays(1 << 20, 1 << 20, -1, 0));
  EXPECT_TRUE(pays(1 << 20, 1 << 20, 1024, 0));
}

}  // namespace
}  // namespace flashattn::cuda
