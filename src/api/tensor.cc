#include "flashattn/tensor.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace flashattn {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kInt32: return "int32";
  }
  return "?";
}

std::string device_name(Device device) {
  return device.type == DeviceType::kCPU ? std::string("cpu")
                                         : "cuda:" + std::to_string(device.index);
}

std::size_t dtype_size(DType dtype) {
  return dtype == DType::kFP32 || dtype == DType::kInt32 ? 4 : 2;
}

bool parse_dtype(std::string_view name, DType* out) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "bf16" || s == "bfloat16") { *out = DType::kBF16; return true; }
  if (s == "fp16" || s == "float16" || s == "half") { *out = DType::kFP16; return true; }
  if (s == "fp32" || s == "float32" || s == "float") { *out = DType::kFP32; return true; }
  return false;
}

TensorView TensorView::contiguous(void* data, DType dtype, Device device,
                                  std::initializer_list<std::int64_t> shape) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.rank = static_cast<int>(std::min<std::size_t>(shape.size(), kMaxRank));
  int i = 0;
  for (std::int64_t s : shape) {
    if (i < kMaxRank) t.shape[i++] = s;
  }
  std::int64_t running = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[d] = running;
    running *= std::max<std::int64_t>(t.shape[d], 1);
  }
  return t;
}

TensorView TensorView::strided(void* data, DType dtype, Device device,
                               std::initializer_list<std::int64_t> shape,
                               std::initializer_list<std::int64_t> stride) {
  TensorView t = contiguous(data, dtype, device, shape);
  int i = 0;
  for (std::int64_t s : stride) {
    if (i < t.rank) t.stride[i++] = s;
  }
  return t;
}

std::int64_t TensorView::numel() const {
  if (rank == 0) return 0;
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

std::int64_t TensorView::span_bytes() const {
  if (numel() == 0) return 0;
  std::int64_t last = 0;
  for (int d = 0; d < rank; ++d) last += (shape[d] - 1) * stride[d];
  return (last + 1) * static_cast<std::int64_t>(dtype_size(dtype));
}

}  // namespace flashattn
