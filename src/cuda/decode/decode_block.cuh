// What a flash-decode attention block works on, where its finished rows go, and the copy of a
// new token into the cache, for both kernels (decode_kernel.cuh on CUDA cores,
// decode_mma_kernel.cuh on tensor cores, which also appends).
#pragma once

#include <cstdint>

#include "common/attention_args.h"
#include "common/mask_rule.h"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/device_dtype.cuh"
#include "cuda/decode/decode.h"

namespace flashattn::cuda {

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
    // Everything here runs before the block's first K / V load can be issued (its key range
    // needs it): the sequence's length first (a load: cache_seqlens[b]), and the grid's divisions
    // with the host's divisors while it is in flight (FastDivmod: 3 instructions, not the ~20 of
    // a 32-bit division; 1.7 us from the block's start to its key range at batch 1 x 8k on the
    // H100 with divisions, tools/profile/decode_step.py --trace).
    k.b = blockIdx.y;
    k.seq = a.seq(k.b);
    k.group = split.by_group.d;
    k.rows_total = a.seqlen_q * k.group;
    std::uint32_t q = 0, r = 0;
    split.by_splits.divmod(blockIdx.x, &q, &r);
    k.s_idx = r;
    split.by_chunks.divmod(q, &q, &r);
    k.r0 = static_cast<std::int64_t>(r) * kRows;
    k.hk = q;
    k.seq.seqlen_k = max(std::int64_t{0}, min(k.seq.seqlen_k, split.bounds.capacity));
    k.rule = a.mask(k.seq);
    // Rows fit 31 bits (supports(): batch * seqlen_q * heads < 2^31).
    k.i_first = split.by_group.div(static_cast<std::uint32_t>(k.r0));
    k.i_count = split.by_group.div(static_cast<std::uint32_t>(min(k.rows_total, k.r0 + kRows) - 1)) -
                k.i_first + 1;
    std::int64_t t_first = 0, t_end = 0;
    k.rule.tile_range(k.i_first, k.i_count, kBlockN, &t_first, &t_end);
    const std::int64_t tiles = max(std::int64_t{0}, t_end - t_first);
    // Key tiles fit 31 bits (the capacity's keys do).
    const std::int64_t per_split =
        split.by_splits.div(static_cast<std::uint32_t>(tiles + split.splits - 1));
    k.n_begin = t_first + min(tiles, k.s_idx * per_split);
    k.n_stop = t_first + min(tiles, (k.s_idx + 1) * per_split);
    return k;
  }
};

// A finished row, from its state relative to its running max: with one split, O / l in T to out
// and the LSE (the sink joined) to lse; with more, the split's float32 partial O (normalized over
// its keys) and LSE (no sink: decode_merge_kernel adds it once) to the workspace (decode.h,
// DecodeSplit). Row (b, i, h) of split s_idx: running max `row_max` (raw units), denominator `row_sum`, the
// thread's four O columns [c, c + 4) in `acc` (unnormalized); `lse_writer` marks the one thread
// of the row that writes its LSE. Columns at or past head_dim are not written.
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
