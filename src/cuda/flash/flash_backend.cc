// The "flash" backend: picks the head-dim bucket and dtype instantiation and launches; every
// variant, no workspace.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "api/backend.h"
#include "cuda/common/runtime.h"
#include "cuda/flash/flash.h"

namespace flashattn {
namespace {

template <int kHeadDimMax>
Status dispatch_dtype(const cuda::KernelArgs& a, DType dtype, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFP32: return cuda::launch_flash<float, kHeadDimMax>(a, stream);
    case DType::kBF16: return cuda::launch_flash<__nv_bfloat16, kHeadDimMax>(a, stream);
    case DType::kFP16: return cuda::launch_flash<__half, kHeadDimMax>(a, stream);
    case DType::kInt32: break;  // not a value dtype: validate() refuses it
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
  Status usable(Device device) const override {
    return cuda::backend_usable(device, &cuda::flash_kernels_available);
  }
  // Every variant: windows, softcap, ALiBi, sinks, varlen (flash_kernel.cuh).
  unsigned variants() const override { return kAllVariants; }
  Status supports(const ForwardParams&) const override { return Status::Ok(); }
  Status run(const ForwardParams& p, StreamHandle stream) const override {
    const cuda::KernelArgs a = cuda::kernel_args_of(p);
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
