// Test kernels for wgmma (SS and RS, K-major and MN-major B), the QK^T -> PV register chain, and
// a warp-specialized block (setmaxnreg, TMA onto an mbarrier, named barriers, elect.sync).
// Bodies are compiled for sm_90a only; the sm_80 pass of the "80;90a" build sees empty kernels,
// which wgmma_usable() keeps from running.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/common/runtime.h"
#include "cuda/common/tensor_map.h"
#include "cuda/primitives/arch.h"
#include "cuda/primitives/elect.cuh"
#include "cuda/primitives/fence.cuh"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/mma_sm80.cuh"
#include "cuda/primitives/named_barrier.cuh"
#include "cuda/primitives/setmaxnreg.cuh"
#include "cuda/primitives/smem.cuh"
#include "cuda/primitives/tma.cuh"
#include "cuda/primitives/wgmma.cuh"
#include "sm90_test_support.cuh"
#include "sm90_wgmma_kernels.h"

namespace flashattn::testing::sm90 {

// The fixed shapes of the chain and warp-specialized kernels. (Outside the anonymous namespace:
// the sm_80 pass, which compiles empty kernel bodies, would warn that its constants are unused.)
namespace shapes {
constexpr int kWarpgroup = 128;

struct Chain {
  static constexpr int kD = 128, kKeys = 64;
  static constexpr int kTileBytes = 64 * 128 * 2;
};

struct Ws {
  static constexpr int kThreads = 3 * kWarpgroup;
  static constexpr int kProducerRegs = 24, kConsumerRegs = 240;  // 168 at entry: an exact fit
  static constexpr int kARows = 128, kBRows = 384, kCols = 64;
  static constexpr int kATileBytes = 64 * kCols * 2;  // 8 KB per consumer
  static constexpr int kBBoxRows = 128;               // B arrives in 3 boxes of 128 rows
  static constexpr int kBBoxBytes = kBBoxRows * kCols * 2;
  static constexpr int kAOffset = 0;
  static constexpr int kBOffset = 2 * kATileBytes;                   // 16 KB
  static constexpr int kBiasOffset = kBOffset + kBRows * kCols * 2;  // 64 KB
  static constexpr int kSwapOffset = kBiasOffset + kBRows * 4;
  static constexpr int kBarOffset = kSwapOffset + 2 * kWarpgroup * 4;
  static constexpr int kSmemBytes = kBarOffset + 8 + kSmemSlack;
  static constexpr std::uint32_t kTxBytes = 2 * kATileBytes + 3 * kBBoxBytes;
  // Named barrier ids (0 is __syncthreads'): producer warp 1 -> consumers; consumers only.
  static constexpr int kBiasBarrier = 1, kBiasBarrierThreads = 32 + 2 * kWarpgroup;
  static constexpr int kSwapBarrier = 2, kSwapBarrierThreads = 2 * kWarpgroup;
};
}  // namespace shapes

namespace {

namespace ptx = cuda::ptx;
using ptx::Major;
using shapes::Chain;
using shapes::kWarpgroup;
using shapes::Ws;

// ---- one product chain ----

// B's tile: n rows of k (K-major, 128-byte rows even for k < 64) or k rows of n (MN-major).
__host__ __device__ constexpr int b_tile_bytes(int n, int k, Major major) {
  return major == Major::kK ? ptx::sw128_tile_bytes(n, k) : ptx::sw128_tile_bytes(k, n);
}

template <class T, int N, int K, bool kRegA, Major kMajorB>
__global__ void __launch_bounds__(kWarpgroup, 1)
    wgmma_kernel(const std::uint16_t* a_tile, const std::uint32_t* a_frags,
                 const std::uint16_t* b_tile, float* d_out) {
#if defined(FA_SM90A_PTX)
  constexpr int kSteps = K / 16;
  constexpr int kABytes = kRegA ? 0 : ptx::sw128_tile_bytes(64, K);  // whole 8 KB blocks
  extern __shared__ unsigned char smem_raw[];
  unsigned char* a_smem = smem_align_1024(smem_raw);
  unsigned char* b_smem = a_smem + kABytes;  // stays 1024-aligned
  if constexpr (!kRegA) copy_16b(a_smem, a_tile, kABytes);
  copy_16b(b_smem, b_tile, b_tile_bytes(N, K, kMajorB));
  ptx::fence_proxy_async_shared();  // generic stores, read next by wgmma (async proxy)
  __syncthreads();

  const int t = static_cast<int>(threadIdx.x);
  std::uint32_t a[kSteps][4];
  if constexpr (kRegA) {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) {
#pragma unroll
      for (int r = 0; r < 4; ++r) a[j][r] = a_frags[(j * 4 + r) * kWarpgroup + t];
    }
  }
  float d[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d[i] = __int_as_float(0x7fc00000);  // NaN: step 0 must ignore it

  const std::uint64_t a_desc = ptx::sw128_k_major_desc(ptx::smem_addr(a_smem));
  const std::uint64_t b_desc = kMajorB == Major::kK
                                   ? ptx::sw128_k_major_desc(ptx::smem_addr(b_smem))
                                   : ptx::sw128_mn_major_desc(ptx::smem_addr(b_smem), K);
  if constexpr (kRegA) {
#pragma unroll
    for (int j = 0; j < kSteps; ++j) ptx::fence_operands(a[j]);
  }
  ptx::fence_operands(d);
  ptx::wgmma_fence();
#pragma unroll
  for (int j = 0; j < kSteps; ++j) {
    const std::uint64_t b_j =
        ptx::desc_advance(b_desc, kMajorB == Major::kK ? ptx::sw128_k_major_step_bytes(N, j)
                                                       : ptx::sw128_mn_major_step_bytes(j));
    if constexpr (kRegA) {
      ptx::wgmma_rs<T, N, kMajorB>(d, a[j], b_j, j > 0);
    } else {
      const std::uint64_t a_j = ptx::desc_advance(a_desc, ptx::sw128_k_major_step_bytes(64, j));
      ptx::wgmma_ss<T, N, Major::kK, kMajorB>(d, a_j, b_j, j > 0);
    }
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::fence_operands(d);
#pragma unroll
  for (int i = 0; i < N / 2; ++i) d_out[i * kWarpgroup + t] = d[i];
#endif
}

using WgmmaKernel = void (*)(const std::uint16_t*, const std::uint32_t*, const std::uint16_t*,
                             float*);

template <class T>
constexpr DType kDtypeOf = std::is_same_v<T, __nv_bfloat16> ? DType::kBF16 : DType::kFP16;

struct WgmmaEntry {
  WgmmaCase c;
  WgmmaKernel kernel;
};

template <class T, int N, int K, bool kRegA, Major kMajorB>
WgmmaEntry entry() {
  return {WgmmaCase{kDtypeOf<T>, N, K, kRegA, kMajorB}, &wgmma_kernel<T, N, K, kRegA, kMajorB>};
}

using bf16 = __nv_bfloat16;
using fp16 = __half;

// N = 64, 128, 256 (the kernel's key-tile and head-dim widths), K up to 128 (two 64-column
// blocks of a K-major tile); every (form, B major) pair in both types.
const std::vector<WgmmaEntry>& wgmma_entries() {
  static const std::vector<WgmmaEntry> entries = {
      entry<bf16, 64, 128, false, Major::kK>(),  // QK^T at d = 128
      entry<fp16, 128, 64, false, Major::kK>(),
      entry<bf16, 256, 16, false, Major::kK>(),   // one step: only the non-accumulating one
      entry<bf16, 128, 64, false, Major::kMN>(),  // PV with P in shared memory, d = 128
      entry<fp16, 256, 32, false, Major::kMN>(),  // d = 256: four 64-column blocks (LBO)
      entry<fp16, 64, 64, false, Major::kMN>(),
      entry<bf16, 64, 64, true, Major::kK>(),
      entry<fp16, 256, 16, true, Major::kK>(),
      entry<bf16, 128, 64, true, Major::kMN>(),  // PV from registers, d = 128
      entry<fp16, 256, 32, true, Major::kMN>(),  // PV from registers, d = 256
      entry<bf16, 64, 128, true, Major::kMN>(),  // PV from registers, d = 64, 128 keys
  };
  return entries;
}

// ---- S = Q K^T, P = S in registers, O = P V ----

template <class T>
__global__ void __launch_bounds__(kWarpgroup, 1)
    attention_chain_kernel(const std::uint16_t* q_tile, const std::uint16_t* k_tile,
                           const std::uint16_t* v_tile, float* o_out) {
#if defined(FA_SM90A_PTX)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* q_smem = smem_align_1024(smem_raw);
  unsigned char* k_smem = q_smem + Chain::kTileBytes;
  unsigned char* v_smem = k_smem + Chain::kTileBytes;
  copy_16b(q_smem, q_tile, Chain::kTileBytes);
  copy_16b(k_smem, k_tile, Chain::kTileBytes);
  copy_16b(v_smem, v_tile, Chain::kTileBytes);
  ptx::fence_proxy_async_shared();
  __syncthreads();
  const int t = static_cast<int>(threadIdx.x);

  float s[Chain::kKeys / 2];
  const std::uint64_t q_desc = ptx::sw128_k_major_desc(ptx::smem_addr(q_smem));
  const std::uint64_t k_desc = ptx::sw128_k_major_desc(ptx::smem_addr(k_smem));
  ptx::fence_operands(s);
  ptx::wgmma_fence();
#pragma unroll
  for (int j = 0; j < Chain::kD / 16; ++j) {
    ptx::wgmma_ss<T, Chain::kKeys, Major::kK, Major::kK>(
        s, ptx::desc_advance(q_desc, ptx::sw128_k_major_step_bytes(64, j)),
        ptx::desc_advance(k_desc, ptx::sw128_k_major_step_bytes(Chain::kKeys, j)), j > 0);
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::fence_operands(s);

  // P as the A fragments of the PV steps (keys 16j..16j+15), all built before the next fence.
  std::uint32_t p[Chain::kKeys / 16][4];
#pragma unroll
  for (int j = 0; j < Chain::kKeys / 16; ++j) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      p[j][r] = ptx::pack2<T>(s[ptx::acc_index_of_a(j, r, 0)], s[ptx::acc_index_of_a(j, r, 1)]);
    }
  }
  float o[Chain::kD / 2];
  const std::uint64_t v_desc = ptx::sw128_mn_major_desc(ptx::smem_addr(v_smem), Chain::kKeys);
#pragma unroll
  for (int j = 0; j < Chain::kKeys / 16; ++j) ptx::fence_operands(p[j]);
  ptx::fence_operands(o);
  ptx::wgmma_fence();
#pragma unroll
  for (int j = 0; j < Chain::kKeys / 16; ++j) {
    ptx::wgmma_rs<T, Chain::kD, Major::kMN>(
        o, p[j], ptx::desc_advance(v_desc, ptx::sw128_mn_major_step_bytes(j)), j > 0);
  }
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
  ptx::fence_operands(o);
#pragma unroll
  for (int i = 0; i < Chain::kD / 2; ++i) o_out[i * kWarpgroup + t] = o[i];
#endif
}

// ---- warp specialization ----

__global__ void __launch_bounds__(Ws::kThreads, 1)
    warp_specialized_kernel(const __grid_constant__ CUtensorMap a_map,
                            const __grid_constant__ CUtensorMap b_map, const float* bias,
                            float* d1_out, float* d2_out, float* swap_out) {
#if defined(FA_SM90A_PTX)
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = smem_align_1024(smem_raw);
  const std::uint32_t a_smem = ptx::smem_addr(smem + Ws::kAOffset);
  const std::uint32_t b_smem = ptx::smem_addr(smem + Ws::kBOffset);
  float* bias_smem = reinterpret_cast<float*>(smem + Ws::kBiasOffset);
  float* swap_smem = reinterpret_cast<float*>(smem + Ws::kSwapOffset);
  const std::uint32_t full = ptx::smem_addr(smem + Ws::kBarOffset);
  const int tid = static_cast<int>(threadIdx.x), warpgroup = tid / kWarpgroup;
  if (tid == 0) {
    ptx::mbarrier_init(full, 1);
    ptx::fence_mbarrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {  // producer
    ptx::setmaxnreg_dec<Ws::kProducerRegs>();
    const int warp = tid / 32, lane = tid % 32;
    if (warp == 0) {
      if (ptx::elect_one_sync()) {
        ptx::tma_prefetch_map(&a_map);
        ptx::tma_prefetch_map(&b_map);
        ptx::mbarrier_arrive_expect_tx(full, Ws::kTxBytes);
        ptx::tma_load(a_smem, &a_map, full, 0, 0);
        ptx::tma_load(a_smem + Ws::kATileBytes, &a_map, full, 0, 64);
        for (int box = 0; box < 3; ++box) {
          ptx::tma_load(b_smem + box * Ws::kBBoxBytes, &b_map, full, 0, box * Ws::kBBoxRows);
        }
      }
    } else if (warp == 1) {
      for (int i = lane; i < Ws::kBRows; i += 32) bias_smem[i] = bias[i];
      ptx::named_barrier_arrive(Ws::kBiasBarrier, Ws::kBiasBarrierThreads);
    }
    // Warps 2 and 3 have nothing to do and exit; no named barrier counts them.
  } else {  // consumers 0 and 1
    ptx::setmaxnreg_inc<Ws::kConsumerRegs>();
    const int c = warpgroup - 1, t = tid % kWarpgroup;
    wait_or_trap(full, 0);
    float d1[128], d2[64];
    const std::uint64_t a_desc = ptx::sw128_k_major_desc(a_smem + c * Ws::kATileBytes);
    const std::uint64_t b1_desc = ptx::sw128_k_major_desc(b_smem);  // B rows 0..255
    const std::uint64_t b2_desc = ptx::sw128_k_major_desc(b_smem + 2 * Ws::kBBoxBytes);
    ptx::fence_operands(d1);
    ptx::fence_operands(d2);
    ptx::wgmma_fence();
#pragma unroll
    for (int j = 0; j < Ws::kCols / 16; ++j) {
      const std::uint64_t a_j = ptx::desc_advance(a_desc, ptx::sw128_k_major_step_bytes(64, j));
      ptx::wgmma_ss<bf16, 256, Major::kK, Major::kK>(
          d1, a_j, ptx::desc_advance(b1_desc, ptx::sw128_k_major_step_bytes(256, j)), j > 0);
      ptx::wgmma_ss<bf16, 128, Major::kK, Major::kK>(
          d2, a_j, ptx::desc_advance(b2_desc, ptx::sw128_k_major_step_bytes(128, j)), j > 0);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
    ptx::fence_operands(d1);
    ptx::fence_operands(d2);

    ptx::named_barrier_sync(Ws::kBiasBarrier, Ws::kBiasBarrierThreads);  // bias_smem is written
#pragma unroll
    for (int i = 0; i < 128; ++i) {
      d1_out[(c * 128 + i) * kWarpgroup + t] = d1[i] + bias_smem[ptx::acc_col(t, i)];
    }
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      d2_out[(c * 64 + i) * kWarpgroup + t] = d2[i] + bias_smem[256 + ptx::acc_col(t, i)];
    }
    swap_smem[c * kWarpgroup + t] = d1[0];
    ptx::named_barrier_sync(Ws::kSwapBarrier, Ws::kSwapBarrierThreads);
    swap_out[c * kWarpgroup + t] = swap_smem[(1 - c) * kWarpgroup + t];
  }
#endif
}

}  // namespace

Status wgmma_usable() {
  return sm90a_usable(reinterpret_cast<const void*>(wgmma_entries().front().kernel));
}

std::vector<WgmmaCase> wgmma_cases() {
  std::vector<WgmmaCase> cases;
  for (const WgmmaEntry& e : wgmma_entries()) cases.push_back(e.c);
  return cases;
}

Status run_wgmma(const WgmmaCase& c, const std::vector<std::uint16_t>& a_tile,
                 const std::vector<std::uint32_t>& a_frags,
                 const std::vector<std::uint16_t>& b_tile, std::vector<float>* d) {
  const WgmmaEntry* found = nullptr;
  for (const WgmmaEntry& e : wgmma_entries()) {
    if (e.c.dtype == c.dtype && e.c.n == c.n && e.c.k == c.k &&
        e.c.a_from_registers == c.a_from_registers && e.c.b_major == c.b_major) {
      found = &e;
    }
  }
  if (found == nullptr) return Status(StatusCode::kUnsupported, "wgmma case not compiled");
  const std::size_t a_elems = c.a_from_registers ? 0 : ptx::sw128_tile_bytes(64, c.k) / 2;
  const std::size_t f_elems = c.a_from_registers ? std::size_t(c.k) / 16 * 4 * kWarpgroup : 0;
  const std::size_t b_elems = b_tile_bytes(c.n, c.k, c.b_major) / 2;
  if (a_tile.size() != a_elems || a_frags.size() != f_elems || b_tile.size() != b_elems) {
    return Status(StatusCode::kInvalidShape, "run_wgmma: input sizes do not match the case");
  }
  cuda::DeviceBuffer a_buf, f_buf, b_buf, d_buf;
  const std::size_t d_count = std::size_t(c.n) / 2 * kWarpgroup;
  FA_TEST_RETURN_IF_ERROR(to_device(a_tile, &a_buf, "A tile"));
  FA_TEST_RETURN_IF_ERROR(to_device(a_frags, &f_buf, "A fragments"));
  FA_TEST_RETURN_IF_ERROR(to_device(b_tile, &b_buf, "B tile"));
  FA_TEST_RETURN_IF_ERROR(d_buf.allocate(d_count * sizeof(float), "D"));
  const int smem = static_cast<int>(2 * (a_elems + b_tile.size())) + kSmemSlack;
  FA_TEST_RETURN_IF_ERROR(allow_smem(reinterpret_cast<const void*>(found->kernel), smem));
  found->kernel<<<1, kWarpgroup, smem>>>(static_cast<const std::uint16_t*>(a_buf.data()),
                                         static_cast<const std::uint32_t*>(f_buf.data()),
                                         static_cast<const std::uint16_t*>(b_buf.data()),
                                         static_cast<float*>(d_buf.data()));
  FA_TEST_RETURN_IF_ERROR(finish("wgmma_kernel"));
  return to_host(d_buf, d_count, d, "D");
}

Status run_attention_chain(DType dtype, const std::vector<std::uint16_t>& q_tile,
                           const std::vector<std::uint16_t>& k_tile,
                           const std::vector<std::uint16_t>& v_tile, std::vector<float>* o) {
  constexpr std::size_t kElems = Chain::kTileBytes / 2;
  if (q_tile.size() != kElems || k_tile.size() != kElems || v_tile.size() != kElems) {
    return Status(StatusCode::kInvalidShape, "run_attention_chain: tiles are 64 x 128");
  }
  const auto kernel =
      dtype == DType::kBF16 ? &attention_chain_kernel<bf16> : &attention_chain_kernel<fp16>;
  cuda::DeviceBuffer q_buf, k_buf, v_buf, o_buf;
  const std::size_t o_count = Chain::kD / 2 * kWarpgroup;
  FA_TEST_RETURN_IF_ERROR(to_device(q_tile, &q_buf, "Q"));
  FA_TEST_RETURN_IF_ERROR(to_device(k_tile, &k_buf, "K"));
  FA_TEST_RETURN_IF_ERROR(to_device(v_tile, &v_buf, "V"));
  FA_TEST_RETURN_IF_ERROR(o_buf.allocate(o_count * sizeof(float), "O"));
  const int smem = 3 * Chain::kTileBytes + kSmemSlack;
  FA_TEST_RETURN_IF_ERROR(allow_smem(reinterpret_cast<const void*>(kernel), smem));
  kernel<<<1, kWarpgroup, smem>>>(static_cast<const std::uint16_t*>(q_buf.data()),
                                  static_cast<const std::uint16_t*>(k_buf.data()),
                                  static_cast<const std::uint16_t*>(v_buf.data()),
                                  static_cast<float*>(o_buf.data()));
  FA_TEST_RETURN_IF_ERROR(finish("attention_chain_kernel"));
  return to_host(o_buf, o_count, o, "O");
}

namespace {

// A row-major [rows][64] bf16 matrix as TMA boxes of {64, box_rows}, 128B swizzle.
Status row_major_map(CUtensorMap* map, const void* gmem, int rows, int box_rows) {
  cuda::TmaTensor t;
  t.rank = 2;
  t.dims[0] = Ws::kCols;
  t.dims[1] = rows;
  t.strides[0] = 1;
  t.strides[1] = Ws::kCols;
  t.box[0] = Ws::kCols;
  t.box[1] = box_rows;
  return cuda::make_tensor_map(map, DType::kBF16, gmem, t, cuda::TmaSwizzle::k128B);
}

}  // namespace

Status run_warp_specialized(const std::vector<std::uint16_t>& a,
                            const std::vector<std::uint16_t>& b, const std::vector<float>& bias,
                            WarpSpecializedResult* out) {
  if (a.size() != std::size_t{Ws::kARows} * Ws::kCols ||
      b.size() != std::size_t{Ws::kBRows} * Ws::kCols || bias.size() != std::size_t{Ws::kBRows}) {
    return Status(StatusCode::kInvalidShape, "run_warp_specialized: A [128][64], B [384][64]");
  }
  cuda::DeviceBuffer a_buf, b_buf, bias_buf, d1_buf, d2_buf, swap_buf;
  const std::size_t d1_count = 2 * 128 * kWarpgroup, d2_count = 2 * 64 * kWarpgroup;
  const std::size_t swap_count = 2 * kWarpgroup;
  FA_TEST_RETURN_IF_ERROR(to_device(a, &a_buf, "A"));
  FA_TEST_RETURN_IF_ERROR(to_device(b, &b_buf, "B"));
  FA_TEST_RETURN_IF_ERROR(to_device(bias, &bias_buf, "bias"));
  FA_TEST_RETURN_IF_ERROR(d1_buf.allocate(d1_count * sizeof(float), "D1"));
  FA_TEST_RETURN_IF_ERROR(d2_buf.allocate(d2_count * sizeof(float), "D2"));
  FA_TEST_RETURN_IF_ERROR(swap_buf.allocate(swap_count * sizeof(float), "swap"));
  CUtensorMap a_map{}, b_map{};
  FA_TEST_RETURN_IF_ERROR(row_major_map(&a_map, a_buf.data(), Ws::kARows, 64));
  FA_TEST_RETURN_IF_ERROR(row_major_map(&b_map, b_buf.data(), Ws::kBRows, Ws::kBBoxRows));
  FA_TEST_RETURN_IF_ERROR(
      allow_smem(reinterpret_cast<const void*>(&warp_specialized_kernel), Ws::kSmemBytes));
  warp_specialized_kernel<<<1, Ws::kThreads, Ws::kSmemBytes>>>(
      a_map, b_map, static_cast<const float*>(bias_buf.data()), static_cast<float*>(d1_buf.data()),
      static_cast<float*>(d2_buf.data()), static_cast<float*>(swap_buf.data()));
  FA_TEST_RETURN_IF_ERROR(finish("warp_specialized_kernel"));
  FA_TEST_RETURN_IF_ERROR(to_host(d1_buf, d1_count, &out->d1, "D1"));
  FA_TEST_RETURN_IF_ERROR(to_host(d2_buf, d2_count, &out->d2, "D2"));
  return to_host(swap_buf, swap_count, &out->swap, "swap");
}

}  // namespace flashattn::testing::sm90
