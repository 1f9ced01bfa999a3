// TMA, the tensor memory accelerator (cp.async.bulk.tensor, sm_90): one thread copies a box of
// a 2D..5D global tensor to or from shared memory, described by a CUtensorMap that the host built
// (cuda/common/tensor_map.h) and passed as a `const __grid_constant__ CUtensorMap` kernel
// parameter; pass its address (&map) here. Coordinates are element indices, innermost (the
// contiguous dimension) first, as int32; boxes may reach past the tensor's edges.
//   load:  completes on an mbarrier (mbarrier.cuh): the producer arms it with
//          mbarrier_arrive_expect_tx(bar, box bytes), then issues the loads; box elements outside
//          the tensor arrive as zeros and still count in the bytes.
//   store: runs in bulk groups of the issuing thread: tma_store_commit(), then
//          tma_store_wait_read<0>() before the shared source is overwritten, tma_store_wait<0>()
//          before the writes must be complete (kernel end). Box elements outside the tensor are
//          not written. The threads that wrote the source tile run fence_proxy_async_shared()
//          (fence.cuh) before the barrier that hands it to the issuing thread.
// Shared-memory tiles: 128-byte aligned, 1024-byte aligned with 128B swizzle (wgmma_layout.h
// describes the swizzled layout; a misaligned swizzled tile gives wrong data, no error).
// Without a cluster launch a block is a cluster of one, so its own .shared::cta addresses are
// valid .shared::cluster destinations.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: nothing here calls the driver)

#include <cstdint>

#include "cuda/primitives/arch.h"

namespace flashattn::cuda::ptx {

// Fetches the tensor map into the descriptor cache ahead of the first copy (one thread, early).
__device__ __forceinline__ void tma_prefetch_map(const CUtensorMap* map) {
#if defined(FA_SM90_PTX)
  const std::uint64_t map_addr = reinterpret_cast<std::uint64_t>(map);  // generic address
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map_addr) : "memory");
#else
  __trap();
#endif
}

// Loads the box at (c0, c1, ...) into dst_smem; its bytes complete_tx on bar_smem.
__device__ __forceinline__ void tma_load(std::uint32_t dst_smem, const CUtensorMap* map,
                                         std::uint32_t bar_smem, int c0, int c1) {
#if defined(FA_SM90_PTX)
  const std::uint64_t map_addr = reinterpret_cast<std::uint64_t>(map);  // generic address
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst_smem),
      "l"(map_addr), "r"(bar_smem), "r"(c0), "r"(c1)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_load(std::uint32_t dst_smem, const CUtensorMap* map,
                                         std::uint32_t bar_smem, int c0, int c1, int c2) {
#if defined(FA_SM90_PTX)
  const std::uint64_t map_addr = reinterpret_cast<std::uint64_t>(map);  // generic address
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst_smem),
      "l"(map_addr), "r"(bar_smem), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_load(std::uint32_t dst_smem, const CUtensorMap* map,
                                         std::uint32_t bar_smem, int c0, int c1, int c2, int c3) {
#if defined(FA_SM90_PTX)
  const std::uint64_t map_addr = reinterpret_cast<std::uint64_t>(map);  // generic address
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst_smem),
      "l"(map_addr), "r"(bar_smem), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_load(std::uint32_t dst_smem, const CUtensorMap* map,
                                         std::uint32_t bar_smem, int c0, int c1, int c2, int c3,
                                         int c4) {
#if defined(FA_SM90_PTX)
  const std::uint64_t map_addr = reinterpret_cast<std::uint64_t>(map);  // generic address
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n" ::"r"(dst_smem),
      "l"(map_addr), "r"(bar_smem), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
#else
  __trap();
#endif
}

// Stores the shared tile src_smem to the box at (c0, c1, ...), in this thread's current bulk group.
__device__ __forceinline__ void tma_store(const CUtensorMap* map, std::uint32_t src_smem, int c0,
                                          int c1) {
#if defined(FA_SM90_PTX)
  const std::uint64_t map_addr = reinterpret_cast<std::uint64_t>(map);  // generic address
  asm volatile(
      "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"
      " [%0, {%2, %3}], [%1];\n" ::"l"(map_addr),
      "r"(src_smem), "r"(c0), "r"(c1)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_store(const CUtensorMap* map, std::uint32_t src_smem, int c0,
                                          int c1, int c2) {
#if defined(FA_SM90_PTX)
  const std::uint64_t map_addr = reinterpret_cast<std::uint64_t>(map);  // generic address
  asm volatile(
      "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group"
      " [%0, {%2, %3, %4}], [%1];\n" ::"l"(map_addr),
      "r"(src_smem), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_store(const CUtensorMap* map, std::uint32_t src_smem, int c0,
                                          int c1, int c2, int c3) {
#if defined(FA_SM90_PTX)
  const std::uint64_t map_addr = reinterpret_cast<std::uint64_t>(map);  // generic address
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group"
      " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(map_addr),
      "r"(src_smem), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#else
  __trap();
#endif
}

__device__ __forceinline__ void tma_store(const CUtensorMap* map, std::uint32_t src_smem, int c0,
                                          int c1, int c2, int c3, int c4) {
#if defined(FA_SM90_PTX)
  const std::uint64_t map_addr = reinterpret_cast<std::uint64_t>(map);  // generic address
  asm volatile(
      "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group"
      " [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(map_addr),
      "r"(src_smem), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
      : "memory");
#else
  __trap();
#endif
}

// Closes this thread's TMA stores since the last commit into one bulk group.
__device__ __forceinline__ void tma_store_commit() {
#if defined(FA_SM90_PTX)
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#else
  __trap();
#endif
}

// Waits until at most kPending of this thread's bulk groups still read their shared source (the
// tile may then be overwritten; the global writes may still be in flight).
template <int kPending>
__device__ __forceinline__ void tma_store_wait_read() {
#if defined(FA_SM90_PTX)
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
#else
  __trap();
#endif
}

// Waits until at most kPending of this thread's bulk groups are still running at all.
template <int kPending>
__device__ __forceinline__ void tma_store_wait() {
#if defined(FA_SM90_PTX)
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
#else
  __trap();
#endif
}

}  // namespace flashattn::cuda::ptx
