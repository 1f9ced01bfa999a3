// combine() (flashattn/combine.h) on CUDA tensors: one kernel, float32, on the caller's stream.
#pragma once

#include "flashattn/combine.h"

namespace flashattn::cuda {

// Parts one launch takes (their pointers and strides are kernel parameters: 32 x 64 bytes).
constexpr int kMaxCombineParts = 32;

// On validated params whose tensors are on a CUDA device; kUnsupported past kMaxCombineParts.
Status combine_cuda(const CombineParams& params, StreamHandle stream);

}  // namespace flashattn::cuda
