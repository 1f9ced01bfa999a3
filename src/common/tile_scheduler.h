// The order in which work tiles (one (batch, head, query block) each) are handed out, for every
// backend's launch or work queue (host and device).
//
// Tile t -> (batch, head, m_block). The flattened (batch, head) pairs fall into sections of
// `section` consecutive pairs; the sections come one after another, and inside a section the
// last query block of every pair comes first, then the one before it, and so on. So within a
// section the longest tiles (causal, and any window whose right edge is the diagonal: the last
// query block sees the most keys) start first and the short ones fill the tail, and the pairs of
// a section (the heads of one GQA group among them) run together on the same K/V, which then
// comes from L2.
// - section = 1 (make()'s default): the query blocks of one head are consecutive, the last
//   first, then the next head. What a grid of one block per tile wants: the hardware hands out
//   blocks in this order as SMs free up.
// - section > 1: longest first over `section` pairs at a time. flash-sm90 v7 handed its tiles
//   of unequal cost out in this order (sections up to half its grid); v8 hands them out with
//   section 1, measured faster at causal 16k (docs/performance.md), so no launch uses it now.
// Split-KV decode will add a split index here.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

struct TileCoord {
  std::int64_t batch, head, m_block;
};

struct TileScheduler {
  std::int64_t batch, heads, m_blocks;  // m_blocks: ceil(max seqlen_q / block_m)
  std::int64_t section = 1;             // (batch, head) pairs per section: divides batch * heads

  FA_HOST_DEVICE static TileScheduler make(std::int64_t batch, std::int64_t heads,
                                           std::int64_t seqlen_q, std::int64_t block_m,
                                           std::int64_t section = 1) {
    return TileScheduler{batch, heads, (seqlen_q + block_m - 1) / block_m, section};
  }
  FA_HOST_DEVICE std::int64_t tiles() const { return batch * heads * m_blocks; }
  FA_HOST_DEVICE TileCoord tile(std::int64_t t) const {
    const std::int64_t per_section = section * m_blocks;
    const std::int64_t s = t / per_section, r = t - s * per_section;
    const std::int64_t pairs = batch * heads - s * section;  // the last section may be short
    const std::int64_t width = pairs < section ? pairs : section;
    const std::int64_t bh = s * section + r % width;
    return TileCoord{bh / heads, bh % heads, m_blocks - 1 - r / width};
  }
  // The same in 32-bit arithmetic, for a launch whose tiles() fits an int (a grid's does): the
  // persistent flash-sm90 producer decodes a tile per work tile with 24 registers, and the
  // 64-bit divisions spilled there.
  FA_HOST_DEVICE TileCoord tile32(int t) const {
    const int mb = static_cast<int>(m_blocks), h = static_cast<int>(heads);
    const int sec = static_cast<int>(section);
    const int r = t % (sec * mb);
    const int bh = (t - r) / mb + r % sec;  // section index * sec + pair in the section
    return TileCoord{bh / h, bh % h, mb - 1 - r / sec};
  }
  // The tile a persistent block takes in its round k (block `block` of `grid`): position
  // k * grid + block in even rounds, k * grid + grid - 1 - block in odd ones. With the tiles
  // sorted longest first, the block that took a round's longest tile takes the next round's
  // shortest, so every block's sum over two rounds is about the same. (Plain round-robin,
  // block i taking i, i + grid, ..., lands tiles of nearly the same query block on each block
  // when the grid is near a multiple of m_blocks: at 16k causal, 128 query blocks against 132
  // blocks, the busiest had 1.57x the mean work.) A position >= tiles() means the block is
  // done: later rounds' positions are larger still. Unsigned: a grid of one block per tile
  // (up to 2^31 - 1 of them) reaches 2 * tiles in its second round.
  FA_HOST_DEVICE static unsigned dealt(unsigned k, unsigned block, unsigned grid) {
    return k * grid + ((k & 1u) ? grid - 1u - block : block);
  }
};

}  // namespace flashattn
