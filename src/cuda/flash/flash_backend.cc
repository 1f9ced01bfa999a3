// The "flash" backend: picks the head-dim bucket and dtype instantiation and launches.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "api/backend.h"
#include "cuda/common/runtime.h"
#include "cuda/flash/flash.h"

namespace flashattn {
namespace cuda {

FlashArgs flash_args_of(const ForwardParams& p) {
  constexpr float kLog2e = 1.4426950408889634f;
  FlashArgs a{};
  a.q = p.q.data; a.k = p.k.data; a.v = p.v.data; a.o = p.out.data;
  a.lse = static_cast<float*>(p.lse.data);
  a.batch = p.batch(); a.heads = p.heads(); a.kv_heads = p.kv_heads();
  a.seqlen_q = p.seqlen_q(); a.seqlen_k = p.seqlen_k(); a.head_dim = p.head_dim();
  for (int i = 0; i < 3; ++i) {
    a.q_stride[i] = p.q.stride[i];
    a.k_stride[i] = p.k.stride[i];
    a.v_stride[i] = p.v.stride[i];
    a.o_stride[i] = p.out.stride[i];
    a.lse_stride[i] = p.lse.defined() ? p.lse.stride[i] : 0;
  }
  a.scale_log2 = p.scale() * kLog2e;
  a.causal = p.causal;
  return a;
}

}  // namespace cuda

namespace {

template <int kHeadDimMax>
Status dispatch_dtype(const cuda::FlashArgs& a, DType dtype, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFP32: return cuda::launch_flash<float, kHeadDimMax>(a, stream);
    case DType::kBF16: return cuda::launch_flash<__nv_bfloat16, kHeadDimMax>(a, stream);
    case DType::kFP16: return cuda::launch_flash<__half, kHeadDimMax>(a, stream);
  }
  return Status(StatusCode::kInternal, "flash: unknown dtype");
}

class FlashBackend final : public Backend {
 public:
  std::string_view name() const override { return "flash"; }
  std::string_view description() const override {
    return "GPU fused online-softmax kernel on CUDA cores (any head dim, bf16/fp16/fp32)";
  }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  Status usable() const override {
    const std::string why = cuda::unavailable_reason();
    if (!why.empty()) return Status(StatusCode::kBackendUnavailable, why);
    return cuda::flash_kernels_available();
  }
  Status supports(const ForwardParams&) const override { return Status::Ok(); }
  Status run(const ForwardParams& p, StreamHandle stream) const override {
    const cuda::FlashArgs a = cuda::flash_args_of(p);
    // Head-dim buckets: the kernel handles any multiple of 8 up to its bucket.
    if (p.head_dim() <= 64) return dispatch_dtype<64>(a, p.q.dtype, stream);
    if (p.head_dim() <= 128) return dispatch_dtype<128>(a, p.q.dtype, stream);
    return dispatch_dtype<256>(a, p.q.dtype, stream);
  }
};

}  // namespace

const Backend* cuda_flash_backend() {
  static const FlashBackend backend;
  return &backend;
}

}  // namespace flashattn
