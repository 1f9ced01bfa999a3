// The naive GPU backend's launcher: the lesson's three-kernel golden reference.
//   1. S = scale * Q K^T (+ causal mask as -inf), float32, into global memory  (B, H, Sq, Sk)
//   2. softmax of each row of S in place; LSE = row max + log(row sum)
//   3. O = P V, float32 accumulation, rounded to the output dtype
// O(Sq * Sk) bytes through memory: slow, and out of memory at long lengths by design.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "flashattn/forward.h"

namespace flashattn::cuda {

// *bytes = the bytes of the float32 S matrix, batch * heads * seqlen_q * seqlen_k * 4; false when
// that does not fit 64 bits (checked: the product wrapped to a small buffer before). Host code, in
// naive_backend.cc.
bool naive_workspace_bytes(const ForwardParams& params, std::size_t* bytes);

// Launches the three kernels on `stream`. `s_gmem` holds naive_workspace_bytes(params) bytes.
Status launch_naive(const ForwardParams& params, float* s_gmem, cudaStream_t stream);

// Ok when this GPU can run the kernels (a compatible image was compiled for its architecture).
Status naive_kernels_available();

}  // namespace flashattn::cuda
