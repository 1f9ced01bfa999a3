// A finished row of a flash-decode attention block (both kernels: decode_kernel.cuh on CUDA cores,
// decode_mma_kernel.cuh on tensor cores), from its state relative to its running max: with one
// split, O / l in T to out and the LSE (the sink joined) to lse; with more, the split's float32
// partial O (normalized over its keys) and LSE (no sink: decode_combine_kernel adds it once) to
// the workspace (decode.h, DecodeSplit).
#pragma once

#include <cstdint>

#include "cuda/attention/online_softmax.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/device_dtype.cuh"
#include "cuda/decode/decode.h"

namespace flashattn::cuda {

// Row (b, i, h) of split s_idx: running max `row_max` (raw units), denominator `row_sum`, the
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

}  // namespace flashattn::cuda
