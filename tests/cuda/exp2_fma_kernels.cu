// The exp2_fma test kernel: the device path (add.rm split, the exponent taken from the rounded
// sum's bits), element by element, for comparison with the host path in exp2_fma_test.cc.
#include "exp2_fma_kernels.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "cuda/common/runtime.h"
#include "cuda/primitives/exp2_fma.cuh"

namespace flashattn::testing {
namespace {

template <int kDegree>
__global__ void exp2_fma_kernel(const float* x, float* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = cuda::ptx::exp2_fma<kDegree>(x[i]);
}

}  // namespace

Status run_exp2_fma(int degree, const std::vector<float>& x, std::vector<float>* y) {
  if (degree != 3 && degree != 4) {
    return Status(StatusCode::kInvalidArgument, "exp2_fma: degree 3 or 4");
  }
  const int n = static_cast<int>(x.size());
  const std::size_t bytes = x.size() * sizeof(float);
  cuda::DeviceBuffer in, out;
  for (cuda::DeviceBuffer* b : {&in, &out}) {
    const Status st = b->allocate(bytes > 0 ? bytes : sizeof(float), "exp2_fma test");
    if (!st.ok()) return st;
  }
  cudaError_t err = cudaMemcpy(in.data(), x.data(), bytes, cudaMemcpyHostToDevice);
  if (err != cudaSuccess) return cuda::status_from_cuda(err, "exp2_fma test: copy in");
  constexpr int kThreads = 256;
  const int blocks = (n + kThreads - 1) / kThreads;
  const float* px = static_cast<const float*>(in.data());
  float* py = static_cast<float*>(out.data());
  if (blocks > 0) {
    if (degree == 3) {
      exp2_fma_kernel<3><<<blocks, kThreads>>>(px, py, n);
    } else {
      exp2_fma_kernel<4><<<blocks, kThreads>>>(px, py, n);
    }
  }
  err = cudaGetLastError();
  if (err != cudaSuccess) return cuda::status_from_cuda(err, "exp2_fma test: launch");
  y->assign(x.size(), 0.0f);
  err = cudaMemcpy(y->data(), out.data(), bytes, cudaMemcpyDeviceToHost);
  return cuda::status_from_cuda(err, "exp2_fma test: copy out");
}

}  // namespace flashattn::testing
