// The "flash-decode" backend's launchers (KV-cache calls: the append of new tokens, split-KV
// attention, the merge of the splits), and the split count and workspace they use.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/fast_divmod.h"
#include "common/host_device.h"
#include "cuda/common/kernel_args.h"
#include "flashattn/forward.h"

namespace flashattn::cuda {

// The new tokens (ForwardParams::k / v of a KV-cache call), which KernelArgs does not carry: its
// k and v are the cache.
struct DecodeNewTokens {
  const void* k = nullptr;
  const void* v = nullptr;
  std::int64_t k_stride[3] = {0, 0, 0}, v_stride[3] = {0, 0, 0};
};

// The cache's bounds, which the kernels hold every access to whatever cache_seqlens and
// block_table hold (on a CUDA device validate() cannot read them without synchronizing): a
// sequence's keys are clamped to [0, capacity], a page index outside [0, num_pages) reads zeros
// and is never written.
struct DecodeBounds {
  std::int64_t capacity = 0;   // keys per sequence
  std::int64_t num_pages = 0;  // paged: pages in the cache; 0: contiguous
};

// How the keys are split and where the splits' partial results go (splits > 1): o_part float32
// [splits][batch][seqlen_q][heads][head_dim], lse_part float32 [splits][batch][seqlen_q][heads]
// (one row index for both: decode_part_row), in the caller's workspace.
struct DecodeSplit {
  std::int64_t splits = 1;
  float* o_part = nullptr;
  float* lse_part = nullptr;
  DecodeBounds bounds;
  // The grid's divisors, set by launch_decode (DecodeBlock::make reads the block's split, chunk
  // and kv head from blockIdx.x with them, and a packed row's token and head): splits, row
  // chunks per kv head, and the GQA group heads / kv_heads.
  FastDivmod by_splits, by_chunks, by_group;
};

// New tokens up to this many per call are appended by the tensor-core attention kernel itself
// (decode_mma_kernel.cuh: one launch less per decode step); longer appends (a prefill into the
// cache), and float32 calls, run decode_append_kernel first. The writing block copies every new
// row of its (sequence, kv head): 16 rows x 8 kv heads is 32 KB at d128, ~0.1 us of one SM.
constexpr std::int64_t kFusedAppendMax = 16;

// The grid of one split-KV launch: splits x row chunks x kv heads blocks along x, batch along y.
struct DecodeShape {
  std::int64_t chunks = 0;    // ceil(seqlen_q * heads / kv_heads / 16)
  std::int64_t key_tiles = 0; // tiles of the cache's capacity (an upper bound on any sequence's)
  int block_n = 0;
};
DecodeShape decode_shape(const ForwardParams& p);

// The split count a call runs with: params.num_splits when set; else the fewest splits whose
// waves (blocks resident per SM: decode_blocks_per_sm) times whole key tiles per split take
// within 5% of the best time, at least kMinTilesPerSplit = 4 key tiles per split, at most
// kMaxSplits, each split with at least one key tile of the cache's capacity.
int decode_blocks_per_sm(const ForwardParams& p);
std::int64_t decode_splits(const ForwardParams& p, int sm_count);

// Workspace bytes for `splits` (0 for one split), and where the partial results lie in it: O
// first (256-byte aligned), the LSEs after.
std::size_t decode_workspace_bytes(const ForwardParams& p, std::int64_t splits);
void decode_workspace_layout(const ForwardParams& p, void* workspace, DecodeSplit* split);

// T is float, __nv_bfloat16 or __half; kD the head-dim bucket (64, 128, 256): any head_dim <=
// kD that is a multiple of 8. Appends the new tokens (if any), runs the splits, merges them.
template <typename T, int kD>
Status launch_decode(const KernelArgs& args, const DecodeNewTokens& new_tokens,
                     const DecodeSplit& split, cudaStream_t stream);

// The row of split s's partial result for (sequence b, token i, head h): o_part holds it at
// row * head_dim, lse_part at row.
FA_HOST_DEVICE std::int64_t decode_part_row(const KernelArgs& a, std::int64_t s, std::int64_t b,
                                            std::int64_t i, std::int64_t h) {
  return ((s * a.batch + b) * a.seqlen_q + i) * a.heads + h;
}

// Ok when this GPU has a kernel image for the decode kernels.
Status decode_kernels_available();

}  // namespace flashattn::cuda
