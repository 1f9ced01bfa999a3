// griddepcontrol (sm_90): programmatic dependent launch. A kernel launched with the
// cudaLaunchAttributeProgrammaticStreamSerialization attribute may start while the kernel before
// it in the stream still runs, once every block of that one has called launch_dependents() or
// exited; it must call grid_dependency_wait() before it reads anything the earlier kernel
// writes (the wait returns when that grid has completed and its memory is visible).
// Without the attribute, and on sm_80 where the instructions do not exist, both are no-ops:
// stream order already runs the kernels one after the other.
#pragma once

#include "cuda/primitives/arch.h"

namespace flashattn::cuda::ptx {

// Blocks until the prerequisite grid of a programmatic launch has completed and flushed its
// memory; returns at once for a kernel launched without one.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(FA_SM90_PTX)
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next kernel in the stream (if launched programmatically) start once every block of
// this grid has called it or exited. Says nothing about this grid's memory: the dependent still
// waits with grid_dependency_wait() for that.
__device__ __forceinline__ void launch_dependents() {
#if defined(FA_SM90_PTX)
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

}  // namespace flashattn::cuda::ptx
