// The attention steps between the two matrix products, written on the accumulator layout that
// mma.sync m16n8 C fragments and wgmma m64nN accumulators share within a warp: a lane (g = lane / 4,
// t = lane % 4) holds, for each 16-row m-tile mt and each 8-column n-tile nt, the float4
//   frag[mt][nt][0..1] = rows g,     columns 8 nt + 2t, 8 nt + 2t + 1
//   frag[mt][nt][2..3] = rows g + 8, same columns
// (a wgmma warp's 16 rows are one m-tile). The kernels call these on S (scores, raw units: see
// score_mod.cuh) and on O; the row of a fragment is row0 + 16 mt + 8 hh, row0 being the lane's
// first row (block start + warp start + g).
//
// Order per key tile: S = Q K^T; score_mod (softcap, ALiBi); mask (after the transform: softcap
// would turn a masked -inf into -cap); ALiBi's row part (alibi_row_bias) into softmax_update;
// rescale O; O += P V.
#pragma once

#include <cstdint>

#include "common/alibi_tile.h"
#include "common/mask_rule.h"
#include "common/softcap.h"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/primitives/fast_math.cuh"

namespace flashattn::cuda {

template <int kMTiles, int kNTiles>
using Fragment = float[kMTiles][kNTiles][4];

// ALiBi's k of key tile n0 (8 kNTiles keys) for a warp's fragment rows, the 16 kMTiles rows
// from row0 - g (common/alibi_tile.h): slope or -slope (raw) on a one-sided tile, 0 across the
// diagonal. Warp-uniform.
template <int kMTiles, int kNTiles, typename Int>
__device__ __forceinline__ float fragment_alibi_k(const ScoreMod& mod, Int row0, int g, Int diag,
                                                  Int n0) {
  return alibi_tile_k<Int>(mod.neg_slope, row0 - g, 16 * kMTiles, diag, n0, 8 * kNTiles);
}

// Softcap and ALiBi on one key tile starting at key n0 (g, t: the lane's row group and column
// pair). Softcap: when every score of the warp's tile has |s| <= softcap.poly_limit (one FMNMX per
// score and a vote), the FMA-pipe polynomial (common/softcap.h: 6 FP32 ops, no MUFU op);
// otherwise the exact form (score_mod.cuh: two MUFU ops). The vote keeps the branch
// warp-uniform; fmaxf drops a NaN score, which then takes the polynomial and stays NaN.
// softcap is the kernel parameter's, so its coefficients stay FFMA constant operands. kPoly
// false: the exact form on every tile (a kernel whose registers cannot take the branch). ALiBi (common/alibi_tile.h): on a tile wholly on one side of the diagonal of every row
// of the warp (fragment_alibi_k), one FFMA per score adds the column part k c, and alibi_row_bias
// gives each row's part -k d, which softmax_update adds to the whole row; across the diagonal
// the general form s - slope |d - c|, one FADD and one FFMA per score, and no row part. d is
// formed per row as one float, (row + diag - n0 - 2t); c = 8 nt + e is an immediate.
template <int kMTiles, int kNTiles, bool kPoly = true, typename Int>
__device__ __forceinline__ void score_mod_fragment(Fragment<kMTiles, kNTiles>& s,
                                                   const ScoreMod& mod,
                                                   const SoftcapConsts& softcap, Int row0, Int diag,
                                                   Int n0, int t, int g) {
  if (softcap.cap != 0.0f) {
    // max |s| of the lane's scores, in kChains independent FMNMX chains: in one chain, d128's
    // 88 scores per lane (16 x 176 tile) are 88 dependent FMNMX, ~350 cycles at ~4 each.
    constexpr int kChains = 4;
    float peaks[kChains] = {};
    if constexpr (kPoly) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) peaks[e] = fmaxf(peaks[e], fabsf(s[mt][nt][e]));
        }
      }
    }
    const float peak = fmaxf(fmaxf(peaks[0], peaks[1]), fmaxf(peaks[2], peaks[3]));
    if (kPoly && __all_sync(0xffffffffu, peak <= softcap.poly_limit)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = softcap.apply_poly(s[mt][nt][e]);
        }
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mt][nt][e] = softcap_exact(softcap, s[mt][nt][e]);
        }
      }
    }
  }
  if (mod.alibi()) {
    const float k = fragment_alibi_k<kMTiles, kNTiles>(mod, row0, g, diag, n0);
    if (k == 0.0f) {
      const float d0 = static_cast<float>(row0 + diag - n0 - 2 * t);
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const float d = d0 + static_cast<float>(16 * mt + 8 * hh);
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = s[mt][nt][2 * hh + e];
              x = mod.apply_alibi(x, d - static_cast<float>(8 * nt + e));
            }
          }
        }
      }
    } else {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int col = 8 * nt + e % 2;
            if (col == 0) continue;  // no column part (ptxas keeps s + k * 0: s may be -0)
            s[mt][nt][e] = alibi_linear_score(s[mt][nt][e], k, static_cast<float>(col));
          }
        }
      }
    }
  }
}

// ALiBi's row part of the tile score_mod_fragment transformed with the same arguments, as
// softmax_update's row_bias: -k d per row on a one-sided tile, 0 across the diagonal or without
// ALiBi (neg_slope = 0). A step of its own, right before softmax_update: made with the column
// part, before the mask, the rows' floats lived across it and spilled flash-sm90's variant
// kernel at 240 registers (4 bytes). The caller skips it without ALiBi (row_bias then 0).
template <int kMTiles, int kNTiles, typename Int>
__device__ __forceinline__ void alibi_row_bias(float (&row_bias)[kMTiles][2], const ScoreMod& mod,
                                               Int row0, Int diag, Int n0, int t, int g) {
  const float k = fragment_alibi_k<kMTiles, kNTiles>(mod, row0, g, diag, n0);  // 0: bias 0
  const float d0 = static_cast<float>(row0 + diag - n0 - 2 * t);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      row_bias[mt][hh] = alibi_linear_row(k, d0 + static_cast<float>(16 * mt + 8 * hh));
    }
  }
}

// Scores a row does not see become -inf (MaskRule: keys left or right of its window, past
// seqlen_k). The caller tests MaskRule::tile_needs_mask first, so only edge tiles pay. Each row's
// visible columns of the tile are [lo, hi); the columns are then compared as small ints (64-bit
// index math per element cost registers at the hottest point).
// One fragment row (m-tile mt, half hh) whose query index is `row` (MaskRule's i).
// Rule: MaskRule, or MaskRule32 where a kernel's registers are scarce (its rows and keys as int).
template <int kMTiles, int kNTiles, class Rule, typename Int>
__device__ __forceinline__ void mask_fragment_row(Fragment<kMTiles, kNTiles>& s, int mt, int hh,
                                                  const Rule& rule, Int row, Int n0, int t) {
  constexpr Int kCols = 8 * kNTiles;
  const auto r = rule.row_range(row);
  const int lo = static_cast<int>(max(Int{0}, min(r.begin - n0, kCols))) - 2 * t;
  const int hi = static_cast<int>(max(Int{0}, min(r.end - n0, kCols))) - 2 * t;
#pragma unroll
  for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = 8 * nt + e;
      if (c < lo || c >= hi) s[mt][nt][2 * hh + e] = -INFINITY;
    }
  }
}

// Rows of consecutive query indices: fragment row (mt, hh) is query row0 + 16 mt + 8 hh.
template <int kMTiles, int kNTiles, class Rule, typename Int>
__device__ __forceinline__ void mask_fragment(Fragment<kMTiles, kNTiles>& s, const Rule& rule,
                                              Int row0, Int n0, int t) {
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      mask_fragment_row<kMTiles, kNTiles>(s, mt, hh, rule, static_cast<Int>(row0 + 16 * mt + 8 * hh),
                                          n0, t);
    }
  }
}

// Online softmax of one tile, in place: S becomes P = exp2((S - max) * scale_log2) (float);
// updates the running max and the per-lane partial row sums, and sets alpha, the factor O must be
// scaled by before P V is added. Returns whether any of this lane's rows moved its max (then
// rescale_fragment() must run before the next P V).
//
// Scores and the running max stay unscaled; the exponent is exp2_arg (online_softmax.cuh):
// subtract, then scale, so the argument is <= 0 and exactly 0 at the max at any magnitude. A
// row's 4 column pairs live on the 4 lanes of a quad, so row reductions are two shuffles.
//
// Lazy rescaling: a row's running max moves only when a tile's max exceeds it by more than
// kRescaleLog2 (a factor 256) after scaling. Below that P = 2^((s - stale max) * scale_log2)
// stays <= 256: O / row_sum is the same function (numerator and denominator share the max),
// P's rounding to 16 bits is relative and unchanged, and row_sum stays far from float overflow
// (256 per key). Once the max has settled, most tiles skip the O rescale: kMTiles * kDTiles * 4
// multiplies per thread (128 at d128 in flash-sm80), about a third of the softmax phase's
// instructions. The growth is measured after scaling, (tile_max - row_max) * scale_log2: a -inf
// old max gives +inf (moves, alpha = 0), an all-masked tile -inf or NaN (stays).
//
// row_bias (null: none): a term each row of this lane adds to every score of the row (ALiBi's
// row part, score_mod_fragment), per lane: the lanes of a quad hold different columns and their
// terms differ. It joins the lane's tile max before the quad's reduction and leaves the
// subtrahend, (s - (max - bias)) * scale_log2: two FADDs per row instead of one per score.
// kFusedExp (flash-sm90's long tiles, online_softmax.cuh): where every row of the warp has
// |sub * scale_log2| < kFusedLimit, the argument is one FFMA, fma(s, scale_log2, -sub *
// scale_log2), whose error against the exact form is the product's rounding, < kFusedLimit
// 2^-24 = 2^-13 in log2 units (a relative 8.5e-5 in P, 1/23 of P's bf16 half-ulp); a warp with a
// larger max takes the exact form. The rows' maxima then all come before the vote and the
// exponentials after it; without kFusedExp each row's exponentials follow its own max, the order
// the other kernels were measured with.
template <int kMTiles, int kNTiles, bool kFusedExp = false>
__device__ __forceinline__ bool softmax_update(Fragment<kMTiles, kNTiles>& s,
                                               float (&row_max)[kMTiles][2],
                                               float (&row_sum)[kMTiles][2],
                                               float (&alpha)[kMTiles][2], float scale_log2,
                                               const float (*row_bias)[2] = nullptr) {
  constexpr float kRescaleLog2 = 8.0f;
  constexpr float kFusedLimit = 2048.0f;
  bool moved = false;
  // Row (mt, hh)'s tile max, the lazy rescale's alpha and new max; returns the subtrahend.
  auto update_max = [&](int mt, int hh) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
      tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
    }
    if (row_bias != nullptr) tile_max += row_bias[mt][hh];
    tile_max = reduce_max_lanes<4>(tile_max);
    const float growth_log2 = exp2_arg(tile_max, row_max[mt][hh], scale_log2);
    alpha[mt][hh] = 1.0f;
    if (growth_log2 > kRescaleLog2) {
      alpha[mt][hh] = ptx::ex2(-growth_log2);  // 0 for a -inf old max
      row_max[mt][hh] = tile_max;
      moved = true;
    }
    float sub = safe_max(row_max[mt][hh]);
    if (row_bias != nullptr) sub -= row_bias[mt][hh];
    return sub;
  };
  // Row (mt, hh)'s P = exp2(arg(s)) and its sum. A per-lane partial sum: alpha is the same on
  // the quad's 4 lanes, so the lanes are summed once, at the end (finalize).
  auto exponentials = [&](int mt, int hh, auto arg) {
    float p_sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
      for (int e = 2 * hh; e < 2 * hh + 2; ++e) {
        s[mt][nt][e] = ptx::ex2(arg(s[mt][nt][e]));
        p_sum += s[mt][nt][e];
      }
    }
    row_sum[mt][hh] = row_sum[mt][hh] * alpha[mt][hh] + p_sum;
  };
  auto exact = [&](float sub) {
    return [=](float x) { return exp2_arg(x, sub, scale_log2); };
  };
  if constexpr (!kFusedExp) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) exponentials(mt, hh, exact(update_max(mt, hh)));
    }
    return moved;
  }
  float sub[kMTiles][2], sub_scaled[kMTiles][2];
  bool small = true;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      sub[mt][hh] = update_max(mt, hh);
      sub_scaled[mt][hh] = sub[mt][hh] * scale_log2;
      small = small && fabsf(sub_scaled[mt][hh]) < kFusedLimit;
    }
  }
  const bool fused = __all_sync(0xffffffffu, small);
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      if (fused) {
        const float neg_sub_scaled = -sub_scaled[mt][hh];
        exponentials(mt, hh, [=](float x) { return fmaf(x, scale_log2, neg_sub_scaled); });
      } else {
        exponentials(mt, hh, exact(sub[mt][hh]));
      }
    }
  }
  return moved;
}

// O *= alpha (per row), skipped by the whole warp (no divergence) when no lane's max moved.
template <int kMTiles, int kDTiles>
__device__ __forceinline__ void rescale_fragment(Fragment<kMTiles, kDTiles>& o,
                                                 const float (&alpha)[kMTiles][2], bool moved) {
  if (!__any_sync(0xffffffffu, moved)) return;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[mt][dt][e] *= alpha[mt][e / 2];
    }
  }
}

// A 4 x 4 transpose of 32-bit words across the 4 lanes of a quad (t = lane % 4): on entry
// v[j] of lane t is M[t][j], on return it is M[j][t]. For an output row, whose 4 column pairs
// of n-tiles 4 q .. 4 q + 3 sit one per lane (packed to 16 bits: one word per n-tile), lane t
// then holds n-tile 4 q + t whole, 16 contiguous bytes: one 16-byte store instead of four
// 4-byte ones. Two butterfly stages (xor 2, then xor 1), each swapping the off-diagonal 2 x 2
// blocks: 4 SHFL per transpose. Every lane of the warp must take part.
__device__ __forceinline__ void quad_transpose(std::uint32_t (&v)[4], int t) {
#pragma unroll
  for (int m = 2; m > 0; m /= 2) {
    const bool upper = (t & m) != 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if ((j & m) != 0) continue;
      // Lanes without bit m send v[j ^ m] and receive into it; lanes with it, v[j].
      const std::uint32_t send = upper ? v[j] : v[j ^ m];
      const std::uint32_t recv = __shfl_xor_sync(0xffffffffu, send, m);
      if (upper) {
        v[j] = recv;
      } else {
        v[j ^ m] = recv;
      }
    }
  }
}

}  // namespace flashattn::cuda
