// elect.sync (sm_90): picks one active lane of the warp, the same one on every call with the
// same mask, without a shuffle or a lane-id comparison. For the single-lane work of a warp-uniform
// branch: issuing TMA copies, arrive.expect_tx, the TMA store.
#pragma once

#include <cstdint>

#include "cuda/primitives/arch.h"

namespace flashattn::cuda::ptx {

// True in exactly one lane of the (fully active) calling warp.
__device__ __forceinline__ bool elect_one_sync() {
#if defined(FA_SM90_PTX)
  std::uint32_t elected;
  asm volatile(
      "{\n.reg .b32 lane;\n.reg .pred p;\n"
      "elect.sync lane|p, 0xffffffff;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(elected));
  return elected != 0;
#else
  __trap();
  return false;
#endif
}

}  // namespace flashattn::cuda::ptx
