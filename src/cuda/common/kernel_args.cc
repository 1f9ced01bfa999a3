#include "cuda/common/kernel_args.h"

#include <cuda_runtime.h>

#include <string>

#include "common/math_constants.h"

namespace flashattn::cuda {

KernelArgs kernel_args_of(const ForwardParams& p) {
  KernelArgs a{};
  a.q = p.q.data; a.k = p.k.data; a.v = p.v.data; a.o = p.out.data;
  a.lse = static_cast<float*>(p.lse.data);
  a.dtype = p.q.dtype;
  a.batch = p.batch(); a.heads = p.heads(); a.kv_heads = p.kv_heads();
  a.seqlen_q = p.seqlen_q(); a.seqlen_k = p.seqlen_k(); a.head_dim = p.head_dim();
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = p.q.stride[i];
    a.k_stride[i] = p.k.stride[i];
    a.v_stride[i] = p.v.stride[i];
    a.o_stride[i] = p.out.stride[i];
    a.lse_stride[i] = p.lse.defined() ? p.lse.stride[i] : 0;
  }
  a.scale = p.scale();
  a.scale_log2 = a.scale * kLog2e;
  a.causal = p.causal;
  return a;
}

Status check_kernel_image(const void* kernel) {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, kernel);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kBackendUnavailable,
                  std::string("no kernel image for this GPU (") + cudaGetErrorString(err) +
                      "); rebuild with its architecture in FLASHATTN_CUDA_ARCHS");
  }
  return Status::Ok();
}

}  // namespace flashattn::cuda
