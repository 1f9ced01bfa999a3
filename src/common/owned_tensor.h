// OwnedTensor: an owning tensor on the host or a CUDA device, for the verifier, the benchmark, the
// CLI and the tests (the public API only ever takes non-owning TensorViews). Optionally followed by
// a guard margin of sentinel bytes, checked after a run to prove no kernel wrote past the end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/common/runtime.h"
#include "flashattn/tensor.h"

namespace flashattn {

class OwnedTensor {
 public:
  static constexpr std::uint8_t kGuardByte = 0xA5;

  OwnedTensor() = default;
  // Allocates a tensor of `shape`; `strides` empty means contiguous, otherwise element strides
  // (the allocation covers the largest addressed element). `guard_bytes` of kGuardByte follow.
  static Status create(DType dtype, Device device, const std::vector<std::int64_t>& shape,
                       OwnedTensor* out, const std::vector<std::int64_t>& strides = {},
                       std::size_t guard_bytes = 0);

  const TensorView& view() const { return view_; }
  TensorView& view() { return view_; }
  DType dtype() const { return view_.dtype; }
  Device device() const { return view_.device; }
  std::int64_t numel() const { return view_.numel(); }
  std::size_t storage_bytes() const { return storage_bytes_; }  // without the guard
  std::size_t guard_bytes() const { return guard_bytes_; }
  // True when the strides are the row-major ones of the shape.
  bool contiguous() const;

  // Fills every element with N(mean, std^2) drawn by common/random.h from (seed, stream), rounded
  // to the dtype. Element i of the logical (row-major) index space gets the same value on any
  // device and with any strides.
  Status fill_normal(std::uint64_t seed, std::uint64_t stream, float mean, float std);
  // Fills the whole storage (padding included) with NaN: poison before a run. The bytes are 0xFF,
  // a NaN in every dtype (0xFFFF in bf16 and fp16, 0xFFFFFFFF in fp32) that computed NaNs
  // (0x7FC0..., 0x7E00, 0x7FC00000) do not produce, so "never written" can be told apart.
  Status fill_nan();
  // Fills every element with `value`.
  Status fill_value(float value);
  // True iff every guard byte still holds kGuardByte.
  Status guard_intact(bool* intact) const;

  // The logical elements as float, row-major, copied to the host.
  Status to_host_float(std::vector<float>* out) const;
  // Writes row-major host floats into the elements (rounded to the dtype).
  Status from_host_float(const std::vector<float>& values);
  // The same for int32 tensors (index tensors such as cu_seqlens), exact: kInvalidDtype for any
  // other dtype (floats would round offsets past 2^24).
  Status to_host_int32(std::vector<std::int32_t>* out) const;
  Status from_host_int32(const std::vector<std::int32_t>& values);
  // A copy on `device` with the same dtype, shape and (contiguous) layout.
  Status copy_to(Device device, OwnedTensor* out) const;
  // A contiguous copy converted to `dtype` on the same device.
  Status convert_to(DType dtype, OwnedTensor* out) const;

 private:
  // The raw storage bytes (padding included, guard excluded), to or from the host.
  Status read_storage(std::vector<std::uint8_t>* bytes) const;
  Status write_storage(const std::vector<std::uint8_t>& bytes);

  TensorView view_;
  std::size_t storage_bytes_ = 0;
  std::size_t guard_bytes_ = 0;
  std::shared_ptr<void> storage_;  // host: aligned_alloc'd; device: a cuda::DeviceBuffer
  // Copies share the storage (shallow); copy_to() makes a deep copy.
};

}  // namespace flashattn
