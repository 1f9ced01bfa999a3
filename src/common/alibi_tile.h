// ALiBi on one key tile as the tiled GPU kernels apply it (flash-sm80, flash-sm90: cuda/attention/
// fragment_ops.cuh), host and device, so tests/common/alibi_tile_test.cc checks on the CPU the
// float32 steps the kernels take.
//
// The bias of score (i, j) is -slope |i + diag - j| (raw units: slope / scale, score_mod.cuh).
// A lane's rows and columns of a tile are i = row + 16 mt + 8 hh and j = n0 + 2t + 8 nt + e;
// with d = i + diag - n0 - 2t (one integer per row) and c = 8 nt + e (a constant per column),
// the distance is d - c. On a tile wholly left of every row's diagonal (d >= c everywhere) or
// wholly right of it (d <= c), |d - c| keeps one sign and the bias splits into a column part
// and a row part:
//     -slope |d - c| = k c - k d,   k = slope (left) or -slope (right).
// The kernels add k c to each score (one FFMA with an immediate c: the general form costs an
// FADD and an FFMA) and -k d once per row, into the row's max and the exponent's subtrahend
// (softmax_update's row_bias): every score of the row is then in its own raw units, so the
// running max, the LSE and the sink need no correction. A tile across the diagonal of some row
// (k = 0 below) keeps the general form, with no row part.
//
// Rounding, against the general form's one rounding of slope |d - c|: s + k c is rounded at its
// own size (k c stays under 2^11 raw at slope 1), -k d at 2^-24 of the bias at the lane's first
// column, and the subtrahend max + k d once more.
// Measured (tests/common/alibi_tile_test.cc, the float32 steps of both forms against float64,
// 1536 rows of 16k and 64k keys, slopes 2^-8 to 1, head dims 64 and 256, tiles of 64 and 176
// keys): the largest relative error of a weight >= 2^-24 is 9.2e-7 in both forms (the
// exponent's own float32 rounding dominates), against P's rounding to 16 bits before P V
// (2^-9 in bf16, 2^-12 in fp16).
#pragma once

#include <cmath>

#include "common/host_device.h"

namespace flashattn {

// k of key tile [n0, n0 + cols) for rows [first_row, first_row + rows) (rows, cols >= 1), from
// neg_slope = -slope (raw units): slope where every key is at or left of every row's diagonal
// (j <= i + diag), -slope where every key is at or right of it, 0 where some row's diagonal
// crosses the tile (the general form). A key on a row's diagonal counts on both sides: its bias
// is 0 either way.
template <typename Int>
FA_HOST_DEVICE float alibi_tile_k(float neg_slope, Int first_row, Int rows, Int diag, Int n0,
                                  Int cols) {
  if (n0 + cols - 1 <= first_row + diag) return -neg_slope;  // left of the first row's diagonal
  if (n0 >= first_row + rows - 1 + diag) return neg_slope;   // right of the last row's
  return 0.0f;
}

// A one-sided tile's column part: score s of column c plus k c.
FA_HOST_DEVICE float alibi_linear_score(float s, float k, float c) { return fmaf(k, c, s); }

// A one-sided tile's row part, -k d, for the row's d (exact as a float below 2^24 keys).
FA_HOST_DEVICE float alibi_linear_row(float k, float d) { return -(k * d); }

// The general form (every kernel's on a tile across the diagonal, ScoreMod::apply_alibi):
// s - slope |dist|, dist = d - c = i + diag - j as a float (exact below 2^24 keys).
FA_HOST_DEVICE float alibi_abs_score(float s, float neg_slope, float dist) {
  return fmaf(neg_slope, fabsf(dist), s);
}

}  // namespace flashattn
