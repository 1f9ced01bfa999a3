// The online-softmax state of one query row, shared by the GPU kernels. The running max is kept
// in the scores' own (unscaled) units; every exponential is exp2 (one MUFU.EX2) of
// (S - row_max) * scale * log2(e).
//
//   init:     row_max = -inf, row_sum = 0, O = 0
//   per tile: new_max = max(row_max, max_j S_j); P_j = exp2((S_j - new_max) * scale_log2);
//             alpha = exp2((row_max - new_max) * scale_log2); row_sum = row_sum * alpha + sum_j P_j;
//             O *= alpha
//   finalize: O /= row_sum; LSE = (row_max * scale_log2 + log2(row_sum)) * ln(2)
//
// Why subtract before scaling: the argument is then <= 0 for every score and exactly 0 at the max
// (S_j - new_max is exact for the max itself, and for every score within a factor 2 of it), so
// P <= 1 and the row's largest score contributes exactly 1 to row_sum, whatever the magnitude.
// The one-instruction form fma(S, scale_log2, -round(new_max * scale_log2)) leaves the max's
// product rounding error in the argument: up to half a float32 step of the scaled max, i.e. 512
// at scaled scores near 1e10, so exp2 overflowed (NaN) or underflowed (a row taken for empty).
// It costs one more FP32 instruction per score (FADD + FMUL for one FFMA): in flash-sm80, measured
// in one process on the H200, 5% at d64 and d128 and 1% at d256. The cheaper forms tried were
// worse or wrong (docs/performance.md, v6): fused unless a warp's scaled max reaches 2^24 (one
// vote per tile) lost 2% at d128 and 6% at d256 to the split loops; row sums from the tensor
// cores (P times ones) won the time back but sum the P rounded to bf16, and LSE then missed its
// 1e-3 bound (1.1e-3 on rows of 17 keys).
// flash-sm90 (v14) takes the fused form after all, guarded, on its long tiles of d96 / d128 and
// at d192 (fragment_ops.cuh softmax_update's kFusedExp): a warp whose scaled maxima are all below
// 2^11 uses fma(S, scale_log2, -max * scale_log2), whose error is then under 2^-13 in the
// exponent, and the exact form otherwise. There its consumers' softmax is on the critical path
// between the ping-pong turns, and the FADD per score measured 5-16% at 4k-16k (H100).
//
// The -inf guard: while every key seen so far is masked, new_max is -inf and S - new_max would be
// (-inf) - (-inf) = NaN. Subtracting 0 instead gives exp2(-inf) = 0 for masked scores and
// alpha = exp2(-inf) = 0 for the (empty) old state, so a row with no visible key ends with
// row_sum = 0: O = 0 and LSE = -inf, never NaN.
#pragma once

#include <cmath>

#include "common/math_constants.h"
#include "cuda/common/exact_div.cuh"

namespace flashattn::cuda {

// The value subtracted from scores of a row whose running max is `row_max`.
__device__ __forceinline__ float safe_max(float row_max) {
  return row_max == -INFINITY ? 0.0f : row_max;
}

// The exp2 argument of score `s` in a row whose (guarded) running max is `max_sub`: <= 0, and
// exactly 0 for the max itself (see above).
__device__ __forceinline__ float exp2_arg(float s, float max_sub, float scale_log2) {
  return (s - max_sub) * scale_log2;
}

// The natural-log LSE of a finished row (row_max unscaled); -inf for a row with no visible key.
__device__ __forceinline__ float finalize_lse(float row_max, float row_sum, float scale_log2) {
  return row_sum > 0.0f ? (row_max * scale_log2 + log2f(row_sum)) * kLn2 : -INFINITY;
}

// A finished row: the factor O is multiplied by, and the natural-log LSE.
struct RowResult {
  float inv;  // 1 / denominator (with the sink's share); 0 for a row with nothing in it
  float lse;
};

// Finalizes a row whose running max (unscaled, possibly stale by the lazy rescaling: O and
// row_sum are both relative to it) is `row_max` and whose denominator is `row_sum`, with an
// optional sink logit `sink` in the same raw units (-inf: none). The sink joins the softmax as
// one more score that adds no value:
//   m' = max(row_max, sink);  a = exp2((row_max - m') * c);  l' = row_sum * a + exp2((sink - m') * c)
//   O = O * a / l';  LSE = (m' * c + log2(l')) * ln(2)
// Both exponents are <= 0 and the larger term is exactly 1, whatever the magnitudes. A row with
// no visible key (row_sum = 0) gives O = 0 and LSE = the sink's logit (-inf without a sink).
__device__ __forceinline__ RowResult finalize_row(float row_max, float row_sum, float sink,
                                                  float scale_log2) {
  if (sink == -INFINITY) {
    return RowResult{row_sum > 0.0f ? 1.0f / row_sum : 0.0f,
                     finalize_lse(row_max, row_sum, scale_log2)};
  }
  // row_sum = 0 means nothing was seen (row_max may be -inf or stale): only the sink counts.
  const float m = row_sum > 0.0f ? fmaxf(row_max, sink) : sink;
  const float a = row_sum > 0.0f ? exp2f(exp2_arg(row_max, m, scale_log2)) : 0.0f;
  const float l = fmaf(row_sum, a, exp2f(exp2_arg(sink, m, scale_log2)));
  return RowResult{div_zero_fast(a, l), (m * scale_log2 + log2f(l)) * kLn2};  // a = 0: no keys
}

// Butterfly reductions across the `kLanes` consecutive lanes that share one row (kLanes a power of
// two <= 32); every lane ends with the result.
template <int kLanes>
__device__ __forceinline__ float reduce_max_lanes(float v) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

template <int kLanes>
__device__ __forceinline__ float reduce_sum_lanes(float v) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

}  // namespace flashattn::cuda
