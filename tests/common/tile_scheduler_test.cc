// TileScheduler: every (batch, head, query block) exactly once, in the documented order.
#include "common/tile_scheduler.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace flashattn {
namespace {

TEST(TileScheduler, EveryTileOnceLongestBlockOfAHeadFirst) {
  for (std::int64_t batch : {1, 3}) {
    for (std::int64_t heads : {1, 5}) {
      for (std::int64_t seqlen_q : {1, 64, 65, 200}) {
        const TileScheduler s = TileScheduler::make(batch, heads, seqlen_q, 64);
        EXPECT_EQ(s.m_blocks, (seqlen_q + 63) / 64);
        ASSERT_EQ(s.tiles(), batch * heads * s.m_blocks);
        std::set<std::tuple<std::int64_t, std::int64_t, std::int64_t>> seen;
        for (std::int64_t t = 0; t < s.tiles(); ++t) {
          const TileCoord c = s.tile(t);
          ASSERT_GE(c.batch, 0); ASSERT_LT(c.batch, batch);
          ASSERT_GE(c.head, 0); ASSERT_LT(c.head, heads);
          ASSERT_GE(c.m_block, 0); ASSERT_LT(c.m_block, s.m_blocks);
          EXPECT_TRUE(seen.insert({c.batch, c.head, c.m_block}).second) << "tile " << t;
          // The blocks of one head are consecutive, the last block first.
          EXPECT_EQ(c.m_block, s.m_blocks - 1 - t % s.m_blocks);
          EXPECT_EQ(c.batch * heads + c.head, t / s.m_blocks);
        }
        EXPECT_EQ(static_cast<std::int64_t>(seen.size()), s.tiles());
      }
    }
  }
}

}  // namespace
}  // namespace flashattn
