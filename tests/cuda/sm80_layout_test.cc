// The flash-sm80 kernel's shared-memory addressing, checked on the CPU for every shipped
// configuration (Sm80ConfigFor) and every address the hot loop forms:
//   - each ldmatrix (Q and K fragments of QK^T, V fragments of PV) addresses the element its
//     fragment needs (row and chunk), through LaneOffsets' four-offsets-plus-constant form;
//   - each of its 8-lane phases hits 8 different 16-byte bank groups: no bank conflict;
//   - the cp.async copy grid writes every (row, chunk) of a tile exactly once, where swizzle()
//     says it lives;
//   - the output staging's 4-byte fragment stores hit 32 different banks.
// No GPU needed: this is the address arithmetic the kernel runs, compiled for the host.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "cuda/sm80/flash_sm80_config.h"
#include "cuda/sm80/smem_layout.h"

namespace flashattn::cuda::sm80 {
namespace {

constexpr int kBankGroupBytes = 16;  // 32 banks x 4 bytes = 8 groups of 16 bytes
constexpr int kBankGroups = 8;

// Checks one warp-wide ldmatrix: lane l addresses `addr[l]`, which must be
// swizzle(want_row[l], want_chunk[l]); every phase (lanes 8i..8i+7) must cover 8 bank groups.
void check_ldmatrix(const std::vector<std::uint32_t>& addr, const std::vector<int>& want_offset,
                    const std::string& what) {
  for (int lane = 0; lane < 32; ++lane) {
    ASSERT_EQ(addr[lane], static_cast<std::uint32_t>(want_offset[lane])) << what << " lane " << lane;
    ASSERT_EQ(addr[lane] % 16, 0u) << what << " lane " << lane;
  }
  for (int phase = 0; phase < 4; ++phase) {
    std::set<std::uint32_t> groups;
    for (int lane = 8 * phase; lane < 8 * phase + 8; ++lane) {
      groups.insert(addr[lane] / kBankGroupBytes % kBankGroups);
    }
    EXPECT_EQ(groups.size(), 8u) << what << ": phase " << phase << " has a bank conflict";
  }
}

template <class Cfg>
void check_config() {
  SCOPED_TRACE("head dim " + std::to_string(Cfg::kHeadDim));
  // Q: A fragments of every warp's m-tiles at every k16 step.
  for (int warp = 0; warp < Cfg::kWarps; ++warp) {
    for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
      for (int ds = 0; ds < Cfg::kDSteps; ++ds) {
        std::vector<std::uint32_t> addr(32);
        std::vector<int> want(32);
        for (int lane = 0; lane < 32; ++lane) {
          const int row = warp * Cfg::kWarpM + q_lane_row(lane);
          const LaneOffsets<Cfg> lanes(row, q_lane_chunk(lane));
          addr[lane] = lanes.at(0, mt, ds);
          want[lane] = static_cast<int>(swizzle<Cfg>(row + 16 * mt, 2 * ds + q_lane_chunk(lane)));
        }
        check_ldmatrix(addr, want, "Q warp " + std::to_string(warp) + " mt " + std::to_string(mt) +
                                       " ds " + std::to_string(ds));
      }
    }
  }
  // K: B fragments of n-tile pairs at every k16 step.
  for (int np = 0; np < Cfg::kNTiles / 2; ++np) {
    for (int ds = 0; ds < Cfg::kDSteps; ++ds) {
      std::vector<std::uint32_t> addr(32);
      std::vector<int> want(32);
      for (int lane = 0; lane < 32; ++lane) {
        const LaneOffsets<Cfg> lanes(k_lane_row(lane), k_lane_chunk(lane));
        addr[lane] = lanes.at(0, np, ds);
        want[lane] = static_cast<int>(
            swizzle<Cfg>(16 * np + k_lane_row(lane), 2 * ds + k_lane_chunk(lane)));
      }
      check_ldmatrix(addr, want, "K np " + std::to_string(np) + " ds " + std::to_string(ds));
    }
  }
  // V: transposed B fragments of d-tile pairs at every k16 (key) step.
  for (int ks = 0; ks < Cfg::kNSteps; ++ks) {
    for (int dp = 0; dp < Cfg::kDTiles / 2; ++dp) {
      std::vector<std::uint32_t> addr(32);
      std::vector<int> want(32);
      for (int lane = 0; lane < 32; ++lane) {
        const LaneOffsets<Cfg> lanes(v_lane_row(lane), v_lane_chunk(lane));
        addr[lane] = lanes.at(0, ks, dp);
        want[lane] = static_cast<int>(
            swizzle<Cfg>(16 * ks + v_lane_row(lane), 2 * dp + v_lane_chunk(lane)));
      }
      check_ldmatrix(addr, want, "V ks " + std::to_string(ks) + " dp " + std::to_string(dp));
    }
  }
  // cp.async: the Q tile (kBlockM rows) and a K/V tile (kBlockN rows), from every thread.
  for (int rows : {Cfg::kBlockM, Cfg::kBlockN}) {
    using Grid = CopyGrid<Cfg, Cfg::kThreads>;
    ASSERT_EQ(rows % Grid::kStep, 0);
    std::set<std::uint32_t> written;
    int copies = 0;
    for (int tid = 0; tid < Cfg::kThreads; ++tid) {
      if (!Grid::active(tid)) continue;
      for (int k = 0; k < rows / Grid::kStep; ++k) {
        const std::uint32_t at = Grid::offset(tid, k);
        EXPECT_EQ(at, swizzle<Cfg>(Grid::first_row(tid) + k * Grid::kStep, Grid::chunk(tid)))
            << "tid " << tid << " copy " << k;
        written.insert(at);
        ++copies;
      }
    }
    EXPECT_EQ(copies, rows * Cfg::kChunks);
    EXPECT_EQ(written.size(), static_cast<std::size_t>(rows * Cfg::kChunks)) << "a chunk written twice";
  }
  // Output staging: per (m-tile, row half, d-tile) the warp stores 32 x 4 bytes.
  for (int mt = 0; mt < Cfg::kMTiles; ++mt) {
    for (int hh = 0; hh < 2; ++hh) {
      for (int dt = 0; dt < Cfg::kDTiles; ++dt) {
        std::set<std::uint32_t> banks;
        for (int lane = 0; lane < 32; ++lane) {
          const int row = mt * 16 + lane / 4 + 8 * hh;
          banks.insert((swizzle<Cfg>(row, dt) + 4 * (lane % 4)) / 4 % 32);
        }
        EXPECT_EQ(banks.size(), 32u) << "staging mt " << mt << " hh " << hh << " dt " << dt;
      }
    }
  }
}

TEST(Sm80LayoutTest, HotLoopAccessesAreExactAndConflictFree) {
  check_config<Sm80ConfigFor<64>::type>();
  check_config<Sm80ConfigFor<96>::type>();
  check_config<Sm80ConfigFor<128>::type>();
  check_config<Sm80ConfigFor<192>::type>();
  check_config<Sm80ConfigFor<256>::type>();
}

// The same checks fail on a layout without the swizzle: the test can tell.
struct Unswizzled {
  static constexpr int kRowBytes = 256;
};

TEST(Sm80LayoutTest, UnswizzledRowsWouldConflict) {
  std::set<std::uint32_t> groups;
  for (int row = 0; row < 8; ++row) groups.insert(row * Unswizzled::kRowBytes / 16 % 8);
  EXPECT_EQ(groups.size(), 1u);  // 8 rows of one chunk column on one bank group: 8-way conflict
  std::set<std::uint32_t> swizzled;
  for (int row = 0; row < 8; ++row) swizzled.insert(swizzle<Unswizzled>(row, 3) / 16 % 8);
  EXPECT_EQ(swizzled.size(), 8u);
}

}  // namespace
}  // namespace flashattn::cuda::sm80
