#include "cuda/common/kernel_args.h"

#include <cuda_runtime.h>

#include <string>


namespace flashattn::cuda {

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
