// flash-decode's split plan (src/cuda/decode/decode_plan.cc), checked on the CPU: the wave rule's
// counts for the decode grid's shapes on the H200's 132 SMs (the figures docs/performance.md
// measured them with), a given num_splits honoured, the bounds (1 .. kMaxSplits, at least 4 key
// tiles per split), and the workspace that run() lays out fitting in workspace_bytes(). Host
// arithmetic only: no GPU needed.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "flashattn/params.h"

#if defined(FLASHATTN_HAVE_CUDA_KERNELS)
#include "cuda/decode/decode.h"

namespace flashattn::cuda {
namespace {

constexpr int kH200Sms = 132;

// A bf16 KV-cache call's params (no data: the plan reads shapes only): q (batch, new, heads,
// head_dim), a contiguous cache (batch, cache_len, kv_heads, head_dim).
ForwardParams decode_params(std::int64_t batch, std::int64_t heads, std::int64_t kv_heads,
                            std::int64_t cache_len, std::int64_t new_tokens = 1,
                            std::int64_t head_dim = 128, DType dtype = DType::kBF16) {
  ForwardParams p;
  const Device gpu = Device::cuda(0);
  p.q = TensorView::contiguous(nullptr, dtype, gpu, {batch, new_tokens, heads, head_dim});
  p.out = p.q;
  p.k_cache = TensorView::contiguous(nullptr, dtype, gpu, {batch, cache_len, kv_heads, head_dim});
  p.v_cache = p.k_cache;
  p.cache_seqlens = TensorView::contiguous(nullptr, DType::kInt32, gpu, {batch});
  return p;
}

TEST(DecodePlan, WaveRuleOnTheH200Grid) {
  // batch 64 x 8k, 32/8 heads: 512 blocks, 264 resident (2 per SM at d128): 2 waves whole, so
  // one split (v1's rule chose 2: the same waves at half length, plus the merge).
  EXPECT_EQ(decode_splits(decode_params(64, 32, 8, 8192), kH200Sms), 1);
  // batch 8 x 8k: 64 blocks; 4 splits fill one wave (v1: 9, 3 waves for 2.2 of work).
  EXPECT_EQ(decode_splits(decode_params(8, 32, 8, 8192), kH200Sms), 4);
  // batch 1 x 128k: 8 blocks; 32 splits of 64 key tiles make 256 blocks, one wave.
  EXPECT_EQ(decode_splits(decode_params(1, 32, 8, 131072), kH200Sms), 32);
  // batch 1 x 8k: 128 key tiles allow at most 32 splits of 4. 31 splits would take 5 tiles
  // each (26 of them with work): 25% longer, which the rule up to v6 (waves / s) did not see.
  EXPECT_EQ(decode_splits(decode_params(1, 32, 8, 8192), kH200Sms), 32);
  // 1000 tiles (64k keys), 8 blocks: 33 splits of 31 tiles fill 264 slots; 32 splits also take
  // 32 tiles each (within 5%) and are fewer.
  EXPECT_EQ(decode_splits(decode_params(1, 32, 8, 64000), kH200Sms), 32);
  // batch 128 x 1k, 64/8 heads: 1024 blocks, 3.9 waves whole: one split.
  EXPECT_EQ(decode_splits(decode_params(128, 64, 8, 1024), kH200Sms), 1);
}

TEST(DecodePlan, GivenCountHonoured) {
  for (int n : {1, 2, 7, 40, kMaxSplits}) {
    ForwardParams p = decode_params(2, 8, 2, 1100);
    p.num_splits = n;
    EXPECT_EQ(decode_splits(p, kH200Sms), n);
  }
}

TEST(DecodePlan, Bounds) {
  for (std::int64_t batch : {1, 3, 64, 1000}) {
    for (std::int64_t cache : {16, 64, 300, 4096, 1 << 20}) {
      for (int sms : {1, 8, 132}) {
        const ForwardParams p = decode_params(batch, 32, 8, cache);
        const std::int64_t n = decode_splits(p, sms);
        const std::int64_t tiles = decode_shape(p).key_tiles;
        EXPECT_GE(n, 1);
        EXPECT_LE(n, kMaxSplits);
        if (n > 1) {
          EXPECT_GE(tiles / n, 4) << batch << " x " << cache << " on " << sms;
          // every split has a key tile: ceil(tiles / n) per split, n of them reach the end
          const std::int64_t per_split = (tiles + n - 1) / n;
          EXPECT_GT(tiles, (n - 1) * per_split) << batch << " x " << cache << " on " << sms;
        }
      }
    }
  }
}

TEST(DecodePlan, ResidentBlocksPerHeadDim) {
  EXPECT_EQ(decode_blocks_per_sm(decode_params(1, 8, 8, 64, 1, 64)), 3);
  EXPECT_EQ(decode_blocks_per_sm(decode_params(1, 8, 8, 64, 1, 128)), 2);
  EXPECT_EQ(decode_blocks_per_sm(decode_params(1, 8, 8, 64, 1, 256)), 1);
  EXPECT_EQ(decode_blocks_per_sm(decode_params(1, 8, 8, 64, 1, 256, DType::kFP32)), 2);
}

TEST(DecodePlan, WorkspaceLayoutFits) {
  const ForwardParams p = decode_params(3, 12, 4, 5000, 4, 96);
  EXPECT_EQ(decode_workspace_bytes(p, 1), 0u);
  for (std::int64_t n : {2, 5, 256}) {
    const std::size_t bytes = decode_workspace_bytes(p, n);
    std::vector<unsigned char> ws(bytes);
    DecodeSplit split;
    split.splits = n;
    decode_workspace_layout(p, ws.data(), &split);
    // O: splits x batch x seqlen_q x heads x head_dim floats, then the LSEs.
    const std::size_t rows = static_cast<std::size_t>(n * 3 * 4 * 12);
    const auto* o_end = reinterpret_cast<const unsigned char*>(split.o_part + rows * 96);
    const auto* lse_end = reinterpret_cast<const unsigned char*>(split.lse_part + rows);
    EXPECT_LE(o_end, reinterpret_cast<const unsigned char*>(split.lse_part)) << n;
    EXPECT_LE(lse_end, ws.data() + bytes) << n;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(split.lse_part) % 4, 0u);
  }
}

// decode_part_row, which the attention kernels write and the merge reads: every (split, sequence,
// token, head) its own row, all of them inside the workspace's rows.
TEST(DecodePlan, PartRowsDistinctAndInside) {
  const ForwardParams p = decode_params(3, 12, 4, 5000, 4, 96);
  const KernelArgs a = kernel_args_of(p);
  constexpr std::int64_t kSplits = 5;
  const std::int64_t rows = kSplits * 3 * 4 * 12;
  std::vector<int> seen(static_cast<std::size_t>(rows), 0);
  for (std::int64_t s = 0; s < kSplits; ++s) {
    for (std::int64_t b = 0; b < 3; ++b) {
      for (std::int64_t i = 0; i < 4; ++i) {
        for (std::int64_t h = 0; h < 12; ++h) {
          const std::int64_t row = decode_part_row(a, s, b, i, h);
          ASSERT_GE(row, 0);
          ASSERT_LT(row, rows);
          ++seen[static_cast<std::size_t>(row)];
        }
      }
    }
  }
  for (int n : seen) EXPECT_EQ(n, 1);
}

}  // namespace
}  // namespace flashattn::cuda

#else  // a build without the GPU backends has no flash-decode plan to check

TEST(DecodePlan, NotBuilt) { GTEST_SKIP() << "skipped: built without the GPU backends"; }

#endif
