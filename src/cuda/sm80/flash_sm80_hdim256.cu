// flash-sm80 kernels for head dim 256 (one translation unit per head dim: the build parallelizes).
#include "cuda/sm80/flash_sm80.h"
#include "cuda/sm80/flash_sm80_kernel.cuh"

namespace flashattn::cuda {

template Status launch_flash_sm80<__nv_bfloat16, 256>(const KernelArgs&, cudaStream_t);
template Status launch_flash_sm80<__half, 256>(const KernelArgs&, cudaStream_t);

}  // namespace flashattn::cuda
