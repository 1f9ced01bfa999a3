// Special registers read with volatile asm. ptxas treats threadIdx.x as a loop invariant and
// hoists whatever is derived from it out of a loop, holding it live across the loop body; a
// volatile read cannot be hoisted, so the values derived from it are recomputed where they are
// used (a few integer instructions) instead. The persistent flash-sm90 consumers use it: at their
// 240-register limit, the lane's row held across the work-tile loop was the one value spilled.
#pragma once

#include <cstdint>

namespace flashattn::cuda::ptx {

__device__ __forceinline__ int thread_index_x() {
  std::uint32_t tid;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(tid));
  return static_cast<int>(tid);
}

}  // namespace flashattn::cuda::ptx
