// Launch-error checking for the GPU backends.
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/runtime.h"

namespace flashattn::cuda {

// The error of the last launch (configuration errors surface here, before the kernel runs).
inline Status check_launch(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  return status_from_cuda(err, kernel);
}

}  // namespace flashattn::cuda

#define FA_CUDA_RETURN_IF_ERROR(call, what)                                           \
  do {                                                                                \
    cudaError_t _err = (call);                                                        \
    if (_err != cudaSuccess) return ::flashattn::cuda::status_from_cuda(_err, what);  \
  } while (0)
