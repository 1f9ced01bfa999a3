// flash-decode kernels for head dims up to 128 (one translation unit per bucket).
#include "cuda/decode/decode_launch.cuh"

namespace flashattn::cuda {
FLASHATTN_INSTANTIATE_DECODE(128)
}  // namespace flashattn::cuda
