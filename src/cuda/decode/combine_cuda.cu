// combine() on CUDA tensors (combine_cuda.h): one warp per (batch, row, head), lanes over the
// columns; float32 with the max subtracted (the CPU version is float64; a float32 exp of an LSE
// difference is within 2 ulp, far below a bf16 / fp16 step, and the float32 tests' bound).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/device_dtype.cuh"
#include "cuda/decode/combine_cuda.h"

namespace flashattn::cuda {
namespace {

struct CombineParts {
  int n = 0;
  std::int64_t batch = 0, seqlen_q = 0, heads = 0, head_dim = 0;
  const float* o[kMaxCombineParts] = {};
  const float* lse[kMaxCombineParts] = {};
  std::int64_t o_stride[kMaxCombineParts][3] = {};  // batch, row, head (elements)
  std::int64_t lse_stride[kMaxCombineParts][3] = {};
  void* out = nullptr;
  std::int64_t out_stride[3] = {0, 0, 0};
  float* out_lse = nullptr;
  std::int64_t out_lse_stride[3] = {0, 0, 0};
};

template <typename T>
__global__ void combine_parts_kernel(const __grid_constant__ CombineParts p) {
  const std::int64_t rows = p.batch * p.seqlen_q * p.heads;
  const std::int64_t row = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) +
                           threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const std::int64_t h = row % p.heads, r = (row / p.heads) % p.seqlen_q;
  const std::int64_t b = row / p.heads / p.seqlen_q;
  auto lse_of = [&](int i) {
    return p.lse[i][b * p.lse_stride[i][0] + h * p.lse_stride[i][1] + r * p.lse_stride[i][2]];
  };
  float m = -INFINITY;
  bool nan = false;
  for (int i = 0; i < p.n; ++i) {
    const float l = lse_of(i);
    nan = nan || isnan(l);
    m = fmaxf(m, l);
  }
  float lse = -INFINITY;
  if (nan) {
    lse = NAN;
  } else if (m != -INFINITY) {
    float total = 0.0f;
    for (int i = 0; i < p.n; ++i) {
      const float l = lse_of(i);
      if (l != -INFINITY) total += expf(l - m);
    }
    lse = m + logf(total);
  }
  T* dst = static_cast<T*>(p.out) + b * p.out_stride[0] + r * p.out_stride[1] + h * p.out_stride[2];
  for (std::int64_t c = lane; c < p.head_dim; c += 32) {
    float acc = nan ? NAN : 0.0f;
    if (!nan && lse != -INFINITY) {
      for (int i = 0; i < p.n; ++i) {
        const float l = lse_of(i);
        if (l == -INFINITY) continue;  // no key: weight 0, O not read
        const float* o = p.o[i] + b * p.o_stride[i][0] + r * p.o_stride[i][1] + h * p.o_stride[i][2];
        acc = fmaf(expf(l - lse), o[c], acc);
      }
    }
    dst[c] = from_float<T>(acc);
  }
  if (lane == 0 && p.out_lse != nullptr) {
    p.out_lse[b * p.out_lse_stride[0] + h * p.out_lse_stride[1] + r * p.out_lse_stride[2]] = lse;
  }
}

}  // namespace

Status combine_cuda(const CombineParams& params, StreamHandle stream) {
  const auto n = params.outs.size();
  if (n > static_cast<std::size_t>(kMaxCombineParts)) {
    return Status(StatusCode::kUnsupported,
                  "combine() on CUDA tensors takes at most " + std::to_string(kMaxCombineParts) +
                      " parts; got " + std::to_string(n) + " (merge them in groups)");
  }
  CombineParts p;
  p.n = static_cast<int>(n);
  const TensorView& out = params.out;
  p.batch = out.shape[0];
  p.seqlen_q = out.shape[1];
  p.heads = out.shape[2];
  p.head_dim = out.shape[3];
  for (std::size_t i = 0; i < n; ++i) {
    p.o[i] = static_cast<const float*>(params.outs[i].data);
    p.lse[i] = static_cast<const float*>(params.lses[i].data);
    for (int d = 0; d < 3; ++d) {
      p.o_stride[i][d] = params.outs[i].stride[d];
      p.lse_stride[i][d] = params.lses[i].stride[d];
    }
  }
  p.out = out.data;
  for (int d = 0; d < 3; ++d) p.out_stride[d] = out.stride[d];
  if (params.lse.defined()) {
    p.out_lse = static_cast<float*>(params.lse.data);
    for (int d = 0; d < 3; ++d) p.out_lse_stride[d] = params.lse.stride[d];
  }
  const std::int64_t rows = p.batch * p.seqlen_q * p.heads;
  if (rows == 0) return Status::Ok();
  constexpr int kWarps = 4;
  const auto grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  auto s = static_cast<cudaStream_t>(stream);
  switch (out.dtype) {
    case DType::kFP32: combine_parts_kernel<float><<<grid, 32 * kWarps, 0, s>>>(p); break;
    case DType::kBF16: combine_parts_kernel<__nv_bfloat16><<<grid, 32 * kWarps, 0, s>>>(p); break;
    case DType::kFP16: combine_parts_kernel<__half><<<grid, 32 * kWarps, 0, s>>>(p); break;
    case DType::kInt32: return Status(StatusCode::kInternal, "combine: int32 out");
  }
  return check_launch("combine_parts_kernel");
}

}  // namespace flashattn::cuda
