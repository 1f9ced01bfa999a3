// The "naive" backend: allocates S (checking the bytes first, so OOM is measured and reported with
// the figure) and runs the three kernels.
#include <cuda_runtime.h>

#include "api/backend.h"
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
  Status usable() const override {
    return cuda::backend_usable(&cuda::naive_kernels_available);
  }
  Status supports(const ForwardParams&) const override { return Status::Ok(); }
  std::size_t workspace_bytes(const ForwardParams& p) const override {
    return cuda::naive_workspace_bytes(p);
  }
  Status run(const ForwardParams& p, StreamHandle stream) const override {
    cuda::DeviceBuffer s_gmem;
    Status st = s_gmem.allocate(cuda::naive_workspace_bytes(p), "naive: the S matrix (float32)");
    if (!st.ok()) return st;
    st = cuda::launch_naive(p, static_cast<float*>(s_gmem.data()), stream);
    if (!st.ok()) return st;
    // S is freed when this returns: wait until the kernels that read it are done.
    return cuda::status_from_cuda(cudaStreamSynchronize(stream), "naive: stream synchronize");
  }
};

}  // namespace

const Backend* cuda_naive_backend() {
  static const NaiveBackend backend;
  return &backend;
}

}  // namespace flashattn
