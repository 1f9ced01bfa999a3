// The tensor-core flash forward kernel (mma.sync m16n8k16, bf16/fp16 in, float32 accumulate),
// for sm_80 and later: blocks of independent warps. Tile shapes:
// flash_sm80_config.h; the per-warp steps: flash_sm80_warp.cuh. Per block:
//
//   init:  cp.async Q and the first K, V tiles into shared memory; row_max = -inf, row_sum = 0,
//          O = 0 in registers.
//   loop over key tiles j (only those some row of the block can see: MaskRule::tile_range):
//          wait K[j] and V[j] (one barrier); issue the next tiles
//          S = Q K[j]^T            ldmatrix (Q, K) + mma.sync, float32 in registers
//          softcap, ALiBi          when asked for (score_mod.cuh)
//          mask (only the tail tile and tiles crossing the diagonal or a window's edges)
//          online softmax          exp2((s - max) * scale * log2 e); P rounded to the input type
//                                  and repacked in registers as the A operand of the next mma
//          O += P V[j]             ldmatrix.trans (V) + mma.sync
//   finalize: the sink folded in; O / row_sum through shared memory to 16-byte coalesced stores;
//          LSE.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/kernel_args.h"
#include "cuda/sm80/flash_sm80_config.h"
#include "cuda/sm80/flash_sm80_warp.cuh"

namespace flashattn::cuda {

// kVariants: the general kernel (varlen, a window's left edge, softcap, ALiBi, sinks) or the dense
// one (every row sees keys [0, its right edge): no window, causal or a right-only window). One
// kernel for both cost the dense problems 3-12% (same-session A/B on the H200, docs/
// performance.md, "variants"): the general kernel keeps the block's coordinates in shared memory
// and re-derives its copy addresses from them every tile, for the registers' sake; the dense
// kernel keeps them in registers and reads the lengths from the kernel parameters.
template <typename T, class Cfg, bool kVariants>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
flash_sm80_kernel(KernelArgs args) {
  constexpr int kBlockN = Cfg::kBlockN;
  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t q_smem = ptx::smem_addr(smem);
  const std::uint32_t k_smem = q_smem + Cfg::kQBytes;                      // [stage]
  const std::uint32_t v_smem = k_smem + Cfg::kStages * Cfg::kKvTileBytes;  // [stage]
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  // One block per query tile (the launcher checks the grid fits). Not a grid-stride loop: the
  // compiler would hoist every per-thread epilogue address out of it, and those ~90 values live
  // across the key loop spilled at d128.
  // General kernel: the block's coordinates live in shared memory once the prologue has issued
  // its copies: read back after every barrier, they hold no registers across the key loop (in
  // registers they spilled at d192 and d256 on sm_80, where the O accumulator takes 128 of 255).
  // So do the score transforms' constants (their divisions run once, not per tile).
  __shared__ sm80::BlockCoords<T> coords_smem;
  __shared__ ScoreMod mod_smem;
  const sm80::BlockCoords<T> c0 = sm80::block_coords<T, Cfg, kVariants>(args);
  if constexpr (kVariants) {
    if (c0.m0 >= c0.seqlen_q) return;  // varlen: past this sequence's rows (the whole block)
    if (tid == 0) {  // published by the first barrier below
      coords_smem = c0;
      mod_smem = ScoreMod::make(args, c0.b, c0.h);
    }
  }
  // The coordinates the loop and the epilogue read: shared memory (general) or registers.
  const sm80::BlockCoords<T>& c = sm80::pick<kVariants>(coords_smem, c0);
  // Keys of the sequence: the dense kernel reads the kernel parameter (no register held).
  auto seqlen_k = [&](const sm80::BlockCoords<T>& cc) -> std::int64_t {
    if constexpr (kVariants) return cc.seqlen_k;
    else return args.seqlen_k;
  };
  auto rule = [&]() -> MaskRule {
    if constexpr (kVariants) return c.rule(args);
    else return MaskRule::make(args.seqlen_q, args.seqlen_k, -1, args.window_right, false);
  };
  // Which test picks the tiles to mask. General kernel: this warp's rows (fewer masked tiles on a
  // window's edges); dense kernel: the block's rows, through MaskRule from the parameters. At
  // d64, where a tile is cheapest and the per-tile test weighs most, the dense kernel tests one
  // int instead: the block's first tile needing a mask (MaskRule::interior_tiles), kept in
  // shared memory (in a register it spilled 16 bytes at d128 on sm_80). Same-session A/B on the
  // H200: the int test is 5% faster at d64 and 3-4% slower at d128 and d256 (a difference of
  // register allocation and scheduling at 255 registers, not of instructions executed), so
  // each head dim keeps the faster one (docs/performance.md, "variants").
  constexpr bool kInteriorTest = !kVariants && Cfg::kHeadDim == 64;
  __shared__ int interior_end_smem;
  if constexpr (kInteriorTest) {
    if (tid == 0) {
      std::int64_t first = 0, end = 0;
      rule().interior_tiles(c0.m0, Cfg::kBlockM, Cfg::kBlockN, &first, &end);
      interior_end_smem = static_cast<int>(end);  // no left edge: the interior starts at 0
    }
  }
  sm80::WarpAttention<T, Cfg> w(tid / 32 * Cfg::kWarpM, lane);

  // Key tile j of K or V (smem: that tensor's ring) into `stage`.
  auto load_kv_tile = [&](std::uint32_t ring_smem, const T* head_gmem, std::int64_t row_stride,
                          std::int64_t seqlen_k, int j, int stage) {
    sm80::load_tile_async<Cfg, kBlockN, Cfg::kThreads>(
        ring_smem + stage * Cfg::kKvTileBytes, head_gmem, row_stride,
        static_cast<std::int64_t>(j) * kBlockN, seqlen_k, tid);
  };
  auto load_k = [&](const sm80::BlockCoords<T>& cc, int j, int stage) {
    load_kv_tile(k_smem, cc.k_gmem, args.k_stride[1], seqlen_k(cc), j, stage);
  };
  auto load_v = [&](const sm80::BlockCoords<T>& cc, int j, int stage) {
    load_kv_tile(v_smem, cc.v_gmem, args.v_stride[1], seqlen_k(cc), j, stage);
  };

  // cp.async groups, in commit order, for kStages = s and key tiles f = n_first, f + 1, ...:
  // [Q, K f, V f] [K f+1, V f+1] .. [K f+s-2, V f+s-2], then per tile [K j+s-1, V j+s-1] (empty
  // past the end): waiting until s - 2 remain completes tile j.
  sm80::load_tile_async<Cfg, Cfg::kBlockM, Cfg::kThreads>(q_smem, c0.q_gmem, args.q_stride[1],
                                                          c0.m0, c0.seqlen_q, tid);
#pragma unroll
  for (int i = 0; i < Cfg::kStages - 1; ++i) {
    if (c0.n_first + i < c0.n_end) {
      load_k(c0, c0.n_first + i, i);
      load_v(c0, c0.n_first + i, i);
    }
    ptx::cp_async_commit();
  }
  // Q's fragments, when they live in registers: loaded once, before the key loop (the wait for
  // Q's group is early by one tile's copy; the lane offsets then die before the loop).
  if constexpr (Cfg::kQInRegs) {
    ptx::cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    w.load_q(q_smem);
  }

  // The stage tile j lives in, and the one the tile kStages - 1 ahead is loaded into (which
  // held tile j - 1).
  //
  // Every warp computes every tile of the block's range. Skipping the tiles none of a warp's own
  // rows sees would save 1 of 18 tiles per warp with a window of 1024 keys (and the last tile
  // for the first warps on the causal diagonal), but each form tried (a branch around the body;
  // three loops over the skipped head, the computed middle and the skipped tail) spilled 24-40
  // bytes at d128, where the kernel sits at 255 registers.
  int stage = 0, ahead_stage = Cfg::kStages - 1;
  const int n_end = c0.n_end;
  for (int j = c0.n_first; j < n_end; ++j) {
    const std::int64_t n0 = static_cast<std::int64_t>(j) * kBlockN;
    // One barrier per tile: tile j landed for every thread, and every warp is done with tile
    // j - 1, whose stage the tile kStages - 1 ahead overwrites.
    ptx::cp_async_wait<Cfg::kStages - 2>();
    __syncthreads();
    if (j + Cfg::kStages - 1 < n_end) {
      load_k(c, j + Cfg::kStages - 1, ahead_stage);
      load_v(c, j + Cfg::kStages - 1, ahead_stage);
    }
    ptx::cp_async_commit();

    typename sm80::WarpAttention<T, Cfg>::Scores s;
    typename sm80::WarpAttention<T, Cfg>::Probs p;
    w.qk(s, q_smem, k_smem + stage * Cfg::kKvTileBytes);
    if constexpr (kVariants) w.score_mod(s, args, mod_smem, c, n0);
    if constexpr (kInteriorTest) {
      if (j >= interior_end_smem) w.mask_tile(s, rule(), c.m0, n0);
    } else {
      w.template mask<kVariants>(s, rule(), c.m0, n0);
    }
    // ALiBi's row part goes into the softmax (fragment_ops.cuh). A copy of the softmax without
    // it serves the general kernel's other variants, which would otherwise add zeros (13 more
    // instructions a tile at d128); the two copies spill at no head dim on sm_80 or sm_90a.
    if (kVariants && args.alibi_slopes != nullptr) {
      float row_bias[Cfg::kMTiles][2];
      w.alibi_row_bias(row_bias, mod_smem, c, n0);
      w.rescale_o(w.softmax(s, p, args.scale_log2, row_bias));
    } else {
      w.rescale_o(w.softmax(s, p, args.scale_log2));
    }
    w.pv(p, v_smem + stage * Cfg::kKvTileBytes);
    stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
    ahead_stage = ahead_stage + 1 == Cfg::kStages ? 0 : ahead_stage + 1;
  }
  // With no key tile the loop's barriers never ran: other threads' copies into this warp's Q
  // rows may still be landing where the output is staged next.
  ptx::cp_async_wait<0>();
  __syncthreads();
  if constexpr (kVariants) {
    w.store(smem, args, c, c.seqlen_q, c.q_row0, sink_raw(args, c.h), lane);
  } else {
    w.store(smem, args, c, args.seqlen_q, 0, -INFINITY, lane);
  }
}

template <typename T, class Cfg>
Status launch_flash_sm80_config(const KernelArgs& args, cudaStream_t stream) {
  auto kernel = needs_variant_kernel(args) ? flash_sm80_kernel<T, Cfg, true>
                                           : flash_sm80_kernel<T, Cfg, false>;
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
      "flash-sm80: cudaFuncSetAttribute(max dynamic shared memory)");
  const std::int64_t tiles =
      TileScheduler::make(args.batch, args.heads, args.seqlen_q, Cfg::kBlockM).tiles();
  constexpr std::int64_t kMaxGrid = 0x7fffffff;  // grid.x limit
  if (tiles > kMaxGrid) {
    // 2^31 query tiles of 128 rows would be a q of >= 2^44 elements: not a real input.
    return Status(StatusCode::kUnsupported,
                  "flash-sm80: batch * heads * ceil(seqlen_q / " + std::to_string(Cfg::kBlockM) +
                      ") = " + std::to_string(tiles) + " blocks exceeds the grid limit 2^31 - 1");
  }
  kernel<<<static_cast<unsigned>(tiles), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(args);
  return check_launch("flash_sm80_kernel");
}

// The production launcher (flash_sm80.h): each head dim with its chosen tile shape.
template <typename T, int kHeadDim>
Status launch_flash_sm80(const KernelArgs& args, cudaStream_t stream) {
  return launch_flash_sm80_config<T, typename Sm80ConfigFor<kHeadDim>::type>(args, stream);
}

}  // namespace flashattn::cuda
