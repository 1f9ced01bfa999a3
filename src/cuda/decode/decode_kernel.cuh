// The KV-cache kernels of the "flash-decode" backend that are not the tensor-core attention
// (decode_mma_kernel.cuh, which every bf16 / fp16 call runs): the append of new tokens into the
// cache and split-KV attention over the cache on CUDA cores for float32 inputs. The merge of the
// splits is decode_merge_kernel.cuh.
//
// The float32 attention (v1 of the backend, any GPU, head dims up to 256): one block serves the
// query rows that read the same K/V (GQA packing: the seqlen_q x (heads / kv_heads) rows of one
// (sequence, kv head), kRows = 16 at a time), and the keys of one (sequence, kv head) are split
// across blocks (split-KV) so that a batch of one still fills the GPU.
//
// Block (split s, row chunk c, kv head hk; batch entry b), 128 threads. Row r of the chunk is
// query token i = r / group, head hk * group + r % group (group = heads / kv_heads). The chunk's
// tokens see the key tiles [first, end) (MaskRule::tile_range); split s takes an equal share of
// them. Per key tile of kBlockN keys:
//   load K and V (paged or contiguous, AttentionArgs::kv_offset) as float into shared memory;
//   S = Q K^T:   thread t computes key t % kBlockN for every (128 / kBlockN)-th row;
//   softmax:     warp w owns rows w, w + 4, ...: transforms, mask, the online update, P in place;
//   O += P V:    thread t owns 4 columns of kRows * kD / 512 rows, rescaled by alpha first.
// P stays float32 (no rounding to the input type before PV): the result carries only float32
// sums and the final rounding, the error of the naive algorithm.
//
// One split (num_splits = 1): O / l and the LSE (sink included) go to out and lse. More: each
// split writes its float32 partial O (normalized over its keys) and partial LSE (no sink) to the
// workspace, and decode_merge_kernel merges them with the sink as one more part.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/attention_args.h"
#include "common/mask_rule.h"
#include "cuda/attention/online_softmax.cuh"
#include "cuda/attention/score_mod.cuh"
#include "cuda/common/device_dtype.cuh"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_block.cuh"

namespace flashattn::cuda {

template <int kD>
struct DecodeTraits {
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kRows = 16;                   // query rows per block (one chunk)
  static constexpr int kBlockN = kD >= 256 ? 32 : 64;  // keys per tile
  static constexpr int kStride = kD + 4;             // floats per K / V / Q row in smem
  static constexpr int kSStride = kBlockN + 1;       // floats per S / P row
  static constexpr int kRowGroupsS = kThreads / kBlockN;        // S: rows r0, r0 + this, ...
  static constexpr int kRowsPerThreadS = kRows / kRowGroupsS;
  static constexpr int kColGroups = kD / 4;                      // PV: float4 columns
  static constexpr int kRowGroupsO = kThreads / kColGroups;
  static constexpr int kRowsPerThreadO = kRows / kRowGroupsO;
  static constexpr int kQFloats = kRows * kStride;
  static constexpr int kKvFloats = kBlockN * kStride;
  static constexpr int kSFloats = kRows * kSStride;
  // Q, K, V, S, and the rows' max / sum / alpha.
  static constexpr int kSmemBytes = 4 * (kQFloats + 2 * kKvFloats + kSFloats + 3 * kRows);
  static_assert(kThreads % kBlockN == 0 && kRows % kRowGroupsS == 0, "S mapping");
  static_assert(kThreads % kColGroups == 0 && kRows % kRowGroupsO == 0, "PV mapping");
};

// The append as a kernel of its own (float32 calls, and appends longer than kFusedAppendMax
// tokens): block (token t, kv head h; batch entry b), 64 threads.
template <typename T>
__global__ void decode_append_kernel(KernelArgs args, DecodeNewTokens nt, DecodeBounds bounds) {
  const std::int64_t t = blockIdx.x / args.kv_heads, h = blockIdx.x % args.kv_heads;
  decode_append_row<T>(args, nt, bounds, blockIdx.y, t, h, static_cast<int>(threadIdx.x),
                       static_cast<int>(blockDim.x));
}

// Rows [0, rows) of a key tile (keys n0 ..) of kv head h into smem as float; keys at or past
// seqlen_k and columns past head_dim become 0.
template <typename T, int kD>
__device__ __forceinline__ void decode_load_kv(const KernelArgs& args, const DecodeBounds& bounds,
                                               const void* base,
                                               const std::int64_t* stride, std::int64_t b,
                                               std::int64_t h, std::int64_t n0,
                                               std::int64_t seqlen_k, float* dst_smem) {
  using Tr = DecodeTraits<kD>;
  constexpr int kVec = kVecElems<T>;
  constexpr int kVecsPerRow = kD / kVec;
  for (int e = threadIdx.x; e < Tr::kBlockN * kVecsPerRow; e += Tr::kThreads) {
    const int r = e / kVecsPerRow, c = (e % kVecsPerRow) * kVec;
    const std::int64_t at =
        n0 + r < seqlen_k && c < args.head_dim ? args.kv_offset(stride, b, n0 + r, h, bounds.num_pages)
                                               : -1;
    const T* src = static_cast<const T*>(base);
    copy_vec_as_float(at >= 0 ? src + at + c : src, at >= 0, dst_smem + r * Tr::kStride + c);
  }
}

// At least 2 blocks per SM: ptxas then takes 141-150 registers (3 blocks fit); a cap of 128 (4
// blocks) spilled 28 bytes, and without a minimum it chose 96 and spilled at d64 bf16 / fp16.
template <typename T, int kD>
__global__ void __launch_bounds__(DecodeTraits<kD>::kThreads, 2)
decode_attention_kernel(KernelArgs args, DecodeSplit split) {
  using Tr = DecodeTraits<kD>;
  constexpr int kRows = Tr::kRows, kBlockN = Tr::kBlockN, kStride = Tr::kStride;
  constexpr int kSStride = Tr::kSStride;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* q_smem = reinterpret_cast<float*>(smem_raw);  // [kRows][kStride]
  float* k_smem = q_smem + Tr::kQFloats;               // [kBlockN][kStride]
  float* v_smem = k_smem + Tr::kKvFloats;              // [kBlockN][kStride]
  float* s_smem = v_smem + Tr::kKvFloats;              // [kRows][kSStride]: S, then P
  float* max_smem = s_smem + Tr::kSFloats;             // [kRows] running max (raw units)
  float* sum_smem = max_smem + kRows;                  // [kRows] running sum
  float* alpha_smem = sum_smem + kRows;                // [kRows] this tile's rescale

  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const DecodeBlock blk = DecodeBlock::make<kRows, kBlockN>(args, split);
  const std::int64_t group = blk.group, rows_total = blk.rows_total, hk = blk.hk, b = blk.b;
  const std::int64_t r0 = blk.r0;
  const SeqInfo& seq = blk.seq;
  const MaskRule& rule = blk.rule;
  const int head_dim = static_cast<int>(args.head_dim);

  // Q rows of the chunk (zeros past the last row), the rows' state.
  for (int e = tid; e < kRows * (kD / 4); e += Tr::kThreads) {
    const int r = e / (kD / 4), c = (e % (kD / 4)) * 4;
    const std::int64_t row = r0 + r;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (row < rows_total && c < head_dim) {
      const std::int64_t i = row / group, h = hk * group + row % group;
      const T* src = static_cast<const T*>(args.q) + b * args.q_stride[0] +
                     i * args.q_stride[1] + h * args.q_stride[2] + c;
      v = make_float4(to_float(src[0]), to_float(src[1]), to_float(src[2]), to_float(src[3]));
    }
    *reinterpret_cast<float4*>(q_smem + r * kStride + c) = v;
  }
  if (tid < kRows) {
    max_smem[tid] = -INFINITY;
    sum_smem[tid] = 0.0f;
  }

  // PV's share: columns 4 cg .. + 3 of rows rg, rg + kRowGroupsO, ...
  const int cg = tid % Tr::kColGroups, rg = tid / Tr::kColGroups;
  float4 o[Tr::kRowsPerThreadO];
#pragma unroll
  for (int k = 0; k < Tr::kRowsPerThreadO; ++k) o[k] = make_float4(0.f, 0.f, 0.f, 0.f);

  for (std::int64_t n_block = blk.n_begin; n_block < blk.n_stop; ++n_block) {
    const std::int64_t n0 = n_block * kBlockN;
    __syncthreads();  // the previous tile's readers of K, V and P are done (and Q is written)
    decode_load_kv<T, kD>(args, split.bounds, args.k, args.k_stride, b, hk, n0, seq.seqlen_k,
                          k_smem);
    decode_load_kv<T, kD>(args, split.bounds, args.v, args.v_stride, b, hk, n0, seq.seqlen_k,
                          v_smem);
    __syncthreads();

    // S = Q K^T (raw scores).
    {
      const int j = tid % kBlockN, rs = tid / kBlockN;
      float acc[Tr::kRowsPerThreadS] = {};
      for (int d = 0; d < head_dim; d += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(k_smem + j * kStride + d);
#pragma unroll
        for (int k = 0; k < Tr::kRowsPerThreadS; ++k) {
          const float4 q4 =
              *reinterpret_cast<const float4*>(q_smem + (rs + k * Tr::kRowGroupsS) * kStride + d);
          acc[k] = fmaf(q4.x, k4.x, acc[k]);
          acc[k] = fmaf(q4.y, k4.y, acc[k]);
          acc[k] = fmaf(q4.z, k4.z, acc[k]);
          acc[k] = fmaf(q4.w, k4.w, acc[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < Tr::kRowsPerThreadS; ++k) {
        s_smem[(rs + k * Tr::kRowGroupsS) * kSStride + j] = acc[k];
      }
    }
    __syncthreads();

    // Softmax: warp w owns rows w, w + kWarps, ...; lane covers keys lane, lane + 32, ...
    for (int r = warp; r < kRows; r += Tr::kWarps) {
      const std::int64_t row = r0 + r;
      const bool row_ok = row < rows_total;
      const std::int64_t i = row_ok ? row / group : 0;
      const std::int64_t h = hk * group + (row_ok ? row % group : 0);
      const KeyRange range = rule.row_range(i);
      const ScoreMod mod = ScoreMod::make(args, b, h);
      constexpr int kPerLane = kBlockN / 32;
      float x[kPerLane];
      float tile_max = -INFINITY;
#pragma unroll
      for (int u = 0; u < kPerLane; ++u) {
        const std::int64_t key = n0 + lane + 32 * u;
        float s = s_smem[r * kSStride + lane + 32 * u];
        if (args.softcap > 0.0f) {
          // float inputs: tanhf (2 ulp); softcap_exact is off by up to softcap * 2.4e-7, above
          // the float32 tolerance but far below a bf16 / fp16 step (as in flash_kernel.cuh).
          if constexpr (std::is_same_v<T, float>) {
            s = args.softcap_consts.cap * tanhf(s * (args.scale / args.softcap));
          } else {
            s = softcap_exact(args.softcap_consts, s);
          }
        }
        if (mod.alibi()) s = mod.apply_alibi(s, static_cast<float>(i + rule.diag() - key));
        if (!row_ok || key < range.begin || key >= range.end) s = -INFINITY;
        x[u] = s;
        tile_max = fmaxf(tile_max, s);
      }
      tile_max = reduce_max_lanes<32>(tile_max);
      const float old_max = max_smem[r];
      const float new_max = fmaxf(old_max, tile_max);
      const float sub = safe_max(new_max);
      const float alpha = exp2f(exp2_arg(old_max, sub, args.scale_log2));
      float p_sum = 0.0f;
#pragma unroll
      for (int u = 0; u < kPerLane; ++u) {
        const float p = exp2f(exp2_arg(x[u], sub, args.scale_log2));
        p_sum += p;
        s_smem[r * kSStride + lane + 32 * u] = p;
      }
      p_sum = reduce_sum_lanes<32>(p_sum);
      __syncwarp();
      if (lane == 0) {
        max_smem[r] = new_max;
        sum_smem[r] = sum_smem[r] * alpha + p_sum;
        alpha_smem[r] = alpha;
      }
    }
    __syncthreads();

    // O = alpha O + P V.
#pragma unroll
    for (int k = 0; k < Tr::kRowsPerThreadO; ++k) {
      const float a = alpha_smem[rg + k * Tr::kRowGroupsO];
      o[k].x *= a; o[k].y *= a; o[k].z *= a; o[k].w *= a;
    }
    if (4 * cg < head_dim) {
      for (int j = 0; j < kBlockN; ++j) {
        const float4 v4 = *reinterpret_cast<const float4*>(v_smem + j * kStride + 4 * cg);
#pragma unroll
        for (int k = 0; k < Tr::kRowsPerThreadO; ++k) {
          const float p = s_smem[(rg + k * Tr::kRowGroupsO) * kSStride + j];
          o[k].x = fmaf(p, v4.x, o[k].x);
          o[k].y = fmaf(p, v4.y, o[k].y);
          o[k].z = fmaf(p, v4.z, o[k].z);
          o[k].w = fmaf(p, v4.w, o[k].w);
        }
      }
    }
  }
  __syncthreads();  // the last tile's max / sum are written (or the initial ones, no tile)

  // Finalize: out and lse directly (one split), or this split's partial into the workspace.
#pragma unroll
  for (int k = 0; k < Tr::kRowsPerThreadO; ++k) {
    const int r = rg + k * Tr::kRowGroupsO;
    const std::int64_t row = r0 + r;
    if (row >= rows_total) continue;
    const std::int64_t i = row / group, h = hk * group + row % group;
    decode_finish_row<T>(args, split, blk.s_idx, b, i, h, 4 * cg, max_smem[r], sum_smem[r], o[k],
                         cg == 0);
  }
}

}  // namespace flashattn::cuda
