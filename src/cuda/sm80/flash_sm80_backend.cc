// The "flash-sm80" backend: the mma.sync tensor-core kernel for bf16/fp16 and the head dims in
// kSm80HeadDims, on GPUs of compute capability 8.0 and newer. Other params are reported as
// unsupported, so "auto" moves on to the CUDA-core "flash" backend for them.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "api/backend.h"
#include "cuda/common/runtime.h"
#include "cuda/sm80/flash_sm80.h"

namespace flashattn {
namespace {

template <typename T>
Status dispatch_head_dim(const cuda::KernelArgs& a, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64: return cuda::launch_flash_sm80<T, 64>(a, stream);
    case 96: return cuda::launch_flash_sm80<T, 96>(a, stream);
    case 128: return cuda::launch_flash_sm80<T, 128>(a, stream);
    case 192: return cuda::launch_flash_sm80<T, 192>(a, stream);
    case 256: return cuda::launch_flash_sm80<T, 256>(a, stream);
    default: break;
  }
  return Status(StatusCode::kInternal, "flash-sm80: head dim not dispatched");
}

std::string head_dim_list() {
  std::string s;
  for (int d : cuda::kSm80HeadDims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

class FlashSm80Backend final : public Backend {
 public:
  std::string_view name() const override { return "flash-sm80"; }
  std::string_view description() const override {
    return "GPU tensor-core kernel (mma.sync, sm_80+), bf16/fp16, head dims 64/96/128/192/256";
  }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  Status usable(Device device) const override {
    return cuda::backend_usable(device, &cuda::flash_sm80_kernels_available, /*min_major=*/8);
  }
  unsigned variants() const override { return kAllVariants; }
  Status supports(const ForwardParams& p) const override {
    if (p.q.dtype == DType::kFP32) {
      return Status(StatusCode::kUnsupported,
                    "flash-sm80 takes dtype bf16 or fp16; got q.dtype = fp32");
    }
    bool known = false;
    for (int d : cuda::kSm80HeadDims) known = known || p.head_dim() == d;
    if (!known) {
      return Status(StatusCode::kUnsupported, "flash-sm80 takes head_dim in {" + head_dim_list() +
                                                  "}; got q.shape[3] = " +
                                                  std::to_string(p.head_dim()));
    }
    return Status::Ok();
  }
  Status run(const ForwardParams& p, StreamHandle stream) const override {
    const cuda::KernelArgs a = cuda::kernel_args_of(p);
    if (p.q.dtype == DType::kBF16) return dispatch_head_dim<__nv_bfloat16>(a, stream);
    return dispatch_head_dim<__half>(a, stream);
  }
};

}  // namespace

const Backend* cuda_flash_sm80_backend() {
  static const FlashSm80Backend backend;
  return &backend;
}

}  // namespace flashattn
