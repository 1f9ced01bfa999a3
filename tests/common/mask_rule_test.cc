// The visibility rule (common/mask_rule.h) against brute force from its definition: for every
// (seqlen_q, seqlen_k, left, right, causal) of a grid that includes seqlen_q > seqlen_k, empty
// sequences, windows of 0, windows wider than the sequence (up to INT64_MAX) and windows that
// leave rows empty, every row's range, every block's key range and tile range, and which tiles
// need a per-element mask.
#include "common/mask_rule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace flashattn {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// The definition (params.h), written so that no operand can overflow: query i sees key j iff
// 0 <= j < seqlen_k, i + diag - j <= left (left = -1: no bound) and j - (i + diag) <= right.
bool visible_by_definition(std::int64_t sq, std::int64_t sk, std::int64_t left, std::int64_t right,
                           bool causal, std::int64_t i, std::int64_t j) {
  if (j < 0 || j >= sk) return false;
  if (causal) right = 0;
  const std::int64_t behind = i + (sk - sq) - j;  // > 0: key before the diagonal
  if (left >= 0 && behind > left) return false;
  if (right >= 0 && -behind > right) return false;
  return true;
}

// A row's visible keys found by scanning every key: [first, last] and how many.
struct BruteRow {
  std::int64_t first = -1, last = -1, count = 0;
};

struct Case {
  std::int64_t sq, sk, left, right;
  bool causal;
  std::string to_string() const {
    std::ostringstream os;
    os << "sq=" << sq << " sk=" << sk << " left=" << left << " right=" << right
       << (causal ? " causal" : "");
    return os.str();
  }
};

// Checks every row, every block of `block_m` rows and every key tile of `block_n` keys of one
// rule; returns the number of failed expectations (gtest reports each).
int check_rule(const Case& c, const std::vector<std::int64_t>& block_ms,
               const std::vector<std::int64_t>& block_ns) {
  const MaskRule rule = MaskRule::make(c.sq, c.sk, c.left, c.right, c.causal);
  int failures = 0;
  std::vector<BruteRow> rows(static_cast<std::size_t>(c.sq));
  for (std::int64_t i = 0; i < c.sq; ++i) {
    BruteRow& br = rows[static_cast<std::size_t>(i)];
    for (std::int64_t j = 0; j < c.sk; ++j) {
      const bool vis = visible_by_definition(c.sq, c.sk, c.left, c.right, c.causal, i, j);
      if (vis) {
        if (br.first < 0) br.first = j;
        br.last = j;
        ++br.count;
      }
      if (rule.visible(i, j) != vis) {
        ADD_FAILURE() << c.to_string() << ": visible(" << i << ", " << j << ") = " << !vis;
        if (++failures > 10) return failures;
      }
    }
    // Keys outside [0, seqlen_k) are never visible.
    if (rule.visible(i, -1) || rule.visible(i, c.sk)) {
      ADD_FAILURE() << c.to_string() << ": row " << i << " sees a key outside [0, seqlen_k)";
      ++failures;
    }
    // The visible keys form one interval, and row_range is it.
    const KeyRange r = rule.row_range(i);
    const bool ok = br.count == 0 ? r.empty() && r.begin >= 0 && r.end <= c.sk
                                  : br.count == br.last - br.first + 1 && r.begin == br.first &&
                                        r.end == br.last + 1;
    if (!ok) {
      ADD_FAILURE() << c.to_string() << ": row_range(" << i << ") = [" << r.begin << ", " << r.end
                    << "), brute force " << br.count << " keys in [" << br.first << ", " << br.last
                    << "]";
      if (++failures > 10) return failures;
    }
  }

  for (std::int64_t block_m : block_ms) {
    for (std::int64_t m0 = 0; m0 < c.sq; m0 += block_m) {
      const std::int64_t m_end = std::min(m0 + block_m, c.sq);
      // The union of the block's rows: tight bounds, empty iff no row sees a key.
      std::int64_t first = kMax, last = -1;
      for (std::int64_t i = m0; i < m_end; ++i) {
        const BruteRow& br = rows[static_cast<std::size_t>(i)];
        if (br.count == 0) continue;
        first = std::min(first, br.first);
        last = std::max(last, br.last);
      }
      const bool any = last >= 0;
      const KeyRange br = rule.block_range(m0, block_m);
      if (any ? (br.begin != first || br.end != last + 1) : !br.empty()) {
        ADD_FAILURE() << c.to_string() << ": block_range(" << m0 << ", " << block_m << ") = ["
                      << br.begin << ", " << br.end << "), brute force "
                      << (any ? "[" + std::to_string(first) + ", " + std::to_string(last + 1) + ")"
                              : std::string("empty"));
        if (++failures > 10) return failures;
      }
      for (std::int64_t block_n : block_ns) {
        // The tiles holding a visible key: exactly [first / n, last / n + 1).
        std::int64_t t_first = 0, t_end = 0;
        rule.tile_range(m0, block_m, block_n, &t_first, &t_end);
        const bool tiles_ok =
            any ? t_first == first / block_n && t_end == last / block_n + 1 : t_first >= t_end;
        if (!tiles_ok) {
          ADD_FAILURE() << c.to_string() << ": tile_range(" << m0 << ", " << block_m << ", "
                        << block_n << ") = [" << t_first << ", " << t_end << ")";
          if (++failures > 10) return failures;
        }
        // Tiles from the first visible key: the fewest of block_n keys that hold [first, last].
        std::int64_t k_first = 0, k_tiles = 0;
        rule.key_tiles(m0, block_m, block_n, &k_first, &k_tiles);
        const bool key_tiles_ok =
            any ? k_first == first && k_tiles == (last - first) / block_n + 1
                : k_first == 0 && k_tiles == 0;
        if (!key_tiles_ok) {
          ADD_FAILURE() << c.to_string() << ": key_tiles(" << m0 << ", " << block_m << ", "
                        << block_n << ") = " << k_tiles << " from " << k_first;
          if (++failures > 10) return failures;
        }
        // Every tile of the key axis (and one past it): a mask is needed iff some element of
        // rows [m0, m_end) x keys [n0, n0 + block_n) is not visible.
        for (std::int64_t n0 = 0; n0 < c.sk + block_n; n0 += block_n) {
          bool hidden = false;
          for (std::int64_t i = m0; i < m_end && !hidden; ++i) {
            const BruteRow& row = rows[static_cast<std::size_t>(i)];
            // Rows are intervals (checked above), so containment is enough.
            hidden = row.count == 0 || row.first > n0 || row.last < n0 + block_n - 1;
          }
          // interior_tiles() names the same tiles: within the key axis, those needing no mask.
          std::int64_t i_first = 0, i_end = 0;
          rule.interior_tiles(m0, block_m, block_n, &i_first, &i_end);
          const std::int64_t j = n0 / block_n;
          const bool interior = j >= i_first && j < i_end;
          if (any && interior == hidden) {
            ADD_FAILURE() << c.to_string() << ": interior_tiles(" << m0 << ", " << block_m << ", "
                          << block_n << ") = [" << i_first << ", " << i_end << ") at tile " << j
                          << ", which " << (hidden ? "needs" : "does not need") << " a mask";
            if (++failures > 10) return failures;
          }
          if (rule.tile_needs_mask(m0, block_m, n0, block_n) != hidden) {
            ADD_FAILURE() << c.to_string() << ": tile_needs_mask(" << m0 << ", " << block_m << ", "
                          << n0 << ", " << block_n << ") = " << !hidden;
            if (++failures > 10) return failures;
          }
        }
      }
    }
  }
  return failures;
}

// Windows around every boundary of a sequence of these lengths, plus huge ones.
std::vector<std::int64_t> windows_for(std::int64_t sq, std::int64_t sk) {
  std::vector<std::int64_t> w = {-1, 0, 1, 2, 3, 5, std::int64_t{1} << 40, kMax - 1, kMax};
  for (std::int64_t x : {sq, sk, sq + sk}) {
    for (std::int64_t d : {-1, 0, 1}) {
      if (x + d >= 0) w.push_back(x + d);
    }
  }
  std::sort(w.begin(), w.end());
  w.erase(std::unique(w.begin(), w.end()), w.end());
  return w;
}

TEST(MaskRule, SmallSequencesExhaustive) {
  int failures = 0;
  for (std::int64_t sq = 0; sq <= 9 && failures == 0; ++sq) {
    for (std::int64_t sk = 0; sk <= 9 && failures == 0; ++sk) {
      for (std::int64_t left : windows_for(sq, sk)) {
        for (std::int64_t right : windows_for(sq, sk)) {
          for (bool causal : {false, true}) {
            failures += check_rule({sq, sk, left, right, causal}, {1, 2, 3, 4, 16}, {1, 2, 3, 8});
            if (failures > 0) return;
          }
        }
      }
    }
  }
}

// Lengths around the 64-wide tiles of cpu-flash and the GPU kernels, both orders.
TEST(MaskRule, TileSizedSequences) {
  const std::int64_t lengths[] = {1, 17, 63, 64, 65, 130, 203};
  for (std::int64_t sq : lengths) {
    for (std::int64_t sk : lengths) {
      for (std::int64_t left : {std::int64_t{-1}, std::int64_t{0}, std::int64_t{1},
                                std::int64_t{31}, std::int64_t{64}, std::int64_t{127}, kMax}) {
        for (std::int64_t right :
             {std::int64_t{-1}, std::int64_t{0}, std::int64_t{7}, std::int64_t{64}, kMax}) {
          for (bool causal : {false, true}) {
            if (check_rule({sq, sk, left, right, causal}, {16, 64, 128}, {32, 64}) > 0) return;
          }
        }
      }
    }
  }
}

// The cases the grid is meant to contain, spelled out.
TEST(MaskRule, KnownCases) {
  // Causal with seqlen_q > seqlen_k: the first sq - sk rows see nothing, row sq - sk sees key 0.
  const MaskRule causal = MaskRule::make(10, 4, -1, -1, true);
  EXPECT_TRUE(causal.row_range(5).empty());
  EXPECT_EQ(causal.row_range(6).begin, 0);
  EXPECT_EQ(causal.row_range(6).end, 1);
  EXPECT_EQ(causal.row_range(9).end, 4);
  // A window past every key leaves rows empty: left 0, right 0 with sq > sk is the diagonal only.
  const MaskRule diagonal = MaskRule::make(10, 4, 0, 0, false);
  EXPECT_TRUE(diagonal.row_range(5).empty());
  EXPECT_EQ(diagonal.row_range(7).begin, 1);
  EXPECT_EQ(diagonal.row_range(7).end, 2);
  // Causal with a left window: right forced to 0, left kept.
  const MaskRule sliding = MaskRule::make(8, 8, 2, 5, true);
  EXPECT_EQ(sliding.row_range(5).begin, 3);
  EXPECT_EQ(sliding.row_range(5).end, 6);
  // INT64_MAX on either side is unbounded (i + diag - left must not wrap around).
  const MaskRule huge = MaskRule::make(10, 4, kMax, kMax, false);
  for (std::int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(huge.row_range(i).begin, 0) << i;
    EXPECT_EQ(huge.row_range(i).end, 4) << i;
  }
  EXPECT_FALSE(huge.bounded());
  // seqlen_k = 0: no row sees anything, no tile is visited.
  const MaskRule no_keys = MaskRule::make(5, 0, 3, -1, false);
  std::int64_t first = 0, end = 0;
  no_keys.tile_range(0, 64, 64, &first, &end);
  EXPECT_GE(first, end);
}

}  // namespace
}  // namespace flashattn
