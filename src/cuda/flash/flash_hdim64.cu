// Instantiations of the CUDA-core flash kernel for head dims up to 64 (one translation unit per
// head-dim bucket so the build parallelizes).
#include "cuda/flash/flash_kernel.cuh"

namespace flashattn::cuda {
FLASHATTN_INSTANTIATE_FLASH(64)

Status flash_kernels_available() {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, flash_forward_kernel<float, 64>);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kBackendUnavailable,
                  std::string("no kernel image for this GPU (") + cudaGetErrorString(err) +
                      "); rebuild with its architecture in FLASHATTN_CUDA_ARCHS");
  }
  return Status::Ok();
}
}  // namespace flashattn::cuda
