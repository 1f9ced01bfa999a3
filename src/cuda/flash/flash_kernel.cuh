// The first fused flash kernel, on CUDA cores (the tensor-core kernels live in sm80/ and sm90/).
//
// One thread block owns kBlockM = 64 query rows of one (batch, head): it keeps Q, the running max,
// the running sum and the O accumulator on chip and streams K and V through one shared-memory
// tile of kBlockN = 64 keys. Threads form a (kBlockM / kRowsPerThread) x 8 grid: each thread owns
// kRowsPerThread query rows and
//   - for S = Q K^T: 8 keys, tx + 8 * j, so the 8 lanes of a row read 8 different K rows;
//     with K rows padded to head_dim + 4 floats those 8 float4 reads hit 8 different bank quads;
//   - for O += P V: head_dim / 8 output columns, 4 * tx + 32 * c, read from V as float4s (the 8
//     lanes cover 128 contiguous bytes: conflict-free).
// P goes through shared memory in the input dtype (as a tensor-core PV would see it).
//
// Per tile: 4 barriers (K in, K done, V in, V done); loads are synchronous, latency is hidden by
// the other resident blocks. Measured figures and the plan past this design: docs/performance.md.
//
// Variants (the steps of cpu-flash, src/cpu/cpu_flash.cc, in the raw score units of
// cuda/attention/score_mod.cuh):
//   sequences   AttentionArgs::seq: a block past its sequence's rows (varlen) does nothing;
//   key tiles   MaskRule::tile_range: tiles left of a window or right of the diagonal are never
//               loaded; the per-element mask runs only on tiles MaskRule::tile_needs_mask names;
//   softcap, ALiBi  ScoreMod on each score before the mask (softcap would turn -inf into -cap);
//               the exponent multiplier stays scale * log2(e);
//   sinks       folded in at finalize (finalize_row).
// The dense path pays uniform branches on kernel parameters only: no per-score work is added.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/attention_args.h"
#include "common/mask_rule.h"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/check.h"
#include "cuda/common/device_dtype.cuh"
#include "cuda/flash/flash.h"

namespace flashattn::cuda {

template <typename T, int kHeadDimMax>
struct FlashTraits {
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = 64;
  static constexpr int kLanesPerRow = 8;
  // 4 rows per thread keeps 4 * head_dim / 8 O accumulators in registers: 64 floats at d128;
  // at d256 that would be 128, so use 2 rows and twice the threads.
  static constexpr int kRowsPerThread = kHeadDimMax <= 128 ? 4 : 2;
  static constexpr int kThreads = kBlockM / kRowsPerThread * kLanesPerRow;  // 128 or 256
  static constexpr int kKeysPerThread = kBlockN / kLanesPerRow;             // 8
  static constexpr int kColVecs = kHeadDimMax / 32;   // float4 column groups per thread
  // K and V are converted to float once per tile (each element is read by 16 row groups). Q and P
  // (P is rounded to T anyway) are staged as QpT: the 16-bit input type at d128, where it takes
  // shared memory from 85 KB to 60 KB and resident blocks from 2 to 3 (measured +24%: ncu had the
  // 2-block kernel issuing on 41% of cycles, latency-bound at 2 warps per scheduler); float
  // elsewhere, where shared memory does not limit occupancy and the conversions on every read
  // only cost (d64 measured -5% with 16-bit staging).
  using QpT = std::conditional_t<kHeadDimMax == 128, T, float>;
  // Rows are padded by 16 bytes: keeps vector alignment and moves consecutive rows 4 banks apart.
  static constexpr int kQStride = kHeadDimMax + 16 / sizeof(QpT);  // elements of QpT
  static constexpr int kKvStride = kHeadDimMax + 4;                // floats
  static constexpr int kPStride = kBlockN + 16 / sizeof(QpT);      // elements of QpT
  static constexpr int kQBytes = kBlockM * kQStride * sizeof(QpT);
  static constexpr int kKvBytes = kBlockN * kKvStride * 4;
  static constexpr int kSmemBytes = kQBytes + kKvBytes + kBlockM * kPStride * sizeof(QpT);
  // Resident blocks per SM on the H200 (227 KB, 64K registers; sm_90a register counts), 16-bit /
  // float inputs:
  //   d64:  52 KB, 128 registers               -> 4 blocks of 4 warps
  //   d128: 60 / 85 KB, 168 / 202 registers    -> 3 / 2 blocks of 4 warps
  //   d256: 150 KB, 168 registers              -> 1 block of 8 warps (staging Q and P in 16 bits
  //         fits 2 blocks in shared memory, but then the compiler took 218 registers, and a
  //         launch-bounds cap of 128 spilled)
  // Those block counts (what shared memory allows: 227 KB per SM, 1 KB reserved per block, 256
  // bytes for the 104-byte FlashBlock) are the __launch_bounds__ minimum, so registers never cut
  // occupancy below them: 4, 3, 2 and 1 at d64, d128 16-bit, d128 float and d256, register caps
  // of 128, 168, 255 and 255. Uncapped, the variants' code (sequence, mask rule, transforms)
  // took d64 16-bit to 132 and d128 16-bit to 174-176 registers on sm_90a (one resident block
  // fewer) although the dense path runs none of it; capped, nothing spills (sm_80 and sm_90a).
  static constexpr int kMinBlocks = (227 * 1024) / (kSmemBytes + 1024 + 256);
};

// Copies rows [row0, row0 + rows) of one head of a BSHD tensor into `dst_smem` (row stride
// `dst_stride` elements), converted to float when Dst is float; rows past `seqlen` and columns
// past head_dim become 0.
template <typename T, typename Dst, int kThreads>
__device__ __forceinline__ void load_tile(const T* src_gmem, std::int64_t row_stride,
                                          std::int64_t row0, std::int64_t seqlen, int rows,
                                          int head_dim, int head_dim_max, Dst* dst_smem,
                                          int dst_stride) {
  constexpr int kVec = kVecElems<T>;
  const int vecs_per_row = head_dim_max / kVec;
  for (int e = threadIdx.x; e < rows * vecs_per_row; e += kThreads) {
    const int r = e / vecs_per_row, c = (e % vecs_per_row) * kVec;
    const bool inside = row0 + r < seqlen && c < head_dim;
    Dst* dst = dst_smem + r * dst_stride + c;
    if constexpr (std::is_same_v<T, Dst>) {
      *reinterpret_cast<uint4*>(dst) =
          inside ? __ldg(reinterpret_cast<const uint4*>(src_gmem + (row0 + r) * row_stride + c))
                 : make_uint4(0, 0, 0, 0);
    } else {
      copy_vec_as_float(inside ? src_gmem + (row0 + r) * row_stride + c : src_gmem, inside, dst);
    }
  }
}

// Where a block works and what it needs past its prologue: one query block of one (batch, head)
// of one sequence (dense or packed: AttentionArgs::seq). Thread 0 writes it to shared memory
// and every thread reads it back after a barrier, so none of it holds registers across the key
// loop (kept in registers, the sequence alone took the 16-bit d128 kernel from 168 to 226
// registers, 3 resident blocks to 2, on the dense path too).
struct FlashBlock {
  MaskRule rule;                  // the sequence's lengths and window (what its rows see)
  std::int64_t m0;                // the block's first row within the sequence
  std::int64_t n_first, n_end;    // key tiles some row of the block sees (rule.tile_range)
  std::int64_t k_offset, v_offset;   // elements to this (sequence, kv head)'s first K / V row
  std::int64_t o_offset, lse_offset; // elements to this (sequence, head)'s first O / LSE row
  float sink;                     // the sink logit in raw units (-inf: none)
  float softcap_cap;              // softcap / scale (float T: read here, not from the params,
                                  // which spilled d64's 128 registers by 12 bytes)
  float softcap_in;               // scale / softcap: the tanhf argument per raw score (float T)
  ScoreMod mod;                   // ALiBi's constant of this (batch, head)
};

template <typename T, int kHeadDimMax>
__global__ void __launch_bounds__(FlashTraits<T, kHeadDimMax>::kThreads,
                                  FlashTraits<T, kHeadDimMax>::kMinBlocks)
flash_forward_kernel(KernelArgs args) {
  using Tr = FlashTraits<T, kHeadDimMax>;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kRows = Tr::kRowsPerThread;
  constexpr int kKeys = Tr::kKeysPerThread, kColVecs = Tr::kColVecs;
  extern __shared__ __align__(16) unsigned char smem[];
  using QpT = typename Tr::QpT;
  QpT* q_smem = reinterpret_cast<QpT*>(smem);                                // [kBlockM][kQStride]
  float* kv_smem = reinterpret_cast<float*>(smem + Tr::kQBytes);             // [kBlockN][kKvStride]
  QpT* p_smem = reinterpret_cast<QpT*>(smem + Tr::kQBytes + Tr::kKvBytes);   // [kBlockM][kPStride]

  const int tx = threadIdx.x % Tr::kLanesPerRow;  // key / column group
  const int ty = threadIdx.x / Tr::kLanesPerRow;  // row group
  const int head_dim = static_cast<int>(args.head_dim);
  const std::int64_t bh_count = args.batch * args.heads;
  const std::int64_t m_blocks = (args.seqlen_q + kBlockM - 1) / kBlockM;
  __shared__ FlashBlock block_smem;
  const FlashBlock& blk = block_smem;  // read only after the barrier that follows its write

  for (std::int64_t tile = blockIdx.x; tile < bh_count * m_blocks; tile += gridDim.x) {
    {
      // The first bh_count tiles take the last query block of every head: with causal those
      // have the most keys, so the longest work starts first.
      const std::int64_t m_block = m_blocks - 1 - tile / bh_count;
      const std::int64_t bh = tile % bh_count;
      const std::int64_t b = bh / args.heads, h = bh % args.heads;
      const SeqInfo seq = args.seq(b);
      const std::int64_t m0 = m_block * kBlockM;
      if (m0 >= seq.seqlen_q) continue;  // varlen: past this sequence's rows (the whole block)
      const T* q_gmem = static_cast<const T*>(args.q) + b * args.q_stride[0] +
                        seq.q_row0 * args.q_stride[1] + h * args.q_stride[2];
      __syncthreads();  // the previous tile's readers of q_smem and block_smem are done
      if (threadIdx.x == 0) {
        FlashBlock f;
        f.rule = args.mask(seq);
        f.m0 = m0;
        f.rule.tile_range(m0, kBlockM, kBlockN, &f.n_first, &f.n_end);
        const std::int64_t h_kv = h / (args.heads / args.kv_heads);
        f.k_offset = b * args.k_stride[0] + seq.k_row0 * args.k_stride[1] + h_kv * args.k_stride[2];
        f.v_offset = b * args.v_stride[0] + seq.k_row0 * args.v_stride[1] + h_kv * args.v_stride[2];
        f.o_offset = b * args.o_stride[0] + seq.q_row0 * args.o_stride[1] + h * args.o_stride[2];
        f.lse_offset = b * args.lse_stride[0] + h * args.lse_stride[1] +
                       seq.q_row0 * args.lse_stride[2];
        f.sink = sink_raw(args, h);
        f.softcap_in = args.softcap > 0.0f ? args.scale / args.softcap : 0.0f;
        f.softcap_cap = args.softcap_consts.cap;
        f.mod = ScoreMod::make(args, b, h);
        block_smem = f;
      }
      load_tile<T, QpT, Tr::kThreads>(q_gmem, args.q_stride[1], m0, seq.seqlen_q, kBlockM,
                                    head_dim, kHeadDimMax, q_smem, Tr::kQStride);
      __syncthreads();  // block_smem is published (Q is waited for by the K barrier too)
    }

    // Init: the attention state of this thread's rows.
    float row_max[kRows], row_sum[kRows];
    float4 o_rmem[kRows][kColVecs];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      row_max[i] = -INFINITY;
      row_sum[i] = 0.0f;
#pragma unroll
      for (int c = 0; c < kColVecs; ++c) o_rmem[i][c] = make_float4(0.f, 0.f, 0.f, 0.f);
    }

    // Key tiles [n_first, n_end) only: none left of a window or right of the diagonal (no tile
    // at all: O = 0, LSE = -inf or the sink).
    for (std::int64_t n_block = blk.n_first; n_block < blk.n_end; ++n_block) {
      const std::int64_t n0 = n_block * kBlockN;
      __syncthreads();  // everyone is done with V of the previous tile
      load_tile<T, float, Tr::kThreads>(static_cast<const T*>(args.k) + blk.k_offset,
                                        args.k_stride[1], n0, blk.rule.seqlen_k, kBlockN,
                                        head_dim, kHeadDimMax, kv_smem, Tr::kKvStride);
      __syncthreads();

      // S = Q K^T for kRows x kKeys scores.
      float s[kRows][kKeys] = {};
      for (int d = 0; d < head_dim; d += 4) {
        float4 q4[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i)
          q4[i] = load4_as_float(q_smem + (ty * kRows + i) * Tr::kQStride + d);
#pragma unroll
        for (int j = 0; j < kKeys; ++j) {
          const float4 k4 =
              *reinterpret_cast<const float4*>(kv_smem + (tx + j * 8) * Tr::kKvStride + d);
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            s[i][j] = fmaf(q4[i].x, k4.x, s[i][j]);
            s[i][j] = fmaf(q4[i].y, k4.y, s[i][j]);
            s[i][j] = fmaf(q4[i].z, k4.z, s[i][j]);
            s[i][j] = fmaf(q4[i].w, k4.w, s[i][j]);
          }
        }
      }

      // Softcap and ALiBi (score_mod.cuh, raw units), when the params ask for either: a test of
      // kernel parameters, the same for every thread. The ALiBi distance i + diag - j of row i
      // and key n0 + tx + 8 j is one float per row, minus 8 j per key (exact below 2^24).
      if (args.softcap > 0.0f || args.alibi_slopes != nullptr) {
        const ScoreMod mod = blk.mod;
        if (args.softcap > 0.0f) {
          if constexpr (std::is_same_v<T, float>) {
            // float inputs: cap * tanhf(s * scale / softcap), tanhf within 2 ulp. softcap_exact
            // is off by up to softcap * 2.4e-7 in a score (7e-6 at softcap 30): above the
            // float32 tolerance (1e-6 of max|O|, verify/compare.h), while a bf16 or fp16 step
            // (2^-8, 2^-11) dwarfs it.
            const float in = blk.softcap_in;
#pragma unroll
            for (int i = 0; i < kRows; ++i) {
#pragma unroll
              for (int j = 0; j < kKeys; ++j) s[i][j] = blk.softcap_cap * tanhf(s[i][j] * in);
            }
          } else {
#pragma unroll
            for (int i = 0; i < kRows; ++i) {
#pragma unroll
              for (int j = 0; j < kKeys; ++j) {
                s[i][j] = softcap_exact(args.softcap_consts, s[i][j]);
              }
            }
          }
        }
        if (mod.alibi()) {
          const std::int64_t dist0 = blk.m0 + ty * kRows + blk.rule.diag() - n0 - tx;
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            const float dist_row = static_cast<float>(dist0 + i);
#pragma unroll
            for (int j = 0; j < kKeys; ++j) {
              s[i][j] = mod.apply_alibi(s[i][j], dist_row - static_cast<float>(8 * j));
            }
          }
        }
      }

      // Online softmax update; masked scores become -inf (after the transforms), only on the
      // tiles MaskRule::tile_needs_mask names: the tail, the diagonal, a window's edges. s and
      // the running max stay unscaled: the exponent is exp2_arg (online_softmax.cuh), which
      // subtracts before it scales, so a common offset (rows near -6e4) cancels exactly.
      const bool needs_mask = blk.rule.tile_needs_mask(blk.m0, kBlockM, n0, kBlockN);
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        if (needs_mask) {
          // This row's visible columns of the tile are [lo, hi), compared as small ints.
          const KeyRange r = blk.rule.row_range(blk.m0 + ty * kRows + i);
          const int lo =
              static_cast<int>(max(std::int64_t{0}, min(r.begin - n0, std::int64_t{kBlockN})));
          const int hi =
              static_cast<int>(max(std::int64_t{0}, min(r.end - n0, std::int64_t{kBlockN})));
#pragma unroll
          for (int j = 0; j < kKeys; ++j) {
            const int c = tx + j * 8;
            if (c < lo || c >= hi) s[i][j] = -INFINITY;
          }
        }
        float tile_max = -INFINITY;
#pragma unroll
        for (int j = 0; j < kKeys; ++j) tile_max = fmaxf(tile_max, s[i][j]);
        const float new_max = fmaxf(row_max[i], reduce_max_lanes<Tr::kLanesPerRow>(tile_max));
        const float sub = safe_max(new_max);
        const float alpha = exp2f(exp2_arg(row_max[i], sub, args.scale_log2));
        row_max[i] = new_max;
        float p_sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kKeys; ++j) {
          const float p = exp2f(exp2_arg(s[i][j], sub, args.scale_log2));
          p_sum += p;
          p_smem[(ty * kRows + i) * Tr::kPStride + tx + j * 8] = from_float<QpT>(round_to<T>(p));
        }
        // row_sum stays a per-lane partial sum (alpha is the same on all 8 lanes of a row);
        // the lanes are summed once, in the finalize step.
        row_sum[i] = row_sum[i] * alpha + p_sum;
#pragma unroll
        for (int c = 0; c < kColVecs; ++c) {
          o_rmem[i][c].x *= alpha; o_rmem[i][c].y *= alpha;
          o_rmem[i][c].z *= alpha; o_rmem[i][c].w *= alpha;
        }
      }
      __syncthreads();  // K reads and P writes are done
      load_tile<T, float, Tr::kThreads>(static_cast<const T*>(args.v) + blk.v_offset,
                                        args.v_stride[1], n0, blk.rule.seqlen_k, kBlockN,
                                        head_dim, kHeadDimMax, kv_smem, Tr::kKvStride);
      __syncthreads();

      // O += P V over this tile's keys.
      for (int key = 0; key < kBlockN; key += 4) {
        float4 p4[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i)
          p4[i] = load4_as_float(p_smem + (ty * kRows + i) * Tr::kPStride + key);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const float* v_row = kv_smem + (key + kk) * Tr::kKvStride + 4 * tx;
#pragma unroll
          for (int c = 0; c < kColVecs; ++c) {
            if (4 * tx + 32 * c >= head_dim) continue;
            const float4 v4 = *reinterpret_cast<const float4*>(v_row + 32 * c);
#pragma unroll
            for (int i = 0; i < kRows; ++i) {
              const float p = kk == 0 ? p4[i].x : kk == 1 ? p4[i].y : kk == 2 ? p4[i].z : p4[i].w;
              o_rmem[i][c].x = fmaf(p, v4.x, o_rmem[i][c].x);
              o_rmem[i][c].y = fmaf(p, v4.y, o_rmem[i][c].y);
              o_rmem[i][c].z = fmaf(p, v4.z, o_rmem[i][c].z);
              o_rmem[i][c].w = fmaf(p, v4.w, o_rmem[i][c].w);
            }
          }
        }
      }
    }

    // Finalize: the sink folded in, O / row_sum, LSE (finalize_row: a row with no visible key
    // gives O = 0 and LSE = -inf, or the sink's logit).
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const std::int64_t row = blk.m0 + ty * kRows + i;
      const float total = reduce_sum_lanes<Tr::kLanesPerRow>(row_sum[i]);
      if (row >= blk.rule.seqlen_q) continue;
      const RowResult res = finalize_row(row_max[i], total, blk.sink, args.scale_log2);
      const float inv = res.inv;
      T* o_row = static_cast<T*>(args.o) + blk.o_offset + row * args.o_stride[1];
#pragma unroll
      for (int c = 0; c < kColVecs; ++c) {
        const int col = 4 * tx + 32 * c;
        if (col >= head_dim) continue;
        const float4 o = o_rmem[i][c];
        if constexpr (sizeof(T) == 4) {
          *reinterpret_cast<float4*>(o_row + col) =
              make_float4(o.x * inv, o.y * inv, o.z * inv, o.w * inv);
        } else {
          // Four 16-bit values: one 8-byte store.
          T packed[4] = {from_float<T>(o.x * inv), from_float<T>(o.y * inv),
                         from_float<T>(o.z * inv), from_float<T>(o.w * inv)};
          *reinterpret_cast<uint2*>(o_row + col) = *reinterpret_cast<const uint2*>(packed);
        }
      }
      if (args.lse != nullptr && tx == 0) {
        args.lse[blk.lse_offset + row * args.lse_stride[2]] = res.lse;
      }
    }
  }
}

template <typename T, int kHeadDimMax>
Status launch_flash(const KernelArgs& args, cudaStream_t stream) {
  using Tr = FlashTraits<T, kHeadDimMax>;
  auto kernel = flash_forward_kernel<T, kHeadDimMax>;
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes),
      "flash: cudaFuncSetAttribute(max dynamic shared memory)");
  const std::int64_t tiles =
      args.batch * args.heads * ((args.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM);
  constexpr std::int64_t kMaxGrid = 0x7fffffff;  // grid.x limit; the kernel loops past it
  const unsigned grid = static_cast<unsigned>(tiles < kMaxGrid ? tiles : kMaxGrid);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(args);
  return check_launch("flash_forward_kernel");
}

#define FLASHATTN_INSTANTIATE_FLASH(HDIM)                                                   \
  template Status launch_flash<float, HDIM>(const KernelArgs&, cudaStream_t);                \
  template Status launch_flash<__nv_bfloat16, HDIM>(const KernelArgs&, cudaStream_t);        \
  template Status launch_flash<__half, HDIM>(const KernelArgs&, cudaStream_t);

}  // namespace flashattn::cuda
