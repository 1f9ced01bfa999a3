// flash-decode kernels for head dims up to 64 (one translation unit per bucket).
#include "cuda/decode/decode_launch.cuh"

namespace flashattn::cuda {
FLASHATTN_INSTANTIATE_DECODE(64)

Status decode_kernels_available() {
  return check_kernel_image(reinterpret_cast<const void*>(decode_attention_kernel<float, 64>));
}
}  // namespace flashattn::cuda
