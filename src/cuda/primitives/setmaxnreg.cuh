// setmaxnreg (sm_90a only): a warpgroup gives registers back to the block's pool or takes more
// from it, so a producer warpgroup can run on few and the math warpgroups on many. All 4 warps of
// the warpgroup execute the same call. ptxas needs the register count at kernel entry
// (__launch_bounds__(threads, 1): the 1 is required) and drops the instruction otherwise, saying
// "C7508 ... 'setmaxnreg' ignored". Budget with one block per SM: 65536 registers; 384 threads
// start at 168 each, and producer 24 + two consumers 240 is an exact fit (18432 freed, 18432
// taken). An increase blocks until the pool has the registers (asking for more than was freed
// hangs); the new registers hold garbage.
#pragma once

#include "cuda/primitives/arch.h"

namespace flashattn::cuda::ptx {

// Raises this warpgroup's per-thread register limit to kRegs (24..256, a multiple of 8; not
// below the current limit).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg: 24..256, step 8");
#if defined(FA_SM90A_PTX)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  __trap();
#endif
}

// Lowers this warpgroup's per-thread register limit to kRegs (not above the current limit).
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg: 24..256, step 8");
#if defined(FA_SM90A_PTX)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#else
  __trap();
#endif
}

}  // namespace flashattn::cuda::ptx
