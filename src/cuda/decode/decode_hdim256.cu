// flash-decode kernels for head dims up to 256 (one translation unit per bucket).
#include "cuda/decode/decode_launch.cuh"

namespace flashattn::cuda {
FLASHATTN_INSTANTIATE_DECODE(256)
}  // namespace flashattn::cuda
