// Instantiations of the CUDA-core flash kernel for head dims up to 64 (one translation unit per
// head-dim bucket so the build parallelizes).
#include "cuda/flash/flash_kernel.cuh"

namespace flashattn::cuda {
FLASHATTN_INSTANTIATE_FLASH(64)

Status flash_kernels_available() {
  return check_kernel_image(reinterpret_cast<const void*>(flash_forward_kernel<float, 64>));
}

}  // namespace flashattn::cuda
