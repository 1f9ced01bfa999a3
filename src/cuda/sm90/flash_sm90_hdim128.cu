// flash-sm90 kernels for head dim 128 (one translation unit per head dim: the build parallelizes).
#include "cuda/sm90/flash_sm90.h"
#include "cuda/sm90/flash_sm90_kernel.cuh"

namespace flashattn::cuda {

template Status launch_flash_sm90<__nv_bfloat16, 128>(const KernelArgs&, const Sm90Extents&,
                                                     unsigned*, cudaStream_t);
template Status launch_flash_sm90<__half, 128>(const KernelArgs&, const Sm90Extents&, unsigned*,
                                              cudaStream_t);

// The kernels run only as sm_90a machine code: on compute capability 9.0 (the image is
// arch-specific), and only when the build compiled it (FLASHATTN_CUDA_ARCHS lists 90a; an
// sm_80 image, or PTX JIT-compiled for a newer GPU, has empty kernel bodies).
Status flash_sm90_kernels_available() {
  const void* kernel = reinterpret_cast<const void*>(
      flash_sm90_kernel<__nv_bfloat16, Sm90ConfigFor<128>::type, false>);
  Status st = check_kernel_image(kernel);
  if (!st.ok()) return st;
  cudaFuncAttributes attr{};
  FA_CUDA_RETURN_IF_ERROR(cudaFuncGetAttributes(&attr, kernel), "flash-sm90: cudaFuncGetAttributes");
  if (attr.binaryVersion != 90) {
    return Status(StatusCode::kBackendUnavailable,
                  "flash-sm90 has no sm_90a image for this GPU (it would run as sm_" +
                      std::to_string(attr.binaryVersion) +
                      " code); it needs compute capability 9.0 and 90a in FLASHATTN_CUDA_ARCHS");
  }
  return Status::Ok();
}

}  // namespace flashattn::cuda
