#include "bench/timer.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>

namespace flashattn::bench {
namespace {

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return cuda::status_from_cuda(static_cast<int>(err), what);
}

}  // namespace

CudaEventTimer::~CudaEventTimer() {
  if (start_ != nullptr) cudaEventDestroy(start_);
  if (stop_ != nullptr) cudaEventDestroy(stop_);
}

Status CudaEventTimer::init() {
  if (start_ == nullptr) {
    Status st = cuda_status(cudaEventCreate(&start_), "cudaEventCreate");
    if (!st.ok()) return st;
  }
  if (stop_ == nullptr) return cuda_status(cudaEventCreate(&stop_), "cudaEventCreate");
  return Status::Ok();
}

Status CudaEventTimer::start(StreamHandle stream) {
  return cuda_status(cudaEventRecord(start_, stream), "cudaEventRecord (start)");
}

Status CudaEventTimer::stop(StreamHandle stream) {
  return cuda_status(cudaEventRecord(stop_, stream), "cudaEventRecord (stop)");
}

Status CudaEventTimer::elapsed_ms(double* ms) const {
  Status st = cuda_status(cudaEventSynchronize(stop_), "cudaEventSynchronize");
  if (!st.ok()) return st;
  float elapsed = 0.0f;
  st = cuda_status(cudaEventElapsedTime(&elapsed, start_, stop_), "cudaEventElapsedTime");
  *ms = elapsed;
  return st;
}

Status L2Flusher::init(int device) {
  cuda::DeviceProps props;
  Status st = cuda::device_props(device, &props);
  if (!st.ok()) return st;
  return buffer_.allocate(2 * std::max<std::size_t>(props.l2_bytes, 1), "bench: L2 flush buffer");
}

Status L2Flusher::flush(StreamHandle stream) const {
  if (buffer_.bytes() == 0) return Status::Ok();
  return cuda_status(cudaMemsetAsync(buffer_.data(), 0, buffer_.bytes(), stream),
                     "cudaMemsetAsync (L2 flush)");
}

double steady_ms() {
  using Clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(Clock::now().time_since_epoch()).count();
}

TimingSummary summarize(std::vector<double> ms) {
  TimingSummary s;
  if (ms.empty()) return s;
  std::sort(ms.begin(), ms.end());
  const std::size_t n = ms.size();
  s.median_ms = n % 2 == 1 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  s.min_ms = ms.front();
  s.max_ms = ms.back();
  return s;
}

}  // namespace flashattn::bench
