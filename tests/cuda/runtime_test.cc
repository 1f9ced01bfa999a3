// The host-side CUDA runtime helpers (src/cuda/common/runtime.cc) on the machine at hand: without
// an NVIDIA driver the runtime reports cudaErrorInsufficientDriver ("CUDA driver version is
// insufficient for CUDA runtime version"), which reads as "upgrade your driver" to someone who has
// none; the reason shown by `flashattn info` and every GPU backend's why_not says what is missing.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <string>

#include "cuda/common/runtime.h"
#include "flashattn/flashattn.h"

namespace flashattn {
namespace {

TEST(CudaRuntime, NoDriverIsSaidPlainly) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  cudaGetLastError();
  if (err == cudaSuccess && count > 0) GTEST_SKIP() << "this machine has a CUDA device";
  if (err != cudaErrorInsufficientDriver) {
    GTEST_SKIP() << "cudaGetDeviceCount returned " << cudaGetErrorName(err)
                 << ", not cudaErrorInsufficientDriver";
  }
  int driver_version = -1;
  ASSERT_EQ(cudaDriverGetVersion(&driver_version), cudaSuccess);
  if (driver_version != 0) {
    GTEST_SKIP() << "an NVIDIA driver (CUDA " << driver_version
                 << ") is installed, older than the runtime";
  }
  const std::string why = cuda::unavailable_reason();
  EXPECT_EQ(why, "no NVIDIA driver or CUDA device found (cudaErrorInsufficientDriver)");
  for (const BackendInfo& b : list_backends()) {
    if (b.device_type != DeviceType::kCUDA || b.why_not.rfind("not built", 0) == 0) continue;
    EXPECT_EQ(b.why_not, why) << b.name;
  }
}

}  // namespace
}  // namespace flashattn
