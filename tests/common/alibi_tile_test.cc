// ALiBi's tile forms (common/alibi_tile.h), checked on the CPU in the float32 steps flash-sm80 and
// flash-sm90 take (fragment_ops.cuh: score_mod_fragment, alibi_row_bias, softmax_update):
// - alibi_tile_k (which side of the rows' diagonals a tile lies on) against every (row, key)
//   pair of a grid of tiles;
// - one row of a long sequence through the kernels' online softmax, emulated in float32 lane by
//   lane (a lane's columns 2t + 8 nt + e, its row part, the quad's max, the lazy rescale), with
//   the general form on every tile (the kernels before the split) and with the split form, each
//   against the float64 softmax of the same float32 scores: the split must stay at the general
//   form's error, far below the rounding of P to 16 bits, up to 64k keys and slope 1.
#include "common/alibi_tile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/math_constants.h"
#include "common/random.h"

namespace flashattn {
namespace {

TEST(AlibiTile, TileKHoldsForEveryPairOfTheTile) {
  const float neg_slope = -0.37f;
  for (std::int64_t first : {0, 5, 100}) {
    for (std::int64_t rows : {1, 16, 32}) {
      for (std::int64_t diag : {-150, -17, 0, 3, 90}) {
        for (std::int64_t cols : {1, 8, 64, 176}) {
          for (std::int64_t n0 = 0; n0 <= 400; n0 += 7) {
            bool all_left = true, all_right = true;
            for (std::int64_t i = first; i < first + rows; ++i) {
              for (std::int64_t j = n0; j < n0 + cols; ++j) {
                all_left = all_left && j <= i + diag;
                all_right = all_right && j >= i + diag;
              }
            }
            const float want = all_left ? -neg_slope : all_right ? neg_slope : 0.0f;
            EXPECT_EQ(alibi_tile_k(neg_slope, first, rows, diag, n0, cols), want)
                << "rows [" << first << ", +" << rows << ") diag " << diag << " keys [" << n0
                << ", +" << cols << ")";
          }
        }
      }
    }
  }
}

// The two parts of a one-sided tile add up to the bias, column by column (float64 arithmetic on
// the float32 values: the split itself is exact; rounding is the emulation's business).
TEST(AlibiTile, SplitFormIsTheBias) {
  const float neg_slope = -0.37f;
  for (bool left : {true, false}) {
    const float k = left ? -neg_slope : neg_slope;
    for (int d : {-300, -7, 0, 7, 300}) {
      for (int c = 0; c < 176; c += 5) {
        if (left != (d >= c)) continue;  // the tile's side
        const double split = static_cast<double>(k) * c - static_cast<double>(k) * d;
        const double bias = static_cast<double>(neg_slope) * std::abs(d - c);
        EXPECT_NEAR(split, bias, 1e-9) << "d " << d << " c " << c;
        EXPECT_EQ(alibi_linear_row(k, static_cast<float>(d)), -(k * static_cast<float>(d)));
      }
    }
  }
}

// One query row through a kernel's key loop.
struct RowProblem {
  std::int64_t seqlen_k;
  std::int64_t row;        // i
  std::int64_t warp_row;   // the first row of its warp, whose rows decide the tile's side
  std::int64_t warp_rows;  // 16 kMTiles: 16 in flash-sm90, 32 in flash-sm80
  std::int64_t diag;       // seqlen_k - seqlen_q
  bool causal;
  int block_n;             // keys per tile
  float scale, slope;      // natural units
  std::uint64_t seed;
  float score_std;         // raw scores ~ N(0, score_std)
};

struct RowError {
  double weight_l1 = 0.0;  // sum over keys of |W - W_f64|: bounds |O - O_f64| for |V| <= 1
  double weight_rel = 0.0;  // max |W / W_f64 - 1| over the keys with W_f64 >= 2^-24
  double lse = 0.0;        // |LSE - LSE_f64|, natural log
};

enum class Form { kGeneral, kSplit };

// The float32 steps of score_mod_fragment / alibi_row_bias / softmax_update for one row (the
// exponentials and the sums in float64: they are the same in both forms and not what is
// measured), and the float64 softmax of the same scores.
RowError run_row(const RowProblem& p, Form form) {
  constexpr int kLanes = 4;
  const float neg_slope = -p.slope / p.scale;  // ScoreMod::make
  const float scale_log2 = p.scale * kLog2e;   // AttentionArgs::scale_log2
  std::vector<float> score(static_cast<std::size_t>(p.seqlen_k));
  for (std::int64_t j = 0; j < p.seqlen_k; ++j) {
    score[j] = p.score_std * normal_at(p.seed, 0, static_cast<std::uint64_t>(j));
  }
  const std::int64_t last_key =
      p.causal ? std::min(p.seqlen_k - 1, p.row + p.diag) : p.seqlen_k - 1;

  float row_max = -INFINITY;
  double row_sum = 0.0, shift_log2 = 0.0;  // shift: the alphas applied so far, log2
  std::vector<double> weight_log2(static_cast<std::size_t>(p.seqlen_k), -INFINITY);
  std::vector<float> s(static_cast<std::size_t>(p.block_n));
  for (std::int64_t n0 = 0; n0 <= last_key; n0 += p.block_n) {
    const float k = form == Form::kSplit ? alibi_tile_k<std::int64_t>(neg_slope, p.warp_row, p.warp_rows,
                                                                        p.diag, n0, p.block_n)
                                         : 0.0f;
    const bool split = k != 0.0f;
    float row_bias[kLanes], lane_max[kLanes];
    for (int t = 0; t < kLanes; ++t) {
      row_bias[t] = alibi_linear_row(k, static_cast<float>(p.row + p.diag - n0 - 2 * t));
      lane_max[t] = -INFINITY;
    }
    for (int col = 0; col < p.block_n; ++col) {
      const std::int64_t j = n0 + col;
      const int t = col % 8 / 2, c = col / 8 * 8 + col % 2;
      float& x = s[col];
      if (j > last_key) {
        x = -INFINITY;
      } else if (split) {
        x = c == 0 ? score[j] : alibi_linear_score(score[j], k, static_cast<float>(c));
      } else {
        x = alibi_abs_score(score[j], neg_slope,
                            static_cast<float>(p.row + p.diag - n0 - 2 * t) -
                                static_cast<float>(c));
      }
      lane_max[t] = std::max(lane_max[t], x);
    }
    float tile_max = -INFINITY;
    for (int t = 0; t < kLanes; ++t) tile_max = std::max(tile_max, lane_max[t] + row_bias[t]);
    const float growth = (tile_max - row_max) * scale_log2;
    if (growth > 8.0f) {  // alpha = 2^-growth; 0 for the empty state of a -inf max
      if (row_max != -INFINITY) {
        row_sum *= std::exp2(-static_cast<double>(growth));
        shift_log2 -= static_cast<double>(growth);
      }
      row_max = tile_max;
    }
    const float max_sub = row_max == -INFINITY ? 0.0f : row_max;
    for (int col = 0; col < p.block_n; ++col) {
      const std::int64_t j = n0 + col;
      if (j > last_key) continue;
      const float arg = (s[col] - (max_sub - row_bias[col % 8 / 2])) * scale_log2;
      row_sum += std::exp2(static_cast<double>(arg));
      weight_log2[j] = static_cast<double>(arg) - shift_log2;
    }
  }
  // The kernel's LSE (finalize_lse: the product in float32) and its normalized weights.
  const double lse = (static_cast<double>(row_max * scale_log2) + std::log2(row_sum)) * kLn2;

  // Float64: the same float32 scores, slope / scale and scale_log2.
  std::vector<double> exact_log2(static_cast<std::size_t>(last_key + 1));
  double m = -INFINITY;
  for (std::int64_t j = 0; j <= last_key; ++j) {
    const double dist = static_cast<double>(std::abs(p.row + p.diag - j));
    exact_log2[j] = (static_cast<double>(score[j]) + static_cast<double>(neg_slope) * dist) *
                    static_cast<double>(scale_log2);
    m = std::max(m, exact_log2[j]);
  }
  double sum = 0.0;
  for (std::int64_t j = 0; j <= last_key; ++j) sum += std::exp2(exact_log2[j] - m);
  const double lse2 = m + std::log2(sum);
  RowError e;
  e.lse = std::abs(lse - lse2 * kLn2);
  for (std::int64_t j = 0; j <= last_key; ++j) {
    const double w = std::exp2(weight_log2[j] + shift_log2) / row_sum;
    const double w64 = std::exp2(exact_log2[j] - lse2);
    e.weight_l1 += std::abs(w - w64);
    if (w64 >= 0x1p-24) e.weight_rel = std::max(e.weight_rel, std::abs(w / w64 - 1.0));
  }
  return e;
}

std::string describe(const RowProblem& p) {
  std::ostringstream os;
  os << "seqlen_k " << p.seqlen_k << " row " << p.row << " (warp from " << p.warp_row
     << ", " << p.warp_rows << " rows) diag " << p.diag << (p.causal ? " causal" : "") << " block_n " << p.block_n
     << " scale " << p.scale << " slope " << p.slope << " score std " << p.score_std;
  return os.str();
}

// Rows at the start, the middle and the end of 16k and 64k-key sequences (diag 0 and not, the
// row at the first and the last position of its warp), causal and not, flash-sm80's tiles (64
// keys, warps of 32 rows) and flash-sm90's at d128 (176 keys, 16 rows), head dims 64 and 256,
// slopes 2^-8 to 1 (the largest of 8 heads is 2^-1; per-batch slopes double it), scores of unit
// and of 8x the natural spread.
// Bounds: the weights' L1 error of the split form at most the general form's plus 2^-20, both
// under 2^-16, and no weight >= 2^-24 off by more than 2^-16 of itself: P is rounded to 2^-9
// (bf16) or 2^-12 (fp16, half a step) of each weight before P V.
TEST(AlibiTile, SplitFormKeepsTheGeneralFormsErrorUpTo64kKeys) {
  constexpr double kAbsBound = 1.0 / (1 << 16), kSlack = 1.0 / (1 << 20), kLseBound = 1e-5;
  double worst_general = 0.0, worst_split = 0.0, worst_lse_general = 0.0, worst_lse_split = 0.0;
  double worst_rel_general = 0.0, worst_rel_split = 0.0;
  int rows = 0;
  std::uint64_t seed = 1;
  for (int block_n : {64, 176}) {
    const std::int64_t warp_rows = block_n == 64 ? 32 : 16;
    for (std::int64_t seqlen_k : {16384, 65536}) {
      for (std::int64_t seqlen_q : {seqlen_k, seqlen_k / 2 + 37}) {
        const std::int64_t diag = seqlen_k - seqlen_q;
        for (std::int64_t warp_row :
             {std::int64_t{0}, seqlen_q / 2 / warp_rows * warp_rows, seqlen_q - warp_rows}) {
          for (bool last_in_warp : {false, true}) {
            for (bool causal : {false, true}) {
              for (int head_dim : {64, 256}) {
                for (float slope : {1.0f, 0.5f, 0.0625f, 0.00390625f}) {
                  for (float spread : {1.0f, 8.0f}) {
                    RowProblem p{seqlen_k, warp_row + (last_in_warp ? warp_rows - 1 : 0),
                                 warp_row, warp_rows, diag, causal, block_n,
                                 1.0f / std::sqrt(static_cast<float>(head_dim)), slope, ++seed,
                                 spread * std::sqrt(static_cast<float>(head_dim))};
                    const RowError g = run_row(p, Form::kGeneral);
                    const RowError sp = run_row(p, Form::kSplit);
                    ++rows;
                    worst_general = std::max(worst_general, g.weight_l1);
                    worst_split = std::max(worst_split, sp.weight_l1);
                    worst_lse_general = std::max(worst_lse_general, g.lse);
                    worst_lse_split = std::max(worst_lse_split, sp.lse);
                    worst_rel_general = std::max(worst_rel_general, g.weight_rel);
                    worst_rel_split = std::max(worst_rel_split, sp.weight_rel);
                    ASSERT_LE(sp.weight_l1, g.weight_l1 + kSlack)
                        << describe(p) << ": general " << g.weight_l1;
                    ASSERT_LE(sp.weight_l1, kAbsBound) << describe(p);
                    ASSERT_LE(g.weight_l1, kAbsBound) << describe(p);
                    ASSERT_LE(sp.lse, kLseBound) << describe(p) << ": general " << g.lse;
                    ASSERT_LE(sp.weight_rel, kAbsBound) << describe(p) << ": general "
                                                        << g.weight_rel;
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  std::printf("%d rows: weights' L1 error general %.3g split %.3g; largest relative error of a "
              "weight >= 2^-24 general %.3g split %.3g; LSE general %.3g split %.3g\n",
              rows, worst_general, worst_split, worst_rel_general, worst_rel_split,
              worst_lse_general, worst_lse_split);
}

}  // namespace
}  // namespace flashattn
