// The per-warp pieces of the flash-sm80 kernel: shared-memory tile layout and copies, the
// block's coordinates, and a warp's attention state with its steps (S = Q K^T, mask, online
// softmax, O += P V, output). The kernel (flash_sm80_kernel.cuh) only orders these steps and the
// copies.
//
// Each warp owns kWarpM = 16 * kMTiles query rows end to end; warps never exchange data.
// Fragment layouts: mma_sm80.cuh (lane l, g = l / 4, t = l % 4; a lane holds rows g and g + 8 of
// every m16 tile and columns 2t, 2t + 1 of every n8 tile).
//
// Shared memory: XOR-swizzled tiles (smem_layout.h).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common/mask_rule.h"
#include "common/tile_scheduler.h"
#include "cuda/attention/fragment_ops.cuh"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/kernel_args.h"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/fast_math.cuh"
#include "cuda/primitives/ldmatrix.cuh"
#include "cuda/primitives/mma_sm80.cuh"
#include "cuda/primitives/smem.cuh"
#include "cuda/sm80/flash_sm80_config.h"
#include "cuda/sm80/smem_layout.h"

namespace flashattn::cuda::sm80 {

// Issues cp.async for rows [row0, row0 + kRows) of one head of a BSHD tensor into a swizzled
// tile, from kLoaders threads (tid in [0, kLoaders)) laid out as CopyGrid (smem_layout.h); rows
// at or past `seqlen` are zero-filled (so masked keys meet V = 0, never NaN garbage).
template <class Cfg, int kRows, int kLoaders, typename T>
__device__ __forceinline__ void load_tile_async(std::uint32_t tile_smem, const T* head_gmem,
                                                std::int64_t row_stride, std::int64_t row0,
                                                std::int64_t seqlen, int tid) {
  using Grid = CopyGrid<Cfg, kLoaders>;
  static_assert(kRows % Grid::kStep == 0, "copy grid must tile the rows");
  const int c = Grid::chunk(tid), r = Grid::first_row(tid);
  if (Grid::kSlots != Cfg::kChunks && c >= Cfg::kChunks) return;  // idle slot (d96, d192)
  const T* src = head_gmem + (row0 + r) * row_stride + c * 8;
  const std::int64_t step_elems = Grid::kStep * row_stride;
  const std::uint32_t dst = tile_smem + Grid::base(tid);
  // Whole tiles (all but the last) take the path without per-row predicates.
  const bool whole = row0 + kRows <= seqlen;
#pragma unroll
  for (int k = 0; k < kRows / Grid::kStep; ++k) {
    const bool valid = whole || row0 + r + k * Grid::kStep < seqlen;
    ptx::cp_async_16(dst + k * Grid::kStep * Cfg::kRowBytes + Grid::chunk_offset(tid, k),
                     valid ? src : head_gmem, valid);
    src += step_elems;
  }
}

// Where a block works: its (batch, head), query rows [m0, m0 + kBlockM) of its sequence (dense
// or packed: AttentionArgs::seq), and the key tiles [n_first, n_end) any of those rows can see
// (MaskRule::tile_range: tiles left of a window or right of the causal diagonal are never
// loaded). A varlen block past its sequence's rows has m0 >= seqlen_q and does nothing.
template <typename T>
struct BlockCoords {
  std::int64_t b, h, m0;
  std::int64_t q_row0;                // the sequence's first row in q, out and lse
  std::int64_t seqlen_q, seqlen_k;    // the sequence's
  const T *q_gmem, *k_gmem, *v_gmem;  // this head's rows of the sequence (BSHD strides)
  int n_first, n_end;

  __device__ __forceinline__ MaskRule rule(const KernelArgs& args) const {
    return MaskRule::make(seqlen_q, seqlen_k, args.window_left, args.window_right, false);
  }
};

// The tile order is TileScheduler's (common/tile_scheduler.h): the query blocks of one head are
// consecutive (then the next head of the same GQA group), so the blocks resident together read
// the same K and V, which then come from L2; within a head the last query block goes first
// (with causal it has the most keys).
// The general kernel's coordinates come from shared memory, the dense kernel's from registers.
template <bool kShared, class C>
__device__ __forceinline__ const C& pick(const C& shared, const C& regs) {
  if constexpr (kShared) return shared;
  else return regs;
}

// kVariants = false: one dense sequence per batch entry and no left window edge (the dense
// kernel): lengths from the parameters, tiles from 0.
template <typename T, class Cfg, bool kVariants>
__device__ __forceinline__ BlockCoords<T> block_coords(const KernelArgs& args) {
  const TileCoord tile =
      TileScheduler::make(args.batch, args.heads, args.seqlen_q, Cfg::kBlockM).tile(blockIdx.x);
  BlockCoords<T> c;
  c.b = tile.batch;
  c.h = tile.head;
  c.m0 = tile.m_block * Cfg::kBlockM;
  SeqInfo seq;
  if constexpr (kVariants) {
    seq = args.seq(c.b);
  } else {
    seq.seqlen_q = args.seqlen_q;
    seq.seqlen_k = args.seqlen_k;
  }
  c.q_row0 = seq.q_row0;
  c.seqlen_q = seq.seqlen_q;
  c.seqlen_k = seq.seqlen_k;
  const std::int64_t h_kv = c.h / (args.heads / args.kv_heads);
  c.q_gmem = static_cast<const T*>(args.q) + c.b * args.q_stride[0] +
             seq.q_row0 * args.q_stride[1] + c.h * args.q_stride[2];
  c.k_gmem = static_cast<const T*>(args.k) + c.b * args.k_stride[0] +
             seq.k_row0 * args.k_stride[1] + h_kv * args.k_stride[2];
  c.v_gmem = static_cast<const T*>(args.v) + c.b * args.v_stride[0] +
             seq.k_row0 * args.v_stride[1] + h_kv * args.v_stride[2];
  std::int64_t first = 0, end = 0;
  const MaskRule rule =
      kVariants ? c.rule(args)
                : MaskRule::make(args.seqlen_q, args.seqlen_k, -1, args.window_right, false);
  if (c.m0 < c.seqlen_q) rule.tile_range(c.m0, Cfg::kBlockM, Cfg::kBlockN, &first, &end);
  c.n_first = static_cast<int>(first);
  c.n_end = static_cast<int>(end);
  return c;
}

// One warp's rows: the running max (unscaled), the per-lane partial row sums, the O
// accumulator, and its ldmatrix addresses.
template <typename T, class Cfg>
struct WarpAttention {
  static constexpr int kMTiles = Cfg::kMTiles, kNTiles = Cfg::kNTiles, kDTiles = Cfg::kDTiles;
  static constexpr int kDSteps = Cfg::kDSteps, kNSteps = Cfg::kNSteps;
  using Scores = float[kMTiles][kNTiles][4];
  using Probs = std::uint32_t[kMTiles][kNSteps][4];  // P as A fragments of PV, in T
  using QFrags = std::uint32_t[Cfg::kQInRegs ? kMTiles : 1][Cfg::kQInRegs ? kDSteps : 1][4];

  int row0;   // the warp's first row within the block
  int g, t;   // fragment row group and column pair
  LaneOffsets<Cfg> q_lanes, k_lanes, v_lanes;  // ldmatrix addresses (smem_layout.h)
  float row_max[kMTiles][2], row_sum[kMTiles][2], alpha[kMTiles][2];  // [m-tile][row g, g + 8]
  float o[kMTiles][kDTiles][4];
  QFrags q_frag;

  __device__ __forceinline__ WarpAttention(int warp_row0, int lane)
      : row0(warp_row0), g(lane / 4), t(lane % 4),
        q_lanes(warp_row0 + q_lane_row(lane), q_lane_chunk(lane)),
        k_lanes(k_lane_row(lane), k_lane_chunk(lane)),
        v_lanes(v_lane_row(lane), v_lane_chunk(lane)) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) { row_max[mt][hh] = -INFINITY; row_sum[mt][hh] = 0.0f; }
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) o[mt][dt][e] = 0.0f;
      }
    }
  }

  // Q's A fragments into registers (kQInRegs), once Q has landed.
  __device__ __forceinline__ void load_q(std::uint32_t q_smem) {
    if constexpr (Cfg::kQInRegs) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int ds = 0; ds < kDSteps; ++ds) {
          ptx::ldmatrix_x4(q_frag[mt][ds], q_lanes.at(q_smem, mt, ds));
        }
      }
    }
  }

  // S = Q K^T for one key tile.
  __device__ __forceinline__ void qk(Scores& s, std::uint32_t q_smem, std::uint32_t k_tile) const {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.0f;
      }
    }
#pragma unroll
    for (int ds = 0; ds < kDSteps; ++ds) {
      std::uint32_t a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (Cfg::kQInRegs) {
#pragma unroll
          for (int e = 0; e < 4; ++e) a[mt][e] = q_frag[mt][ds][e];
        } else {
          ptx::ldmatrix_x4(a[mt], q_lanes.at(q_smem, mt, ds));
        }
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        std::uint32_t kb[4];  // B fragments of n-tiles 2np and 2np + 1
        ptx::ldmatrix_x4(kb, k_lanes.at(k_tile, np, ds));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          ptx::mma_m16n8k16<T>(s[mt][2 * np], a[mt], kb[0], kb[1]);
          ptx::mma_m16n8k16<T>(s[mt][2 * np + 1], a[mt], kb[2], kb[3]);
        }
      }
    }
  }

  // Softcap and ALiBi (score_mod.cuh), when the params ask for either: a test of kernel
  // parameters, so the dense path pays one uniform branch per tile. ALiBi takes its one-FFMA
  // form on tiles wholly on one side of the diagonals of this warp's rows (fragment_ops.cuh);
  // its row part comes from alibi_row_bias().
  __device__ __forceinline__ void score_mod(Scores& s, const KernelArgs& args, const ScoreMod& mod,
                                            const BlockCoords<T>& c, std::int64_t n0) const {
    if (args.softcap > 0.0f || args.alibi_slopes != nullptr) {
      score_mod_fragment<kMTiles, kNTiles, Cfg::kSoftcapPoly>(
          s, mod, args.softcap_consts, c.m0 + row0 + g, c.seqlen_k - c.seqlen_q, n0, t, g);
    }
  }

  // ALiBi's row part of tile n0 for softmax() (fragment_ops.cuh alibi_row_bias), after the mask.
  __device__ __forceinline__ void alibi_row_bias(float (&row_bias)[kMTiles][2],
                                                 const ScoreMod& mod, const BlockCoords<T>& c,
                                                 std::int64_t n0) const {
    cuda::alibi_row_bias<kMTiles, kNTiles>(row_bias, mod, c.m0 + row0 + g,
                                           c.seqlen_k - c.seqlen_q, n0, t, g);
  }

  // Scores the rows do not see become -inf (MaskRule): only on the tiles where some row of this
  // warp's needs it (the tail tile, tiles crossing the causal diagonal or a window's edges).
  // kPerWarp: the test is on this warp's rows (fewer masked tiles on a window's edges), else on
  // the block's (one less 64-bit value live in the dense kernel, which sits at 255 registers).
  template <bool kPerWarp>
  __device__ __forceinline__ void mask(Scores& s, const MaskRule& rule, std::int64_t m0,
                                       std::int64_t n0) const {
    const bool needed = kPerWarp ? rule.tile_needs_mask(m0 + row0, Cfg::kWarpM, n0, Cfg::kBlockN)
                                 : rule.tile_needs_mask(m0, Cfg::kBlockM, n0, Cfg::kBlockN);
    if (!needed) return;
    mask_tile(s, rule, m0, n0);
  }

  // The same without the test, for a kernel that has decided the tile needs it.
  __device__ __forceinline__ void mask_tile(Scores& s, const MaskRule& rule, std::int64_t m0,
                                            std::int64_t n0) const {
    mask_fragment<kMTiles, kNTiles>(s, rule, m0 + row0 + g, n0, t);
  }

  // Online softmax of one tile (fragment_ops.cuh: lazy rescaling, exponent form), then P rounded
  // to T and packed as PV's A fragments. Returns whether rescale_o() must run before pv().
  // row_bias: ALiBi's row part (alibi_row_bias), the general kernel's; null: none.
  __device__ __forceinline__ bool softmax(Scores& s, Probs& p, float scale_log2,
                                          const float (*row_bias)[2] = nullptr) {
    const bool moved =
        softmax_update<kMTiles, kNTiles>(s, row_max, row_sum, alpha, scale_log2, row_bias);
    // The C fragments of n-tiles 2ks and 2ks + 1 are the A fragment of PV's k16 step ks.
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int ks = 0; ks < kNSteps; ++ks) {
        p[mt][ks][0] = ptx::pack2<T>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
        p[mt][ks][1] = ptx::pack2<T>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
        p[mt][ks][2] = ptx::pack2<T>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
        p[mt][ks][3] = ptx::pack2<T>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
      }
    }
    return moved;
  }

  __device__ __forceinline__ void rescale_o(bool moved) {
    rescale_fragment<kMTiles, kDTiles>(o, alpha, moved);
  }

  // O += P V for one key tile.
  __device__ __forceinline__ void pv(const Probs& p, std::uint32_t v_tile) {
#pragma unroll
    for (int ks = 0; ks < kNSteps; ++ks) {
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        std::uint32_t vb[4];  // B fragments of d-tiles 2dp and 2dp + 1
        ptx::ldmatrix_x4_trans(vb, v_lanes.at(v_tile, ks, dp));
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          ptx::mma_m16n8k16<T>(o[mt][2 * dp], p[mt][ks], vb[0], vb[1]);
          ptx::mma_m16n8k16<T>(o[mt][2 * dp + 1], p[mt][ks], vb[2], vb[3]);
        }
      }
    }
  }

  // O / row_sum with the sink (raw units, -inf: none) folded in (online_softmax.cuh finalize_row: O = 0 and LSE = -inf,
  // or the sink's logit, for a row with no visible key) to global memory. The warp writes its O
  // rows over its own Q rows in shared memory (only it ever read them; every copy into them must
  // have landed), then stores whole 16-byte chunks: consecutive lanes cover consecutive chunks of
  // a row.
  // seqlen_q and q_row0: the sequence's rows (the caller passes the dense kernel's from the
  // parameters).
  __device__ __forceinline__ void store(unsigned char* q_rows_smem, const KernelArgs& args,
                                        const BlockCoords<T>& c, std::int64_t seqlen_q,
                                        std::int64_t q_row0, float sink, int lane) const {
    float* lse_gmem = args.lse == nullptr
                          ? nullptr
                          : args.lse + c.b * args.lse_stride[0] + c.h * args.lse_stride[1] +
                                q_row0 * args.lse_stride[2];
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const RowResult r =
            finalize_row(row_max[mt][hh], reduce_sum_lanes<4>(row_sum[mt][hh]), sink,
                         args.scale_log2);
        const int row = row0 + mt * 16 + g + 8 * hh;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          const std::uint32_t packed =
              ptx::pack2<T>(o[mt][dt][2 * hh] * r.inv, o[mt][dt][2 * hh + 1] * r.inv);
          *reinterpret_cast<std::uint32_t*>(q_rows_smem + swizzle<Cfg>(row, dt) + 4 * t) = packed;
        }
        const std::int64_t row_seq = c.m0 + row;
        if (lse_gmem != nullptr && t == 0 && row_seq < seqlen_q) {
          lse_gmem[row_seq * args.lse_stride[2]] = r.lse;
        }
      }
    }
    __syncwarp();
    T* o_gmem = static_cast<T*>(args.o) + c.b * args.o_stride[0] + q_row0 * args.o_stride[1] +
                c.h * args.o_stride[2];
#pragma unroll
    for (int i = lane; i < Cfg::kWarpM * Cfg::kChunks; i += 32) {
      const int r = i / Cfg::kChunks, ch = i % Cfg::kChunks;
      const std::int64_t row_seq = c.m0 + row0 + r;
      if (row_seq < seqlen_q) {
        const uint4 chunk =
            *reinterpret_cast<const uint4*>(q_rows_smem + swizzle<Cfg>(row0 + r, ch));
        *reinterpret_cast<uint4*>(o_gmem + row_seq * args.o_stride[1] + ch * 8) = chunk;
      }
    }
  }
};

}  // namespace flashattn::cuda::sm80
