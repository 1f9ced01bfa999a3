// Host-side CUDA runtime helpers shared by every GPU backend, the verifier and the benchmark:
// error mapping, device discovery, pointer checks, stream queries, owning device buffers, a
// device guard.
// Plain C++ (no kernels), so it compiles with the host compiler.
#pragma once

#include <cstddef>
#include <string>

#include "flashattn/forward.h"

namespace flashattn::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never an error).
int device_count();

// Why CUDA is unusable here ("no NVIDIA driver or CUDA device found (cudaErrorInsufficientDriver)",
// "no CUDA device found (cudaErrorNoDevice)", ...), or empty when it is usable.
std::string unavailable_reason();

// A GPU backend's usable(device): kBackendUnavailable with unavailable_reason() when CUDA is
// unusable here, or naming the device when there is no such device or it is below
// `min_major`.x, else what `kernels_available` (the backend's kernel-image check) says on it.
Status backend_usable(Device device, Status (*kernels_available)(), int min_major = 0);

struct DeviceProps {
  std::string name;
  int major = 0, minor = 0;
  int sm_count = 0;
  std::size_t total_memory = 0;
  std::size_t l2_bytes = 0;
  std::size_t max_smem_per_block_optin = 0;
};
Status device_props(int device, DeviceProps* props);

// Maps a CUDA runtime error code (an int, so callers need no CUDA header) to a Status.
Status status_from_cuda(int cuda_error, const char* what);

// For a tensor on `device`, checks that `ptr` is memory of that device (device or managed memory
// for CUDA; for the CPU, not device memory). Host function, launches nothing.
Status check_pointer_device(const void* ptr, Device device, const char* name);

// Whether `stream` is capturing a CUDA graph (cudaStreamIsCapturing; legal during a capture).
Status stream_is_capturing(StreamHandle stream, bool* capturing);

// Waits until the work queued on `stream` is done (cudaStreamSynchronize).
Status stream_synchronize(StreamHandle stream, const char* what);

// Selects a device for the lifetime of the guard, restoring the previous one on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// An owning cudaMalloc'd buffer. allocate() checks free memory first and reports the bytes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // `what` names the buffer in the out-of-memory message ("naive: S scores").
  Status allocate(std::size_t bytes, const char* what);
  void reset();
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Formats a byte count as "68.72 GB (68719476736 bytes)".
std::string format_bytes(std::size_t bytes);

}  // namespace flashattn::cuda
