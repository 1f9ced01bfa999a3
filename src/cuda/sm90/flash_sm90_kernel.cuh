// The Hopper flash forward kernel (sm_90a): TMA copies into a ring of shared-memory stages that
// complete on mbarriers, S = Q K^T as wgmma with both operands in shared memory, the online
// softmax of the shared layer (cuda/attention/fragment_ops.cuh) on the wgmma accumulator, and
// O += P V as wgmma with P from registers and V (MN-major) from shared memory. Tile shapes and
// warp roles: flash_sm90_config.h. Since version 3 (issue 10, step 3) the products of one tile
// run inside each consumer warpgroup while the softmax of the next is computed, and
// (Cfg::kPingPong) the two consumer warpgroups take turns issuing their products. Version 5: a
// persistent grid for tiles of equal cost (a block loops over work tiles, one per round:
// TileScheduler::dealt; the ring position and the Q round carry over), so one tile's epilogue
// overlaps the next one's Q and K/V loads. Version 7: causal, windowed and varlen tiles too,
// handed out longest first to whichever block is free (a counter in the workspace: Work).
// Version 13: the ping-pong turns carry over from one work tile to the next, so the consumers
// stay a turn apart across tile boundaries instead of meeting at every tile's start.
//
// Per work tile k (kBlockM = 128 or 192 query rows of one (batch, head), the TileScheduler's
// order):
//   producer (one lane of warp 0):
//     Q buffer b = k % kQBuffers: wait q_empty(b) (round k - kQBuffers); Q (kColBlocks boxes
//     of {64, kBlockM}) onto q_full(b) (round k);
//     per key tile j, stage s = it % kStages (it counts over the block's work tiles; parity =
//     the pass over the ring, inverted):
//       wait k_empty[s]; K[j] onto k_full[s]; wait v_empty[s]; V[j] onto v_full[s]
//   consumer warpgroup c (rows 64c..64c+63 of the block), key tiles j0..j1:
//     wait q_full(b) (round k); S0 = Q K0^T; softmax(S0) -> P0
//     per tile j > j0:  issue S_j = Q K_j^T and O += P_{j-1} V_{j-1} (two wgmma groups);
//       wait for S_j only, release K_j; softcap / ALiBi, mask, online softmax of S_j -> P_j
//       while the tensor cores run P_{j-1} V_{j-1}; wait for it, release V_{j-1}; rescale O
//     (after the last S_j: release Q, q_empty) O += P_j1 V_j1
//   epilogue: finalize_row (sink, empty rows: O = 0, LSE = -inf); O stored from registers in
//     16-byte stores, LSE per row. The d256 variant kernel (Cfg::kVariantStagedEpilogue) stages
//     O in the warp's own Q rows of shared memory (128B-swizzled) and releases Q after that.
// K is released a tile before V because S_j is done long before P_j V_j is issued: with one
// barrier per stage for both, the producer could not refill K until a tile later.
// mbarriers: q_full (1 arrival + Q's bytes), k_full[s] and v_full[s] (1 arrival + the tile's
// bytes), q_empty, k_empty[s] and v_empty[s] (one arrival per consumer warp, 8 or 12: a warp's
// wgmma_wait covers all its lanes). Every consumer reads every K and V tile (the block's key
// range is one interval, MaskRule::key_tiles).
//
// Out-of-bounds rows. TMA zero-fills only outside the tensor map's extents: in a dense problem
// the maps' row extent is seqlen, so a tail tile's rows past it are zeros. In a packed (varlen)
// problem the map covers the whole packed tensor, and rows past a sequence's end are the next
// sequence's (or, with seqused_k, keys the caller marked unused, which may hold anything,
// NaN included): their scores are masked to -inf (mask_fragment: keys >= seqlen_k), their
// query rows are never stored, and the V rows of the sequence's tail tile past seqlen_k are
// zeroed in shared memory before P V reads them (P = 0 there, but 0 * NaN = NaN).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "common/mask_rule.h"
#include "common/tile_scheduler.h"
#include "cuda/attention/fragment_ops.cuh"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/check.h"
#include "cuda/common/kernel_args.h"
#include "cuda/common/runtime.h"
#include "cuda/common/tensor_map.h"
#include "cuda/primitives/arch.h"
#include "cuda/primitives/elect.cuh"
#include "cuda/primitives/fence.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/mma_sm80.cuh"  // pack2
#include "cuda/primitives/named_barrier.cuh"
#include "cuda/primitives/setmaxnreg.cuh"
#include "cuda/primitives/smem.cuh"
#include "cuda/primitives/special_regs.cuh"
#include "cuda/primitives/tma.cuh"
#include "cuda/primitives/wgmma.cuh"
#include "cuda/primitives/wgmma_layout.h"
#include "cuda/sm90/flash_sm90.h"
#include "cuda/sm90/flash_sm90_config.h"
#include "cuda/sm90/sm90_trace.cuh"

namespace flashattn::cuda {
namespace sm90 {

// Named barrier ids (0 is __syncthreads'; 16 in all). kVTailBarrier: every consumer warpgroup,
// after the zeroing of a varlen tail tile's V rows; kTurnBarrier + c: consumer c's turn to
// issue its products (ping-pong; consumer c and the one before it).
constexpr int kVTailBarrier = 1;
constexpr int kEpilogueBarrier = 2;  // + c: consumer warpgroup c (the staged epilogue), c < 3
constexpr int kTurnBarrier = 5;      // + c, c < 3

// An mbarrier wait that traps after about a second (2^31 cycles) instead of hanging the GPU: a
// phase that never completes (a wrong byte count or parity) then fails the launch with an error.
// The first try_wait is the fast path; the clock is read only while waiting.
__device__ __forceinline__ void wait_or_trap(std::uint32_t bar_smem, std::uint32_t parity) {
  if (ptx::mbarrier_try_wait_parity(bar_smem, parity)) return;
  const long long start = clock64();
  while (!ptx::mbarrier_try_wait_parity(bar_smem, parity)) {
    if (clock64() - start > (1ll << 31)) __trap();
  }
}

// Where a block works: its (batch, head), query rows [m0, m0 + kBlockM) of its sequence, the
// sequence's first rows in q/o/lse and in k/v, its lengths, and its key tiles: n_tiles tiles of
// kBlockN keys from key_first, the first key any of its rows sees (MaskRule::key_tiles), so
// tile t holds keys key_first + t kBlockN onwards (a window's left edge is the only case where
// key_first > 0). A varlen tile past its sequence's rows (m0 >= seqlen_q) is skipped by the
// producer and never reaches the consumers.
// In 32 bits (every count fits: validate() and the tensor maps' extents), which the consumers
// hold through a whole work tile: as 64-bit values they spilled the variant kernel at 240.
struct BlockCoords {
  int b, h, h_kv, m0;
  int q_row0, k_row0;
  int seqlen_q, seqlen_k;
  int key_first, n_tiles;
  int tma_batch;  // the batch coordinate of the TMA boxes: b, or 0 for packed tensors
};

// The persistent grid's work: the tile order and the GQA group, computed on the host. A kernel
// parameter rather than arithmetic on KernelArgs: the producer, at 24 registers, kept the 64-bit
// quotients (heads / kv_heads, the m-block count) live across its tile loop and spilled them.
// The dense kernel's mask rule (one for every tile) is made there too: its clamps of the window
// were hoisted and spilled the same way.
// Tiles of unequal cost (causal, a window, varlen) are handed out dynamically: a block's first
// tile is its block index, each further one the next value of tile_counter (zeroed before the
// launch, in the caller's workspace) plus the grid size, so a block that finishes early takes
// the next tile in the scheduler's order, longest first, as the hardware would hand out blocks,
// and still overlaps one tile's epilogue with the next one's loads. Tiles of equal cost take
// the static deal (TileScheduler::dealt) and need no counter (tile_counter null).
struct Work {
  TileScheduler sched;
  MaskRule32 dense_rule;  // the dense kernel's: (seqlen_q, seqlen_k, no left edge, window_right)
  int tiles;            // sched.tiles(), < 2^31 (the launch checks)
  int group;            // heads / kv_heads
  unsigned* tile_counter;  // null: the static deal
};

// kVariants = false: the dense kernel (one sequence per batch entry, no left window edge).
template <class Cfg, bool kVariants>
__device__ __forceinline__ BlockCoords block_coords(const KernelArgs& args, const Work& work,
                                                    int tile_index) {
  const TileCoord tile = work.sched.tile32(tile_index);
  BlockCoords c;
  c.b = static_cast<int>(tile.batch);
  c.h = static_cast<int>(tile.head);
  c.h_kv = c.h / work.group;
  c.m0 = static_cast<int>(tile.m_block) * Cfg::kBlockM;
  SeqInfo seq;
  if constexpr (kVariants) {
    seq = args.seq(c.b);
  } else {
    seq.seqlen_q = args.seqlen_q;
    seq.seqlen_k = args.seqlen_k;
  }
  c.q_row0 = static_cast<int>(seq.q_row0);
  c.k_row0 = static_cast<int>(seq.k_row0);
  c.seqlen_q = static_cast<int>(seq.seqlen_q);
  c.seqlen_k = static_cast<int>(seq.seqlen_k);
  c.tma_batch = args.varlen() ? 0 : static_cast<int>(c.b);
  // In 32 bits (MaskRule32): the producer computes this with 24 registers.
  c.key_first = 0;
  c.n_tiles = 0;
  if (c.m0 < c.seqlen_q) {
    const MaskRule32 rule =
        kVariants ? MaskRule32::make(c.seqlen_q, c.seqlen_k, args.window_left, args.window_right,
                                     false)
                  : work.dense_rule;
    rule.key_tiles(c.m0, Cfg::kBlockM, Cfg::kBlockN, &c.key_first, &c.n_tiles);
  }
  return c;
}

// Shared-memory addresses of one block's tiles and barriers (flash_sm90_config.h offsets).
template <class Cfg>
struct Smem {
  std::uint32_t base;
  // Q buffer b (Cfg::kQBuffers), its barriers and its round's work tile.
  __device__ __forceinline__ std::uint32_t q(int b = 0) const {
    return base + Cfg::kQOffset + b * Cfg::kQBytes;
  }
  __device__ __forceinline__ std::uint32_t k(int s) const {
    return base + Cfg::kKOffset + s * Cfg::kKvTileBytes;
  }
  __device__ __forceinline__ std::uint32_t v(int s) const {
    return base + Cfg::kVOffset + s * Cfg::kKvTileBytes;
  }
  static constexpr int kQB = Cfg::kQBuffers;
  __device__ __forceinline__ std::uint32_t bar(int i) const {
    return base + Cfg::kBarOffset + 8 * i;
  }
  __device__ __forceinline__ std::uint32_t q_full(int b = 0) const { return bar(b); }
  __device__ __forceinline__ std::uint32_t k_full(int s) const { return bar(kQB + s); }
  __device__ __forceinline__ std::uint32_t v_full(int s) const {
    return bar(kQB + Cfg::kStages + s);
  }
  __device__ __forceinline__ std::uint32_t k_empty(int s) const {
    return bar(kQB + 2 * Cfg::kStages + s);
  }
  __device__ __forceinline__ std::uint32_t v_empty(int s) const {
    return bar(kQB + 3 * Cfg::kStages + s);
  }
  __device__ __forceinline__ std::uint32_t q_empty(int b = 0) const {
    return bar(kQB + 4 * Cfg::kStages + b);
  }
  // The work tile of the round in Q buffer b (tiles when the block is done), written by the
  // producer before it arrives on q_full(b) and read by lane 0 of each consumer warp after its
  // wait on it.
  __device__ __forceinline__ std::uint32_t tile_slot(int b = 0) const {
    return bar(2 * kQB + 4 * Cfg::kStages + b);
  }
};

// The position of the i-th use of a ring of kDepth buffers: the K/V stages (kDepth =
// Cfg::kStages, i counting the key tiles a block streams over all its work tiles) and the Q
// buffers (Cfg::kQBuffers, i the work tile: its round). The empty barriers wait for parity ^ 1,
// which a fresh barrier passes, so the first pass over the ring does not wait.
template <int kDepth>
struct RingSlot {
  int stage;
  std::uint32_t parity;  // of the buffer's full barrier
  __device__ __forceinline__ static RingSlot at(int i) {
    return RingSlot{i % kDepth, static_cast<std::uint32_t>(i / kDepth) & 1u};
  }
};

// The producer lane, over the block's work tiles: Q (once the consumers are done reading the
// previous tile's Q: q_empty), then K and V of every key tile of the tile's range, through one
// ring whose position carries over from tile to tile.
template <class Cfg, bool kVariants>
__device__ __forceinline__ void produce(const KernelArgs& args, const Smem<Cfg>& sm,
                                        const CUtensorMap* q_map, const CUtensorMap* k_map,
                                        const CUtensorMap* v_map, const Work& work) {
  ptx::tma_prefetch_map(q_map);
  ptx::tma_prefetch_map(k_map);
  ptx::tma_prefetch_map(v_map);
  int it = 0;  // key tiles through the ring
  // The producer holds 24 registers (setmaxnreg): it keeps only the ints the TMA boxes take (the
  // extents fit: tensor_map.cc), and the rest of BlockCoords dies at once.
  // Work tile k is Q round k (q_full / q_empty phase k). Each round's tile is published in
  // tile_slot before q_full's arrival; the round whose tile is past the last one ends the
  // consumers' loop too. A varlen tile past its sequence's rows is skipped here, before it
  // becomes a round: the next tile is claimed at once (the counter hands out such tiles only in
  // varlen problems; the static deal never meets one). v7-v12 made each a round of its own,
  // a q_full / q_empty handshake with the consumers for nothing.
  for (int k = 0;; ++k) {
    // Block index and grid size read afresh (special_regs.cuh): held across the loop, what
    // ptxas derived from them spilled the variant kernel's producer at 24 registers.
    unsigned next;
    int q_row = 0, h = 0, h_kv = 0, k_row0 = 0, n_tiles = 0, tma_batch = 0;
    const unsigned tiles = static_cast<unsigned>(work.tiles);
    for (bool first = k == 0;; first = false) {
      if (work.tile_counter == nullptr) {
        next = TileScheduler::dealt(k, ptx::block_index_x(), ptx::grid_dim_x());
      } else {
        next = first ? ptx::block_index_x() : atomicAdd(work.tile_counter, 1u) + ptx::grid_dim_x();
      }
      if (next >= tiles) break;
      const BlockCoords c = block_coords<Cfg, kVariants>(args, work, static_cast<int>(next));
      if (kVariants && c.m0 >= c.seqlen_q) continue;  // varlen: past the sequence's rows
      q_row = c.q_row0 + c.m0;
      h = c.h;
      h_kv = c.h_kv;
      k_row0 = c.k_row0 + c.key_first;
      n_tiles = c.n_tiles;
      tma_batch = c.tma_batch;
      break;
    }
    // Round k's buffer is free once the consumers are done with round k - kQBuffers (its Q
    // and tile_slot).
    const RingSlot<Cfg::kQBuffers> qr = RingSlot<Cfg::kQBuffers>::at(k);
    wait_or_trap(sm.q_empty(qr.stage), qr.parity ^ 1);
    ptx::st_shared_u32(sm.tile_slot(qr.stage), next < tiles ? next : tiles);
    if (next >= tiles) {
      ptx::mbarrier_arrive(sm.q_full(qr.stage));
      break;
    }
    ptx::mbarrier_arrive_expect_tx(sm.q_full(qr.stage), Cfg::kQBytes);
#pragma unroll
    for (int blk = 0; blk < Cfg::kColBlocks; ++blk) {
      ptx::tma_load(sm.q(qr.stage) + blk * Cfg::kBlockM * Cfg::kRowBytes, q_map,
                    sm.q_full(qr.stage), blk * Cfg::kBlockCols, q_row, h, tma_batch);
    }
    for (int j = 0; j < n_tiles; ++j, ++it) {
      const RingSlot<Cfg::kStages> r = RingSlot<Cfg::kStages>::at(it);
      const int k_row = k_row0 + j * Cfg::kBlockN;
      wait_or_trap(sm.k_empty(r.stage), r.parity ^ 1);  // the first pass over the ring passes
      ptx::mbarrier_arrive_expect_tx(sm.k_full(r.stage), Cfg::kKvTileBytes);
#pragma unroll
      for (int blk = 0; blk < Cfg::kColBlocks; ++blk) {
        ptx::tma_load(sm.k(r.stage) + blk * Cfg::kBlockN * Cfg::kRowBytes, k_map,
                      sm.k_full(r.stage), blk * Cfg::kBlockCols, k_row, h_kv, tma_batch);
      }
      wait_or_trap(sm.v_empty(r.stage), r.parity ^ 1);
      ptx::mbarrier_arrive_expect_tx(sm.v_full(r.stage), Cfg::kKvTileBytes);
#pragma unroll
      for (int blk = 0; blk < Cfg::kColBlocks; ++blk) {
        ptx::tma_load(sm.v(r.stage) + blk * Cfg::kBlockN * Cfg::kRowBytes, v_map,
                      sm.v_full(r.stage), blk * Cfg::kBlockCols, k_row, h_kv, tma_batch);
      }
    }
  }
  // Stay until the consumers have released every stage and the last Q: no copy of ours is in
  // flight when this thread exits.
  for (int i = 0; i < Cfg::kStages; ++i, ++it) {
    const RingSlot<Cfg::kStages> r = RingSlot<Cfg::kStages>::at(it);
    wait_or_trap(sm.k_empty(r.stage), r.parity ^ 1);
    wait_or_trap(sm.v_empty(r.stage), r.parity ^ 1);
  }
}

// Zeroes rows [row_begin, kBlockN) of a V tile (all column blocks), from the 256 consumer
// threads (ct = 0..255), then hands the tile to wgmma (proxy fence + barrier of both
// consumers). Only the varlen tail tile needs it (see the file comment).
template <class Cfg>
__device__ __forceinline__ void zero_v_tail(std::uint32_t v_tile, int row_begin, int ct) {
  constexpr int kRowChunks = Cfg::kRowBytes / 16;
  const int rows = Cfg::kBlockN - row_begin;
  const int chunks = rows * kRowChunks * Cfg::kColBlocks;
  for (int i = ct; i < chunks; i += Cfg::kConsumers * Cfg::kWarpgroup) {
    const int blk = i / (rows * kRowChunks), rem = i % (rows * kRowChunks);
    const std::uint32_t addr = v_tile + blk * Cfg::kBlockN * Cfg::kRowBytes +
                               (row_begin + rem / kRowChunks) * Cfg::kRowBytes +
                               (rem % kRowChunks) * 16;
    ptx::st_shared_zero16(addr);
  }
  ptx::fence_proxy_async_shared();  // generic stores, read next by wgmma (async proxy)
  ptx::named_barrier_sync(kVTailBarrier, Cfg::kConsumers * Cfg::kWarpgroup);
}

// S = Q K^T of one key tile (K in shared memory at k_tile): kDSteps wgmmas committed as one
// group, not waited for. The caller fences first (wgmma_fence).
template <typename T, class Cfg>
__device__ __forceinline__ void issue_qk(float (&s_acc)[Cfg::kBlockN / 2], std::uint64_t q_desc,
                                         std::uint32_t k_tile) {
  const std::uint64_t k_desc = ptx::sw128_k_major_desc(k_tile);
#pragma unroll
  for (int ds = 0; ds < Cfg::kDSteps; ++ds) {
    ptx::wgmma_ss<T, Cfg::kBlockN, ptx::Major::kK, ptx::Major::kK>(
        s_acc, ptx::desc_advance(q_desc, ptx::sw128_k_major_step_bytes(Cfg::kBlockM, ds)),
        ptx::desc_advance(k_desc, ptx::sw128_k_major_step_bytes(Cfg::kBlockN, ds)), ds > 0);
  }
  ptx::wgmma_commit();
}

// O += P V of one key tile (V at v_tile, MN-major): kPvSplits x kNSteps wgmmas as one group,
// not waited for.
template <typename T, class Cfg>
__device__ __forceinline__ void issue_pv(float (&o)[Cfg::kPvSplits][Cfg::kPvN / 2],
                                         const std::uint32_t (&p)[Cfg::kNSteps][4],
                                         std::uint32_t v_tile) {
#pragma unroll
  for (int h = 0; h < Cfg::kPvSplits; ++h) {
    // Columns [h kPvN, (h + 1) kPvN) of V start at column block h kPvN / 64.
    const std::uint64_t v_desc = ptx::sw128_mn_major_desc(
        v_tile + h * (Cfg::kPvN / Cfg::kBlockCols) * Cfg::kBlockN * Cfg::kRowBytes, Cfg::kBlockN);
#pragma unroll
    for (int ks = 0; ks < Cfg::kNSteps; ++ks) {
      ptx::wgmma_rs<T, Cfg::kPvN, ptx::Major::kMN>(
          o[h], p[ks], ptx::desc_advance(v_desc, ptx::sw128_mn_major_step_bytes(ks)), true);
    }
  }
  ptx::wgmma_commit();
}

// The register epilogue: O / l of the warp's rows (lane_row and lane_row + 8, finalize_row of
// their running max and sum) straight from the accumulator to global memory, 16 bytes per lane
// and store: the quad's 4 lanes hold a row's 4 column pairs of each n-tile and exchange them
// (quad_transpose), so lane t stores n-tile 4 q + t of each 32-column group q. Four 4-byte
// stores per n-tile (8 rows x 16 bytes a warp instruction) made the epilogue 2200 clocks at
// d128 16k and 4000 at 512, with the tensor cores idle (clock64 trace of block 0; a work tile
// of 512 keys took 22200). The LSE per row, from the quad's lane 0.
template <typename T, class Cfg>
__device__ __forceinline__ void store_o_rows(const KernelArgs& args, const BlockCoords& c,
                                             std::int64_t seqlen_q, float* lse_gmem,
                                             int lane_row, int tq,
                                             const Fragment<1, Cfg::kDTiles>& o_frag,
                                             const float (&row_max)[2], const float (&row_sum)[2],
                                             float sink) {
  constexpr int kDTiles = Cfg::kDTiles;
  static_assert(kDTiles % 4 == 0, "32-column groups");
  T* o_gmem = static_cast<T*>(args.o) + c.b * args.o_stride[0] + c.q_row0 * args.o_stride[1] +
              c.h * args.o_stride[2];
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const RowResult r =
        finalize_row(row_max[hh], reduce_sum_lanes<4>(row_sum[hh]), sink, args.scale_log2);
    const std::int64_t row_seq = lane_row + 8 * hh;
    const bool in_rows = row_seq < seqlen_q;  // the quad's 4 lanes agree
    T* row_gmem = o_gmem + row_seq * args.o_stride[1] + 8 * tq;
#pragma unroll
    for (int q = 0; q < kDTiles / 4; ++q) {
      if (32 * q >= Cfg::kHeadDim) continue;  // d96: the zero columns
      std::uint32_t w[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int dt = 4 * q + j;
        w[j] = ptx::pack2<T>(o_frag[0][dt][2 * hh] * r.inv, o_frag[0][dt][2 * hh + 1] * r.inv);
      }
      quad_transpose(w, tq);
      if (in_rows) {
        *reinterpret_cast<uint4*>(row_gmem + 32 * q) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
    if (in_rows && lse_gmem != nullptr && tq == 0) {
      lse_gmem[row_seq * args.lse_stride[2]] = r.lse;
    }
  }
}

// One consumer warpgroup on one work tile: 64 query rows through every key tile, then the
// output, once the caller has waited for the work tile's Q (q_full). ring: the ring position
// of its first key tile.
template <typename T, class Cfg, bool kVariants>
__device__ __forceinline__ void consume(const KernelArgs& args, const Smem<Cfg>& sm,
                                        const BlockCoords& c, int consumer, int ring,
                                        int q_buf, const Sm90Trace& trace) {
  constexpr int kBlockN = Cfg::kBlockN, kNTiles = Cfg::kNTiles, kDTiles = Cfg::kDTiles;
  // The consumer thread index, read afresh for each work tile (special_regs.cuh): held across
  // the work-tile loop, the lane's row was the one value the variant kernel spilled.
  const int ct = ptx::thread_index_x() - Cfg::kWarpgroup;
  const int t = ct % Cfg::kWarpgroup;  // thread in the warpgroup
  const int warp = t / 32, lane = t % 32, g = lane / 4, tq = lane % 4;
  const int wg_row = consumer * Cfg::kConsumerRows;      // within the block
  const int lane_row = c.m0 + wg_row + 16 * warp + g;  // within the sequence
  // 32-bit rule and rows (MaskRule32): the variant kernel's consumers, at 240 registers, spilled
  // with the 64-bit ones once the persistent tile loop's state joined them. The dense rule is
  // made here rather than taken from Work: its left edge is then the constant -1, and ptxas
  // drops the left-edge arithmetic from every mask (68 SASS instructions a kernel at d128).
  const MaskRule32 rule =
      kVariants ? MaskRule32::make(c.seqlen_q, c.seqlen_k, args.window_left, args.window_right,
                                   false)
                : MaskRule32::make(args.seqlen_q, args.seqlen_k, -1, args.window_right, false);
  ScoreMod mod;
  if constexpr (kVariants) mod = ScoreMod::make(args, c.b, c.h);

  float row_max[1][2] = {{-INFINITY, -INFINITY}}, row_sum[1][2] = {{0.0f, 0.0f}}, alpha[1][2];
  // The accumulators in wgmma's register order, viewed as the fragment_ops layout: register
  // 4 nt + e of a thread is [0][nt][e] (wgmma_layout.h acc_row / acc_col; checked on the CPU in
  // tests/cuda/sm90_layout_test.cc).
  // O is kPvSplits accumulators of kPvN columns (d256: two of 128; one m64n256 accumulator
  // made ptxas serialize the wgmmas and spill ~1 KB, C7512); in memory order they are the
  // columns left to right, so the Fragment view covers them all.
  constexpr int kPvN = Cfg::kPvN;
  Fragment<1, kDTiles> o_frag;
  float(&o)[Cfg::kPvSplits][kPvN / 2] =
      reinterpret_cast<float(&)[Cfg::kPvSplits][kPvN / 2]>(o_frag);
#pragma unroll
  for (int h = 0; h < Cfg::kPvSplits; ++h) {
#pragma unroll
    for (int i = 0; i < kPvN / 2; ++i) o[h][i] = 0.0f;
  }

  // Q rows of this warpgroup: 64 rows into each 128-row column block, 1024-aligned.
  const std::uint64_t q_desc = ptx::sw128_k_major_desc(sm.q(q_buf) + wg_row * Cfg::kRowBytes);
  // The caller has waited for this round's Q (q_full). Q goes back once the last S is computed,
  // so the producer loads the next work tile's Q during this one's last P V and epilogue; with
  // the staged epilogue (Cfg::kVariantStagedEpilogue), whose O passes through Q's shared
  // memory, only after the epilogue.
  constexpr bool kStaged = kVariants && Cfg::kVariantStagedEpilogue;
  auto release_q = [&] {
    if (lane == 0) ptx::mbarrier_arrive(sm.q_empty(q_buf));
  };
  auto release_q_early = [&] {
    if constexpr (!kStaged) release_q();
  };

  // The exponent's form per tile shape: Cfg::kFusedExp (flash_sm90_config.h).
  constexpr bool kFusedExp = Cfg::kFusedExp;
  // Score transforms, mask and online softmax of key tile j's scores (first key n0), in place.
  // True when a row's max moved (O then needs alpha).
  auto softmax = [&](Fragment<1, kNTiles>& s_frag, int n0) {
    const int diag = c.seqlen_k - c.seqlen_q;
    if constexpr (kVariants) {
      if (args.softcap > 0.0f || args.alibi_slopes != nullptr) {
        score_mod_fragment<1, kNTiles>(s_frag, mod, args.softcap_consts, lane_row, diag, n0, tq,
                                        g);
      }
    }
    if (rule.tile_needs_mask(c.m0 + wg_row, Cfg::kConsumerRows, n0, kBlockN)) {
      mask_fragment<1, kNTiles>(s_frag, rule, lane_row, n0, tq);
    }
    if constexpr (kVariants) {
      // ALiBi's row part; zeros without ALiBi (two FADDs per row in softmax_update: a second
      // copy of the softmax without them spilled 12 bytes at d128).
      float row_bias[1][2] = {{0.0f, 0.0f}};
      if (args.alibi_slopes != nullptr) {
        alibi_row_bias<1, kNTiles>(row_bias, mod, lane_row, diag, n0, tq, g);
      }
      return softmax_update<1, kNTiles, kFusedExp>(s_frag, row_max, row_sum, alpha,
                                                   args.scale_log2, row_bias);
    } else {
      return softmax_update<1, kNTiles, kFusedExp>(s_frag, row_max, row_sum, alpha,
                                                   args.scale_log2);
    }
  };
  // P in 16 bits as PV's A fragments.
  auto pack_p = [&](const float(&s_acc)[kBlockN / 2], std::uint32_t(&p)[Cfg::kNSteps][4]) {
#pragma unroll
    for (int ks = 0; ks < Cfg::kNSteps; ++ks) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        p[ks][r] = ptx::pack2<T>(s_acc[ptx::acc_index_of_a(ks, r, 0)],
                                 s_acc[ptx::acc_index_of_a(ks, r, 1)]);
      }
    }
  };
  // The varlen tail tile's V rows past seqlen_k are zeroed before P V reads them (file comment).
  auto prepare_v = [&](int stage, int n0) {
    if constexpr (kVariants) {
      if (args.varlen() && n0 + kBlockN > c.seqlen_k) {
        zero_v_tail<Cfg>(sm.v(stage), static_cast<int>(c.seqlen_k - n0), ct);
      }
    }
  };
  // A warp is done with a stage's K or V once its wgmma_wait has returned.
  auto release = [&](std::uint32_t bar_smem) {
    if (lane == 0) ptx::mbarrier_arrive(bar_smem);
  };
  auto fence_p_o = [&](std::uint32_t(&p)[Cfg::kNSteps][4]) {
#pragma unroll
    for (int ks = 0; ks < Cfg::kNSteps; ++ks) ptx::fence_operands(p[ks]);
#pragma unroll
    for (int h = 0; h < Cfg::kPvSplits; ++h) ptx::fence_operands(o[h]);
  };

  // Ping-pong (Cfg::kPingPong, on work tiles of at least Cfg::kPingPongMinTiles key tiles):
  // the consumers take turns issuing their wgmmas, in a ring, so the softmax of one runs while
  // the tensor cores work for the others (FlashAttention-3's warp scheduler barriers). A turn
  // starts when the consumer before it in the ring has ended its own (each barrier counts the
  // two warpgroups: the one waiting, the one arriving). The ring carries over from work tile to
  // work tile (v13): the kernel hands consumer 0 the first turn before the first tile, the last
  // consumer's last turn of a tile hands it on to consumer 0's first of the next, and consumer
  // 0 takes the one left over at the end. So the consumers stay a turn apart across tile
  // boundaries: one's epilogue and softmax of its first S run while the tensor cores work for
  // the others (v3-v12 closed each tile's ring, and every tile began with the consumers in
  // step). Every consumer sees the same tiles and key tiles, so all take the same turns. No
  // consumer arrives twice on a barrier before its waiter has passed: its next turn waits for
  // the whole ring, that waiter included.
  constexpr int kPair = 2 * Cfg::kWarpgroup;
  constexpr int kLastConsumer = Cfg::kConsumers - 1;
  const int next_consumer = consumer == kLastConsumer ? 0 : consumer + 1;
  const int tiles = c.n_tiles;
  const bool pingpong = Cfg::kPingPong && tiles >= Cfg::kPingPongMinTiles;
  auto turn_begin = [&] {
    if constexpr (Cfg::kPingPong) {
      if (pingpong) ptx::named_barrier_sync(kTurnBarrier + consumer, kPair);
    }
  };
  auto turn_end = [&] {
    if constexpr (Cfg::kPingPong) {
      if (pingpong) ptx::named_barrier_arrive(kTurnBarrier + next_consumer, kPair);
    }
  };

  if (tiles > 0) {
    std::uint32_t p[Cfg::kNSteps][4];
    {  // The first tile: S, softmax, P (O is still 0: nothing to rescale).
      Fragment<1, kNTiles> s_frag;
      float(&s_acc)[kBlockN / 2] = reinterpret_cast<float(&)[kBlockN / 2]>(s_frag);
      const RingSlot<Cfg::kStages> first = RingSlot<Cfg::kStages>::at(ring);
      wait_or_trap(sm.k_full(first.stage), first.parity);
      ptx::fence_operands(s_acc);
      turn_begin();
      trace.mark(kTraceTurn0);
      ptx::wgmma_fence();
      issue_qk<T, Cfg>(s_acc, q_desc, sm.k(first.stage));
      turn_end();
      ptx::wgmma_wait<0>();
      ptx::fence_operands(s_acc);
      trace.mark(kTraceS0, __float_as_uint(s_acc[0]));
      release(sm.k_empty(first.stage));
      if (tiles == 1) release_q_early();
      softmax(s_frag, c.key_first);
      pack_p(s_acc, p);
      trace.mark(kTraceP0, p[0][0]);
    }
    for (int it = 1; it < tiles; ++it) {
      const RingSlot<Cfg::kStages> cur = RingSlot<Cfg::kStages>::at(ring + it);
      const RingSlot<Cfg::kStages> before = RingSlot<Cfg::kStages>::at(ring + it - 1);
      const int s = cur.stage, prev = before.stage;
      const std::uint32_t parity = cur.parity, prev_parity = before.parity;
      const int n0 = c.key_first + it * kBlockN;  // keys < 2^31

      // Issue S_j = Q K_j^T, then O += P_{j-1} V_{j-1}: two groups, in this order.
      Fragment<1, kNTiles> s_frag;
      float(&s_acc)[kBlockN / 2] = reinterpret_cast<float(&)[kBlockN / 2]>(s_frag);
      wait_or_trap(sm.k_full(s), parity);
      wait_or_trap(sm.v_full(prev), prev_parity);
      prepare_v(prev, n0 - kBlockN);
      ptx::fence_operands(s_acc);
      fence_p_o(p);
      turn_begin();
      if (it <= kSm90TraceTurns) trace.mark(kTraceTurn1 + it - 1);
      ptx::wgmma_fence();
      issue_qk<T, Cfg>(s_acc, q_desc, sm.k(s));
      issue_pv<T, Cfg>(o, p, sm.v(prev));
      turn_end();

      // The softmax of S_j while P_{j-1} V_{j-1} runs; S_j becomes P_j in P_{j-1}'s registers
      // once that product is done (FlashAttention-3's order: one P live, not two).
      ptx::wgmma_wait<1>();
      ptx::fence_operands(s_acc);
      const bool traced = it <= kSm90TraceTurns;
      if (traced) trace.mark(kTraceSj + it - 1, __float_as_uint(s_acc[0]));
      release(sm.k_empty(s));
      if (it == tiles - 1) release_q_early();
      const bool moved = softmax(s_frag, n0);
      if (traced) trace.mark(kTraceSoftmaxj + it - 1, __float_as_uint(s_acc[0]));

      ptx::wgmma_wait<0>();
      fence_p_o(p);
      if (traced) trace.mark(kTracePvj + it - 1, __float_as_uint(o[0][0]));
      release(sm.v_empty(prev));
      pack_p(s_acc, p);
      rescale_fragment<1, kDTiles>(o_frag, alpha, moved);
      if (traced) trace.mark(kTracePackj + it - 1, p[0][0] ^ __float_as_uint(o[0][0]));
    }
    // The last tile's P V.
    const RingSlot<Cfg::kStages> last_slot = RingSlot<Cfg::kStages>::at(ring + tiles - 1);
    const int last = last_slot.stage;
    wait_or_trap(sm.v_full(last), last_slot.parity);
    prepare_v(last, c.key_first + (tiles - 1) * kBlockN);
    fence_p_o(p);
    turn_begin();
    trace.mark(kTraceLastTurn);
    ptx::wgmma_fence();
    issue_pv<T, Cfg>(o, p, sm.v(last));
    turn_end();
    ptx::wgmma_wait<0>();
    fence_p_o(p);
    trace.mark(kTraceLastPv, __float_as_uint(o[0][0]));
    release(sm.v_empty(last));
  } else {
    release_q_early();
  }

  // Epilogue: finalize_row per row, O / l in T to out, the LSE to lse. kStaged: O / l is staged
  // in the warpgroup's own Q rows of shared memory (128B-swizzled) and stored in 16-byte chunks;
  // every warp of the warpgroup is past its last wgmma (which read all 64 Q rows) before any
  // warp overwrites its Q rows.
  if constexpr (kStaged) ptx::named_barrier_sync(kEpilogueBarrier + consumer, Cfg::kWarpgroup);
  const float sink = kVariants ? sink_raw(args, c.h) : -INFINITY;
  const std::int64_t seqlen_q = kVariants ? c.seqlen_q : args.seqlen_q;
  float* lse_gmem = args.lse == nullptr
                        ? nullptr
                        : args.lse + c.b * args.lse_stride[0] + c.h * args.lse_stride[1] +
                              c.q_row0 * args.lse_stride[2];
  if constexpr (kStaged) {
    // Q goes back to the producer once every warp has read its rows out again.
    unsigned char* q_rows_smem =
        reinterpret_cast<unsigned char*>(__cvta_shared_to_generic(sm.q()));
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const RowResult r = finalize_row(row_max[0][hh], reduce_sum_lanes<4>(row_sum[0][hh]), sink,
                                       args.scale_log2);
      const int row = wg_row + 16 * warp + g + 8 * hh;  // within the block
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        if (8 * dt >= Cfg::kHeadDim) continue;  // d96: the zero columns
        const std::uint32_t packed =
            ptx::pack2<T>(o_frag[0][dt][2 * hh] * r.inv, o_frag[0][dt][2 * hh + 1] * r.inv);
        *reinterpret_cast<std::uint32_t*>(
            q_rows_smem + ptx::sw128_offset(Cfg::kBlockM, row, 8 * dt + 2 * tq)) = packed;
      }
      const std::int64_t row_seq = c.m0 + row;
      if (lse_gmem != nullptr && tq == 0 && row_seq < seqlen_q) {
        lse_gmem[row_seq * args.lse_stride[2]] = r.lse;
      }
    }
    __syncwarp();
    T* o_gmem = static_cast<T*>(args.o) + c.b * args.o_stride[0] + c.q_row0 * args.o_stride[1] +
                c.h * args.o_stride[2];
    const int warp_row = wg_row + 16 * warp;
#pragma unroll
    for (int i = lane; i < 16 * Cfg::kChunks; i += 32) {
      const int r = i / Cfg::kChunks, ch = i % Cfg::kChunks;
      const std::int64_t row_seq = c.m0 + warp_row + r;
      if (row_seq < seqlen_q) {
        const uint4 chunk = *reinterpret_cast<const uint4*>(
            q_rows_smem + ptx::sw128_offset(Cfg::kBlockM, warp_row + r, 8 * ch));
        *reinterpret_cast<uint4*>(o_gmem + row_seq * args.o_stride[1] + ch * 8) = chunk;
      }
    }
    __syncwarp();  // every lane's read of the warp's rows is done
    release_q();
  } else {
    store_o_rows<T, Cfg>(args, c, seqlen_q, lse_gmem, lane_row, tq, o_frag, row_max[0],
                         row_sum[0], sink);
  }
  trace.mark(kTraceStored);
}

}  // namespace sm90

// kVariants: the general kernel (varlen, a window's left edge, softcap, ALiBi, sinks) or the
// dense one, as flash-sm80 splits them.
template <typename T, class Cfg, bool kVariants>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
flash_sm90_kernel(const __grid_constant__ KernelArgs args,
                  const __grid_constant__ CUtensorMap q_map,
                  const __grid_constant__ CUtensorMap k_map,
                  const __grid_constant__ CUtensorMap v_map,
                  const __grid_constant__ sm90::Work work) {
#if defined(FA_SM90A_PTX)
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw = ptx::smem_addr(smem_raw);
  const sm90::Smem<Cfg> sm{raw + (1024 - raw % 1024) % 1024};  // the swizzle atom's alignment
  const int tid = static_cast<int>(threadIdx.x), warpgroup = tid / Cfg::kWarpgroup;
  // A persistent grid: block i takes one work tile per round in the TileScheduler's order
  // (equal costs: TileScheduler::dealt, i, then 2 * gridDim.x - 1 - i, ...; else the next tile
  // of Work::tile_counter), so one tile's epilogue and the next one's Q and first K/V loads
  // overlap, and no block pays its launch and pipeline fill again. The producer publishes each
  // round's tile in tile_slot.
  if (tid == 0) {
#pragma unroll
    for (int b = 0; b < Cfg::kQBuffers; ++b) {
      ptx::mbarrier_init(sm.q_full(b), 1);
      ptx::mbarrier_init(sm.q_empty(b), Cfg::kConsumers * Cfg::kWarpgroup / 32);
    }
#pragma unroll
    for (int s = 0; s < Cfg::kStages; ++s) {
      ptx::mbarrier_init(sm.k_full(s), 1);
      ptx::mbarrier_init(sm.v_full(s), 1);
      ptx::mbarrier_init(sm.k_empty(s), Cfg::kConsumers * Cfg::kWarpgroup / 32);
      ptx::mbarrier_init(sm.v_empty(s), Cfg::kConsumers * Cfg::kWarpgroup / 32);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();

  // The consumers' branch comes first and returns: with the producer's first (an if / else
  // joining at the end), ptxas held the consumers near 180 registers and spilled (276-892
  // bytes at d128) instead of using the 240 they hold after setmaxnreg. No thread exits before
  // setmaxnreg either (that too capped the consumers near 180 registers, C7512).
  if (warpgroup != 0) {
    ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
    // The ping-pong ring's first turn is consumer 0's (consume).
    if constexpr (Cfg::kPingPong) {
      if (warpgroup == Cfg::kConsumers) {
        ptx::named_barrier_arrive(sm90::kTurnBarrier, 2 * Cfg::kWarpgroup);
      }
    }
    int ring = 0;
    // One loop counter (the tile is rederived from it): the variant kernel's consumers sit at
    // their 240-register limit, and the second counter spilled.
    for (int k = 0;; ++k) {
      const sm90::Sm90Trace trace = sm90::Sm90Trace::round(warpgroup - 1, k, Cfg::kWarpgroup);
      trace.top();
      // Every round with a tile waits for its q_full, also without key tiles: a skipped wait
      // would let the next round's wait pass on this round's phase. The round past the last
      // tile (the producer's final arrival) needs no wait.
      // The static deal: the tile is known before Q arrives, so its coordinates are computed
      // while Q loads (v5's order; v7 read every tile from tile_slot after the wait, and its
      // dense 512-1k cells ran 2.5-4% slower).
      const bool counted = work.tile_counter != nullptr;
      const sm90::RingSlot<Cfg::kQBuffers> qr = sm90::RingSlot<Cfg::kQBuffers>::at(k);
      unsigned next =
          counted ? 0u : TileScheduler::dealt(k, ptx::block_index_x(), ptx::grid_dim_x());
      if (counted) {
        sm90::wait_or_trap(sm.q_full(qr.stage), qr.parity);
        // Lane 0 of each warp reads tile_slot, and it is the lane that arrives on q_empty
        // later: an arrive releases only the arriving thread's accesses, so another lane's
        // read would race with the producer's next write (the PTX memory model; racecheck
        // reports it).
        if (tid % 32 == 0) next = ptx::ld_shared_u32(sm.tile_slot(qr.stage));
        next = __shfl_sync(0xffffffffu, next, 0);
      }
      if (next >= static_cast<unsigned>(work.tiles)) {
        sm90::Sm90Trace::report(warpgroup - 1, k, Cfg::kWarpgroup);
        break;
      }
      const int tile = static_cast<int>(next);
      const sm90::BlockCoords c = sm90::block_coords<Cfg, kVariants>(args, work, tile);
      if (!counted) sm90::wait_or_trap(sm.q_full(qr.stage), qr.parity);
      trace.tile(next, c.n_tiles);
      trace.mark(sm90::kTraceQ);
      sm90::consume<T, Cfg, kVariants>(args, sm, c, warpgroup - 1, ring, qr.stage, trace);
      ring += c.n_tiles;
    }
    // The turn the last consumer handed on after its last one (consume). The warpgroup read
    // afresh: held across the loop, it spilled the N176 kernels (8-80 bytes).
    if constexpr (Cfg::kPingPong) {
      if (ptx::thread_index_x() / Cfg::kWarpgroup == 1) {
        ptx::named_barrier_sync(sm90::kTurnBarrier, 2 * Cfg::kWarpgroup);
      }
    }
    return;
  }
  ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
  // Warps 1-3 exit at once (no named barrier counts them).
  if (tid / 32 == 0 && ptx::elect_one_sync()) {
    sm90::produce<Cfg, kVariants>(args, sm, &q_map, &k_map, &v_map, work);
  }
#endif
}

// Once per device and kernel: the shared-memory opt-in (cudaFuncSetAttribute) and the blocks
// resident per SM (the occupancy query); neither changes while the process runs, and the two
// calls on every launch were host time before the kernel was even queued. Two threads racing on
// the first launch both set the same attribute and store the same count.
template <typename T, class Cfg, bool kVariants>
Status sm90_prepare_kernel(int device, int* per_sm) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];  // 0 until prepared, then the blocks per SM
  if (device >= 0 && device < kMaxDevices) {
    const int v = cached[device].load(std::memory_order_acquire);
    if (v > 0) {
      *per_sm = v;
      return Status::Ok();
    }
  }
  auto kernel = flash_sm90_kernel<T, Cfg, kVariants>;
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
      "flash-sm90: cudaFuncSetAttribute(max dynamic shared memory)");
  int blocks = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                              &blocks, kernel, Cfg::kThreads, Cfg::kSmemBytes),
                          "flash-sm90: cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  *per_sm = std::max(1, blocks);
  if (device >= 0 && device < kMaxDevices) {
    cached[device].store(*per_sm, std::memory_order_release);
  }
  return Status::Ok();
}

template <typename T, class Cfg>
Status launch_flash_sm90_config(const KernelArgs& args, const Sm90Extents& ext,
                                unsigned* tile_counter, cudaStream_t stream) {
  // The maps live in this frame until the launch has copied its parameters.
  CUtensorMap q_map{}, k_map{}, v_map{};
  {
    const Status st = sm90_tensor_map(&q_map, "q", args.dtype, args.q, args.q_stride, ext.q_rows,
                                      args.heads, ext.batch, args.head_dim, Cfg::kBlockM);
    if (!st.ok()) return st;
  }
  if (ext.k_rows > 0) {
    const Status st = sm90_tensor_map(&k_map, "k", args.dtype, args.k, args.k_stride, ext.k_rows,
                                      args.kv_heads, ext.batch, args.head_dim, Cfg::kBlockN);
    if (!st.ok()) return st;
    const Status st_v = sm90_tensor_map(&v_map, "v", args.dtype, args.v, args.v_stride,
                                        ext.k_rows, args.kv_heads, ext.batch, args.head_dim,
                                        Cfg::kBlockN);
    if (!st_v.ok()) return st_v;
  } else {
    k_map = q_map;  // no keys: no block loads a K or V tile (every tile range is empty)
    v_map = q_map;
  }
  const bool variants = needs_variant_kernel(args);
  auto kernel = variants ? flash_sm90_kernel<T, Cfg, true> : flash_sm90_kernel<T, Cfg, false>;
  const std::int64_t tiles =
      TileScheduler::make(args.batch, args.heads, args.seqlen_q, Cfg::kBlockM).tiles();
  constexpr std::int64_t kMaxGrid = 0x7fffffff;  // grid.x limit
  if (tiles > kMaxGrid) {
    return Status(StatusCode::kUnsupported,
                  "flash-sm90: batch * heads * ceil(seqlen_q / " + std::to_string(Cfg::kBlockM) +
                      ") = " + std::to_string(tiles) + " blocks exceeds the grid limit 2^31 - 1");
  }
  // A persistent grid: one resident block per SM at most (the smem and the 240-register
  // consumers) loops over the work tiles, taken in the TileScheduler's head-major order, so the
  // tiles running together are the query blocks of one or two heads and share their K/V. Tiles
  // of equal cost (no mask edge, no varlen) are dealt out round by round (TileScheduler::dealt);
  // tiles of unequal cost (causal, a window, varlen; sm90_dynamic_tiles) go to whichever block
  // is free next (Work::tile_counter).
  // Measured on the H200 for causal (docs/performance.md, flash-sm90 v5 to v8): plain
  // round-robin over 132 blocks ran 0.62-0.66x at 16k (1.57x the mean work on the busiest
  // block); the counter against one block per tile: causal d64 512-1k +27-37%, d128 512-1k
  // +10% (v7, over sections of (batch, head) pairs longest first); head-major instead of the
  // sections: causal 16k d128 +2.0%, d256 +1.7%, d256 causal 512 0.58x -> 0.77x cuDNN (v8).
  const bool dynamic = sm90_dynamic_tiles(args);
  if (dynamic && tile_counter == nullptr) {
    return Status(StatusCode::kInternal, "flash-sm90: causal, windowed or varlen tiles need "
                                         "the tile counter (the backend's workspace)");
  }
  int device = 0, per_sm = 1;
  FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "flash-sm90: cudaGetDevice");
  DeviceProps props;
  {
    const Status st = device_props(device, &props);
    if (!st.ok()) return st;
  }
  const int sms = std::max(1, props.sm_count);
  {
    const Status st = variants ? sm90_prepare_kernel<T, Cfg, true>(device, &per_sm)
                               : sm90_prepare_kernel<T, Cfg, false>(device, &per_sm);
    if (!st.ok()) return st;
  }
  const std::int64_t grid = std::max<std::int64_t>(
      1, std::min<std::int64_t>(tiles, static_cast<std::int64_t>(sms) * std::max(1, per_sm)));
  sm90::Work work;
  work.sched = TileScheduler::make(args.batch, args.heads, args.seqlen_q, Cfg::kBlockM);
  work.tiles = static_cast<int>(tiles);
  work.group = static_cast<int>(args.heads / args.kv_heads);
  work.dense_rule = MaskRule32::make(args.seqlen_q, args.seqlen_k, -1, args.window_right, false);
  work.tile_counter = dynamic ? tile_counter : nullptr;
  if (dynamic) {
    FA_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(tile_counter, 0, sizeof(unsigned), stream),
                            "flash-sm90: cudaMemsetAsync(tile counter)");
  }
  kernel<<<static_cast<unsigned>(grid), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(
      args, q_map, k_map, v_map, work);
  return check_launch("flash_sm90_kernel");
}

// Softcap at d128 takes the short (N128) tile: at N176 the variant kernel's consumers hold S,
// P and O in all but ~2 of their 240 registers, and ptxas ran the softcap polynomial one score
// at a time (SASS: each score's Horner chain of dependent FP32 ops waits on the last); at N128
// it interleaves four. Measured with the degree-5 polynomial (bf16, H200): 16k +1.4% (causal
// +3.1%), 2k +6.6% (causal +0.1%).
template <typename T, int kHeadDim>
Status launch_flash_sm90(const KernelArgs& args, const Sm90Extents& ext, unsigned* tile_counter,
                         cudaStream_t stream) {
  using Long = typename Sm90ConfigFor<kHeadDim>::type;
  using Short = typename Sm90ShortConfigFor<kHeadDim>::type;
  if constexpr (!std::is_same_v<Long, Short>) {
    if ((kHeadDim == 128 && args.softcap > 0.0f) ||
        sm90_short_tiles_pay(args.seqlen_q, args.seqlen_k, args.window_left, args.window_right,
                             sm90_tile_shape<Long>(), sm90_tile_shape<Short>())) {
      return launch_flash_sm90_config<T, Short>(args, ext, tile_counter, stream);
    }
  }
  return launch_flash_sm90_config<T, Long>(args, ext, tile_counter, stream);
}

}  // namespace flashattn::cuda
