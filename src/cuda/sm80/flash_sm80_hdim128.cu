// flash-sm80 kernels for head dim 128 (one translation unit per head dim: the build parallelizes).
#include "cuda/sm80/flash_sm80.h"
#include "cuda/sm80/flash_sm80_kernel.cuh"

namespace flashattn::cuda {

template Status launch_flash_sm80<__nv_bfloat16, 128>(const KernelArgs&, cudaStream_t);
template Status launch_flash_sm80<__half, 128>(const KernelArgs&, cudaStream_t);

Status flash_sm80_kernels_available() {
  return check_kernel_image(reinterpret_cast<const void*>(
      flash_sm80_kernel<__nv_bfloat16, Sm80ConfigFor<128>::type, false>));
}

}  // namespace flashattn::cuda
