// The TMA tensor-map builder (cuda/common/tensor_map.h). Its argument checks are plain host code
// and run everywhere; encoding a map needs the driver, so that test skips without a GPU.
#include "cuda/common/tensor_map.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "cuda/common/runtime.h"
#include "test_util.h"

namespace flashattn::cuda {
namespace {

// A BSHD tensor [2][50][3][128] with padded rows, seen as {d, s, h, b}, box {64, 64, 1, 1}.
TmaTensor bshd_view() {
  TmaTensor t;
  t.rank = 4;
  const std::int64_t dims[4] = {128, 50, 3, 2};
  const std::int64_t strides[4] = {1, 448, 128, 50 * 448 + 64};
  for (int i = 0; i < 4; ++i) {
    t.dims[i] = dims[i];
    t.strides[i] = strides[i];
    t.box[i] = i < 2 ? 64 : 1;
  }
  return t;
}

// Any 16-byte-aligned address: the checks never dereference it.
const void* const kAligned = reinterpret_cast<const void*>(std::uintptr_t{0x10000});

void expect_error(const Status& st, StatusCode code, const std::string& part) {
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(part), std::string::npos) << st.to_string();
}

TEST(TensorMap, ValidViewsPass) {
  EXPECT_TRUE(check_tma_tensor(DType::kBF16, kAligned, bshd_view(), TmaSwizzle::k128B).ok());
  EXPECT_TRUE(check_tma_tensor(DType::kFP16, kAligned, bshd_view(), TmaSwizzle::k128B).ok());
  TmaTensor wide = bshd_view();
  wide.box[0] = 128;  // 256 bytes: fine without a swizzle
  EXPECT_TRUE(check_tma_tensor(DType::kBF16, kAligned, wide, TmaSwizzle::kNone).ok());
}

TEST(TensorMap, BadArgumentsNameTheField) {
  const TmaTensor ok = bshd_view();
  expect_error(check_tma_tensor(DType::kFP32, kAligned, ok, TmaSwizzle::k128B),
               StatusCode::kInvalidDtype, "fp32");
  expect_error(check_tma_tensor(DType::kBF16, nullptr, ok, TmaSwizzle::k128B),
               StatusCode::kNullPointer, "null");
  expect_error(
      check_tma_tensor(DType::kBF16, reinterpret_cast<const void*>(std::uintptr_t{0x10008}), ok,
                       TmaSwizzle::k128B),
      StatusCode::kMisaligned, "16-byte");
  TmaTensor t = ok;
  t.rank = 6;
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k128B),
               StatusCode::kInvalidRank, "rank = 6");
  t = ok;
  t.dims[2] = 0;
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k128B),
               StatusCode::kInvalidShape, "dims[2] = 0");
  t = ok;
  t.dims[3] = (std::int64_t{1} << 32) + 1;
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k128B),
               StatusCode::kInvalidShape, "dims[3]");
  t = ok;
  t.box[1] = 257;
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k128B),
               StatusCode::kInvalidShape, "box[1] = 257");
  t = ok;
  t.strides[0] = 2;
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k128B),
               StatusCode::kInvalidStride, "strides[0] = 2");
  t = ok;
  t.strides[1] = 100;  // 200 bytes
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k128B),
               StatusCode::kInvalidStride, "strides[1] = 100");
  t = ok;
  t.strides[3] = std::int64_t{1} << 39;  // 2^40 bytes
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k128B),
               StatusCode::kInvalidStride, "strides[3]");
  t = ok;
  t.box[0] = 4;  // 8 bytes
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k128B),
               StatusCode::kInvalidShape, "multiple of 16 bytes");
  t = ok;
  t.box[0] = 128;  // 256 bytes > the 128-byte span
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k128B),
               StatusCode::kInvalidShape, "128-byte swizzle span");
  t = ok;
  expect_error(check_tma_tensor(DType::kBF16, kAligned, t, TmaSwizzle::k64B),
               StatusCode::kInvalidShape, "64-byte swizzle span");
}

TEST(TensorMap, MapMustBe64ByteAligned) {
  alignas(128) unsigned char storage[2 * sizeof(CUtensorMap)];
  auto* misaligned = reinterpret_cast<CUtensorMap*>(storage + 32);
  expect_error(make_tensor_map(misaligned, DType::kBF16, kAligned, bshd_view(), TmaSwizzle::k128B),
               StatusCode::kMisaligned, "64-byte");
  expect_error(make_tensor_map(nullptr, DType::kBF16, kAligned, bshd_view(), TmaSwizzle::k128B),
               StatusCode::kNullPointer, "null");
}

// The driver encodes a valid view of real device memory (a map is only checked for real when a
// kernel uses it: tests/cuda/sm90_tma_test.cc).
TEST(TensorMap, EncodesOnTheDevice) {
  FA_SKIP_WITHOUT_CUDA();
  DeviceProps props;
  ASSERT_TRUE(device_props(0, &props).ok());
  if (props.major < 9) GTEST_SKIP() << "skipped: tensor maps need compute capability 9.0";
  DeviceBuffer buf;
  ASSERT_TRUE(buf.allocate(2 * (2 * (50 * 448 + 64)), "tensor").ok());
  alignas(128) CUtensorMap map;
  const Status st = make_tensor_map(&map, DType::kBF16, buf.data(), bshd_view(), TmaSwizzle::k128B);
  if (st.code() == StatusCode::kBackendUnavailable) GTEST_SKIP() << "skipped: " << st.message();
  EXPECT_TRUE(st.ok()) << st.to_string();
}

}  // namespace
}  // namespace flashattn::cuda
