// The GPU backends' view of the problem struct, and the kernel-image check.
#pragma once

#include <cstdint>

#include "common/attention_args.h"
#include "flashattn/forward.h"

namespace flashattn::cuda {

// The GPU kernels' arguments: the one problem struct of every backend (common/attention_args.h),
// passed by value.
using KernelArgs = AttentionArgs;
inline KernelArgs kernel_args_of(const ForwardParams& params) { return make_attention_args(params); }

// Ok when this GPU has a compiled image of `kernel` (a __global__ function's address); otherwise
// kBackendUnavailable naming the fix.
Status check_kernel_image(const void* kernel);

}  // namespace flashattn::cuda
