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

// Whether the tensor-core kernels (flash-sm80, flash-sm90) need their general kernel rather than
// the dense one: anything but keys [0, a right edge) per row.
inline bool needs_variant_kernel(const KernelArgs& args) {
  return args.varlen() || args.window_left >= 0 || args.softcap > 0.0f ||
         args.alibi_slopes != nullptr || args.sinks != nullptr;
}

// Ok when this GPU has a compiled image of `kernel` (a __global__ function's address); otherwise
// kBackendUnavailable naming the fix.
Status check_kernel_image(const void* kernel);

}  // namespace flashattn::cuda
