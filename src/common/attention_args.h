// AttentionArgs: the one plain struct every backend runs from (host and device), built once from
// validated ForwardParams: pointers, sizes, int64 element strides and the variant fields, plus
// the two rules every backend and reference share: where sequence b lives (dense or packed) and
// what its rows see (common/mask_rule.h), and the score transform (softcap, ALiBi).
//
// Rows and sequences. Every tensor is addressed as (batch, row, head[, d]) through q_stride etc.:
// dense BSHD has the batch stride, packed varlen has batch stride 0 and sequence b's rows start at
// cu_seqlens_q[b] (cu_seqlens_k[b]) of the token axis; LSE likewise ((batch, head, row) dense,
// (head, total_q) packed). seq(b) gives a sequence's first rows and lengths, so a kernel written
// for one dense sequence runs every layout.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "common/mask_rule.h"
#include "common/softcap.h"
#include "flashattn/tensor.h"

namespace flashattn {

// Sequence b of the batch: its rows in q/out/lse and in k/v, and its lengths.
struct SeqInfo {
  std::int64_t q_row0 = 0, k_row0 = 0;
  std::int64_t seqlen_q = 0, seqlen_k = 0;
};

struct AttentionArgs {
  // The dense problem (the fields the GPU kernels read; keep their order).
  const void* q; const void* k; const void* v; void* o;
  float* lse;  // null when no LSE is wanted
  DType dtype;
  std::int64_t batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim;  // varlen: max lengths
  std::int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];  // batch, row, head
  std::int64_t lse_stride[3];                                         // batch, head, row
  float scale;       // softmax scale
  float scale_log2;  // softmax scale * log2(e): scores in the exp2 domain
  bool causal;

  // The variants (ForwardParams' fields; causal folded into window_right).
  std::int64_t window_left, window_right;  // -1: unbounded
  float softcap;                            // 0: off
  SoftcapConsts softcap_consts;             // softcap's in raw units, for the kernels (common/softcap.h)
  const float* alibi_slopes;                // null: none; slope of (b, h) at b * alibi_batch_stride + h
  std::int64_t alibi_batch_stride;          // 0 for (heads) slopes, heads for (batch, heads)
  const float* sinks;                       // null: none; one logit per head
  const std::int32_t* cu_seqlens_q;         // null: dense
  const std::int32_t* cu_seqlens_k;
  const std::int32_t* seqused_k;            // null: every key of the sequence
  // KV cache (ForwardParams::k_cache): k, v and k_stride / v_stride are the cache's; sequence b
  // has cache_seqlens[b] + seqlen_new keys; seqlen_k is the capacity.
  const std::int32_t* cache_seqlens;        // null: no KV cache
  std::int64_t seqlen_new;                  // new tokens appended (0 without)
  const std::int32_t* block_table;          // null: contiguous cache
  std::int64_t block_table_stride, page_size;

  // Element offset of key j of sequence b (row k_row0 + j of k/v), head h, d = 0: dense, packed
  // or through the block table. num_pages >= 0 bounds the pages: -1 for a page outside
  // [0, num_pages) (the GPU's flash-decode, which cannot check block_table on the host, reads
  // such keys as zeros and never writes them); -1 (the default) trusts the table (validate()
  // checked it on the host).
  FA_HOST_DEVICE std::int64_t kv_offset(const std::int64_t* stride, std::int64_t b,
                                        std::int64_t key, std::int64_t h,
                                        std::int64_t num_pages = -1) const {
    if (block_table != nullptr) {
      const std::int64_t page = block_table[b * block_table_stride + key / page_size];
      if (num_pages >= 0 && (page < 0 || page >= num_pages)) return -1;
      return page * stride[0] + (key % page_size) * stride[1] + h * stride[2];
    }
    return b * stride[0] + key * stride[1] + h * stride[2];
  }

  FA_HOST_DEVICE bool varlen() const { return cu_seqlens_q != nullptr; }

  // Sequence b's rows and lengths.
  FA_HOST_DEVICE SeqInfo seq(std::int64_t b) const {
    SeqInfo s;
    if (cu_seqlens_q == nullptr) {
      s.seqlen_q = seqlen_q;
      s.seqlen_k = cache_seqlens != nullptr ? cache_seqlens[b] + seqlen_new : seqlen_k;
      return s;
    }
    s.q_row0 = cu_seqlens_q[b];
    s.k_row0 = cu_seqlens_k[b];
    s.seqlen_q = cu_seqlens_q[b + 1] - s.q_row0;
    s.seqlen_k = seqused_k != nullptr ? seqused_k[b] : cu_seqlens_k[b + 1] - s.k_row0;
    return s;
  }

  // What sequence `s`'s rows see.
  FA_HOST_DEVICE MaskRule mask(const SeqInfo& s) const {
    return MaskRule::make(s.seqlen_q, s.seqlen_k, window_left, window_right, false);
  }

  // The ALiBi slope of (b, h); 0 without ALiBi.
  FA_HOST_DEVICE float alibi_slope(std::int64_t b, std::int64_t h) const {
    return alibi_slopes != nullptr ? alibi_slopes[b * alibi_batch_stride + h] : 0.0f;
  }
};

// The score of query row i and key j of one sequence after the transforms, from the scaled score
// s = scale * q.k: softcap * tanh(s / softcap) when softcap > 0, then - slope * |i + diag - j|
// (diag = seqlen_k - seqlen_q). The references apply this per element; the kernels apply the same
// steps to their score fragments. Acc is float or double.
template <typename Acc>
FA_HOST_DEVICE Acc transform_score(Acc s, float softcap, float slope, std::int64_t i,
                                   std::int64_t j, std::int64_t diag) {
  if (softcap > 0.0f) s = static_cast<Acc>(softcap) * std::tanh(s / static_cast<Acc>(softcap));
  if (slope != 0.0f) {
    const std::int64_t dist = i + diag - j;
    s -= static_cast<Acc>(slope) * static_cast<Acc>(dist < 0 ? -dist : dist);
  }
  return s;
}

struct ForwardParams;
// Built from validated params (host only).
AttentionArgs make_attention_args(const ForwardParams& params);

}  // namespace flashattn
