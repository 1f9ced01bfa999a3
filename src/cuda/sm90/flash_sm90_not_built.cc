// Built with the CUDA kernels but without 90a in FLASHATTN_CUDA_ARCHS: "flash-sm90" stays in the
// registry (names, `flashattn info` and errors stay the same) and says it was not built.
#include "api/backend.h"

namespace flashattn {
namespace {

class Sm90NotBuiltBackend final : public Backend {
 public:
  std::string_view name() const override { return "flash-sm90"; }
  std::string_view description() const override {
    return "GPU Hopper kernel (wgmma + TMA, sm_90a)";
  }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  Status usable(Device /*device*/) const override {
    return Status(StatusCode::kBackendUnavailable,
                  "not built (FLASHATTN_CUDA_ARCHS has no 90a)");
  }
  unsigned variants() const override { return 0; }
  Status supports(const ForwardParams& p) const override { return usable(p.q.device); }
  Status run(const ForwardParams& p, StreamHandle) const override { return usable(p.q.device); }
};

}  // namespace

const Backend* cuda_flash_sm90_backend() {
  static const Sm90NotBuiltBackend b;
  return &b;
}

}  // namespace flashattn
