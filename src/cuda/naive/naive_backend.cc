// The "naive" backend: every variant; its S matrix lives in the caller's workspace
// (ForwardParams::workspace, workspace_bytes() of it), so run() neither allocates nor
// synchronizes and can be captured in a CUDA graph. forward() supplies a temporary workspace when
// the caller gives none (api/workspace.h).
#include <cuda_runtime.h>

#include <limits>
#include <string>

#include "api/backend.h"
#include "api/workspace.h"
#include "common/checked_math.h"
#include "cuda/common/runtime.h"
#include "cuda/naive/naive.h"

namespace flashattn {
namespace {

class NaiveBackend final : public Backend {
 public:
  std::string_view name() const override { return "naive"; }
  std::string_view description() const override {
    return "GPU golden reference: S = scale*QK^T to global memory (float32), softmax, O = PV";
  }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  Status usable(Device device) const override {
    return cuda::backend_usable(device, &cuda::naive_kernels_available);
  }
  unsigned variants() const override { return kAllVariants; }
  Status supports(const ForwardParams&) const override { return Status::Ok(); }
  // Saturates: an S matrix too large to count needs more memory than any device has (run()
  // then reports the factors).
  std::size_t workspace_bytes(const ForwardParams& p) const override {
    std::size_t bytes = 0;
    return cuda::naive_workspace_bytes(p, &bytes) ? bytes : std::numeric_limits<std::size_t>::max();
  }
  std::string_view workspace_purpose() const override {
    return "the float32 S matrix, batch * heads * max_seqlen_q * max_seqlen_k * 4 bytes";
  }
  Status run(const ForwardParams& p, StreamHandle stream) const override {
    std::size_t s_bytes = 0;
    if (!cuda::naive_workspace_bytes(p, &s_bytes)) {
      return Status(StatusCode::kOutOfMemory,
                    "naive: the S matrix (float32) needs batch * heads * seqlen_q * seqlen_k * 4 = " +
                        std::to_string(p.batch()) + " * " + std::to_string(p.heads()) + " * " +
                        std::to_string(p.seqlen_q()) + " * " + std::to_string(p.seqlen_k()) +
                        " * 4 bytes, more than 64 bits can count");
    }
    const Status st = check_workspace(*this, p);
    if (!st.ok()) return st;
    return cuda::launch_naive(p, static_cast<float*>(p.workspace), stream);
  }
};

}  // namespace

namespace cuda {

bool naive_workspace_bytes(const ForwardParams& p, std::size_t* bytes) {
  return checked_product<std::size_t>(
      {static_cast<std::size_t>(p.batch()), static_cast<std::size_t>(p.heads()),
       static_cast<std::size_t>(p.seqlen_q()), static_cast<std::size_t>(p.seqlen_k()),
       sizeof(float)},
      bytes);
}

}  // namespace cuda

const Backend* cuda_naive_backend() {
  static const NaiveBackend backend;
  return &backend;
}

}  // namespace flashattn
