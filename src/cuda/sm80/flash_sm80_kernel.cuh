// The tensor-core flash forward kernel (mma.sync m16n8k16, bf16/fp16 in, float32 accumulate),
// for sm_80 and later. Tile shapes: flash_sm80_config.h. Per block:
//
//   init:  cp.async Q and the first K, V tiles into shared memory; row_max = -inf, row_sum = 0,
//          O = 0 in registers.
//   loop over key tiles j (only those some row of the block can see: causal tiles above the
//   diagonal are never loaded):
//          issue K[j+1]; wait K[j]
//          S = Q K[j]^T            ldmatrix (Q, K) + mma.sync, float32 in registers
//          mask (only the tail tile and tiles crossing the causal diagonal)
//          online softmax          exp2 with the scale folded in; P rounded to the input type
//                                  and repacked in registers as the A operand of the next mma
//          issue V[j+1]; wait V[j]
//          O += P V[j]             ldmatrix.trans (V) + mma.sync
//   finalize: O / row_sum through shared memory to 16-byte coalesced stores; LSE.
//
// Shared memory is XOR-swizzled by 16-byte chunk: chunk c of row r lives at chunk c ^ (r % 8).
// Every ldmatrix phase reads one chunk column of 8 consecutive rows, which the swizzle spreads
// over all 32 banks; so do the fragment-layout stores of the output staging.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "cuda/attention/mask.cuh"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/common/check.h"
#include "cuda/common/kernel_args.h"
#include "cuda/primitives/cp_async.cuh"
#include "cuda/primitives/fast_math.cuh"
#include "cuda/primitives/ldmatrix.cuh"
#include "cuda/primitives/mma_sm80.cuh"
#include "cuda/primitives/smem.cuh"
#include "cuda/sm80/flash_sm80_config.h"

namespace flashattn::cuda {
namespace sm80 {

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of Cfg rows.
template <class Cfg>
__device__ __forceinline__ std::uint32_t swizzle(int row, int chunk) {
  return static_cast<std::uint32_t>(row * Cfg::kRowBytes + ((chunk ^ (row & 7)) << 4));
}

// A lane's ldmatrix addresses in a swizzled tile. The lane reads row lane_row + 16 * row16 and
// chunk 2 * pair + lane_chunk. Written as pair = 4a + i, the swizzled chunk is
// 8a + ((2i + lane_chunk) ^ (lane_row % 8)): four per-lane offsets (i = 0..3) plus a compile-time
// constant, which ptxas folds into the instruction's immediate. Computing the XOR per access
// instead lets the compiler hoist one address per (row16, pair): 64 registers at d128, and spills.
template <class Cfg>
struct LaneOffsets {
  std::uint32_t off[4];

  __device__ __forceinline__ LaneOffsets(int lane_row, int lane_chunk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      off[i] = static_cast<std::uint32_t>(lane_row * Cfg::kRowBytes +
                                          (((2 * i + lane_chunk) ^ (lane_row & 7)) << 4));
    }
  }
  __device__ __forceinline__ std::uint32_t at(std::uint32_t tile_smem, int row16, int pair) const {
    return tile_smem + off[pair % 4] + row16 * 16 * Cfg::kRowBytes + (pair / 4) * 128;
  }
};

// Issues cp.async for rows [row0, row0 + kRows) of one head of a BSHD tensor into a swizzled
// tile; rows at or past `seqlen` are zero-filled (so masked keys meet V = 0, never NaN garbage).
// Thread i always copies chunk i % kSlots of rows i / kSlots + k * kStep (kSlots: the chunks of a
// row rounded up to a power of two; threads past the last chunk idle, 25% of the copy issue at
// d96 and d192). Both sizes are powers of two and the starting row is below kStep, so row % 8 of
// copy k is (i / kSlots) % 8 ^ (k * kStep) % 8: the swizzle needs no per-copy arithmetic, and
// the addresses are one base plus compile-time offsets (per-copy index math hoisted out of the
// key loop cost ~40 registers and spilled).
template <class Cfg, int kRows, typename T>
__device__ __forceinline__ void load_tile_async(std::uint32_t tile_smem, const T* head_gmem,
                                                std::int64_t row_stride, std::int64_t row0,
                                                std::int64_t seqlen) {
  constexpr int kSlots = Cfg::kChunks <= 8 ? 8 : Cfg::kChunks <= 16 ? 16 : 32;
  constexpr int kStep = Cfg::kThreads / kSlots;
  static_assert(Cfg::kThreads % kSlots == 0 && kRows % kStep == 0, "copy grid must tile the rows");
  const int c = static_cast<int>(threadIdx.x) % kSlots, r = static_cast<int>(threadIdx.x) / kSlots;
  if (kSlots != Cfg::kChunks && c >= Cfg::kChunks) return;
  const T* src = head_gmem + (row0 + r) * row_stride + c * 8;
  const std::int64_t step_elems = kStep * row_stride;
  const std::uint32_t dst = tile_smem + static_cast<std::uint32_t>(r * Cfg::kRowBytes);
  const int key = c ^ (r & 7);
  // Whole tiles (all but the last) take the path without per-row predicates.
  const bool whole = row0 + kRows <= seqlen;
#pragma unroll
  for (int k = 0; k < kRows / kStep; ++k) {
    const bool valid = whole || row0 + r + k * kStep < seqlen;
    const std::uint32_t chunk = static_cast<std::uint32_t>(key ^ ((k * kStep) & 7));
    ptx::cp_async_16(dst + k * kStep * Cfg::kRowBytes + (chunk << 4), valid ? src : head_gmem,
                     valid);
    src += step_elems;
  }
}

}  // namespace sm80

template <typename T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
flash_sm80_kernel(KernelArgs args) {
  constexpr int kBlockM = Cfg::kBlockM, kBlockN = Cfg::kBlockN, kWarpM = Cfg::kWarpM;
  constexpr int kMTiles = Cfg::kMTiles, kNTiles = Cfg::kNTiles, kDTiles = Cfg::kDTiles;
  constexpr int kDSteps = Cfg::kDSteps, kNSteps = Cfg::kNSteps;
  extern __shared__ __align__(128) unsigned char smem[];
  const std::uint32_t q_smem = ptx::smem_addr(smem);
  const std::uint32_t k_smem = q_smem + Cfg::kQBytes;                                // [stage]
  const std::uint32_t v_smem = k_smem + Cfg::kStages * Cfg::kKvTileBytes;            // [stage]

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;  // fragment row group and column pair (mma_sm80.cuh)
  const int warp_row0 = warp * kWarpM;   // this warp's first row within the block
  // ldmatrix row addresses (ldmatrix.cuh: lanes 8i..8i+7 address the rows of matrix i):
  //   Q, A fragments:          matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15), rows first
  //   K, B fragments of QK^T:  (keys 0-7, k 0-7), (keys 0-7, k 8-15), (keys 8-15, k 0-7), ...
  //   V, B fragments of PV:    (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15), ...
  const sm80::LaneOffsets<Cfg> q_lanes(warp_row0 + lane % 16, lane / 16);
  const sm80::LaneOffsets<Cfg> k_lanes(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
  const sm80::LaneOffsets<Cfg> v_lanes(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);

  const Mask mask{args.seqlen_q, args.seqlen_k, args.causal};
  const std::int64_t m_blocks = (args.seqlen_q + kBlockM - 1) / kBlockM;
  // One block per query tile (the launcher checks the grid fits). Not a grid-stride loop: the
  // compiler would hoist every per-thread epilogue address out of it, and those ~90 values live
  // across the key loop spilled at d128.
  const std::int64_t tile = blockIdx.x;
  // Consecutive blocks take the query blocks of one head (then the next head of the same GQA
  // group): the blocks resident together read the same K and V, which then come from L2.
  // Within a head the last query block goes first: with causal it has the most keys.
  const std::int64_t bh = tile / m_blocks;
  const std::int64_t m0 = (m_blocks - 1 - tile % m_blocks) * kBlockM;
  const std::int64_t b = bh / args.heads, h = bh % args.heads;
  const std::int64_t h_kv = h / (args.heads / args.kv_heads);
  const T* q_gmem = static_cast<const T*>(args.q) + b * args.q_stride[0] + h * args.q_stride[2];
  const T* k_gmem = static_cast<const T*>(args.k) + b * args.k_stride[0] + h_kv * args.k_stride[2];
  const T* v_gmem = static_cast<const T*>(args.v) + b * args.v_stride[0] + h_kv * args.v_stride[2];
  const std::int64_t key_end = mask.key_end(m0, kBlockM);
  const int n_tiles = key_end > 0 ? static_cast<int>((key_end + kBlockN - 1) / kBlockN) : 0;

  // cp.async groups, in commit order.
  //   two barriers per tile: [Q, K0] [V0], then per tile [K j+1] [V j+1] (empty past the end):
  //     waiting until 2 groups remain in flight always completes exactly the tile about to be
  //     read.
  //   one barrier per tile: [Q, K0, V0] [K1, V1] .. [K s-2, V s-2] for kStages = s, then per
  //     tile [K j+s-1, V j+s-1]: waiting until s - 2 remain completes tile j.
  auto load_kv = [&](int tile_index, int stage_index, bool with_v) {
    const std::int64_t row0 = static_cast<std::int64_t>(tile_index) * kBlockN;
    sm80::load_tile_async<Cfg, kBlockN>(k_smem + stage_index * Cfg::kKvTileBytes, k_gmem,
                                        args.k_stride[1], row0, args.seqlen_k);
    if (with_v) {
      sm80::load_tile_async<Cfg, kBlockN>(v_smem + stage_index * Cfg::kKvTileBytes, v_gmem,
                                          args.v_stride[1], row0, args.seqlen_k);
    }
  };
  auto load_v = [&](int tile_index, int stage_index) {
    sm80::load_tile_async<Cfg, kBlockN>(v_smem + stage_index * Cfg::kKvTileBytes, v_gmem,
                                        args.v_stride[1],
                                        static_cast<std::int64_t>(tile_index) * kBlockN,
                                        args.seqlen_k);
  };
  sm80::load_tile_async<Cfg, kBlockM>(q_smem, q_gmem, args.q_stride[1], m0, args.seqlen_q);
  if constexpr (Cfg::kBarriers == 2) {
    if (n_tiles > 0) load_kv(0, 0, false);
    ptx::cp_async_commit();
    if (n_tiles > 0) load_v(0, 0);
    ptx::cp_async_commit();
  } else {
#pragma unroll
    for (int i = 0; i < Cfg::kStages - 1; ++i) {
      if (i < n_tiles) load_kv(i, i, true);
      ptx::cp_async_commit();
    }
  }

  float row_max[kMTiles][2], row_sum[kMTiles][2];  // [m-tile][row g, row g + 8]
  float o[kMTiles][kDTiles][4];
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
  // Q's A fragments, when they live in registers: loaded once, before the key loop (the wait
  // for Q's group is early by one tile's copy; the lane offsets then die before the loop).
  std::uint32_t q_frag[Cfg::kQInRegs ? kMTiles : 1][Cfg::kQInRegs ? kDSteps : 1][4];
  if constexpr (Cfg::kQInRegs) {
    ptx::cp_async_wait<Cfg::kBarriers == 2 ? 1 : Cfg::kStages - 2>();
    __syncthreads();
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int ds = 0; ds < kDSteps; ++ds) {
        ptx::ldmatrix_x4(q_frag[mt][ds], q_lanes.at(q_smem, mt, ds));
      }
    }
  }

  // The stage tile j lives in, and the one the tile kStages - 1 ahead is loaded into (which
  // held tile j - 1).
  int stage = 0, ahead_stage = Cfg::kStages - 1;
  for (int j = 0; j < n_tiles; ++j) {
    const std::int64_t n0 = static_cast<std::int64_t>(j) * kBlockN;
    const std::uint32_t k_tile = k_smem + stage * Cfg::kKvTileBytes;
    const std::uint32_t v_tile = v_smem + stage * Cfg::kKvTileBytes;
    if constexpr (Cfg::kBarriers == 1) {
      // One barrier per tile: tile j landed for every thread, and every warp is done with tile
      // j - 1, whose stage the tile kStages - 1 ahead overwrites.
      ptx::cp_async_wait<Cfg::kStages - 2>();
      __syncthreads();
      if (j + Cfg::kStages - 1 < n_tiles) load_kv(j + Cfg::kStages - 1, ahead_stage, true);
      ptx::cp_async_commit();
    } else {
      // K[j+1] overwrites K[j-1], which every warp finished before the previous V barrier.
      if (j + 1 < n_tiles) load_kv(j + 1, ahead_stage, false);
      ptx::cp_async_commit();
      ptx::cp_async_wait<2>();
      __syncthreads();  // K[j] (and, first time, Q) visible to every warp
    }

    // S = Q K^T.
    float s[kMTiles][kNTiles][4];
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

    // Mask: keys past seqlen_k and, with causal, right of the diagonal; block-uniform test.
    // Each of the thread's rows sees the tile's keys [0, limit); the columns are then compared
    // as small ints (the 64-bit index math per element cost registers at the hottest point).
    if (mask.tile_needs_mask(m0, n0, kBlockN)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const std::int64_t row = m0 + warp_row0 + mt * 16 + g + 8 * hh;
          std::int64_t end = args.seqlen_k - n0;
          if (args.causal) end = min(end, row + mask.diag() + 1 - n0);
          const int limit = static_cast<int>(max(std::int64_t{0}, min(end, std::int64_t{kBlockN})));
#pragma unroll
          for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              if (nt * 8 + 2 * t + e >= limit) s[mt][nt][2 * hh + e] = -INFINITY;
            }
          }
        }
      }
    }

    // Online softmax. Scores stay unscaled until the exponent, fma(s, scale_log2, -max): one
    // rounding, and the scale costs nothing. A row's 4 column pairs live on the 4 lanes of a
    // quad (t = 0..3), so row reductions are two shuffles.
    //
    // Lazy rescaling: a row's running max moves only when a tile's max exceeds it by more than
    // kRescaleLog2 (a factor 256). Below that P = 2^(s - stale max) stays <= 256: O / row_sum is
    // the same function (numerator and denominator share the max), P's rounding to T is
    // relative and unchanged, and row_sum stays far from float overflow (256 per key). Once the
    // max has settled, most tiles skip the O rescale: kMTiles * kDTiles * 4 multiplies per thread
    // (128 at d128), about a third of the softmax phase's instructions. The skip is decided per
    // warp, so the branch never diverges.
    constexpr float kRescaleLog2 = 8.0f;
    std::uint32_t p[kMTiles][kNSteps][4];  // P as A fragments of PV, in T
    float alpha[kMTiles][2];
    bool rescale = false;
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float tile_max = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          tile_max = fmaxf(tile_max, fmaxf(s[mt][nt][2 * hh], s[mt][nt][2 * hh + 1]));
        }
        // scale_log2 > 0, so the max of the scaled scores is the scaled max. A row that has
        // seen no key keeps -inf (-inf + 8 = -inf: any visible score moves it).
        const float tile_max_log2 = reduce_max_lanes<4>(tile_max) * args.scale_log2;
        alpha[mt][hh] = 1.0f;
        if (tile_max_log2 > row_max[mt][hh] + kRescaleLog2) {
          alpha[mt][hh] = ptx::ex2(row_max[mt][hh] - tile_max_log2);  // 0 for a -inf old max
          row_max[mt][hh] = tile_max_log2;
          rescale = true;
        }
        const float sub = safe_max(row_max[mt][hh]);
        float p_sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 2 * hh; e < 2 * hh + 2; ++e) {
            s[mt][nt][e] = ptx::ex2(fmaf(s[mt][nt][e], args.scale_log2, -sub));
            p_sum += s[mt][nt][e];
          }
        }
        // A per-thread partial sum: alpha is the same on the quad's 4 lanes, so the lanes are
        // summed once, at finalize.
        row_sum[mt][hh] = row_sum[mt][hh] * alpha[mt][hh] + p_sum;
      }
      // The C fragments of n-tiles 2ks and 2ks + 1 are the A fragment of PV's k16 step ks.
#pragma unroll
      for (int ks = 0; ks < kNSteps; ++ks) {
        p[mt][ks][0] = ptx::pack2<T>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
        p[mt][ks][1] = ptx::pack2<T>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
        p[mt][ks][2] = ptx::pack2<T>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
        p[mt][ks][3] = ptx::pack2<T>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
      }
    }

    if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) o[mt][dt][e] *= alpha[mt][e / 2];
        }
      }
    }

    if constexpr (Cfg::kBarriers == 2) {
      // V[j+1] overwrites V[j-1], which every warp finished before this iteration's K barrier.
      if (j + 1 < n_tiles) load_v(j + 1, ahead_stage);
      ptx::cp_async_commit();
      ptx::cp_async_wait<2>();
      __syncthreads();  // V[j] visible to every warp
    }

    // O += P V.
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
    stage = stage + 1 == Cfg::kStages ? 0 : stage + 1;
    ahead_stage = ahead_stage + 1 == Cfg::kStages ? 0 : ahead_stage + 1;
  }
  // With no key tile the loop's barriers never ran: other threads' copies into this warp's Q
  // rows may still be landing where the output is staged next.
  ptx::cp_async_wait<0>();
  __syncthreads();

  // Finalize: O / row_sum (O = 0 and LSE = -inf for a row with no visible key). The warp
  // writes its O rows over its own Q rows (only it ever read them), then stores whole 16-byte
  // chunks: consecutive lanes cover consecutive chunks of a row.
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const float total = reduce_sum_lanes<4>(row_sum[mt][hh]);
      const float inv = total > 0.0f ? 1.0f / total : 0.0f;
      const int row = warp_row0 + mt * 16 + g + 8 * hh;
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
        const std::uint32_t packed =
            ptx::pack2<T>(o[mt][dt][2 * hh] * inv, o[mt][dt][2 * hh + 1] * inv);
        *reinterpret_cast<std::uint32_t*>(smem + sm80::swizzle<Cfg>(row, dt) + 4 * t) = packed;
      }
      const std::int64_t row_global = m0 + row;
      if (args.lse != nullptr && t == 0 && row_global < args.seqlen_q) {
        args.lse[b * args.lse_stride[0] + h * args.lse_stride[1] +
                 row_global * args.lse_stride[2]] = finalize_lse(row_max[mt][hh], total);
      }
    }
  }
  __syncwarp();
  T* o_gmem = static_cast<T*>(args.o) + b * args.o_stride[0] + h * args.o_stride[2];
#pragma unroll
  for (int i = lane; i < kWarpM * Cfg::kChunks; i += 32) {
    const int r = i / Cfg::kChunks, c = i % Cfg::kChunks;
    const std::int64_t row_global = m0 + warp_row0 + r;
    if (row_global < args.seqlen_q) {
      const uint4 chunk =
          *reinterpret_cast<const uint4*>(smem + sm80::swizzle<Cfg>(warp_row0 + r, c));
      *reinterpret_cast<uint4*>(o_gmem + row_global * args.o_stride[1] + c * 8) = chunk;
    }
  }
}

template <typename T, class Cfg>
Status launch_flash_sm80_config(const KernelArgs& args, cudaStream_t stream) {
  auto kernel = flash_sm80_kernel<T, Cfg>;
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes),
      "flash-sm80: cudaFuncSetAttribute(max dynamic shared memory)");
  const std::int64_t tiles =
      args.batch * args.heads * ((args.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM);
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
