// Built with FLASHATTN_BUILD_CUDA_KERNELS=OFF: the GPU backends exist in the registry (so names,
// `flashattn info` and errors stay the same) but say they were not built.
#include "api/backend.h"
#include "cuda/decode/combine_cuda.h"

namespace flashattn {
namespace {

class NotBuiltBackend final : public Backend {
 public:
  NotBuiltBackend(std::string_view name, std::string_view description)
      : name_(name), description_(description) {}
  std::string_view name() const override { return name_; }
  std::string_view description() const override { return description_; }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  Status usable(Device /*device*/) const override {
    return Status(StatusCode::kBackendUnavailable,
                  "not built (configure with -DFLASHATTN_BUILD_CUDA_KERNELS=ON)");
  }
  unsigned variants() const override { return 0; }
  Status supports(const ForwardParams& p) const override { return usable(p.q.device); }
  Status run(const ForwardParams& p, StreamHandle) const override { return usable(p.q.device); }

 private:
  std::string_view name_, description_;
};

}  // namespace

const Backend* cuda_flash_sm80_backend() {
  static const NotBuiltBackend b("flash-sm80", "GPU tensor-core kernel (mma.sync, sm_80+)");
  return &b;
}

const Backend* cuda_flash_sm90_backend() {
  static const NotBuiltBackend b("flash-sm90", "GPU Hopper kernel (wgmma + TMA, sm_90a)");
  return &b;
}

const Backend* cuda_naive_backend() {
  static const NotBuiltBackend b("naive", "GPU golden reference: S to global memory, softmax, PV");
  return &b;
}

const Backend* cuda_flash_backend() {
  static const NotBuiltBackend b("flash", "GPU fused online-softmax kernel (CUDA cores)");
  return &b;
}

const Backend* cuda_flash_decode_backend() {
  static const NotBuiltBackend b("flash-decode", "GPU KV-cache kernel (tensor cores, split-KV)");
  return &b;
}

namespace cuda {
Status combine_cuda(const CombineParams& /*params*/, StreamHandle /*stream*/) {
  return Status(StatusCode::kBackendUnavailable,
                "combine() on CUDA tensors: not built (configure with "
                "-DFLASHATTN_BUILD_CUDA_KERNELS=ON)");
}
}  // namespace cuda

}  // namespace flashattn
