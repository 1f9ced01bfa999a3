// Thread-block clusters (sm_90 and later): the blocks of one cluster run at the same time on one
// GPC and read each other's shared memory (distributed shared memory). flash-decode's splits of
// one (sequence, kv head) merge this way, without a workspace or a second kernel
// (cuda/decode/decode_mma_kernel.cuh).
#pragma once

#include <cstdint>

#include "cuda/primitives/arch.h"

namespace flashattn::cuda::ptx {

// This block's rank in its cluster: 0 .. cluster size - 1 (x fastest).
__device__ __forceinline__ unsigned cluster_ctarank() {
#if defined(FA_SM90_PTX)
  std::uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
#else
  __trap();
  return 0;
#endif
}

// Every thread of every block of the cluster: arrive (release: this thread's shared and global
// writes are visible to the cluster's threads after their wait) and wait for all (acquire).
// All threads of each warp execute it together (.aligned).
__device__ __forceinline__ void cluster_sync() {
#if defined(FA_SM90_PTX)
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}

// The address in block `rank`'s shared memory of what lies at `smem_addr` in this block's (a
// 32-bit .shared::cta address, smem.cuh): a .shared::cluster address for ld_cluster_*().
__device__ __forceinline__ std::uint32_t map_shared_rank(std::uint32_t smem_addr, unsigned rank) {
#if defined(FA_SM90_PTX)
  std::uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(smem_addr), "r"(rank));
  return r;
#else
  __trap();
  return 0;
#endif
}

__device__ __forceinline__ float ld_cluster_f32(std::uint32_t cluster_addr) {
#if defined(FA_SM90_PTX)
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(cluster_addr) : "memory");
  return v;
#else
  __trap();
  return 0.0f;
#endif
}

// 16 bytes, 16-byte aligned.
__device__ __forceinline__ float4 ld_cluster_f32x4(std::uint32_t cluster_addr) {
#if defined(FA_SM90_PTX)
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(cluster_addr)
               : "memory");
  return v;
#else
  __trap();
  return make_float4(0.f, 0.f, 0.f, 0.f);
#endif
}

}  // namespace flashattn::cuda::ptx
