// ForwardParams: everything one attention forward pass needs, as plain data.
//
// Layout BSHD, arbitrary int64 strides, last dim contiguous:
//   q   (batch, seqlen_q, heads,    head_dim)
//   k,v (batch, seqlen_k, kv_heads, head_dim)   heads % kv_heads == 0 (GQA/MQA);
//                                               query head h reads kv head h / (heads / kv_heads)
//   out (batch, seqlen_q, heads,    head_dim)   same dtype as q
//   lse (batch, heads, seqlen_q), float32, optional (leave undefined for none)
//
// Semantics: O = softmax(scale * Q K^T + mask) V with float32 accumulation.
// Causal is aligned bottom-right: query row i sees key j iff j <= i + (seqlen_k - seqlen_q).
// A row that sees no key (causal with seqlen_q > seqlen_k, or seqlen_k == 0) gives O = 0 and
// LSE = -inf, never NaN.
#pragma once

#include <optional>

#include "flashattn/tensor.h"

namespace flashattn {

struct ForwardParams {
  TensorView q, k, v, out;
  TensorView lse;                      // optional float32 (batch, heads, seqlen_q)
  std::optional<float> softmax_scale;  // default 1 / sqrt(head_dim)
  bool causal = false;

  float scale() const;  // the effective softmax scale

  // Sizes, read off the views (valid after validate() succeeded).
  std::int64_t batch() const { return q.shape[0]; }
  std::int64_t seqlen_q() const { return q.shape[1]; }
  std::int64_t heads() const { return q.shape[2]; }
  std::int64_t head_dim() const { return q.shape[3]; }
  std::int64_t seqlen_k() const { return k.shape[1]; }
  std::int64_t kv_heads() const { return k.shape[2]; }
};

// Head dims every backend accepts: multiples of 8 from 8 to 256.
constexpr int kHeadDimStep = 8;
constexpr int kMaxHeadDim = 256;
// Base pointers must be aligned to this many bytes and every non-last stride must be a multiple of
// it (in bytes): GPU kernels move 16-byte vectors.
constexpr int kRequiredAlignmentBytes = 16;

}  // namespace flashattn
