// flash-decode's merge of the splits inside a thread-block cluster (sm_90 and later;
// DecodeSplit::cluster): the splits of one (sequence, kv head, row chunk) are the blocks of one
// cluster, each leaves its rows' state in its own shared memory, and the cluster reads all of
// them through distributed shared memory and writes out and lse. No float32 partials go to a
// workspace and no merge kernel follows: at batch 1 x 8k on the H100 the merge kernel took 2.8
// us and its launch gap 0.3 of a 24.4 us step (tools/profile/decode_step.py --timeline).
#pragma once

#include <cstdint>

#include "common/attention_args.h"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_block.cuh"
#include "cuda/primitives/cluster.cuh"

namespace flashattn::cuda {

// A block's state of its kRows rows in shared memory, at the same offset in every block:
// O [kRows][kD] float (unnormalized, relative to the row's max), then the rows' max (raw
// units) and sum. A row the block saw no key of has sum 0 (its max and O are not read).
template <int kRows, int kD>
struct ClusterRowState {  // byte offsets
  static constexpr std::uint32_t kBytes = 4 * (kRows * kD + 2 * kRows);
  __device__ static constexpr std::uint32_t o_at(int r, int c) { return 4 * (r * kD + c); }
  __device__ static constexpr std::uint32_t max_at(int r) { return 4 * (kRows * kD + r); }
  __device__ static constexpr std::uint32_t sum_at(int r) { return 4 * (kRows * kD + kRows + r); }
};

// Called by every thread of every block of the cluster after each wrote its ClusterRowState
// (`state_smem`: its 32-bit shared address in this block): the rows' merged O / l and LSE (the
// sink joined) to out and lse. The (row, 4-column group) pairs of the valid rows are dealt
// round-robin over the cluster's ranks, so each block reads 1 / splits of the states; a pair
// reads its row's max and sum from every split, then the O columns of the splits that saw a key.
// Splits are at most 16 (decode_max_cluster_splits).
template <typename T, int kRows, int kD, int kThreads>
__device__ __forceinline__ void decode_cluster_merge(const KernelArgs& args,
                                                     const DecodeSplit& split, std::int64_t b,
                                                     std::int64_t r0, std::int64_t group,
                                                     std::int64_t hk, std::int64_t rows_total,
                                                     std::uint32_t state_smem, int tid) {
  using State = ClusterRowState<kRows, kD>;
  constexpr int kMaxSplits = 16;
  constexpr int kColGroups = kD / 4;
  ptx::cluster_sync();  // every split's state written and visible
  const int splits = static_cast<int>(split.splits);
  const int rank = static_cast<int>(ptx::cluster_ctarank());
  const int rows = static_cast<int>(min(static_cast<std::int64_t>(kRows), rows_total - r0));
  for (int pair = tid * splits + rank; pair < rows * kColGroups; pair += kThreads * splits) {
    const int r = pair / kColGroups, cg = pair % kColGroups;
    const PackedRow pr = packed_row(r0 + r, group, hk, rows_total);
    float m_s[kMaxSplits], l_s[kMaxSplits];
    float m = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      if (s < splits) {
        m_s[s] = ptx::ld_cluster_f32(ptx::map_shared_rank(state_smem + State::max_at(r), s));
        l_s[s] = ptx::ld_cluster_f32(ptx::map_shared_rank(state_smem + State::sum_at(r), s));
        if (l_s[s] != 0.0f) m = fmaxf(m, m_s[s]);
      }
    }
    const float sub = safe_max(m);
    float l = 0.0f;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      if (s < splits && l_s[s] != 0.0f) {  // a split that saw no key: its O is not written
        const float w = exp2f(exp2_arg(m_s[s], sub, args.scale_log2));
        l = fmaf(l_s[s], w, l);
        const float4 o =
            ptx::ld_cluster_f32x4(ptx::map_shared_rank(state_smem + State::o_at(r, 4 * cg), s));
        acc.x = fmaf(w, o.x, acc.x);
        acc.y = fmaf(w, o.y, acc.y);
        acc.z = fmaf(w, o.z, acc.z);
        acc.w = fmaf(w, o.w, acc.w);
      }
    }
    decode_finish_row<T>(args, split, 0, b, pr.i, pr.h, 4 * cg, m, l, acc, cg == 0);
  }
  ptx::cluster_sync();  // no block leaves while another still reads its shared memory
}

}  // namespace flashattn::cuda
