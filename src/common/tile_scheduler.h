// The order in which work tiles (one (batch, head, query block) each) are handed out, for every
// backend's launch or work queue (host and device).
//
// Tile t -> (batch, head, m_block): the query blocks of one head are consecutive, then the next
// head (the heads of one GQA group share K and V, so tiles running together read the same K/V,
// which then comes from L2), then the next batch entry. Within a head the last query block goes
// first: with causal (and any window whose right edge is the diagonal) it sees the most keys, so
// the longest tiles start first and the short ones fill the tail. Split-KV decode will add a
// split index here.
#pragma once

#include <cstdint>

#include "common/host_device.h"

namespace flashattn {

struct TileCoord {
  std::int64_t batch, head, m_block;
};

struct TileScheduler {
  std::int64_t batch, heads, m_blocks;  // m_blocks: ceil(max seqlen_q / block_m)

  FA_HOST_DEVICE static TileScheduler make(std::int64_t batch, std::int64_t heads,
                                           std::int64_t seqlen_q, std::int64_t block_m) {
    return TileScheduler{batch, heads, (seqlen_q + block_m - 1) / block_m};
  }
  FA_HOST_DEVICE std::int64_t tiles() const { return batch * heads * m_blocks; }
  FA_HOST_DEVICE TileCoord tile(std::int64_t t) const {
    const std::int64_t bh = t / m_blocks;
    return TileCoord{bh / heads, bh % heads, m_blocks - 1 - t % m_blocks};
  }
  // The same in 32-bit arithmetic, for a launch whose tiles() fits an int (a grid's does): the
  // persistent flash-sm90 producer decodes a tile per work tile with 24 registers, and the
  // 64-bit divisions spilled there.
  FA_HOST_DEVICE TileCoord tile32(int t) const {
    const int mb = static_cast<int>(m_blocks), h = static_cast<int>(heads);
    const int bh = t / mb;
    return TileCoord{bh / h, bh % h, mb - 1 - t % mb};
  }
};

}  // namespace flashattn
