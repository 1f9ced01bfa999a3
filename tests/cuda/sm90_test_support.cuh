// Shared by the sm_90 primitive tests' kernel files (sm90_*_kernels.cu): the check that an sm_90a
// image can run here, a launch-and-wait with a hang watchdog, and device-side helpers.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cuda/common/runtime.h"
#include "cuda/primitives/mbarrier.cuh"
#include "cuda/primitives/smem.cuh"
#include "flashattn/status.h"

// Returns the Status of `expr` when it is an error. (Reassigning a Status is avoided: nvcc reads
// the discarded Status& of operator= as a dropped [[nodiscard]] value.)
#define FA_TEST_RETURN_IF_ERROR(expr) \
  do {                                \
    const Status _st = (expr);        \
    if (!_st.ok()) return _st;        \
  } while (0)

namespace flashattn::testing::sm90 {

// Whether `kernel` (a __global__ function's address) runs here as sm_90a code: Ok, or
// kBackendUnavailable saying why not (the tests skip), or kInternal when this build has sm_90a
// code (FLASHATTN_CUDA_ARCHS lists 90a) and the device is 9.0 but the runtime picked another
// image (the tests fail: on an H200 they must run, never skip). sm_90a machine code runs on
// compute capability 9.0 only; a build without 90a runs the sm_80 image, whose test kernels are
// empty.
inline Status sm90a_usable(const void* kernel) {
  if (cuda::device_count() == 0) return Status(StatusCode::kBackendUnavailable, "no CUDA device");
  int device = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&p, device) != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kInternal, "cannot read the device's properties");
  }
  if (p.major != 9 || p.minor != 0) {
    return Status(StatusCode::kBackendUnavailable,
                  "needs compute capability 9.0 (sm_90a); " + std::string(p.name) + " is " +
                      std::to_string(p.major) + "." + std::to_string(p.minor));
  }
#if defined(FLASHATTN_TEST_HAVE_SM90A)
  constexpr StatusCode kNoImage = StatusCode::kInternal;
#else
  constexpr StatusCode kNoImage = StatusCode::kBackendUnavailable;
#endif
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, kernel);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(kNoImage,
                  std::string("no kernel image for this GPU (") + cudaGetErrorName(err) + ")");
  }
  if (attr.binaryVersion != 90) {
    return Status(kNoImage, "the kernel runs as sm_" + std::to_string(attr.binaryVersion) +
                                " code, not sm_90a (FLASHATTN_CUDA_ARCHS needs 90a)");
  }
  return Status::Ok();
}

// Sets the kernel's dynamic shared-memory limit (needed above 48 KB).
inline Status allow_smem(const void* kernel, int bytes) {
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  return cuda::status_from_cuda(err, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

// The launch's error, then a wait for the default stream. A kernel still running after `seconds`
// is taken for a hang (a barrier that never completes): nothing more can run on the GPU, so the
// process says so and exits, and the driver ends the kernel with the process's context. The
// kernels' own mbarrier waits trap after about a second first (wait_or_trap).
inline Status finish(const char* what, double seconds = 30.0) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return cuda::status_from_cuda(err, what);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while ((err = cudaStreamQuery(nullptr)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "%s: still running after %.0f s, taken for a hang; exiting\n", what,
                   seconds);
      std::fflush(stderr);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (err != cudaSuccess) {
    Status st = cuda::status_from_cuda(err, what);
    return Status(st.code(), st.message() + " (a trap here is a timed-out mbarrier wait)");
  }
  return Status::Ok();
}

// A device copy of `host`, or of `count` elements of `fill`.
template <class T>
Status to_device(const std::vector<T>& host, cuda::DeviceBuffer* buf, const char* what) {
  Status st = buf->allocate(std::max<std::size_t>(host.size(), 1) * sizeof(T), what);
  if (!st.ok()) return st;
  if (host.empty()) return Status::Ok();
  return cuda::status_from_cuda(
      cudaMemcpy(buf->data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), what);
}

template <class T>
Status to_host(const cuda::DeviceBuffer& buf, std::size_t count, std::vector<T>* host,
               const char* what) {
  host->assign(count, T{});
  return cuda::status_from_cuda(
      cudaMemcpy(host->data(), buf.data(), count * sizeof(T), cudaMemcpyDeviceToHost), what);
}

// ---- device side ----

// The dynamic shared-memory base rounded up to the 1024-byte swizzle atom: extern __shared__
// arrays are only guaranteed 16-byte alignment. Launches add kSmemSlack bytes for it.
constexpr int kSmemSlack = 1024;
__device__ __forceinline__ unsigned char* smem_align_1024(unsigned char* raw) {
  const std::uint32_t addr = cuda::ptx::smem_addr(raw);
  return raw + ((1024 - addr % 1024) % 1024);
}

// Copies `bytes` (a multiple of 16) with every thread of the block, 16 bytes per access.
__device__ __forceinline__ void copy_16b(void* dst, const void* src, int bytes) {
  const uint4* s = static_cast<const uint4*>(src);
  uint4* d = static_cast<uint4*>(dst);
  for (int i = static_cast<int>(threadIdx.x); i < bytes / 16; i += static_cast<int>(blockDim.x)) {
    d[i] = s[i];
  }
}

// mbarrier_wait with a deadline of about a second (2^31 SM cycles): a phase that never completes
// (wrong byte count, wrong parity) traps, failing the launch, instead of hanging the GPU.
__device__ __forceinline__ void wait_or_trap(std::uint32_t bar_smem, std::uint32_t parity) {
  const long long start = clock64();
  while (!cuda::ptx::mbarrier_try_wait_parity(bar_smem, parity)) {
    if (clock64() - start > (1ll << 31)) __trap();
  }
}

}  // namespace flashattn::testing::sm90
