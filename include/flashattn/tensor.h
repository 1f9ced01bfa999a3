// TensorView: a non-owning view of a strided tensor (pointer, dtype, device, shape, int64 element
// strides). The library never allocates or frees user tensors; it reads and writes through views.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

namespace flashattn {

// kInt32 is for index tensors (cu_seqlens, seqused_k), never for q, k, v or out.
enum class DType { kBF16, kFP16, kFP32, kInt32 };

std::string_view dtype_name(DType dtype);       // "bf16", "fp16", "fp32", "int32"
std::size_t dtype_size(DType dtype);            // bytes per element
// The value dtypes: bf16|bfloat16|fp16|float16|half|fp32|float32 (int32 is not one of them).
bool parse_dtype(std::string_view name, DType* out);

enum class DeviceType { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

std::string device_name(Device device);  // "cpu", "cuda:0"

constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFP32;
  Device device;
  int rank = 0;
  std::int64_t shape[kMaxRank] = {0, 0, 0, 0};
  std::int64_t stride[kMaxRank] = {0, 0, 0, 0};  // in elements, not bytes

  // A contiguous (row-major) view of `shape`.
  static TensorView contiguous(void* data, DType dtype, Device device,
                               std::initializer_list<std::int64_t> shape);
  // A view with explicit element strides (sizes of `shape` and `stride` must match).
  static TensorView strided(void* data, DType dtype, Device device,
                            std::initializer_list<std::int64_t> shape,
                            std::initializer_list<std::int64_t> stride);

  bool defined() const { return rank > 0; }
  std::int64_t numel() const;
  // Bytes from the first to one past the last addressed element (0 when empty).
  std::int64_t span_bytes() const;
};

}  // namespace flashattn
