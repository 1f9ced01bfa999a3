// Named barriers (bar.sync / bar.arrive with an id and a thread count): let two warp groups of a
// block hand a resource back and forth without stopping the whole block. Id 0 is
// __syncthreads(); `count` is the number of threads taking part (a multiple of 32), arriving and
// waiting together. A barrier orders the shared-memory accesses made before it by the arriving
// threads before those made after it by the waiting threads.
#pragma once

namespace flashattn::cuda::ptx {

// Waits until `count` threads (this one included) have reached barrier `id`.
__device__ __forceinline__ void named_barrier_sync(int id, int count) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

// Counts this thread as arrived at barrier `id` without waiting.
__device__ __forceinline__ void named_barrier_arrive(int id, int count) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

}  // namespace flashattn::cuda::ptx
