// Named barriers (bar.sync / bar.arrive with an id and a thread count; every architecture we
// build for): 16 per block, ids 0-15, id 0 being __syncthreads'. `threads` counts every thread
// that takes part, arrivers and waiters together, and is a multiple of 32: the barrier works per
// warp, and a warp must not arrive twice before the barrier completes. Warps that have exited
// never arrive: leave them out of the count (a count that includes them hangs).
#pragma once

namespace flashattn::cuda::ptx {

// Arrives and waits until `threads` threads have arrived at barrier `id`.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Arrives at barrier `id` without waiting (a producer signalling waiters that bar.sync on it);
// this warp's earlier shared-memory writes are visible to them once the barrier completes.
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace flashattn::cuda::ptx
