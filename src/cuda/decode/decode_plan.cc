// The split-KV plan of flash-decode (decode.h): grid shape, split count, workspace size. Host code.
#include <algorithm>
#include <cstdint>

#include "cuda/decode/decode.h"

namespace flashattn::cuda {

namespace {
constexpr std::int64_t kRows = 16;           // DecodeTraits::kRows
constexpr std::int64_t kMinTilesPerSplit = 4;  // below this a split's fixed cost dominates
constexpr std::size_t kAlign = 256;
}  // namespace

DecodeShape decode_shape(const ForwardParams& p) {
  DecodeShape s;
  const std::int64_t group = p.heads() / p.kv_heads();
  s.chunks = (p.seqlen_q() * group + kRows - 1) / kRows;
  // DecodeMmaTraits::kBlockN (16-bit inputs), DecodeTraits::kBlockN (float32) of the bucket.
  s.block_n = p.q.dtype == DType::kFP32 && p.head_dim() > 128 ? 32 : 64;
  s.key_tiles = (p.seqlen_k() + s.block_n - 1) / s.block_n;
  return s;
}

// Blocks of the tensor-core kernel resident per SM (DecodeMmaTraits: shared memory and
// registers; ptxas -v and ncu's occupancy on the H200: d64 3, d128 2, d256 1); the float32
// kernel fits 2.
int decode_blocks_per_sm(const ForwardParams& p) {
  if (p.q.dtype == DType::kFP32) return 2;
  return p.head_dim() <= 64 ? 3 : p.head_dim() <= 128 ? 2 : 1;
}

// The split count by wave efficiency: a split takes per_split = ceil(key_tiles / s) tiles
// (DecodeBlock), so ceil(key_tiles / per_split) splits have work and the rest return at once;
// the blocks with work run in ceil(blocks * those / resident) waves, and the time goes as
// waves * per_split. The smallest s within 5% of the best keeps the merge and the partial
// results small, and the count returned is the splits with work. v1 aimed at 4 blocks per SM:
// at batch 64 x 8k (512 blocks, 264 resident at d128) it chose 2 splits for the same 4
// half-length waves as 2 whole ones, and paid the merge. Up to v6 the time went as waves / s,
// blind to whole tiles: at batch 1 x 8k (128 tiles) it chose 31 splits, whose 5 tiles each
// left 26 splits with work and took 5 tiles' time where 32 splits take 4.
std::int64_t decode_splits(const ForwardParams& p, int sm_count) {
  if (p.num_splits > 0) return p.num_splits;
  const DecodeShape s = decode_shape(p);
  const std::int64_t blocks = std::max<std::int64_t>(1, p.batch() * p.kv_heads() * s.chunks);
  const std::int64_t resident = std::max(1, sm_count) * std::int64_t{decode_blocks_per_sm(p)};
  const std::int64_t tiles = std::max<std::int64_t>(1, s.key_tiles);
  const std::int64_t max_splits = std::clamp<std::int64_t>(tiles / kMinTilesPerSplit, 1,
                                                           kMaxSplits);
  auto per_split = [&](std::int64_t n) { return (tiles + n - 1) / n; };
  auto working = [&](std::int64_t n) { return (tiles + per_split(n) - 1) / per_split(n); };
  auto cost = [&](std::int64_t n) {  // tiles' time of the slowest wave chain: lower is faster
    const std::int64_t waves = (blocks * working(n) + resident - 1) / resident;
    return static_cast<double>(waves) * static_cast<double>(per_split(n));
  };
  double best = cost(1);
  for (std::int64_t n = 2; n <= max_splits; ++n) best = std::min(best, cost(n));
  for (std::int64_t n = 1; n <= max_splits; ++n) {
    if (cost(n) <= best * 1.05) return working(n);
  }
  return 1;
}

namespace {
std::size_t partial_rows(const ForwardParams& p, std::int64_t splits) {
  return static_cast<std::size_t>(splits * p.batch() * p.seqlen_q() * p.heads());
}
std::size_t o_part_bytes(const ForwardParams& p, std::int64_t splits) {
  const std::size_t bytes = partial_rows(p, splits) * static_cast<std::size_t>(p.head_dim()) * 4;
  return (bytes + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

std::size_t decode_workspace_bytes(const ForwardParams& p, std::int64_t splits) {
  if (splits <= 1) return 0;
  return o_part_bytes(p, splits) + partial_rows(p, splits) * 4;
}

void decode_workspace_layout(const ForwardParams& p, void* workspace, DecodeSplit* split) {
  if (split->splits <= 1) return;
  split->o_part = static_cast<float*>(workspace);
  split->lse_part = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) +
                                             o_part_bytes(p, split->splits));
}

}  // namespace flashattn::cuda
