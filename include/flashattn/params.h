// ForwardParams: everything one attention forward pass needs, as plain data.
//
// Layout BSHD, arbitrary int64 strides, last dim contiguous:
//   q   (batch, seqlen_q, heads,    head_dim)
//   k,v (batch, seqlen_k, kv_heads, head_dim)   heads % kv_heads == 0 (GQA/MQA);
//                                               query head h reads kv head h / (heads / kv_heads)
//   out (batch, seqlen_q, heads,    head_dim)   same dtype as q
//   lse (batch, heads, seqlen_q), float32, optional (leave undefined for none)
// Variable length (cu_seqlens_q and cu_seqlens_k defined): the sequences are packed along one
// token axis, sequence b holding rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of
//   q, out (total_q, heads, head_dim);  k, v (total_k, kv_heads, head_dim);  lse (heads, total_q)
// and every rule below applies per sequence, with that sequence's seqlen_q and seqlen_k.
//
// Semantics: O = softmax(S + bias + mask) V with float32 accumulation, where
//   S    = scale * Q K^T, then softcap * tanh(S / softcap) when softcap > 0;
//   bias = -alibi_slope[b, h] * |i + seqlen_k - seqlen_q - j| when alibi_slopes is given;
//   mask: query i sees key j iff 0 <= j < seqlen_k and
//         i + seqlen_k - seqlen_q - window_left <= j <= i + seqlen_k - seqlen_q + window_right
//         (a side at -1 is unbounded; causal means window_right = 0, aligned bottom-right);
//   sinks: a per-head logit that joins every row's softmax denominator and adds no value.
// A row that sees no key gives O = 0 and LSE = -inf (LSE = the sink's logit with sinks), never NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "flashattn/tensor.h"

namespace flashattn {

struct ForwardParams {
  TensorView q, k, v, out;
  TensorView lse;                      // optional float32 (batch, heads, seqlen_q)
  std::optional<float> softmax_scale;  // default 1 / sqrt(head_dim)
  bool causal = false;

  // Sliding window, FlashAttention's window_size = (left, right); -1 is unbounded. With causal
  // the right edge is the diagonal: window_right must be -1 or 0 (a wider one is refused).
  std::int64_t window_left = -1, window_right = -1;
  // Scores become softcap * tanh(scores / softcap) before the softmax (Gemma 2, Grok); 0 is off.
  float softcap = 0.0f;
  // ALiBi slopes (BLOOM, MPT): float32 (heads) or (batch, heads); optional.
  TensorView alibi_slopes;
  // Attention sinks (gpt-oss): float32 (heads), one logit per head; optional.
  TensorView sinks;

  // Variable length: int32 (batch + 1) offsets, starting at 0 and non-decreasing, both or neither;
  // max_seqlen_q / max_seqlen_k bound every sequence's length. seqused_k (int32 (batch),
  // optional) limits sequence b to its first seqused_k[b] keys.
  TensorView cu_seqlens_q, cu_seqlens_k, seqused_k;
  std::int64_t max_seqlen_q = 0, max_seqlen_k = 0;

  // KV cache (FlashAttention's flash_attn_with_kvcache), on when k_cache is defined. Dense q only
  // (no cu_seqlens). Sequence b's keys are the cache's first cache_seqlens[b] + seqlen_new rows;
  // every rule above (causal bottom-right, window, ALiBi, ...) applies with that seqlen_k.
  //   k_cache, v_cache (batch, cache_len, kv_heads, head_dim), q's dtype; or paged, with
  //                    block_table: (num_pages, page_size, kv_heads, head_dim), page_size a
  //                    multiple of 16 from 16 to 256; key j of sequence b is row j % page_size of
  //                    page block_table[b, j / page_size]
  //   cache_seqlens    int32 (batch), required: the keys already in the cache
  //   block_table      int32 (batch, max_pages_per_seq), optional (paged)
  //   k, v             optional new tokens (batch, seqlen_new, kv_heads, head_dim): written into
  //                    the cache (in place) at rows cache_seqlens[b] .. + seqlen_new, then attended
  // cache_seqlens[b] + seqlen_new must fit the capacity (cache_len, or max_pages_per_seq *
  // page_size). On host tensors validate() reads cache_seqlens and the block_table entries a
  // sequence uses (each in [0, num_pages)); on a CUDA device it cannot without synchronizing, so
  // there the values are the caller's contract (a kernel must not read or write outside the
  // cache for any value, but the result is then unspecified). Sequences must not share a page
  // they append to.
  TensorView k_cache, v_cache, cache_seqlens, block_table;
  // Split-KV (KV cache calls): the keys of each (sequence, kv head) are split across this many
  // blocks whose partial results are merged (flashattn/combine.h's rule); 0 lets the backend pick
  // from the GPU's size and the shape, 1 is no split. The result is the same up to float32
  // rounding for any count; the CPU backends compute unsplit. At most kMaxSplits.
  int num_splits = 0;

  // Scratch memory for the backend, at least workspace_bytes() of it (device memory of q's
  // device for the CUDA backends, 16-byte aligned). With it forward() neither allocates nor
  // synchronizes (CUDA-graph capturable); left null while the backend needs one, forward()
  // allocates a temporary buffer and synchronizes the stream before freeing it (forward.h).
  void* workspace = nullptr;
  std::size_t workspace_size = 0;

  float scale() const;  // the effective softmax scale
  bool varlen() const { return cu_seqlens_q.defined() || cu_seqlens_k.defined(); }
  bool kv_cache() const { return k_cache.defined(); }
  bool paged_kv() const { return kv_cache() && block_table.defined(); }
  // New tokens appended to the cache (0 without a cache or without new k/v).
  std::int64_t seqlen_new() const { return kv_cache() && k.defined() ? k.shape[1] : 0; }

  // Sizes, read off the views (valid after validate() succeeded). With varlen, seqlen_q() and
  // seqlen_k() are max_seqlen_q and max_seqlen_k.
  std::int64_t batch() const { return varlen() ? cu_seqlens_q.shape[0] - 1 : q.shape[0]; }
  std::int64_t seqlen_q() const { return varlen() ? max_seqlen_q : q.shape[1]; }
  std::int64_t heads() const { return q.shape[q.rank - 2]; }
  std::int64_t head_dim() const { return q.shape[q.rank - 1]; }
  // With a KV cache: the capacity (cache_len, or max_pages_per_seq * page_size).
  std::int64_t seqlen_k() const {
    if (kv_cache()) return paged_kv() ? block_table.shape[1] * k_cache.shape[1] : k_cache.shape[1];
    return varlen() ? max_seqlen_k : k.shape[1];
  }
  std::int64_t kv_heads() const { return kv_cache() ? k_cache.shape[2] : k.shape[k.rank - 2]; }
};

// The largest split count ForwardParams::num_splits takes.
constexpr int kMaxSplits = 256;

// Head dims every backend accepts: multiples of 8 from 8 to 256.
constexpr int kHeadDimStep = 8;
constexpr int kMaxHeadDim = 256;
// Base pointers must be aligned to this many bytes and every non-last stride must be a multiple of
// it (in bytes): GPU kernels move 16-byte vectors.
constexpr int kRequiredAlignmentBytes = 16;

}  // namespace flashattn
