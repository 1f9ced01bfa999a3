// Which keys a query row sees: keys past seqlen_k never; with causal (aligned bottom-right),
// key j is visible to query i iff j <= i + (seqlen_k - seqlen_q). Shared by the GPU kernels.
#pragma once

#include <cstdint>

namespace flashattn::cuda {

struct Mask {
  std::int64_t seqlen_q, seqlen_k;
  bool causal;

  // Offset of the causal diagonal: query i sees keys up to i + diag.
  __device__ __forceinline__ std::int64_t diag() const { return seqlen_k - seqlen_q; }

  // One past the last key any of the rows [m0, m0 + rows) can see (may be <= 0: no key at all).
  __device__ __forceinline__ std::int64_t key_end(std::int64_t m0, int rows) const {
    if (!causal) return seqlen_k;
    const std::int64_t last_row = (m0 + rows < seqlen_q ? m0 + rows : seqlen_q) - 1;
    const std::int64_t end = last_row + diag() + 1;
    return end < seqlen_k ? end : seqlen_k;
  }

  // Whether the key tile [n0, n0 + cols) needs per-element masking for rows starting at m0:
  // only the tail tile and tiles crossing the causal diagonal do.
  __device__ __forceinline__ bool tile_needs_mask(std::int64_t m0, std::int64_t n0,
                                                  int cols) const {
    if (n0 + cols > seqlen_k) return true;
    return causal && n0 + cols - 1 > m0 + diag();
  }

  __device__ __forceinline__ bool visible(std::int64_t row, std::int64_t col) const {
    return col < seqlen_k && (!causal || col <= row + diag());
  }
};

}  // namespace flashattn::cuda
