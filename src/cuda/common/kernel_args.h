// Plain kernel arguments shared by every GPU backend: pointers, sizes and int64 element strides,
// built once from validated ForwardParams.
#pragma once

#include <cstdint>

#include "flashattn/forward.h"

namespace flashattn::cuda {

struct KernelArgs {
  const void* q; const void* k; const void* v; void* o;
  float* lse;  // null when no LSE is wanted
  DType dtype;
  std::int64_t batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim;
  std::int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3];  // batch, seq, head
  std::int64_t lse_stride[3];                                         // batch, head, seq
  float scale;       // softmax scale
  float scale_log2;  // softmax scale * log2(e): scores in the exp2 domain
  bool causal;
};

KernelArgs kernel_args_of(const ForwardParams& params);

// Ok when this GPU has a compiled image of `kernel` (a __global__ function's address); otherwise
// kBackendUnavailable naming the fix.
Status check_kernel_image(const void* kernel);

}  // namespace flashattn::cuda
