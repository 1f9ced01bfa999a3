// The "flash" backend's launcher: one fused CUDA-core kernel, tiled online softmax.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashattn/forward.h"

namespace flashattn::cuda {

// Plain kernel arguments: pointers and int64 element strides (batch, seq, head).
struct FlashArgs {
  const void* q; const void* k; const void* v; void* o; float* lse;
  std::int64_t batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim;
  std::int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];
  std::int64_t lse_stride[3];  // batch, head, seq
  float scale_log2;            // softmax scale * log2(e)
  bool causal;
};

FlashArgs flash_args_of(const ForwardParams& params);

// One instantiation per (head-dim bucket, dtype): T is float, __nv_bfloat16 or __half; the
// kernel handles any head_dim <= kHeadDimMax that is a multiple of 8.
template <typename T, int kHeadDimMax>
Status launch_flash(const FlashArgs& args, cudaStream_t stream);

// Ok when this GPU has a kernel image for the flash kernels.
Status flash_kernels_available();

}  // namespace flashattn::cuda
