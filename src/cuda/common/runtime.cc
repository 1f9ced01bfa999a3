#include "cuda/common/runtime.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

namespace flashattn::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

namespace {

// "11.4" from cudaDriverGetVersion's / cudaRuntimeGetVersion's 11040.
std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// Why cudaGetDeviceCount failed, in the user's terms. Without any NVIDIA driver the runtime
// returns cudaErrorInsufficientDriver, whose text ("CUDA driver version is insufficient for CUDA
// runtime version") sends a user without a GPU looking for a driver upgrade; the driver version
// (0 when no driver is installed) tells the two cases apart. The error's name stays in
// parentheses.
std::string device_count_failure(cudaError_t err) {
  const std::string name = cudaGetErrorName(err);
  if (err == cudaErrorInsufficientDriver) {
    int driver = 0, runtime = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess || driver == 0) {
      return "no NVIDIA driver or CUDA device found (" + name + ")";
    }
    cudaRuntimeGetVersion(&runtime);
    return "the NVIDIA driver supports CUDA " + cuda_version_text(driver) +
           ", older than this build's CUDA runtime " + cuda_version_text(runtime) + " (" + name +
           ")";
  }
  if (err == cudaErrorNoDevice) return "no CUDA device found (" + name + ")";
  return "no CUDA device (" + name + ": " + cudaGetErrorString(err) + ")";
}

}  // namespace

std::string unavailable_reason() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return device_count_failure(err);
  }
  if (n == 0) return "no CUDA device";
  return "";
}

// cudaGetDeviceProperties fills about a hundred fields, some through driver queries; `auto`
// asked it once per GPU backend on every forward(), and a decode step spent ~250 us of host time
// per call (tools/profile/decode_step.py --timing on the H200). A device's properties do not
// change within a process: each is read once.
Status device_props(int device, DeviceProps* props) {
  static std::mutex mu;
  static std::map<int, DeviceProps> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = cache.find(device);
    if (it != cache.end()) {
      *props = it->second;
      return Status::Ok();
    }
  }
  cudaDeviceProp p{};
  cudaError_t err = cudaGetDeviceProperties(&p, device);
  if (err != cudaSuccess) return status_from_cuda(err, "cudaGetDeviceProperties");
  props->name = p.name;
  props->major = p.major;
  props->minor = p.minor;
  props->sm_count = p.multiProcessorCount;
  props->total_memory = p.totalGlobalMem;
  props->l2_bytes = static_cast<std::size_t>(p.l2CacheSize);
  props->max_smem_per_block_optin = p.sharedMemPerBlockOptin;
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(device, *props);
  return Status::Ok();
}

Status status_from_cuda(int cuda_error, const char* what) {
  if (cuda_error == cudaSuccess) return Status::Ok();
  auto err = static_cast<cudaError_t>(cuda_error);
  const StatusCode code =
      err == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory : StatusCode::kCudaError;
  return Status(code, std::string(what) + " failed: " + cudaGetErrorName(err) + " (" +
                          cudaGetErrorString(err) + ")");
}

Status backend_usable(Device device, Status (*kernels_available)(), int min_major) {
  const std::string why = unavailable_reason();
  if (!why.empty()) return Status(StatusCode::kBackendUnavailable, why);
  if (device.type != DeviceType::kCUDA) {
    return Status(StatusCode::kBackendUnavailable,
                  "a GPU backend, asked about " + device_name(device));
  }
  const int n = device_count();
  if (device.index < 0 || device.index >= n) {
    return Status(StatusCode::kBackendUnavailable,
                  device_name(device) + " does not exist (" + std::to_string(n) +
                      " CUDA devices)");
  }
  if (min_major > 0) {
    DeviceProps props;
    Status st = device_props(device.index, &props);
    if (!st.ok()) return st;
    if (props.major < min_major) {
      return Status(StatusCode::kBackendUnavailable,
                    "needs compute capability >= " + std::to_string(min_major) + ".0; " +
                        device_name(device) + " (" + props.name + ") is " +
                        std::to_string(props.major) + "." + std::to_string(props.minor));
    }
  }
  // Whether this build has a kernel image for the device does not change either: looked up once
  // per (backend, device).
  static std::mutex mu;
  static std::map<std::pair<Status (*)(), int>, Status> images;
  const std::pair<Status (*)(), int> key{kernels_available, device.index};
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = images.find(key);
    if (it != images.end()) return it->second;
  }
  Status st;
  {
    DeviceGuard guard(device.index);  // the kernel image is looked up for the current device
    st = kernels_available();
  }
  std::lock_guard<std::mutex> lock(mu);
  images.emplace(key, st);
  return st;
}

Status check_pointer_device(const void* ptr, Device device, const char* name) {
  const std::string arg(name);
  if (device.type == DeviceType::kCUDA) {
    const int n = device_count();
    if (n == 0) {
      return Status(StatusCode::kInvalidDevice,
                    arg + ".device = cuda:" + std::to_string(device.index) +
                        " but this machine has no CUDA device");
    }
    if (device.index < 0 || device.index >= n) {
      return Status(StatusCode::kInvalidDevice,
                    arg + ".device = cuda:" + std::to_string(device.index) +
                        ", expected an index below the device count " + std::to_string(n));
    }
  } else if (device_count() == 0) {
    return Status::Ok();  // no CUDA: every pointer is host memory
  }
  cudaPointerAttributes attr{};
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    attr.type = cudaMemoryTypeUnregistered;
  }
  if (device.type == DeviceType::kCUDA) {
    if (attr.type == cudaMemoryTypeManaged) return Status::Ok();
    if (attr.type != cudaMemoryTypeDevice) {
      return Status(StatusCode::kInvalidDevice,
                    arg + ".data is host memory, expected device memory of cuda:" +
                        std::to_string(device.index));
    }
    if (attr.device != device.index) {
      return Status(StatusCode::kInvalidDevice,
                    arg + ".data is memory of cuda:" + std::to_string(attr.device) +
                        ", expected cuda:" + std::to_string(device.index));
    }
    return Status::Ok();
  }
  if (attr.type == cudaMemoryTypeDevice) {
    return Status(StatusCode::kInvalidDevice,
                  arg + ".data is device memory of cuda:" + std::to_string(attr.device) +
                      ", expected host memory (" + arg + ".device = cpu)");
  }
  return Status::Ok();
}

Status stream_is_capturing(StreamHandle stream, bool* capturing) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t err = cudaStreamIsCapturing(stream, &status);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return status_from_cuda(err, "cudaStreamIsCapturing");
  }
  *capturing = status != cudaStreamCaptureStatusNone;
  return Status::Ok();
}

Status stream_synchronize(StreamHandle stream, const char* what) {
  return status_from_cuda(cudaStreamSynchronize(stream), what);
}

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) {
    cudaGetLastError();
    previous_ = -1;
  }
  if (previous_ != device) cudaSetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (data_ != nullptr) cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Status DeviceBuffer::allocate(std::size_t bytes, const char* what) {
  reset();
  if (bytes == 0) return Status::Ok();
  std::size_t free_bytes = 0, total_bytes = 0;
  cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) return status_from_cuda(err, "cudaMemGetInfo");
  if (bytes > free_bytes) {
    return Status(StatusCode::kOutOfMemory,
                  std::string(what) + " needs " + format_bytes(bytes) + " but only " +
                      format_bytes(free_bytes) + " of " + format_bytes(total_bytes) +
                      " are free on the device");
  }
  err = cudaMalloc(&data_, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    data_ = nullptr;
    return Status(StatusCode::kOutOfMemory, std::string(what) + " needs " + format_bytes(bytes) +
                                                ": cudaMalloc failed (" +
                                                cudaGetErrorString(err) + ")");
  }
  bytes_ = bytes;
  return Status::Ok();
}

std::string format_bytes(std::size_t bytes) {
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.2f GB (%zu bytes)", static_cast<double>(bytes) / 1e9, bytes);
  return buf;
}

}  // namespace flashattn::cuda
