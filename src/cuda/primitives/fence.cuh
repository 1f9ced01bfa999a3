// Proxy fences (sm_90). Ordinary loads and stores (the generic proxy) and the async proxy (TMA,
// and wgmma's shared-memory operand reads) see shared memory through different paths; a barrier
// alone does not order one against the other.
#pragma once

#include "cuda/primitives/arch.h"

namespace flashattn::cuda::ptx {

// Orders this thread's earlier ordinary shared-memory accesses before later async-proxy
// accesses. Every thread that wrote a tile with st.shared / stmatrix runs it before the barrier
// that hands the tile to a TMA store or to wgmma; every thread that read a stage with ld.shared
// runs it before releasing the stage to a TMA refill.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(FA_SM90_PTX)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

}  // namespace flashattn::cuda::ptx
