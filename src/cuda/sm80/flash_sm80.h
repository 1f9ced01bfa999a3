// The "flash-sm80" backend's launchers: the mma.sync tensor-core kernel, bf16 and fp16, for the
// head dims in kSm80HeadDims (others run on the "flash" backend).
#pragma once

#include <cuda_runtime.h>

#include <array>

#include "cuda/common/kernel_args.h"
#include "flashattn/forward.h"

namespace flashattn::cuda {

constexpr std::array<int, 5> kSm80HeadDims = {64, 96, 128, 192, 256};

// T is __nv_bfloat16 or __half; kHeadDim one of kSm80HeadDims (the tile shape it runs with:
// Sm80ConfigFor in flash_sm80_config.h).
template <typename T, int kHeadDim>
Status launch_flash_sm80(const KernelArgs& args, cudaStream_t stream);

// Ok when this GPU is sm_80 or newer and has an image of the kernels.
Status flash_sm80_kernels_available();

}  // namespace flashattn::cuda
