// Instantiations of the CUDA-core flash kernel for head dims up to 256 (one translation unit per
// head-dim bucket so the build parallelizes).
#include "cuda/flash/flash_kernel.cuh"

namespace flashattn::cuda {
FLASHATTN_INSTANTIATE_FLASH(256)
}  // namespace flashattn::cuda
