// Device fills for OwnedTensor: seeded normals (bit-identical to the host generator), constants,
// dtype conversion, byte memset. Grid-stride loops over the logical row-major index space, with
// the tensor's strides applied, so any layout gets the same values.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/dtype_convert.h"
#include "common/random.h"
#include "cuda/common/check.h"
#include "cuda/common/fill.h"

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;

// Shape and strides right-aligned to kMaxRank dims (leading dims of size 1), so offset_of
// unrolls fully and the arrays stay in registers.
struct Layout {
  std::int64_t shape[kMaxRank];
  std::int64_t stride[kMaxRank];
};

Layout layout_of(const TensorView& t) {
  Layout l{};
  const int pad = kMaxRank - t.rank;
  for (int d = 0; d < kMaxRank; ++d) {
    l.shape[d] = d < pad ? 1 : t.shape[d - pad];
    l.stride[d] = d < pad ? 0 : t.stride[d - pad];
  }
  return l;
}

// Element offset of logical row-major index i.
__device__ __forceinline__ std::int64_t offset_of(const Layout& l, std::int64_t i) {
  std::int64_t off = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    off += (i % l.shape[d]) * l.stride[d];
    i /= l.shape[d];
  }
  return off;
}

__global__ void fill_normal_kernel(void* data, DType dtype, Layout l, std::int64_t n,
                                   std::uint64_t seed, std::uint64_t stream, float mean,
                                   float std) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    store_from_float(data, dtype, offset_of(l, i), affine(std, normal_at(seed, stream, i), mean));
  }
}

__global__ void fill_value_kernel(void* data, DType dtype, Layout l, std::int64_t n, float value) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    store_from_float(data, dtype, offset_of(l, i), value);
  }
}

__global__ void convert_kernel(const void* src, DType src_dtype, Layout src_l, void* dst,
                               DType dst_dtype, Layout dst_l, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    store_from_float(dst, dst_dtype, offset_of(dst_l, i),
                     load_as_float(src, src_dtype, offset_of(src_l, i)));
  }
}

unsigned grid_for(std::int64_t n) {
  // Enough blocks to fill any GPU; the grid-stride loop covers the rest.
  return static_cast<unsigned>(std::max<std::int64_t>(
      1, std::min<std::int64_t>((n + kThreads - 1) / kThreads, 65536)));
}

}  // namespace

Status fill_normal(const TensorView& t, std::uint64_t seed, std::uint64_t stream, float mean,
                   float std) {
  const std::int64_t n = t.numel();
  if (n == 0) return Status::Ok();
  fill_normal_kernel<<<grid_for(n), kThreads>>>(t.data, t.dtype, layout_of(t), n, seed, stream,
                                                mean, std);
  FA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "fill_normal_kernel launch");
  FA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "fill_normal_kernel");
  return Status::Ok();
}

Status fill_value(const TensorView& t, float value) {
  const std::int64_t n = t.numel();
  if (n == 0) return Status::Ok();
  fill_value_kernel<<<grid_for(n), kThreads>>>(t.data, t.dtype, layout_of(t), n, value);
  FA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "fill_value_kernel launch");
  FA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "fill_value_kernel");
  return Status::Ok();
}

Status convert(const TensorView& src, const TensorView& dst) {
  const std::int64_t n = src.numel();
  if (n != dst.numel()) {
    return Status(StatusCode::kInvalidShape, "convert: source has " + std::to_string(n) +
                                                 " elements, destination " +
                                                 std::to_string(dst.numel()));
  }
  if (n == 0) return Status::Ok();
  convert_kernel<<<grid_for(n), kThreads>>>(src.data, src.dtype, layout_of(src), dst.data,
                                            dst.dtype, layout_of(dst), n);
  FA_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "convert_kernel launch");
  FA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize(), "convert_kernel");
  return Status::Ok();
}

Status memset_bytes(void* ptr, int value, std::size_t bytes) {
  if (bytes == 0) return Status::Ok();
  FA_CUDA_RETURN_IF_ERROR(cudaMemset(ptr, value, bytes), "cudaMemset");
  return Status::Ok();
}

}  // namespace flashattn::cuda
