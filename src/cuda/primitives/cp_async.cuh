// cp.async (sm_80+): 16-byte copies from global to shared memory that bypass registers and run in
// the background; completion is tracked in commit groups.
#pragma once

#include <cstdint>

namespace flashattn::cuda::ptx {

// Copies 16 bytes from global to shared memory; when `valid` is false the 16 bytes are
// zero-filled instead (src-size 0: the source is not read), which is how tile tails are padded.
// .cg caches in L2 only: K and V tiles are re-read by other blocks, never by this one.
__device__ __forceinline__ void cp_async_16(std::uint32_t dst_smem, const void* src_gmem,
                                            bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst_smem), "l"(src_gmem),
               "r"(src_bytes)
               : "memory");
}

// Closes the group of cp.async issued by this thread since the last commit.
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most kPending of this thread's committed groups are still in flight.
// Other threads' copies need a barrier after this before they can be read.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace flashattn::cuda::ptx
