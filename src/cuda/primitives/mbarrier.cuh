// mbarrier (sm_90 forms): an 8-byte barrier object in shared memory that counts thread arrivals
// and, for TMA, transaction bytes. A phase completes when both its pending arrivals and its
// pending bytes reach zero; the phase parity then flips and the arrival count reloads.
// After init the current phase has parity 0: wait(bar, 0) blocks until the first completion,
// wait(bar, 1) returns at once (the phase before counts as complete). A ring of stages keeps one
// parity bit per pass: stage s = it % S, parity (it / S) & 1 for consumers and its complement
// for producers (who thus pass their first wait on every stage).
// All addresses are 32-bit shared addresses (smem.cuh), 8-byte aligned.
#pragma once

#include <cstdint>

#include "cuda/primitives/arch.h"

namespace flashattn::cuda::ptx {

// One thread initialises the barrier to expect `count` arrivals per phase (1 .. 2^20 - 1). Follow
// with fence_mbarrier_init() and a block barrier before any thread or TMA uses it; never
// re-initialise a barrier that is in use.
__device__ __forceinline__ void mbarrier_init(std::uint32_t bar_smem, std::uint32_t count) {
#if defined(FA_SM90_PTX)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar_smem), "r"(count) : "memory");
#else
  __trap();
#endif
}

// Makes this thread's mbarrier_init()s visible to the other threads and to the async proxy (TMA
// completes transactions on the barrier): after the inits, before the block barrier.
__device__ __forceinline__ void fence_mbarrier_init() {
#if defined(FA_SM90_PTX)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#else
  __trap();
#endif
}

// One arrival (release: this thread's earlier memory accesses are visible to whoever waits on
// the completed phase; a warp that wrote data and arrives from one lane needs __syncwarp first).
__device__ __forceinline__ void mbarrier_arrive(std::uint32_t bar_smem) {
#if defined(FA_SM90_PTX)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar_smem) : "memory");
#else
  __trap();
#endif
}

// One arrival that also adds `bytes` (< 2^20) to the phase's pending transaction count: the
// producer's call before issuing TMA copies that complete on this barrier. The bytes must equal
// what the copies deliver, whole boxes even where they reach past the tensor (zero-filled):
// more never completes (a hang), fewer completes before the data has landed.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint32_t bar_smem,
                                                          std::uint32_t bytes) {
#if defined(FA_SM90_PTX)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar_smem),
               "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// True when the phase of parity `parity` has completed (acquire: the data released by the
// arrivals, and the bytes of the TMA copies, are then visible). May wait a little in hardware
// before answering false.
__device__ __forceinline__ bool mbarrier_try_wait_parity(std::uint32_t bar_smem,
                                                         std::uint32_t parity) {
#if defined(FA_SM90_PTX)
  std::uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar_smem), "r"(parity)
      : "memory");
  return done != 0;
#else
  __trap();
  return false;
#endif
}

// Blocks until the phase of parity `parity` has completed.
__device__ __forceinline__ void mbarrier_wait(std::uint32_t bar_smem, std::uint32_t parity) {
  while (!mbarrier_try_wait_parity(bar_smem, parity)) {
  }
}

}  // namespace flashattn::cuda::ptx
