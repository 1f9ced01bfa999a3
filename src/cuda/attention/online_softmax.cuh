// The online-softmax state of one query row, shared by the GPU kernels. Scores arrive already
// multiplied by scale * log2(e), so every exponential is exp2 (one MUFU.EX2).
//
//   init:     row_max = -inf, row_sum = 0, O = 0
//   per tile: new_max = max(row_max, max_j S_j); P_j = exp2(S_j - new_max);
//             alpha = exp2(row_max - new_max); row_sum = row_sum * alpha + sum_j P_j; O *= alpha
//   finalize: O /= row_sum; LSE = (row_max + log2(row_sum)) * ln(2)
//
// The -inf guard: while every key seen so far is masked, new_max is -inf and S - new_max would be
// (-inf) - (-inf) = NaN. Subtracting 0 instead gives exp2(-inf) = 0 for masked scores and
// alpha = exp2(-inf) = 0 for the (empty) old state, so a row with no visible key ends with
// row_sum = 0: O = 0 and LSE = -inf, never NaN.
#pragma once

#include <cmath>

#include "common/math_constants.h"

namespace flashattn::cuda {

// The value subtracted from scores of a row whose running max is `row_max`.
__device__ __forceinline__ float safe_max(float row_max) {
  return row_max == -INFINITY ? 0.0f : row_max;
}

// The natural-log LSE of a finished row; -inf for a row with no visible key.
__device__ __forceinline__ float finalize_lse(float row_max, float row_sum) {
  return row_sum > 0.0f ? (row_max + log2f(row_sum)) * kLn2 : -INFINITY;
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
