// flash-sm90 kernels for head dim 192 (one translation unit per head dim: the build parallelizes).
#include "cuda/sm90/flash_sm90.h"
#include "cuda/sm90/flash_sm90_kernel.cuh"

namespace flashattn::cuda {

template Status launch_flash_sm90<__nv_bfloat16, 192>(const KernelArgs&, const Sm90Extents&,
                                                     unsigned*, cudaStream_t);
template Status launch_flash_sm90<__half, 192>(const KernelArgs&, const Sm90Extents&, unsigned*,
                                              cudaStream_t);

}  // namespace flashattn::cuda
