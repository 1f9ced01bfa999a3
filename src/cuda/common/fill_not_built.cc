// Built with FLASHATTN_BUILD_CUDA_KERNELS=OFF: device fills are unavailable.
#include "cuda/common/fill.h"

namespace flashattn::cuda {
namespace {
Status not_built() {
  return Status(StatusCode::kBackendUnavailable, "CUDA kernels were not built");
}
}  // namespace

Status fill_normal(const TensorView&, std::uint64_t, std::uint64_t, float, float) {
  return not_built();
}
Status fill_value(const TensorView&, float) { return not_built(); }
Status convert(const TensorView&, const TensorView&) { return not_built(); }
Status memset_bytes(void*, int, std::size_t) { return not_built(); }

}  // namespace flashattn::cuda
