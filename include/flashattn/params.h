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

  // Scratch memory for the backend, at least workspace_bytes() of it (device memory of q's
  // device for the CUDA backends, 16-byte aligned). With it forward() neither allocates nor
  // synchronizes (CUDA-graph capturable); left null while the backend needs one, forward()
  // allocates a temporary buffer and synchronizes the stream before freeing it (forward.h).
  void* workspace = nullptr;
  std::size_t workspace_size = 0;

  float scale() const;  // the effective softmax scale
  bool varlen() const { return cu_seqlens_q.defined() || cu_seqlens_k.defined(); }

  // Sizes, read off the views (valid after validate() succeeded). With varlen, seqlen_q() and
  // seqlen_k() are max_seqlen_q and max_seqlen_k.
  std::int64_t batch() const { return varlen() ? cu_seqlens_q.shape[0] - 1 : q.shape[0]; }
  std::int64_t seqlen_q() const { return varlen() ? max_seqlen_q : q.shape[1]; }
  std::int64_t heads() const { return q.shape[q.rank - 2]; }
  std::int64_t head_dim() const { return q.shape[q.rank - 1]; }
  std::int64_t seqlen_k() const { return varlen() ? max_seqlen_k : k.shape[1]; }
  std::int64_t kv_heads() const { return k.shape[k.rank - 2]; }
};

// Head dims every backend accepts: multiples of 8 from 8 to 256.
constexpr int kHeadDimStep = 8;
constexpr int kMaxHeadDim = 256;
// Base pointers must be aligned to this many bytes and every non-last stride must be a multiple of
// it (in bytes): GPU kernels move 16-byte vectors.
constexpr int kRequiredAlignmentBytes = 16;

}  // namespace flashattn
