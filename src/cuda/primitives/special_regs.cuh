// Special registers read with volatile asm. ptxas treats threadIdx.x as a loop invariant and
// hoists whatever is derived from it out of a loop, holding it live across the loop body; a
// volatile read cannot be hoisted, so the values derived from it are recomputed where they are
// used (a few integer instructions) instead. The persistent flash-sm90 kernel uses them: at the
// consumers' 240-register limit, the lane's row held across the work-tile loop was the one value
// spilled, and at the producer's 24 the values derived from the block index and the grid size
// for TileScheduler::dealt spilled the variant kernel.
#pragma once

#include <cstdint>

namespace flashattn::cuda::ptx {

__device__ __forceinline__ int thread_index_x() {
  std::uint32_t tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return static_cast<int>(tid);
}

__device__ __forceinline__ unsigned block_index_x() {
  std::uint32_t v;
  asm volatile("mov.u32 %0, %%ctaid.x;\n" : "=r"(v));
  return v;
}

__device__ __forceinline__ unsigned grid_dim_x() {
  std::uint32_t v;
  asm volatile("mov.u32 %0, %%nctaid.x;\n" : "=r"(v));
  return v;
}

// Timers for phase traces (cuda/decode/decode_trace.cuh). The SM's cycle counter, low 32 bits,
// read after `dep` is available (pass a value the phase produced, so the read waits for it;
// the memory clobber keeps loads and stores on their side).
__device__ __forceinline__ std::uint32_t clock_after(std::uint32_t dep) {
  std::uint32_t c;
  asm volatile("mov.u32 %0, %%clock;\n" : "=r"(c) : "r"(dep) : "memory");
  return c;
}

// The GPU-wide nanosecond clock (comparable across SMs; it ticks in steps of tens of ns).
__device__ __forceinline__ std::uint64_t globaltimer_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t)::"memory");
  return t;
}

__device__ __forceinline__ unsigned sm_id() {
  std::uint32_t v;
  asm volatile("mov.u32 %0, %%smid;\n" : "=r"(v));
  return v;
}

}  // namespace flashattn::cuda::ptx
