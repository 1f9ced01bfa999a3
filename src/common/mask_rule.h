// Which keys a query row sees: the one rule every backend, the references and the tile loops
// use (host and device).
//
// Within one sequence of seqlen_q queries and seqlen_k keys, aligned bottom-right
// (diag = seqlen_k - seqlen_q), query i sees key j iff
//     0 <= j < seqlen_k,
//     j >= i + diag - left    unless left  = -1 (unbounded), and
//     j <= i + diag + right   unless right = -1.
// That is FlashAttention's sliding window; causal is right = 0 (MaskRule::make folds it in).
// A row whose range is empty (causal with seqlen_q > seqlen_k, a window past the keys,
// seqlen_k = 0) sees no key: O = 0, LSE = -inf.
//
// Tiles: the keys any row of a block [m0, m0 + rows) sees form one interval, because both ends of
// a row's range grow with i; a tile loop runs over the key tiles meeting it, and only tiles not
// wholly inside every row's range need a per-element mask.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

// Int is std::int64_t everywhere (MaskRule, KeyRange) but where registers are scarce: the
// flash-sm90 producer, at 24 registers after setmaxnreg, spilled computing a varlen tile's
// range in 64 bits and does it in 32 (MaskRule32; lengths below 2^31, which every launch has).
template <typename Int>
struct BasicKeyRange {
  Int begin = 0, end = 0;  // [begin, end); empty when begin >= end
  FA_HOST_DEVICE bool empty() const { return begin >= end; }
};

template <typename Int>
struct BasicMaskRule {
  Int seqlen_q = 0, seqlen_k = 0;
  // -1: unbounded on that side; else below seqlen_k (left) and seqlen_q (right), as make() sets.
  Int left = -1, right = -1;

  // The rule of one sequence; causal forces right = 0 (FlashAttention: causal means the window's
  // right edge is the diagonal; a given left still applies). A side at least as wide as the
  // sequence (left >= seqlen_k, right >= seqlen_q) masks nothing and becomes -1: validate()
  // accepts any window up to INT64_MAX, and i + diag - left or i + diag + right + 1 would
  // overflow there (window_right = INT64_MAX wrapped around and hid every key).
  // The clamps are made in 64 bits (a window may be INT64_MAX), then narrowed to Int.
  FA_HOST_DEVICE static BasicMaskRule make(std::int64_t seqlen_q, std::int64_t seqlen_k,
                                           std::int64_t left, std::int64_t right, bool causal) {
    if (causal) right = 0;
    BasicMaskRule r;
    r.seqlen_q = static_cast<Int>(seqlen_q);
    r.seqlen_k = static_cast<Int>(seqlen_k);
    r.left = static_cast<Int>(left >= seqlen_k ? -1 : left);
    r.right = static_cast<Int>(right >= seqlen_q ? -1 : right);
    return r;
  }

  FA_HOST_DEVICE Int diag() const { return seqlen_k - seqlen_q; }
  // Whether any key can be masked for some row (false: every row sees every key).
  FA_HOST_DEVICE bool bounded() const { return left >= 0 || right >= 0; }

  // Keys row i sees, clamped to [0, seqlen_k].
  FA_HOST_DEVICE BasicKeyRange<Int> row_range(Int i) const {
    BasicKeyRange<Int> r{0, seqlen_k};
    if (left >= 0) r.begin = clamp(i + diag() - left, 0, seqlen_k);
    if (right >= 0) r.end = clamp(i + diag() + right + 1, 0, seqlen_k);
    return r;
  }

  FA_HOST_DEVICE bool visible(Int i, Int j) const {
    const BasicKeyRange<Int> r = row_range(i);
    return j >= r.begin && j < r.end;
  }

  // Keys any row of [m0, m0 + rows) sees (rows past seqlen_q are ignored): the first row's begin
  // to the last row's end. Empty when the block sees nothing.
  FA_HOST_DEVICE BasicKeyRange<Int> block_range(Int m0, Int rows) const {
    const Int last = (m0 + rows < seqlen_q ? m0 + rows : seqlen_q) - 1;
    if (last < m0) return BasicKeyRange<Int>{0, 0};
    return BasicKeyRange<Int>{row_range(m0).begin, row_range(last).end};
  }

  // Key tiles [first, end) of width block_n meeting block_range (first >= end: none).
  FA_HOST_DEVICE void tile_range(Int m0, Int rows, Int block_n,
                                 Int* first, Int* end) const {
    const BasicKeyRange<Int> r = block_range(m0, rows);
    if (r.empty()) {
      *first = *end = 0;
      return;
    }
    *first = r.begin / block_n;
    *end = (r.end + block_n - 1) / block_n;
  }

  // The key tiles of a block counted from its first visible key rather than on tile_range's
  // grid of multiples of block_n (flash-sm90): *tiles tiles of block_n keys from *first_key =
  // block_range's begin cover block_range; none (0, 0) when it is empty. A block whose range
  // starts inside a tile of that grid (a window's left edge) takes fewer: a window (1024, 0)
  // block's 1152 keys are 7 tiles of 176 from its first key, 7.46 on average on the grid.
  FA_HOST_DEVICE void key_tiles(Int m0, Int rows, Int block_n, Int* first_key, Int* tiles) const {
    const BasicKeyRange<Int> r = block_range(m0, rows);
    *first_key = 0;
    *tiles = 0;
    if (!r.empty()) {
      *first_key = r.begin;
      *tiles = (r.end - r.begin + block_n - 1) / block_n;
    }
  }

  // Key tiles [first, end) of width block_n that no row of [m0, m0 + rows) needs masked (every
  // row sees every key of them, none is past seqlen_k); within tile_range, the tiles outside it
  // are the ones tile_needs_mask names. A kernel computes it once per block, so its key loop
  // tests one int per tile. end >= first.
  FA_HOST_DEVICE void interior_tiles(Int m0, Int rows, Int block_n,
                                     Int* first, Int* end) const {
    const Int last = (m0 + rows < seqlen_q ? m0 + rows : seqlen_q) - 1;
    if (last < m0) {
      *first = *end = 0;
      return;
    }
    // Tile j is interior iff j * block_n >= the last row's begin and (j + 1) * block_n <= the
    // first row's end (row ends are clamped to seqlen_k).
    *first = (row_range(last).begin + block_n - 1) / block_n;
    *end = row_range(m0).end / block_n;
    if (*end < *first) *end = *first;
  }

  // Whether the tile [n0, n0 + cols) needs a per-element mask for rows [m0, m0 + rows): false
  // when every (in-range) row sees every key of it. Keys past seqlen_k always need masking.
  FA_HOST_DEVICE bool tile_needs_mask(Int m0, Int rows, Int n0,
                                      Int cols) const {
    if (n0 + cols > seqlen_k) return true;
    const Int last = (m0 + rows < seqlen_q ? m0 + rows : seqlen_q) - 1;
    if (last < m0) return false;
    // Every row's range contains the tile iff the last row starts at or before n0 and the
    // first row ends at or after n0 + cols (begin and end grow with the row).
    return row_range(last).begin > n0 || row_range(m0).end < n0 + cols;
  }

 private:
  FA_HOST_DEVICE static Int clamp(Int x, Int lo, Int hi) {
    return x < lo ? lo : (x > hi ? hi : x);
  }
};

using KeyRange = BasicKeyRange<std::int64_t>;
using MaskRule = BasicMaskRule<std::int64_t>;
using MaskRule32 = BasicMaskRule<int>;

}  // namespace flashattn
