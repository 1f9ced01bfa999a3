// The three kernels of the naive golden reference, every variant. Plain CUDA-core code with a
// 64x64 register-tiled GEMM (4x4 outputs per thread) so the comparison with flash measures the
// algorithm (S through global memory) rather than an untiled matrix product. Runtime dtype: the
// reference path is not specialized.
//
// The semantics are cpu-reference's (src/cpu/reference.cc), element for element: the score of
// query i and key j of one sequence is transform_score(scale * q.k) (softcap, then ALiBi) where
// MaskRule says the row sees the key and -inf elsewhere; the softmax takes the exact row max
// with the sink's logit, and the sink joins the denominator; a row without keys gets P = 0,
// O = 0 and LSE = -inf (the sink's logit with sinks).
//
// Sequences (AttentionArgs::seq: dense, or packed varlen). S is one slab of
// max_seqlen_q x max_seqlen_k floats per (batch, head), row stride max_seqlen_k (naive.h); a
// sequence uses its top-left lq x lk corner. The grids cover the slabs; a tile past its sequence's
// rows or keys returns at once.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "common/attention_args.h"
#include "common/dtype_convert.h"
#include "cuda/common/check.h"
#include "cuda/common/kernel_args.h"
#include "cuda/naive/naive.h"

namespace flashattn::cuda {
namespace {

constexpr int kTile = 64;        // output tile edge (rows and columns)
constexpr int kChunk = 16;       // reduction slice staged in shared memory per step
constexpr int kThreads = 256;    // 16 x 16 threads, 4 x 4 outputs each
constexpr int kMicro = 4;
constexpr int kSoftmaxThreads = 256;

// The naive kernels take the shared KernelArgs plus the S buffer.
struct Geometry : KernelArgs {
  float* s;
};

__device__ __forceinline__ std::int64_t kv_head_of(const Geometry& g, std::int64_t h) {
  return h / (g.heads / g.kv_heads);
}

// Sequence b, its lengths clamped to the slab (0 to max_seqlen): validate() reads the varlen
// offsets only when they are host memory, and a length past max_seqlen would address S past the
// workspace. Valid offsets are unchanged.
__device__ __forceinline__ SeqInfo seq_of(const Geometry& g, std::int64_t b) {
  SeqInfo s = g.seq(b);
  s.seqlen_q = max(std::int64_t{0}, min(s.seqlen_q, g.seqlen_q));
  s.seqlen_k = max(std::int64_t{0}, min(s.seqlen_k, g.seqlen_k));
  return s;
}

// One 64x64 output tile of one (batch, head)'s slab, from a flat tile index.
struct SlabTile {
  std::int64_t bh, b, h, h_kv, row0, col0;
};

__device__ __forceinline__ SlabTile slab_tile(const Geometry& g, std::int64_t tile,
                                              std::int64_t tiles_m, std::int64_t tiles_n) {
  SlabTile t;
  t.bh = tile / (tiles_m * tiles_n);
  const std::int64_t rem = tile % (tiles_m * tiles_n);
  t.row0 = (rem / tiles_n) * kTile;
  t.col0 = (rem % tiles_n) * kTile;
  t.b = t.bh / g.heads;
  t.h = t.bh % g.heads;
  t.h_kv = kv_head_of(g, t.h);
  return t;
}

// Accumulates the 4x4 micro-tile of this thread over one staged chunk.
// a_smem[k][row], b_smem[k][col]: k-major so 4 consecutive rows/cols are one float4.
__device__ __forceinline__ void micro_tile_fma(const float (*a_smem)[kTile + 4],
                                               const float (*b_smem)[kTile + 4], int ty, int tx,
                                               float (&acc)[kMicro][kMicro]) {
#pragma unroll
  for (int kk = 0; kk < kChunk; ++kk) {
    const float4 a = *reinterpret_cast<const float4*>(&a_smem[kk][ty * kMicro]);
    const float4 b = *reinterpret_cast<const float4*>(&b_smem[kk][tx * kMicro]);
    const float av[4] = {a.x, a.y, a.z, a.w};
    const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < kMicro; ++i)
#pragma unroll
      for (int j = 0; j < kMicro; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
  }
}

// Kernel 1: S[bh, i, j] = transform_score(scale * dot(Q[i, h, :], K[j, h_kv, :])) where row i
// sees key j, -inf where it does not (the mask after the transform: softcap would turn -inf
// into -softcap).
__global__ void __launch_bounds__(kThreads) qk_kernel(Geometry g, std::int64_t tiles_m,
                                                      std::int64_t tiles_n, std::int64_t total) {
  __shared__ __align__(16) float q_smem[kChunk][kTile + 4];
  __shared__ __align__(16) float k_smem[kChunk][kTile + 4];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  for (std::int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const auto [bh, b, h, hk, row0, col0] = slab_tile(g, tile, tiles_m, tiles_n);
    const SeqInfo seq = seq_of(g, b);
    if (row0 >= seq.seqlen_q || col0 >= seq.seqlen_k) continue;  // the whole block
    const std::int64_t q_base = b * g.q_stride[0] + seq.q_row0 * g.q_stride[1] + h * g.q_stride[2];
    const std::int64_t k_base = b * g.k_stride[0] + seq.k_row0 * g.k_stride[1] + hk * g.k_stride[2];
    float acc[kMicro][kMicro] = {};
    for (std::int64_t d0 = 0; d0 < g.head_dim; d0 += kChunk) {
      // Stage Q[row0:+64, d0:+16] and K[col0:+64, d0:+16] transposed; zero past the edges.
      for (int e = tid; e < kTile * kChunk; e += kThreads) {
        const int r = e / kChunk, c = e % kChunk;
        const std::int64_t d = d0 + c;
        const std::int64_t qi = row0 + r, kj = col0 + r;
        q_smem[c][r] = (qi < seq.seqlen_q && d < g.head_dim)
                           ? load_as_float(g.q, g.dtype, q_base + qi * g.q_stride[1] + d)
                           : 0.0f;
        k_smem[c][r] = (kj < seq.seqlen_k && d < g.head_dim)
                           ? load_as_float(g.k, g.dtype, k_base + kj * g.k_stride[1] + d)
                           : 0.0f;
      }
      __syncthreads();
      micro_tile_fma(q_smem, k_smem, ty, tx, acc);
      __syncthreads();
    }
    const MaskRule rule = g.mask(seq);
    const float slope = g.alibi_slope(b, h);
    float* s_bh = g.s + bh * g.seqlen_q * g.seqlen_k;
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
      const std::int64_t qi = row0 + ty * kMicro + i;
      if (qi >= seq.seqlen_q) continue;
      const KeyRange keys = rule.row_range(qi);
#pragma unroll
      for (int j = 0; j < kMicro; ++j) {
        const std::int64_t kj = col0 + tx * kMicro + j;
        if (kj >= seq.seqlen_k) continue;
        const bool visible = kj >= keys.begin && kj < keys.end;
        s_bh[qi * g.seqlen_k + kj] =
            visible ? transform_score<float>(acc[i][j] * g.scale, g.softcap, slope, qi, kj,
                                             rule.diag())
                    : -INFINITY;
      }
    }
  }
}

__device__ float block_reduce(float v, bool is_max, float* scratch_smem) {
  for (int off = 16; off > 0; off /= 2) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = is_max ? fmaxf(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch_smem[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < kSoftmaxThreads / 32 ? scratch_smem[lane] : (is_max ? -INFINITY : 0.0f);
    for (int off = 16; off > 0; off /= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, v, off);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) scratch_smem[0] = v;
  }
  __syncthreads();
  v = scratch_smem[0];
  __syncthreads();
  return v;
}

// Kernel 2: one block per slab row (bh, i): the row max (with the sink's logit), the sum of
// exponentials (with the sink's term, which adds no value), P normalized in place; LSE. A row
// with no visible key and no sink (max = -inf) becomes all zeros with LSE = -inf; with a sink
// its max is the sink, the sum exp(0) = 1 and LSE = the sink's logit exactly.
__global__ void __launch_bounds__(kSoftmaxThreads) softmax_kernel(Geometry g, std::int64_t rows) {
  __shared__ float scratch_smem[kSoftmaxThreads / 32];
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const std::int64_t bh = row / g.seqlen_q, i = row % g.seqlen_q;
    const std::int64_t b = bh / g.heads, h = bh % g.heads;
    const SeqInfo seq = seq_of(g, b);
    if (i >= seq.seqlen_q) continue;  // the whole block
    float* s_row = g.s + row * g.seqlen_k;
    const float sink = g.sinks != nullptr ? g.sinks[h] : -INFINITY;
    float row_max = -INFINITY;
    for (std::int64_t j = threadIdx.x; j < seq.seqlen_k; j += kSoftmaxThreads)
      row_max = fmaxf(row_max, s_row[j]);
    row_max = fmaxf(block_reduce(row_max, true, scratch_smem), sink);
    float row_sum = 0.0f;
    if (row_max != -INFINITY) {
      for (std::int64_t j = threadIdx.x; j < seq.seqlen_k; j += kSoftmaxThreads)
        row_sum += expf(s_row[j] - row_max);
    }
    row_sum = block_reduce(row_sum, false, scratch_smem);
    // The sink's term once, after the reduction (a sink of -inf adds nothing, as without one).
    if (sink != -INFINITY) row_sum += expf(sink - row_max);
    const float inv_sum = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
    for (std::int64_t j = threadIdx.x; j < seq.seqlen_k; j += kSoftmaxThreads)
      s_row[j] = row_sum > 0.0f ? expf(s_row[j] - row_max) * inv_sum : 0.0f;
    if (g.lse != nullptr && threadIdx.x == 0) {
      g.lse[b * g.lse_stride[0] + h * g.lse_stride[1] + (seq.q_row0 + i) * g.lse_stride[2]] =
          row_sum > 0.0f ? row_max + logf(row_sum) : -INFINITY;
    }
  }
}

// Kernel 3: O[i, h, n] = sum_j P[bh, i, j] * V[j, h_kv, n]; a sequence without keys gets O = 0.
__global__ void __launch_bounds__(kThreads) pv_kernel(Geometry g, std::int64_t tiles_m,
                                                      std::int64_t tiles_n, std::int64_t total) {
  __shared__ __align__(16) float p_smem[kChunk][kTile + 4];
  __shared__ __align__(16) float v_smem[kChunk][kTile + 4];
  const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
  for (std::int64_t tile = blockIdx.x; tile < total; tile += gridDim.x) {
    const auto [bh, b, h, hk, row0, col0] = slab_tile(g, tile, tiles_m, tiles_n);
    const SeqInfo seq = seq_of(g, b);
    if (row0 >= seq.seqlen_q) continue;  // the whole block
    const float* p_bh = g.s + bh * g.seqlen_q * g.seqlen_k;
    const std::int64_t v_base = b * g.v_stride[0] + seq.k_row0 * g.v_stride[1] + hk * g.v_stride[2];
    float acc[kMicro][kMicro] = {};
    for (std::int64_t j0 = 0; j0 < seq.seqlen_k; j0 += kChunk) {
      for (int e = tid; e < kTile * kChunk; e += kThreads) {
        const int r = e / kChunk, c = e % kChunk;           // P: row r, key c
        const std::int64_t qi = row0 + r, kj = j0 + c;
        p_smem[c][r] =
            (qi < seq.seqlen_q && kj < seq.seqlen_k) ? p_bh[qi * g.seqlen_k + kj] : 0.0f;
        const int vk = e / kTile, vn = e % kTile;            // V: key vk, column vn
        const std::int64_t vj = j0 + vk, n = col0 + vn;
        v_smem[vk][vn] = (vj < seq.seqlen_k && n < g.head_dim)
                             ? load_as_float(g.v, g.dtype, v_base + vj * g.v_stride[1] + n)
                             : 0.0f;
      }
      __syncthreads();
      micro_tile_fma(p_smem, v_smem, ty, tx, acc);
      __syncthreads();
    }
    const std::int64_t o_base = b * g.o_stride[0] + seq.q_row0 * g.o_stride[1] + h * g.o_stride[2];
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
      const std::int64_t qi = row0 + ty * kMicro + i;
      if (qi >= seq.seqlen_q) continue;
#pragma unroll
      for (int j = 0; j < kMicro; ++j) {
        const std::int64_t n = col0 + tx * kMicro + j;
        if (n < g.head_dim) store_from_float(g.o, g.dtype, o_base + qi * g.o_stride[1] + n, acc[i][j]);
      }
    }
  }
}

Geometry geometry_of(const ForwardParams& p, float* s_gmem) {
  Geometry g{};
  static_cast<KernelArgs&>(g) = kernel_args_of(p);
  g.s = s_gmem;
  return g;
}

unsigned grid_for(std::int64_t work) {
  // A grid-stride loop covers any amount of work; this many blocks fill every GPU many times.
  constexpr std::int64_t kMaxBlocks = 1 << 20;
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(work, kMaxBlocks)));
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

Status launch_naive(const ForwardParams& p, float* s_gmem, cudaStream_t stream) {
  const Geometry g = geometry_of(p, s_gmem);
  const std::int64_t bh = p.batch() * p.heads();
  const std::int64_t tiles_m = ceil_div(p.seqlen_q(), kTile);
  if (p.seqlen_k() > 0) {
    const std::int64_t tiles_n = ceil_div(p.seqlen_k(), kTile);
    const std::int64_t total = bh * tiles_m * tiles_n;
    qk_kernel<<<grid_for(total), kThreads, 0, stream>>>(g, tiles_m, tiles_n, total);
    FA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "naive qk_kernel launch");
  }
  const std::int64_t rows = bh * p.seqlen_q();
  softmax_kernel<<<grid_for(rows), kSoftmaxThreads, 0, stream>>>(g, rows);
  FA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "naive softmax_kernel launch");
  const std::int64_t tiles_d = ceil_div(p.head_dim(), kTile);
  const std::int64_t total_pv = bh * tiles_m * tiles_d;
  pv_kernel<<<grid_for(total_pv), kThreads, 0, stream>>>(g, tiles_m, tiles_d, total_pv);
  FA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "naive pv_kernel launch");
  return Status::Ok();
}

Status naive_kernels_available() { return check_kernel_image(reinterpret_cast<const void*>(qk_kernel)); }

}  // namespace flashattn::cuda
