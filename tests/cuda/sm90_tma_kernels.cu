// Test kernels for TMA loads and stores (2D..5D maps, 128B swizzle, out-of-bounds boxes),
// mbarrier phases (a generic producer/consumer ring and a TMA ring), stmatrix and elect.sync.
// Bodies are compiled for sm_90 and later only; the sm_80 pass of the "80;90a" build sees empty
// kernels, which tma_usable() keeps from running.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/common/runtime.h"
#include "cuda/primitives/arch.h"
#include "cuda/primitives/elect.cuh"
#include "cuda/primitives/fence.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/smem.cuh"
#include "cuda/primitives/stmatrix.cuh"
#include "cuda/primitives/tma.cuh"
#include "cuda/primitives/wgmma_layout.h"
#include "sm90_test_support.cuh"
#include "sm90_tma_kernels.h"

namespace flashattn::testing::sm90 {

// The fixed shapes of the kernels below. (Outside the anonymous namespace: the sm_80 pass, which
// compiles empty kernel bodies, would warn that its constants are unused.)
namespace shapes {
struct Ring {
  static constexpr int kStages = 2, kConsumers = 128, kThreads = 32 + kConsumers;
  static constexpr int kStageBytes = 64 * 64 * 2;
};
struct Ping {
  static constexpr int kStages = 2, kThreads = 32 + kPingConsumers;
};
}  // namespace shapes

namespace {

namespace ptx = cuda::ptx;
using shapes::Ping;
using shapes::Ring;

constexpr int kBlock = 128;

#if defined(FA_SM90_PTX)  // (the sm_80 pass would warn about unused helpers)
__device__ __forceinline__ void load_box(const TmaBoxes& b, int i, std::uint32_t dst_smem,
                                         const CUtensorMap* map, std::uint32_t bar_smem) {
  const int* c = b.coords[i];
  switch (b.rank) {
    case 2: ptx::tma_load(dst_smem, map, bar_smem, c[0], c[1]); break;
    case 3: ptx::tma_load(dst_smem, map, bar_smem, c[0], c[1], c[2]); break;
    case 4: ptx::tma_load(dst_smem, map, bar_smem, c[0], c[1], c[2], c[3]); break;
    default: ptx::tma_load(dst_smem, map, bar_smem, c[0], c[1], c[2], c[3], c[4]); break;
  }
}

__device__ __forceinline__ void store_box(const TmaBoxes& b, int i, const CUtensorMap* map,
                                          std::uint32_t src_smem) {
  const int* c = b.coords[i];
  switch (b.rank) {
    case 2: ptx::tma_store(map, src_smem, c[0], c[1]); break;
    case 3: ptx::tma_store(map, src_smem, c[0], c[1], c[2]); break;
    case 4: ptx::tma_store(map, src_smem, c[0], c[1], c[2], c[3]); break;
    default: ptx::tma_store(map, src_smem, c[0], c[1], c[2], c[3], c[4]); break;
  }
}

// Thread 0 loads every box onto one barrier armed with their total bytes; all threads wait.
__device__ __forceinline__ void load_boxes(const CUtensorMap* map, const TmaBoxes& boxes,
                                           std::uint32_t tile_smem, std::uint32_t bar_smem) {
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(bar_smem, 1);
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ptx::tma_prefetch_map(map);
    ptx::mbarrier_arrive_expect_tx(bar_smem,
                                   static_cast<std::uint32_t>(boxes.count * boxes.box_bytes));
#pragma unroll  // constant box indices: the coordinates stay kernel parameters, not a stack copy
    for (int b = 0; b < 4; ++b) {
      if (b < boxes.count) load_box(boxes, b, tile_smem + b * boxes.box_bytes, map, bar_smem);
    }
  }
  wait_or_trap(bar_smem, 0);
}

// Thread 0 stores every box and waits until the stores are complete.
__device__ __forceinline__ void store_boxes(const CUtensorMap* map, const TmaBoxes& boxes,
                                            std::uint32_t tile_smem) {
  if (threadIdx.x == 0) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      if (b < boxes.count) store_box(boxes, b, map, tile_smem + b * boxes.box_bytes);
    }
    ptx::tma_store_commit();
    ptx::tma_store_wait<0>();
  }
}
#endif  // FA_SM90_PTX

__global__ void __launch_bounds__(kBlock, 1)
    tma_load_kernel(const __grid_constant__ CUtensorMap map, const TmaBoxes boxes,
                    std::uint16_t* out) {
#if defined(FA_SM90_PTX)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tile = smem_align_1024(smem_raw);
  __shared__ std::uint64_t bar;
  const int bytes = boxes.count * boxes.box_bytes;
  for (int i = static_cast<int>(threadIdx.x); i < bytes / 4; i += kBlock) {
    reinterpret_cast<std::uint32_t*>(tile)[i] = 0xFFFFFFFFu;  // poison: what TMA leaves is seen
  }
  ptx::fence_proxy_async_shared();  // the poison stores before TMA's writes to the same bytes
  load_boxes(&map, boxes, ptx::smem_addr(tile), ptx::smem_addr(&bar));
  copy_16b(out, tile, bytes);
#endif
}

__global__ void __launch_bounds__(kBlock, 1)
    tma_store_kernel(const __grid_constant__ CUtensorMap map, const TmaBoxes boxes,
                     const std::uint16_t* image) {
#if defined(FA_SM90_PTX)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tile = smem_align_1024(smem_raw);
  copy_16b(tile, image, boxes.count * boxes.box_bytes);
  ptx::fence_proxy_async_shared();  // every writer, before the barrier that hands over the tile
  __syncthreads();
  store_boxes(&map, boxes, ptx::smem_addr(tile));
#endif
}

__global__ void __launch_bounds__(kBlock, 1)
    tma_round_trip_kernel(const __grid_constant__ CUtensorMap in_map, const TmaBoxes in,
                          const __grid_constant__ CUtensorMap out_map, const TmaBoxes out) {
#if defined(FA_SM90_PTX)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tile = smem_align_1024(smem_raw);
  __shared__ std::uint64_t bar;
  load_boxes(&in_map, in, ptx::smem_addr(tile), ptx::smem_addr(&bar));
  ptx::fence_proxy_async_shared();
  store_boxes(&out_map, out, ptx::smem_addr(tile));
#endif
}

__global__ void __launch_bounds__(Ping::kThreads, 1) mbarrier_ping_kernel(int* values, int* fresh) {
#if defined(FA_SM90_PTX)
  __shared__ std::uint64_t full[Ping::kStages], empty[Ping::kStages];
  __shared__ int buf[Ping::kStages][32];
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    for (int s = 0; s < Ping::kStages; ++s) {
      ptx::mbarrier_init(ptx::smem_addr(&full[s]), 32);
      ptx::mbarrier_init(ptx::smem_addr(&empty[s]), kPingConsumers);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (tid == 0) {  // nobody arrives before the next barrier: phase 0 open, "phase -1" complete
    fresh[0] = ptx::mbarrier_try_wait_parity(ptx::smem_addr(&full[0]), 0) ? 1 : 0;
    fresh[1] = ptx::mbarrier_try_wait_parity(ptx::smem_addr(&full[0]), 1) ? 1 : 0;
  }
  __syncthreads();
  if (tid < 32) {  // producer warp: every lane writes one word and arrives
    for (int it = 0; it < kPingIters; ++it) {
      const int s = it % Ping::kStages;
      const std::uint32_t parity = (it / Ping::kStages) & 1;
      wait_or_trap(ptx::smem_addr(&empty[s]), parity ^ 1);
      buf[s][tid] = it * 1000 + tid;
      ptx::mbarrier_arrive(ptx::smem_addr(&full[s]));
    }
  } else {
    const int c = tid - 32;
    for (int it = 0; it < kPingIters; ++it) {
      const int s = it % Ping::kStages;
      const std::uint32_t parity = (it / Ping::kStages) & 1;
      wait_or_trap(ptx::smem_addr(&full[s]), parity);
      values[it * kPingConsumers + c] = buf[s][c % 32];
      ptx::mbarrier_arrive(ptx::smem_addr(&empty[s]));
    }
  }
#endif
}

__global__ void __launch_bounds__(Ring::kThreads, 1)
    tma_ring_kernel(const __grid_constant__ CUtensorMap map, std::uint16_t* out) {
#if defined(FA_SM90_PTX)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* stages = smem_align_1024(smem_raw);
  __shared__ std::uint64_t full[Ring::kStages], empty[Ring::kStages];
  const int tid = static_cast<int>(threadIdx.x);
  if (tid == 0) {
    for (int s = 0; s < Ring::kStages; ++s) {
      ptx::mbarrier_init(ptx::smem_addr(&full[s]), 1);
      ptx::mbarrier_init(ptx::smem_addr(&empty[s]), Ring::kConsumers);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (tid < 32) {  // producer warp, one elected lane
    if (ptx::elect_one_sync()) {
      ptx::tma_prefetch_map(&map);
      for (int it = 0; it < kRingTiles; ++it) {
        const int s = it % Ring::kStages;
        const std::uint32_t parity = (it / Ring::kStages) & 1;
        wait_or_trap(ptx::smem_addr(&empty[s]), parity ^ 1);
        ptx::mbarrier_arrive_expect_tx(ptx::smem_addr(&full[s]), Ring::kStageBytes);
        ptx::tma_load(ptx::smem_addr(stages + s * Ring::kStageBytes), &map,
                      ptx::smem_addr(&full[s]), 0, it * 64);
      }
    }
  } else {
    const int t = tid - 32;
    constexpr int kChunks = Ring::kStageBytes / 16 / Ring::kConsumers;  // 4 x 16 bytes each
    for (int it = 0; it < kRingTiles; ++it) {
      const int s = it % Ring::kStages;
      const std::uint32_t parity = (it / Ring::kStages) & 1;
      wait_or_trap(ptx::smem_addr(&full[s]), parity);
      const uint4* src = reinterpret_cast<const uint4*>(stages + s * Ring::kStageBytes);
      uint4* dst = reinterpret_cast<uint4*>(out) + it * (Ring::kStageBytes / 16);
#pragma unroll
      for (int q = 0; q < kChunks; ++q) dst[t * kChunks + q] = src[t * kChunks + q];
      ptx::fence_proxy_async_shared();  // our reads of the stage before TMA refills it
      ptx::mbarrier_arrive(ptx::smem_addr(&empty[s]));
    }
  }
#endif
}

__global__ void __launch_bounds__(kBlock, 1)
    stmatrix_tile_kernel(const std::uint16_t* frag, std::uint16_t* out) {
#if defined(FA_SM90_PTX)
  constexpr int kRows = 64, kBytes = 64 * 64 * 2;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* tile = smem_align_1024(smem_raw);
  const int t = static_cast<int>(threadIdx.x), w = t / 32, l = t % 32;
  for (int i = t; i < kBytes / 4; i += kBlock) reinterpret_cast<std::uint32_t*>(tile)[i] = ~0u;
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 4; ++j) {  // 16 columns per stmatrix.x4
    std::uint32_t r[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      r[k] = static_cast<std::uint32_t>(frag[(8 * j + 2 * k) * kBlock + t]) |
             (static_cast<std::uint32_t>(frag[(8 * j + 2 * k + 1) * kBlock + t]) << 16);
    }
    const int row = 16 * w + 8 * ((l / 8) % 2) + l % 8, col = 16 * j + 8 * (l / 16);
    ptx::stmatrix_x4(ptx::smem_addr(tile) + ptx::sw128_offset(kRows, row, col), r);
  }
  __syncthreads();
  copy_16b(out, tile, kBytes);
#endif
}

__global__ void __launch_bounds__(32, 1)
    stmatrix_plain_kernel(const std::uint32_t* regs, std::uint16_t* plain, std::uint16_t* trans) {
#if defined(FA_SM90_PTX)
  __shared__ alignas(16) std::uint16_t plain_smem[256], trans_smem[256];
  const int l = static_cast<int>(threadIdx.x);
  for (int i = l; i < 256; i += 32) plain_smem[i] = trans_smem[i] = 0xFFFF;
  __syncwarp();
  std::uint32_t r[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) r[k] = regs[k * 32 + l];
  const std::uint32_t row_bytes = (l / 8) * 128 + (l % 8) * 16;
  ptx::stmatrix_x4(ptx::smem_addr(plain_smem) + row_bytes, r);
  ptx::stmatrix_x4_trans(ptx::smem_addr(trans_smem) + row_bytes, r);
  __syncwarp();
  for (int i = l; i < 256; i += 32) {
    plain[i] = plain_smem[i];
    trans[i] = trans_smem[i];
  }
#endif
}

__global__ void __launch_bounds__(kBlock, 1) elect_kernel(int* out) {
#if defined(FA_SM90_PTX)
  const int t = static_cast<int>(threadIdx.x);
  out[t] = ptx::elect_one_sync() ? 1 : 0;
  out[kBlock + t] = ptx::elect_one_sync() ? 1 : 0;
#endif
}

Status check_boxes(const TmaBoxes& b) {
  if (b.rank < 2 || b.rank > 5 || b.count < 1 || b.count > 4 || b.box_bytes <= 0 ||
      b.box_bytes % 1024 != 0) {
    return Status(StatusCode::kInvalidArgument, "TmaBoxes: rank 2..5, 1..4 boxes of k * 1024 B");
  }
  return Status::Ok();
}

}  // namespace

Status tma_usable() { return sm90a_usable(reinterpret_cast<const void*>(&tma_load_kernel)); }

Status run_tma_load(const CUtensorMap& map, const TmaBoxes& boxes,
                    std::vector<std::uint16_t>* smem) {
  FA_TEST_RETURN_IF_ERROR(check_boxes(boxes));
  const int bytes = boxes.count * boxes.box_bytes;
  cuda::DeviceBuffer out;
  FA_TEST_RETURN_IF_ERROR(out.allocate(bytes, "shared image"));
  FA_TEST_RETURN_IF_ERROR(
      allow_smem(reinterpret_cast<const void*>(&tma_load_kernel), bytes + kSmemSlack));
  tma_load_kernel<<<1, kBlock, bytes + kSmemSlack>>>(map, boxes,
                                                     static_cast<std::uint16_t*>(out.data()));
  FA_TEST_RETURN_IF_ERROR(finish("tma_load_kernel"));
  return to_host(out, bytes / 2, smem, "shared image");
}

Status run_tma_store(const CUtensorMap& map, const TmaBoxes& boxes,
                     const std::vector<std::uint16_t>& image) {
  FA_TEST_RETURN_IF_ERROR(check_boxes(boxes));
  const int bytes = boxes.count * boxes.box_bytes;
  if (image.size() * 2 != static_cast<std::size_t>(bytes)) {
    return Status(StatusCode::kInvalidShape, "run_tma_store: image size != boxes' bytes");
  }
  cuda::DeviceBuffer in;
  FA_TEST_RETURN_IF_ERROR(to_device(image, &in, "shared image"));
  FA_TEST_RETURN_IF_ERROR(
      allow_smem(reinterpret_cast<const void*>(&tma_store_kernel), bytes + kSmemSlack));
  tma_store_kernel<<<1, kBlock, bytes + kSmemSlack>>>(map, boxes,
                                                      static_cast<const std::uint16_t*>(in.data()));
  return finish("tma_store_kernel");
}

Status run_tma_round_trip(const CUtensorMap& in_map, const TmaBoxes& in, const CUtensorMap& out_map,
                          const TmaBoxes& out) {
  FA_TEST_RETURN_IF_ERROR(check_boxes(in));
  FA_TEST_RETURN_IF_ERROR(check_boxes(out));
  if (in.count != out.count || in.box_bytes != out.box_bytes) {
    return Status(StatusCode::kInvalidArgument, "run_tma_round_trip: in and out boxes differ");
  }
  const int bytes = in.count * in.box_bytes;
  FA_TEST_RETURN_IF_ERROR(
      allow_smem(reinterpret_cast<const void*>(&tma_round_trip_kernel), bytes + kSmemSlack));
  tma_round_trip_kernel<<<1, kBlock, bytes + kSmemSlack>>>(in_map, in, out_map, out);
  return finish("tma_round_trip_kernel");
}

Status run_mbarrier_ping(std::vector<int>* values, std::vector<int>* fresh) {
  cuda::DeviceBuffer v, f;
  const std::size_t count = std::size_t{kPingIters} * kPingConsumers;
  FA_TEST_RETURN_IF_ERROR(v.allocate(count * sizeof(int), "values"));
  FA_TEST_RETURN_IF_ERROR(f.allocate(2 * sizeof(int), "fresh"));
  mbarrier_ping_kernel<<<1, Ping::kThreads>>>(static_cast<int*>(v.data()),
                                              static_cast<int*>(f.data()));
  FA_TEST_RETURN_IF_ERROR(finish("mbarrier_ping_kernel"));
  FA_TEST_RETURN_IF_ERROR(to_host(v, count, values, "values"));
  return to_host(f, 2, fresh, "fresh");
}

Status run_tma_ring(const CUtensorMap& map, std::vector<std::uint16_t>* out) {
  cuda::DeviceBuffer o;
  const std::size_t bytes = std::size_t{kRingTiles} * Ring::kStageBytes;
  FA_TEST_RETURN_IF_ERROR(o.allocate(bytes, "ring output"));
  const int smem = Ring::kStages * Ring::kStageBytes + kSmemSlack;
  FA_TEST_RETURN_IF_ERROR(allow_smem(reinterpret_cast<const void*>(&tma_ring_kernel), smem));
  tma_ring_kernel<<<1, Ring::kThreads, smem>>>(map, static_cast<std::uint16_t*>(o.data()));
  FA_TEST_RETURN_IF_ERROR(finish("tma_ring_kernel"));
  return to_host(o, bytes / 2, out, "ring output");
}

Status run_stmatrix_tile(const std::vector<std::uint16_t>& frag, std::vector<std::uint16_t>* tile) {
  if (frag.size() != 32u * kBlock) {
    return Status(StatusCode::kInvalidShape, "run_stmatrix_tile: 32 registers x 128 threads");
  }
  cuda::DeviceBuffer f, o;
  constexpr int kBytes = 64 * 64 * 2;
  FA_TEST_RETURN_IF_ERROR(to_device(frag, &f, "fragments"));
  FA_TEST_RETURN_IF_ERROR(o.allocate(kBytes, "tile"));
  stmatrix_tile_kernel<<<1, kBlock, kBytes + kSmemSlack>>>(
      static_cast<const std::uint16_t*>(f.data()), static_cast<std::uint16_t*>(o.data()));
  FA_TEST_RETURN_IF_ERROR(finish("stmatrix_tile_kernel"));
  return to_host(o, kBytes / 2, tile, "tile");
}

Status run_stmatrix_plain(const std::vector<std::uint32_t>& regs, std::vector<std::uint16_t>* plain,
                          std::vector<std::uint16_t>* trans) {
  if (regs.size() != 4u * 32) {
    return Status(StatusCode::kInvalidShape, "run_stmatrix_plain: 4 registers x 32 lanes");
  }
  cuda::DeviceBuffer r, p, t;
  FA_TEST_RETURN_IF_ERROR(to_device(regs, &r, "registers"));
  FA_TEST_RETURN_IF_ERROR(p.allocate(512, "plain"));
  FA_TEST_RETURN_IF_ERROR(t.allocate(512, "trans"));
  stmatrix_plain_kernel<<<1, 32>>>(static_cast<const std::uint32_t*>(r.data()),
                                   static_cast<std::uint16_t*>(p.data()),
                                   static_cast<std::uint16_t*>(t.data()));
  FA_TEST_RETURN_IF_ERROR(finish("stmatrix_plain_kernel"));
  FA_TEST_RETURN_IF_ERROR(to_host(p, 256, plain, "plain"));
  return to_host(t, 256, trans, "trans");
}

Status run_elect(std::vector<int>* out) {
  cuda::DeviceBuffer o;
  FA_TEST_RETURN_IF_ERROR(o.allocate(2 * kBlock * sizeof(int), "elected"));
  elect_kernel<<<1, kBlock>>>(static_cast<int*>(o.data()));
  FA_TEST_RETURN_IF_ERROR(finish("elect_kernel"));
  return to_host(o, 2 * kBlock, out, "elected");
}

}  // namespace flashattn::testing::sm90
