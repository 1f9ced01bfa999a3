// OwnedTensor: host storage is 256-byte aligned (std::aligned_alloc); device storage is a
// cuda::DeviceBuffer (cudaMalloc, 256-byte aligned, free memory checked first). The guard margin
// sits directly after the last addressed byte, so a write one element past the end lands in it.
//
// Element-wise work on device tensors (normal fill, constant fill, conversion) runs as kernels
// from cuda/common/fill.h. When those are not built, the same values are produced on the host and
// uploaded: slower, identical result.
#include "common/owned_tensor.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "common/checked_math.h"
#include "common/dtype_convert.h"
#include "common/random.h"
#include "cuda/common/fill.h"

namespace flashattn {
namespace {

constexpr std::size_t kHostAlignment = 256;

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

// Calls fn(logical_index, element_offset) for every element of `t`, logical order row-major.
template <typename Fn>
void for_each_element(const TensorView& t, Fn&& fn) {
  const std::int64_t n = t.numel();
  if (n == 0) return;
  std::int64_t idx[kMaxRank] = {0, 0, 0, 0};
  std::int64_t offset = 0;
  const int last = t.rank - 1;
  for (std::int64_t i = 0; i < n; ++i) {
    fn(i, offset);
    // Odometer step: bump the last index, carry into the ones before it.
    for (int d = last; d >= 0; --d) {
      ++idx[d];
      offset += t.stride[d];
      if (idx[d] < t.shape[d]) break;
      offset -= idx[d] * t.stride[d];
      idx[d] = 0;
    }
  }
}

Status cuda_status(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return Status::Ok();
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed for it
  return cuda::status_from_cuda(static_cast<int>(err), what);
}

// Copies `bytes` between host and the tensor's storage at byte offset `at`.
Status device_read(const void* device_ptr, void* host, std::size_t bytes, int device_index) {
  if (bytes == 0) return Status::Ok();
  cuda::DeviceGuard guard(device_index);
  return cuda_status(cudaMemcpy(host, device_ptr, bytes, cudaMemcpyDeviceToHost),
                     "cudaMemcpy (device to host)");
}

Status device_write(void* device_ptr, const void* host, std::size_t bytes, int device_index) {
  if (bytes == 0) return Status::Ok();
  cuda::DeviceGuard guard(device_index);
  return cuda_status(cudaMemcpy(device_ptr, host, bytes, cudaMemcpyHostToDevice),
                     "cudaMemcpy (host to device)");
}

Status device_memset(void* device_ptr, int value, std::size_t bytes, int device_index) {
  if (bytes == 0) return Status::Ok();
  cuda::DeviceGuard guard(device_index);
  return cuda_status(cudaMemset(device_ptr, value, bytes), "cudaMemset");
}

bool kernels_missing(const Status& st) { return st.code() == StatusCode::kBackendUnavailable; }

}  // namespace

Status OwnedTensor::create(DType dtype, Device device, const std::vector<std::int64_t>& shape,
                           OwnedTensor* out, const std::vector<std::int64_t>& strides,
                           std::size_t guard_bytes) {
  if (shape.empty() || shape.size() > static_cast<std::size_t>(kMaxRank)) {
    return Status(StatusCode::kInvalidRank, "OwnedTensor: rank = " + std::to_string(shape.size()) +
                                                ", expected 1 to " + std::to_string(kMaxRank));
  }
  if (!strides.empty() && strides.size() != shape.size()) {
    return Status(StatusCode::kInvalidStride,
                  "OwnedTensor: " + std::to_string(strides.size()) + " strides for rank " +
                      std::to_string(shape.size()));
  }
  OwnedTensor t;
  TensorView& v = t.view_;
  v.dtype = dtype;
  v.device = device;
  v.rank = static_cast<int>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return Status(StatusCode::kInvalidShape, "OwnedTensor: shape " + shape_string(shape) +
                                                   " has a negative size");
    }
    if (!strides.empty() && strides[d] < 0) {
      return Status(StatusCode::kInvalidStride,
                    "OwnedTensor: strides " + shape_string(strides) + " have a negative entry");
    }
  }
  // Sizes are checked products: a shape whose element count or byte span does not fit 64 bits is
  // an invalid shape, not a wrapped (small or negative) allocation.
  std::int64_t running = 1;
  bool fits = true;
  for (int d = v.rank - 1; d >= 0 && fits; --d) {
    v.shape[d] = shape[d];
    v.stride[d] = strides.empty() ? running : strides[d];
    fits = checked_mul(running, std::max<std::int64_t>(shape[d], 1), &running);
  }
  // The span: the offset of the last element + 1, in bytes (TensorView::span_bytes, checked).
  std::int64_t numel = 1, span = 0;
  for (int d = 0; d < v.rank && fits; ++d) fits = checked_mul(numel, v.shape[d], &numel);
  if (fits && numel > 0) {
    std::int64_t last = 0;
    for (int d = 0; d < v.rank && fits; ++d) {
      std::int64_t term = 0;
      fits = checked_mul(v.shape[d] - 1, v.stride[d], &term) && checked_add(last, term, &last);
    }
    fits = fits && checked_add(last, std::int64_t{1}, &span) &&
           checked_mul(span, static_cast<std::int64_t>(dtype_size(dtype)), &span);
  }
  std::size_t total = 0;
  fits = fits && checked_add(static_cast<std::size_t>(span), guard_bytes, &total) &&
         total <= std::numeric_limits<std::size_t>::max() - kHostAlignment;
  if (!fits) {
    return Status(StatusCode::kInvalidShape,
                  "OwnedTensor: shape " + shape_string(shape) +
                      (strides.empty() ? "" : " with strides " + shape_string(strides)) + " of " +
                      std::string(dtype_name(dtype)) + " needs more than " +
                      std::to_string(std::numeric_limits<std::int64_t>::max()) + " bytes");
  }
  t.storage_bytes_ = static_cast<std::size_t>(span);
  t.guard_bytes_ = guard_bytes;

  if (total > 0) {
    if (device.type == DeviceType::kCPU) {
      const std::size_t rounded = (total + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
      void* p = std::aligned_alloc(kHostAlignment, rounded);
      if (p == nullptr) {
        return Status(StatusCode::kOutOfMemory, "OwnedTensor: host allocation of " +
                                                    cuda::format_bytes(rounded) + " failed");
      }
      t.storage_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
      if (guard_bytes > 0) {
        std::memset(static_cast<std::uint8_t*>(p) + t.storage_bytes_, kGuardByte, guard_bytes);
      }
    } else {
      cuda::DeviceGuard guard(device.index);
      auto buffer = std::make_shared<cuda::DeviceBuffer>();
      const std::string what = "tensor " + std::string(dtype_name(dtype)) + " " +
                               shape_string(shape) + " on cuda:" + std::to_string(device.index);
      Status st = buffer->allocate(total, what.c_str());
      if (!st.ok()) return st;
      void* p = buffer->data();
      t.storage_ = std::shared_ptr<void>(std::move(buffer), p);
      if (guard_bytes > 0) {
        st = device_memset(static_cast<std::uint8_t*>(p) + t.storage_bytes_, kGuardByte,
                           guard_bytes, device.index);
        if (!st.ok()) return st;
      }
    }
  }
  v.data = t.storage_.get();
  *out = std::move(t);
  return Status::Ok();
}

Status OwnedTensor::read_storage(std::vector<std::uint8_t>* bytes) const {
  bytes->resize(storage_bytes_);
  if (storage_bytes_ == 0) return Status::Ok();
  if (device().type == DeviceType::kCPU) {
    std::memcpy(bytes->data(), view_.data, storage_bytes_);
    return Status::Ok();
  }
  return device_read(view_.data, bytes->data(), storage_bytes_, device().index);
}

Status OwnedTensor::write_storage(const std::vector<std::uint8_t>& bytes) {
  if (bytes.size() != storage_bytes_) {
    return Status(StatusCode::kInternal, "OwnedTensor::write_storage: " +
                                             std::to_string(bytes.size()) + " bytes for storage of " +
                                             std::to_string(storage_bytes_));
  }
  if (storage_bytes_ == 0) return Status::Ok();
  if (device().type == DeviceType::kCPU) {
    std::memcpy(view_.data, bytes.data(), storage_bytes_);
    return Status::Ok();
  }
  return device_write(view_.data, bytes.data(), storage_bytes_, device().index);
}

Status OwnedTensor::fill_normal(std::uint64_t seed, std::uint64_t stream, float mean, float std) {
  if (numel() == 0) return Status::Ok();
  if (device().type == DeviceType::kCUDA) {
    cuda::DeviceGuard guard(device().index);
    Status st = cuda::fill_normal(view_, seed, stream, mean, std);
    if (!kernels_missing(st)) return st;
  }
  std::vector<float> values(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = mean + std * normal_at(seed, stream, i);
  }
  return from_host_float(values);
}

Status OwnedTensor::fill_nan() {
  // 0xFF bytes are a NaN in every dtype: 0xFFFF in bf16 and fp16, 0xFFFFFFFF in fp32. Writing the
  // whole storage poisons the padding between strided rows too.
  if (storage_bytes_ == 0) return Status::Ok();
  if (device().type == DeviceType::kCPU) {
    std::memset(view_.data, 0xFF, storage_bytes_);
    return Status::Ok();
  }
  return device_memset(view_.data, 0xFF, storage_bytes_, device().index);
}

Status OwnedTensor::fill_value(float value) {
  if (numel() == 0) return Status::Ok();
  if (device().type == DeviceType::kCUDA) {
    cuda::DeviceGuard guard(device().index);
    Status st = cuda::fill_value(view_, value);
    if (!kernels_missing(st)) return st;
  }
  return from_host_float(std::vector<float>(static_cast<std::size_t>(numel()), value));
}

Status OwnedTensor::guard_intact(bool* intact) const {
  *intact = true;
  if (guard_bytes_ == 0) return Status::Ok();
  const auto* guard_ptr = static_cast<const std::uint8_t*>(view_.data) + storage_bytes_;
  std::vector<std::uint8_t> guard(guard_bytes_);
  if (device().type == DeviceType::kCPU) {
    std::memcpy(guard.data(), guard_ptr, guard_bytes_);
  } else {
    Status st = device_read(guard_ptr, guard.data(), guard_bytes_, device().index);
    if (!st.ok()) return st;
  }
  *intact = std::all_of(guard.begin(), guard.end(), [](std::uint8_t b) { return b == kGuardByte; });
  return Status::Ok();
}

Status OwnedTensor::to_host_float(std::vector<float>* out) const {
  out->resize(static_cast<std::size_t>(numel()));
  if (numel() == 0) return Status::Ok();
  const void* base = view_.data;
  std::vector<std::uint8_t> staging;
  if (device().type == DeviceType::kCUDA) {
    Status st = read_storage(&staging);
    if (!st.ok()) return st;
    base = staging.data();
  }
  const DType dt = dtype();
  float* dst = out->data();
  for_each_element(view_, [&](std::int64_t i, std::int64_t offset) {
    dst[i] = load_as_float(base, dt, offset);
  });
  return Status::Ok();
}

Status OwnedTensor::from_host_float(const std::vector<float>& values) {
  if (static_cast<std::int64_t>(values.size()) != numel()) {
    return Status(StatusCode::kInvalidShape,
                  "OwnedTensor::from_host_float: " + std::to_string(values.size()) +
                      " values for a tensor of " + std::to_string(numel()) + " elements");
  }
  if (numel() == 0) return Status::Ok();
  const DType dt = dtype();
  if (device().type == DeviceType::kCPU) {
    void* base = view_.data;
    for_each_element(view_, [&](std::int64_t i, std::int64_t offset) {
      store_from_float(base, dt, offset, values[static_cast<std::size_t>(i)]);
    });
    return Status::Ok();
  }
  // Device: stage the whole storage so the padding between strided rows keeps its bytes.
  std::vector<std::uint8_t> staging;
  Status st = contiguous() ? Status::Ok() : read_storage(&staging);
  if (!st.ok()) return st;
  staging.resize(storage_bytes_);
  void* base = staging.data();
  for_each_element(view_, [&](std::int64_t i, std::int64_t offset) {
    store_from_float(base, dt, offset, values[static_cast<std::size_t>(i)]);
  });
  return write_storage(staging);
}

Status OwnedTensor::to_host_int32(std::vector<std::int32_t>* out) const {
  if (dtype() != DType::kInt32) {
    return Status(StatusCode::kInvalidDtype, "OwnedTensor::to_host_int32: dtype = " +
                                                 std::string(dtype_name(dtype())) +
                                                 ", expected int32");
  }
  out->resize(static_cast<std::size_t>(numel()));
  if (numel() == 0) return Status::Ok();
  std::vector<std::uint8_t> staging;
  Status st = read_storage(&staging);
  if (!st.ok()) return st;
  std::int32_t* dst = out->data();
  for_each_element(view_, [&](std::int64_t i, std::int64_t offset) {
    std::memcpy(dst + i, staging.data() + offset * 4, 4);
  });
  return Status::Ok();
}

Status OwnedTensor::from_host_int32(const std::vector<std::int32_t>& values) {
  if (dtype() != DType::kInt32) {
    return Status(StatusCode::kInvalidDtype, "OwnedTensor::from_host_int32: dtype = " +
                                                 std::string(dtype_name(dtype())) +
                                                 ", expected int32");
  }
  if (static_cast<std::int64_t>(values.size()) != numel()) {
    return Status(StatusCode::kInvalidShape,
                  "OwnedTensor::from_host_int32: " + std::to_string(values.size()) +
                      " values for a tensor of " + std::to_string(numel()) + " elements");
  }
  if (numel() == 0) return Status::Ok();
  std::vector<std::uint8_t> staging;
  Status st = contiguous() ? Status::Ok() : read_storage(&staging);
  if (!st.ok()) return st;
  staging.resize(storage_bytes_);
  for_each_element(view_, [&](std::int64_t i, std::int64_t offset) {
    std::memcpy(staging.data() + offset * 4, values.data() + i, 4);
  });
  return write_storage(staging);
}

Status OwnedTensor::copy_to(Device device, OwnedTensor* out) const {
  std::vector<std::int64_t> shape(view_.shape, view_.shape + view_.rank);
  OwnedTensor dst;
  Status st = create(dtype(), device, shape, &dst, {}, guard_bytes_);
  if (!st.ok()) return st;
  if (numel() > 0) {
    // Gather the raw elements (bit-exact, NaN payloads included) into row-major order.
    std::vector<std::uint8_t> src_bytes;
    st = read_storage(&src_bytes);
    if (!st.ok()) return st;
    std::vector<std::uint8_t> packed(dst.storage_bytes_);
    const std::size_t elem = dtype_size(dtype());
    for_each_element(view_, [&](std::int64_t i, std::int64_t offset) {
      std::memcpy(packed.data() + static_cast<std::size_t>(i) * elem,
                  src_bytes.data() + static_cast<std::size_t>(offset) * elem, elem);
    });
    st = dst.write_storage(packed);
    if (!st.ok()) return st;
  }
  *out = std::move(dst);
  return Status::Ok();
}

Status OwnedTensor::convert_to(DType dtype, OwnedTensor* out) const {
  std::vector<std::int64_t> shape(view_.shape, view_.shape + view_.rank);
  OwnedTensor dst;
  Status st = create(dtype, device(), shape, &dst, {}, guard_bytes_);
  if (!st.ok()) return st;
  if (numel() > 0) {
    st = Status(StatusCode::kBackendUnavailable, "");
    if (device().type == DeviceType::kCUDA) {
      cuda::DeviceGuard guard(device().index);
      st = cuda::convert(view_, dst.view_);
    }
    if (kernels_missing(st)) {
      std::vector<float> values;
      st = to_host_float(&values);
      if (st.ok()) st = dst.from_host_float(values);
    }
    if (!st.ok()) return st;
  }
  *out = std::move(dst);
  return Status::Ok();
}

bool OwnedTensor::contiguous() const {
  std::int64_t running = 1;
  for (int d = view_.rank - 1; d >= 0; --d) {
    if (view_.shape[d] > 1 && view_.stride[d] != running) return false;
    running *= std::max<std::int64_t>(view_.shape[d], 1);
  }
  return true;
}

}  // namespace flashattn
