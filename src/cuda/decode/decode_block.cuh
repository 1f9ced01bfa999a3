// What a flash-decode attention block works on, where its finished rows go, the merge of the
// splits by the block that finishes last, and the copy of a new token into the cache, for both
// kernels (decode_kernel.cuh on CUDA cores, decode_mma_kernel.cuh on tensor cores, which also
// appends).
#pragma once

#include <cuda/atomic>

#include <cstdint>

#include "common/attention_args.h"
#include "common/mask_rule.h"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/device_dtype.cuh"
#include "cuda/decode/decode.h"

namespace flashattn::cuda {

// A packed row of a (sequence, kv head): row r is query token r / group, head hk * group +
// r % group; rows at or past rows_total (a chunk's padding) are not valid.
struct PackedRow {
  int i;  // query token (validate(): seqlen_q and heads fit an int)
  int h;  // query head
  bool valid;
};

__device__ __forceinline__ PackedRow packed_row(std::int64_t row, std::int64_t group,
                                                std::int64_t hk, std::int64_t rows_total) {
  PackedRow p;
  p.valid = row < rows_total;
  p.i = p.valid ? static_cast<int>(row / group) : 0;
  p.h = static_cast<int>(hk * group + (p.valid ? row % group : 0));
  return p;
}

// Block (split s, row chunk c, kv head hk; batch entry b) of the grid (launch_decode): its kRows
// packed rows (row r of the chunk is token (r0 + r) / group, head hk * group + (r0 + r) % group),
// the sequence (its keys clamped to the cache's capacity, DecodeBounds), and split s's equal share
// [n_begin, n_stop) of the key tiles the chunk's tokens see (MaskRule::tile_range).
struct DecodeBlock {
  std::int64_t group, rows_total;  // heads / kv_heads; seqlen_q * group
  std::int64_t s_idx, hk, b, r0;
  SeqInfo seq;
  MaskRule rule;
  std::int64_t i_first, i_count;  // the chunk's tokens
  std::int64_t n_begin, n_stop;   // key tiles of kBlockN keys

  template <int kRows, int kBlockN>
  __device__ __forceinline__ static DecodeBlock make(const KernelArgs& a, const DecodeSplit& split) {
    DecodeBlock k;
    k.group = a.heads / a.kv_heads;
    k.rows_total = a.seqlen_q * k.group;
    const std::int64_t chunks = (k.rows_total + kRows - 1) / kRows;
    k.s_idx = blockIdx.x % split.splits;
    k.r0 = (blockIdx.x / split.splits) % chunks * kRows;
    k.hk = blockIdx.x / split.splits / chunks;
    k.b = blockIdx.y;
    k.seq = a.seq(k.b);
    k.seq.seqlen_k = max(std::int64_t{0}, min(k.seq.seqlen_k, split.bounds.capacity));
    k.rule = a.mask(k.seq);
    k.i_first = k.r0 / k.group;
    k.i_count = (min(k.rows_total, k.r0 + kRows) - 1) / k.group - k.i_first + 1;
    std::int64_t t_first = 0, t_end = 0;
    k.rule.tile_range(k.i_first, k.i_count, kBlockN, &t_first, &t_end);
    const std::int64_t tiles = max(std::int64_t{0}, t_end - t_first);
    const std::int64_t per_split = (tiles + split.splits - 1) / split.splits;
    k.n_begin = t_first + min(tiles, k.s_idx * per_split);
    k.n_stop = t_first + min(tiles, (k.s_idx + 1) * per_split);
    return k;
  }
};

// A finished row, from its state relative to its running max: with one split, O / l in T to out
// and the LSE (the sink joined) to lse; with more, the split's float32 partial O (normalized over
// its keys) and LSE (no sink: decode_merge_splits adds it once) to the workspace (decode.h,
// DecodeSplit). Row (b, i, h) of split s_idx: running max `row_max` (raw units), denominator
// `row_sum`, the thread's four O columns [c, c + 4) in `acc` (unnormalized); `lse_writer` marks
// the one thread of the row that writes its LSE. Columns at or past head_dim are not written.
template <typename T>
__device__ __forceinline__ void decode_finish_row(const KernelArgs& a, const DecodeSplit& split,
                                                  std::int64_t s_idx, std::int64_t b,
                                                  std::int64_t i, std::int64_t h, int c,
                                                  float row_max, float row_sum, float4 acc,
                                                  bool lse_writer) {
  const bool whole = split.splits == 1;
  const RowResult res =
      finalize_row(row_max, row_sum, whole ? sink_raw(a, h) : -INFINITY, a.scale_log2);
  const float4 v = make_float4(acc.x * res.inv, acc.y * res.inv, acc.z * res.inv,
                               acc.w * res.inv);
  if (whole) {
    if (c < a.head_dim) {
      store4_from_float(static_cast<T*>(a.o) + b * a.o_stride[0] + i * a.o_stride[1] +
                            h * a.o_stride[2] + c,
                        v);
    }
    if (lse_writer && a.lse != nullptr) {
      a.lse[b * a.lse_stride[0] + h * a.lse_stride[1] + i * a.lse_stride[2]] = res.lse;
    }
    return;
  }
  const std::int64_t row = decode_part_row(a, s_idx, b, i, h);
  if (c < a.head_dim) *reinterpret_cast<float4*>(split.o_part + row * a.head_dim + c) = v;
  if (lse_writer) split.lse_part[row] = res.lse;
}

// The splits' merge (splits > 1), by the split block of each (sequence, kv head, row chunk)
// that finishes last, in place of a kernel of its own: one dependent launch less per decode
// step (~2-3 us of a 30-150 us step at batch 1), and each chunk's merge starts as soon as its
// own splits are done rather than after the grid's slowest block.
//
// Shared memory the merge uses (the block's pipeline is done by then): one weight per split of
// each of the chunk's rows.
template <int kRows>
constexpr int kDecodeMergeSmemBytes = kRows * kMaxSplits * 4;

// Counts one arrival on semaphore `sem` (decode.h: decode_arrival, the word's next value);
// true for the arrival that completes the splits. A compare-and-swap from the reset word first
// (the first arrival's case), then from what it found: two round trips to L2 for the others; no
// block ever waits for another. Each swap releases what the block wrote before it (the caller's
// barrier makes that every thread's writes: release is cumulative) and acquires what the earlier
// arrivals released (the swaps form one release sequence), so the last block may read every
// split's partials.
__device__ __forceinline__ bool decode_count_arrival(unsigned long long* sem, std::uint64_t tag,
                                                     std::int64_t splits) {
  ::cuda::atomic_ref<unsigned long long, ::cuda::thread_scope_device> word(*sem);
  unsigned long long seen = 0;
  for (;;) {
    const DecodeArrival arrival = decode_arrival(seen, tag, splits);
    // On failure `seen` becomes the word found.
    if (word.compare_exchange_strong(seen, arrival.next, ::cuda::memory_order_acq_rel,
                                     ::cuda::memory_order_relaxed)) {
      return arrival.last;
    }
  }
}

// After the block has written its partial rows: true in every thread of the block that arrives
// last on its chunk's semaphore (decode_count_arrival, by thread 0 after a barrier; the barrier
// after it hands its acquire to the block's other threads).
template <int kRows>
__device__ __forceinline__ bool decode_arrives_last(const KernelArgs& a, const DecodeSplit& split,
                                                    const DecodeBlock& blk) {
  __syncthreads();
  int last = 0;
  if (threadIdx.x == 0) {
    const std::int64_t chunks = (blk.rows_total + kRows - 1) / kRows;
    unsigned long long* sem =
        split.semaphores + decode_semaphore_index(a, blk.b, blk.hk, blk.r0 / kRows, chunks);
    last = decode_count_arrival(sem, split.tag, split.splits) ? 1 : 0;
  }
  return __syncthreads_or(last) != 0;
}

// The merge of the chunk's rows over every split into out / lse, by the last block (kThreads
// threads; w_smem: kDecodeMergeSmemBytes). Per row (warp w: rows w, w + kWarps, ...; lane:
// splits lane, lane + 32, ...), the splits' LSEs l_s, all loads in flight at once, then
// lse = log(sum_s exp(l_s) + exp(sink)) with the max subtracted, and the weights exp(l_s - lse)
// into shared memory: the sink joins once, as one more part with O = 0. Then thread tid sums
// columns [4 cg, 4 cg + 4) (cg = tid % (kD / 4)) of rows tid / (kD / 4) + k * (kThreads /
// (kD / 4)) over the splits, kInFlight loads at a time. Float32; a split with LSE -inf (no key)
// has weight 0 and its O is not read; every part at -inf gives O = 0 and LSE = -inf (with a
// sink: its logit). The partials are read through L2 (__ldcg): other SMs wrote them.
template <typename T, int kD, int kThreads, int kRows>
__device__ __forceinline__ void decode_merge_splits(const KernelArgs& a, const DecodeSplit& split,
                                                    const DecodeBlock& blk, float* w_smem) {
  constexpr int kWarps = kThreads / 32;
  constexpr int kPerLane = kMaxSplits / 32;
  // float4 loads in flight per thread (16 KB per block): batch 1's 31-32 splits take 4 round
  // trips to L2. 16 took d64's tensor-core kernel to 179 registers, past the 168 of 3 blocks per
  // SM (ptxas).
  constexpr int kInFlight = 8;
  constexpr int kColGroups = kD / 4, kRowStep = kThreads / kColGroups;
  static_assert(kMaxSplits % 32 == 0 && kThreads % 32 == 0, "whole warps and lanes");
  static_assert(kThreads % kColGroups == 0, "column groups must tile the block");
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int splits = static_cast<int>(split.splits);
  const std::int64_t split_rows = a.batch * a.seqlen_q * a.heads;  // decode_part_row's step

  for (int r = warp; r < kRows; r += kWarps) {
    const PackedRow pr = packed_row(blk.r0 + r, blk.group, blk.hk, blk.rows_total);
    if (!pr.valid) continue;  // uniform over the warp
    const float* lse_row = split.lse_part + decode_part_row(a, 0, blk.b, pr.i, pr.h);
    float l[kPerLane];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int s = lane + 32 * k;
      l[k] = s < splits ? __ldcg(lse_row + s * split_rows) : -INFINITY;
      m = fmaxf(m, l[k]);
    }
    const float sink = a.sinks != nullptr ? a.sinks[pr.h] : -INFINITY;  // natural units
    m = fmaxf(reduce_max_lanes<32>(m), sink);
    float lse = -INFINITY;
    if (m != -INFINITY) {  // uniform over the warp
      float part = 0.0f;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        if (l[k] != -INFINITY) part += __expf(l[k] - m);
      }
      const float sink_part = sink != -INFINITY ? __expf(sink - m) : 0.0f;
      lse = m + __logf(reduce_sum_lanes<32>(part) + sink_part);
    }
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int s = lane + 32 * k;
      if (s < splits) {
        w_smem[r * kMaxSplits + s] =
            l[k] == -INFINITY || lse == -INFINITY ? 0.0f : __expf(l[k] - lse);
      }
    }
    if (lane == 0 && a.lse != nullptr) {
      a.lse[blk.b * a.lse_stride[0] + pr.h * a.lse_stride[1] + pr.i * a.lse_stride[2]] = lse;
    }
  }
  __syncthreads();

  const int cg = tid % kColGroups;
  const std::int64_t split_step = split_rows * a.head_dim;  // floats from split s to s + 1
  for (int r = tid / kColGroups; r < kRows; r += kRowStep) {
    const PackedRow pr = packed_row(blk.r0 + r, blk.group, blk.hk, blk.rows_total);
    if (!pr.valid || 4 * cg >= a.head_dim) continue;
    const float* o_col =
        split.o_part + decode_part_row(a, 0, blk.b, pr.i, pr.h) * a.head_dim + 4 * cg;
    const float* w = w_smem + r * kMaxSplits;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    auto add = [&](float wt, float4 v) {
      acc.x = fmaf(wt, v.x, acc.x);
      acc.y = fmaf(wt, v.y, acc.y);
      acc.z = fmaf(wt, v.z, acc.z);
      acc.w = fmaf(wt, v.w, acc.w);
    };
    // Rounds of kInFlight splits, the last one partial: ceil(splits / kInFlight) round trips.
    for (int s0 = 0; s0 < splits; s0 += kInFlight) {
      float wt[kInFlight];
      float4 v[kInFlight];
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        wt[u] = s0 + u < splits ? w[s0 + u] : 0.0f;
        v[u] = wt[u] != 0.0f
                   ? __ldcg(reinterpret_cast<const float4*>(o_col + (s0 + u) * split_step))
                   : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) add(wt[u], v[u]);
    }
    store4_from_float(static_cast<T*>(a.o) + blk.b * a.o_stride[0] + pr.i * a.o_stride[1] +
                          pr.h * a.o_stride[2] + 4 * cg,
                      acc);
  }
}

// Copies new token t of kv head h of sequence b into the cache: row cache_seqlens[b] + t of K
// and V (AttentionArgs::kv_offset: contiguous or through the block table), threads `lane` of
// `lanes` taking 16 bytes per step. Exact copies; a row past the cache's capacity or on a page
// outside the cache is not written (DecodeBounds).
template <typename T>
__device__ __forceinline__ void decode_append_row(const KernelArgs& args, const DecodeNewTokens& nt,
                                                  const DecodeBounds& bounds, std::int64_t b,
                                                  std::int64_t t, std::int64_t h, int lane,
                                                  int lanes) {
  const std::int64_t key = static_cast<std::int64_t>(args.cache_seqlens[b]) + t;
  if (key < 0 || key >= bounds.capacity) return;  // a cache_seqlens past the cache: not written
  const std::int64_t k_at = args.kv_offset(args.k_stride, b, key, h, bounds.num_pages);
  const std::int64_t v_at = args.kv_offset(args.v_stride, b, key, h, bounds.num_pages);
  if (k_at < 0 || v_at < 0) return;  // a page outside the cache
  const T* k_src = static_cast<const T*>(nt.k) + b * nt.k_stride[0] + t * nt.k_stride[1] +
                   h * nt.k_stride[2];
  const T* v_src = static_cast<const T*>(nt.v) + b * nt.v_stride[0] + t * nt.v_stride[1] +
                   h * nt.v_stride[2];
  T* k_dst = static_cast<T*>(const_cast<void*>(args.k)) + k_at;
  T* v_dst = static_cast<T*>(const_cast<void*>(args.v)) + v_at;
  constexpr int kVec = kVecElems<T>;
  for (int c = lane * kVec; c < args.head_dim; c += lanes * kVec) {
    *reinterpret_cast<uint4*>(k_dst + c) = *reinterpret_cast<const uint4*>(k_src + c);
    *reinterpret_cast<uint4*>(v_dst + c) = *reinterpret_cast<const uint4*>(v_src + c);
  }
}

}  // namespace flashattn::cuda
