// The "flash" backend's launcher: one fused CUDA-core kernel, tiled online softmax, every variant
// (window, softcap, ALiBi, sinks, varlen).
#pragma once

#include <cuda_runtime.h>

#include "cuda/common/kernel_args.h"
#include "flashattn/forward.h"

namespace flashattn::cuda {

// One instantiation per (head-dim bucket, dtype): T is float, __nv_bfloat16 or __half; the
// kernel handles any head_dim <= kHeadDimMax that is a multiple of 8.
template <typename T, int kHeadDimMax>
Status launch_flash(const KernelArgs& args, cudaStream_t stream);

// Ok when this GPU has a kernel image for the flash kernels.
Status flash_kernels_available();

}  // namespace flashattn::cuda
