// The merge of flash-decode's splits (more than one): the float32 partial O rows and LSEs the
// attention blocks wrote to the workspace (decode_part_row) become out and lse, the sink (if any)
// joining as one more part with O = 0.
//
// One block of kMergeThreads per (b, i, h) row, one memory round trip where it can: the threads
// issue their first kMergeLoads float4 loads of partial O (thread t: column group t % (head_dim /
// 4), splits t / (head_dim / 4) + k * slices) and their splits' LSEs before anything is reduced,
// then turn the LSEs into weights exp(l_s - lse) in shared memory and sum. Splits past the first
// round (more than kMergeLoads * slices: d128 32) load again. The slices' sums meet in shared
// memory. v3 read the LSEs first and then walked the splits 4 loads at a time: 5.4 us for 32
// splits of 32 rows at batch 1 x 8k (torch.profiler, graph replay), 30% of the attention's 17.7.
//
// Tried and measured (bench --decode, graph replays, 3 rounds): 256 threads in place of 128,
// 27.9 against 27.0 us at batch 1 x 8k and 87.4 against 86.7 at batch 8 x 8k; the merge launched
// as a programmatic dependent of the attention (griddepcontrol, sm_90), 27.5 against 26.4 us at
// batch 1 x 8k and the same kernel span at batch 8 x 8k (79.5 us): neither is used.
//
// Float32, max-subtracted: a part with LSE -inf (a split without keys, whose O row may hold
// anything) has weight 0 and is never added; all -inf gives O = 0 and LSE = -inf (or the sink's
// logit).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/attention_args.h"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/common/device_dtype.cuh"
#include "cuda/common/exact_div.cuh"
#include "cuda/decode/decode.h"

namespace flashattn::cuda {

constexpr int kMergeThreads = 128;
constexpr int kMergeLoads = 8;  // float4 loads of partial O in flight per thread (32 registers)
constexpr int kMergeLses = kMaxSplits / kMergeThreads;  // split LSEs per thread

template <typename T>
__global__ void __launch_bounds__(kMergeThreads)
decode_merge_kernel(KernelArgs args, DecodeSplit split) {
  static_assert(kMaxSplits == kMergeLses * kMergeThreads, "LSEs per thread");
  __shared__ float w_smem[kMaxSplits];
  __shared__ float red_smem[kMergeThreads / 32];
  __shared__ float4 acc_smem[kMergeThreads];
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  // 32-bit divisions (the rows fit: supports()); the 64-bit subroutine sat before every load.
  const DivMod by_head = divmod_fast(blockIdx.x, args.heads);
  const DivMod by_token = divmod_fast(by_head.q, args.seqlen_q);
  const std::int64_t h = by_head.r, i = by_token.r, b = by_token.q;
  const int splits = static_cast<int>(split.splits);
  // Column groups of 4 (head_dim is a multiple of 8) and the slices of splits over the threads:
  // d128 32 groups x 4 slices; a thread of slice >= slices only reads LSEs.
  const int groups = args.head_dim / 4, slices = kMergeThreads / groups;
  const int cg = tid % groups, slice = tid / groups;
  const float sink = args.sinks != nullptr ? args.sinks[h] : -INFINITY;  // natural units
  // Split s's row lies split_rows rows after split s - 1's (decode_part_row).
  const std::int64_t split_stride = args.batch * args.seqlen_q * args.heads * args.head_dim;
  const float4* o_col = reinterpret_cast<const float4*>(
                            split.o_part + decode_part_row(args, 0, b, i, h) * args.head_dim) +
                        cg;
  auto load_round = [&](int first, float4 (&v)[kMergeLoads]) {
#pragma unroll
    for (int k = 0; k < kMergeLoads; ++k) {
      const int s = first + slice + k * slices;
      v[k] = slice < slices && s < splits ? o_col[s * split_stride / 4]
                                          : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };

  float4 v[kMergeLoads];
  load_round(0, v);
  float l[kMergeLses];
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kMergeLses; ++k) {
    const int s = tid + k * kMergeThreads;
    l[k] = s < splits ? split.lse_part[decode_part_row(args, s, b, i, h)] : -INFINITY;
    m = fmaxf(m, l[k]);
  }

  // A block-wide reduction (max or sum) of one value per thread.
  auto block_reduce = [&](float x, bool is_max) {
    x = is_max ? reduce_max_lanes<32>(x) : reduce_sum_lanes<32>(x);
    __syncthreads();  // red_smem's previous use is done
    if (lane == 0) red_smem[warp] = x;
    __syncthreads();
    float r = red_smem[0];
#pragma unroll
    for (int w = 1; w < kMergeThreads / 32; ++w) r = is_max ? fmaxf(r, red_smem[w]) : r + red_smem[w];
    return r;
  };
  m = fmaxf(block_reduce(m, true), sink);
  float lse = -INFINITY;
  if (m != -INFINITY) {  // uniform: every thread has the same m
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < kMergeLses; ++k) part += l[k] != -INFINITY ? __expf(l[k] - m) : 0.0f;
    const float total = block_reduce(part, false) + (sink != -INFINITY ? __expf(sink - m) : 0.0f);
    lse = m + __logf(total);
  }
#pragma unroll
  for (int k = 0; k < kMergeLses; ++k) {
    const int s = tid + k * kMergeThreads;
    if (s < splits) w_smem[s] = l[k] == -INFINITY || lse == -INFINITY ? 0.0f : __expf(l[k] - lse);
  }
  __syncthreads();

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  for (int first = 0;;) {
#pragma unroll
    for (int k = 0; k < kMergeLoads; ++k) {
      const int s = first + slice + k * slices;
      const float w = s < splits ? w_smem[s] : 0.0f;
      if (w != 0.0f) {  // a split without keys may have left anything in its row
        acc.x = fmaf(w, v[k].x, acc.x);
        acc.y = fmaf(w, v[k].y, acc.y);
        acc.z = fmaf(w, v[k].z, acc.z);
        acc.w = fmaf(w, v[k].w, acc.w);
      }
    }
    first += kMergeLoads * slices;
    if (first >= splits) break;
    load_round(first, v);
  }
  acc_smem[tid] = acc;
  __syncthreads();
  if (slice == 0) {
    for (int k = 1; k < slices; ++k) {
      const float4 a = acc_smem[cg + k * groups];
      acc.x += a.x;
      acc.y += a.y;
      acc.z += a.z;
      acc.w += a.w;
    }
    T* dst = static_cast<T*>(args.o) + b * args.o_stride[0] + i * args.o_stride[1] +
             h * args.o_stride[2] + 4 * cg;
    dst[0] = from_float<T>(acc.x);
    dst[1] = from_float<T>(acc.y);
    dst[2] = from_float<T>(acc.z);
    dst[3] = from_float<T>(acc.w);
  }
  if (tid == 0 && args.lse != nullptr) {
    args.lse[b * args.lse_stride[0] + h * args.lse_stride[1] + i * args.lse_stride[2]] = lse;
  }
}

}  // namespace flashattn::cuda
