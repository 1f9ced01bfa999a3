// The flash-sm80 kernel's ping-pong schedule: two groups of 4 warps take turns on the tensor
// cores, so one group's softmax runs while the other's matrix products do.
//
// Why: in the independent-warp schedule (flash_sm80_kernel.cuh) each warp alternates between
// ~250 mma.sync (QK^T and PV of a 64-key tile at d128) and a softmax phase of ~300 FP32/MUFU
// instructions, and nothing keeps the two warps sharing a scheduler out of phase: whenever both
// are in softmax the tensor core idles (d128 ran at 400 TFLOP/s, 62% of the 645 mma.sync peak).
// Here each scheduler holds one warp of each group (warp w runs on scheduler w % 4), and two
// named barriers hand the tensor cores back and forth:
//
//   group 0:  [PV j-1, QK j] softmax j  [PV j, QK j+1] softmax j+1  ...
//   group 1:        softmax j-1 [PV j-1, QK j]  softmax j  [PV j, QK j+1] ...
//
// A "phase" is PV of the previous tile followed by QK^T of the next (the rescale of O by the
// previous softmax's alpha goes first). Group 0 waits on barrier kTurn0 before each phase and
// releases kTurn1 after it; group 1 the reverse.
//
// K and V: a 3-stage ring. After the prologue (every thread copies Q and tiles 0 and 1, then one
// block barrier), group 1 alone issues the copies: at the end of its phase j it is the last
// reader of tile j - 1 (a barrier among its own 4 warps makes sure of that), so it refills that
// stage with tile j + 2, then waits for its copies of tile j + 1 to land before releasing group 0
// into phase j + 1, the first to read it. The turn barriers publish those copies to both groups.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/kernel_args.h"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/named_barrier.cuh"
#include "cuda/sm80/flash_sm80_warp.cuh"

namespace flashattn::cuda {

template <typename T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) flash_sm80_pingpong_kernel(KernelArgs args) {
  constexpr int kBlockN = Cfg::kBlockN, kStages = Cfg::kStages;
  constexpr int kGroupThreads = Cfg::kThreads / 2;
  // Named barrier ids (0 is __syncthreads): whose turn it is, and group 1 among itself.
  constexpr int kTurn0 = 1, kTurn1 = 2, kGroup1 = 3;
  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t q_smem = ptx::smem_addr(smem);
  const std::uint32_t k_smem = q_smem + Cfg::kQBytes;                  // [stage]
  const std::uint32_t v_smem = k_smem + kStages * Cfg::kKvTileBytes;   // [stage]
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  const int group = tid / kGroupThreads;
  const sm80::BlockCoords<T> c = sm80::block_coords<T, Cfg>(args);
  sm80::WarpAttention<T, Cfg> w(tid / 32 * Cfg::kWarpM, lane);

  // Copies tile j into `stage`, from `kLoaders` threads.
  auto load_kv = [&](auto loaders, int j, int stage, int loader_tid) {
    constexpr int kLoaders = decltype(loaders)::value;
    const std::int64_t row0 = static_cast<std::int64_t>(j) * kBlockN;
    sm80::load_tile_async<Cfg, kBlockN, kLoaders>(k_smem + stage * Cfg::kKvTileBytes, c.k_gmem,
                                                  args.k_stride[1], row0, args.seqlen_k,
                                                  loader_tid);
    sm80::load_tile_async<Cfg, kBlockN, kLoaders>(v_smem + stage * Cfg::kKvTileBytes, c.v_gmem,
                                                  args.v_stride[1], row0, args.seqlen_k,
                                                  loader_tid);
  };
  using AllThreads = std::integral_constant<int, Cfg::kThreads>;
  using OneGroup = std::integral_constant<int, kGroupThreads>;

  sm80::load_tile_async<Cfg, Cfg::kBlockM, Cfg::kThreads>(q_smem, c.q_gmem, args.q_stride[1],
                                                          c.m0, args.seqlen_q, tid);
  if (c.n_tiles > 0) load_kv(AllThreads{}, 0, 0, tid);
  if (c.n_tiles > 1) load_kv(AllThreads{}, 1, 1, tid);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  w.load_q(q_smem);

  // Phase j: PV of tile j - 1 (j > 0), QK^T of tile j (j < n_tiles). Both groups run the same
  // n_tiles + 1 phases, alternating, group 0 first.
  if (group == 1) ptx::named_barrier_arrive(kTurn0, Cfg::kThreads);
  typename sm80::WarpAttention<T, Cfg>::Scores s;
  typename sm80::WarpAttention<T, Cfg>::Probs p;
  bool moved = false;
  int stage = 0;  // of tile j
  for (int j = 0; j <= c.n_tiles; ++j) {
    const int prev_stage = stage == 0 ? kStages - 1 : stage - 1;  // of tile j - 1
    ptx::named_barrier_sync(group == 0 ? kTurn0 : kTurn1, Cfg::kThreads);
    if (j > 0) {
      w.rescale_o(moved);
      w.pv(p, v_smem + prev_stage * Cfg::kKvTileBytes);
    }
    if (j < c.n_tiles) w.qk(s, q_smem, k_smem + stage * Cfg::kKvTileBytes);
    if (group == 1) {
      // Tile j + 2 goes where tile j - 1 was: group 0 is past its last read (PV j - 1) since it
      // released this phase; the group barrier makes sure all of group 1 is too.
      ptx::named_barrier_sync(kGroup1, kGroupThreads);
      if (j + 2 < c.n_tiles) load_kv(OneGroup{}, j + 2, prev_stage, tid - kGroupThreads);
      ptx::cp_async_commit();
      ptx::cp_async_wait<1>();  // tile j + 1 landed: group 0 reads it in its next phase
      if (j < c.n_tiles) ptx::named_barrier_arrive(kTurn0, Cfg::kThreads);
    } else {
      ptx::named_barrier_arrive(kTurn1, Cfg::kThreads);
    }
    if (j < c.n_tiles) {
      w.mask(s, args, c.m0, static_cast<std::int64_t>(j) * kBlockN);
      moved = w.softmax(s, p, args.scale_log2);
    }
    stage = stage + 1 == kStages ? 0 : stage + 1;
  }
  ptx::cp_async_wait<0>();  // group 1's last (empty) groups; the Q rows are long landed
  w.store(smem, args, c, lane);
}

}  // namespace flashattn::cuda
