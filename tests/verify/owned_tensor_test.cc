// OwnedTensor on the host: deterministic layout-independent fills, NaN poison, guards, float
// round trips, strided views. (Device paths are exercised by the GPU tests.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype_convert.h"
#include "common/owned_tensor.h"
#include "common/random.h"
#include "test_util.h"

namespace flashattn {
namespace {

const std::vector<DType> kDtypes = {DType::kBF16, DType::kFP16, DType::kFP32};

std::vector<float> host_floats(const OwnedTensor& t) {
  std::vector<float> v;
  EXPECT_TRUE(t.to_host_float(&v).ok());
  return v;
}

TEST(OwnedTensorTest, CreateContiguous) {
  OwnedTensor t;
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), {2, 3, 4, 8}, &t).ok());
  EXPECT_EQ(t.numel(), 2 * 3 * 4 * 8);
  EXPECT_EQ(t.storage_bytes(), static_cast<std::size_t>(2 * 3 * 4 * 8 * 2));
  EXPECT_TRUE(t.contiguous());
  EXPECT_EQ(t.view().rank, 4);
  EXPECT_EQ(t.view().stride[0], 3 * 4 * 8);
  EXPECT_EQ(t.view().stride[3], 1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.view().data) % 256, 0u);
  EXPECT_EQ(t.device(), Device::cpu());
}

TEST(OwnedTensorTest, CreateRejectsBadArguments) {
  OwnedTensor t;
  EXPECT_EQ(OwnedTensor::create(DType::kFP32, Device::cpu(), {}, &t).code(),
            StatusCode::kInvalidRank);
  EXPECT_EQ(OwnedTensor::create(DType::kFP32, Device::cpu(), {1, 2, 3, 4, 5}, &t).code(),
            StatusCode::kInvalidRank);
  EXPECT_EQ(OwnedTensor::create(DType::kFP32, Device::cpu(), {2, -1}, &t).code(),
            StatusCode::kInvalidShape);
  EXPECT_EQ(OwnedTensor::create(DType::kFP32, Device::cpu(), {2, 3}, &t, {3}).code(),
            StatusCode::kInvalidStride);
}

// Sizes whose products overflow 64 bits are an invalid shape that says so, not a wrapped byte count
// (9223372036854775807 * 512 * 8 * 128 * 4 bytes wrapped to "18446744073707454464 bytes").
TEST(OwnedTensorTest, CreateRejectsSizesThatOverflow) {
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  OwnedTensor t;
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{kMax, 512, 8, 128}, std::vector<std::int64_t>{1, kMax / 2 + 1, 2},
        std::vector<std::int64_t>{kMax / 4 + 1}}) {  // 2^61 fp32 elements: 2^63 bytes
    const Status st = OwnedTensor::create(DType::kFP32, Device::cpu(), shape, &t);
    EXPECT_EQ(st.code(), StatusCode::kInvalidShape) << st.to_string();
    EXPECT_NE(st.message().find("needs more than 9223372036854775807 bytes"), std::string::npos)
        << st.message();
  }
  // Strides that address past 2^63 bytes, and a guard that tips the total over.
  Status st = OwnedTensor::create(DType::kBF16, Device::cpu(), {2, 8}, &t, {kMax / 2, 1});
  EXPECT_EQ(st.code(), StatusCode::kInvalidShape) << st.to_string();
  st = OwnedTensor::create(DType::kFP32, Device::cpu(), {kMax / 8}, &t, {},
                           std::numeric_limits<std::size_t>::max() - 100);
  EXPECT_EQ(st.code(), StatusCode::kInvalidShape) << st.to_string();
}

TEST(OwnedTensorTest, EmptyTensor) {
  OwnedTensor t;
  ASSERT_TRUE(OwnedTensor::create(DType::kFP16, Device::cpu(), {2, 0, 4, 8}, &t, {}, 64).ok());
  EXPECT_EQ(t.numel(), 0);
  EXPECT_EQ(t.storage_bytes(), 0u);
  EXPECT_TRUE(t.fill_normal(1, 0, 0.5f, 1.0f).ok());
  EXPECT_TRUE(t.fill_nan().ok());
  EXPECT_TRUE(host_floats(t).empty());
  bool intact = false;
  ASSERT_TRUE(t.guard_intact(&intact).ok());
  EXPECT_TRUE(intact);
}

TEST(OwnedTensorTest, FillNormalIsDeterministicAndRounded) {
  for (DType dt : kDtypes) {
    OwnedTensor a, b, c;
    ASSERT_TRUE(OwnedTensor::create(dt, Device::cpu(), {3, 5, 2, 16}, &a).ok());
    ASSERT_TRUE(OwnedTensor::create(dt, Device::cpu(), {3, 5, 2, 16}, &b).ok());
    ASSERT_TRUE(OwnedTensor::create(dt, Device::cpu(), {3, 5, 2, 16}, &c).ok());
    ASSERT_TRUE(a.fill_normal(42, 1, 0.5f, 1.0f).ok());
    ASSERT_TRUE(b.fill_normal(42, 1, 0.5f, 1.0f).ok());
    ASSERT_TRUE(c.fill_normal(42, 2, 0.5f, 1.0f).ok());  // another stream
    const std::vector<float> va = host_floats(a), vb = host_floats(b), vc = host_floats(c);
    EXPECT_EQ(va, vb);
    EXPECT_NE(va, vc);
    for (std::size_t i = 0; i < va.size(); ++i) {
      const float want = round_to_dtype(0.5f + 1.0f * normal_at(42, 1, i), dt);
      ASSERT_EQ(va[i], want) << "element " << i << " " << dtype_name(dt);
    }
  }
}

TEST(OwnedTensorTest, FillNormalIsLayoutIndependent) {
  // The same logical element gets the same value whatever the strides.
  const std::vector<std::int64_t> shape = {2, 7, 3, 8};
  OwnedTensor contiguous, bhsd, padded;
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), shape, &contiguous).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), shape, &bhsd,
                                  {3 * 7 * 8, 8, 7 * 8, 1})
                  .ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), shape, &padded,
                                  {7 * 5 * 8, 5 * 8, 8, 1})
                  .ok());
  EXPECT_FALSE(bhsd.contiguous());
  EXPECT_FALSE(padded.contiguous());
  EXPECT_EQ(padded.storage_bytes(),
            static_cast<std::size_t>(((2 - 1) * 280 + (7 - 1) * 40 + (3 - 1) * 8 + 7 + 1) * 2));
  for (OwnedTensor* t : {&contiguous, &bhsd, &padded}) {
    ASSERT_TRUE(t->fill_normal(7, 0, 0.5f, 1.0f).ok());
  }
  EXPECT_EQ(host_floats(bhsd), host_floats(contiguous));
  EXPECT_EQ(host_floats(padded), host_floats(contiguous));
}

TEST(OwnedTensorTest, StridedElementsLandAtTheirOffsets) {
  // BHSD storage seen as BSHD: logical (b, s, h, d) lives at b*H*S*D + h*S*D + s*D + d.
  const std::int64_t B = 2, S = 3, H = 4, D = 8;
  OwnedTensor t;
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), {B, S, H, D}, &t,
                                  {H * S * D, D, S * D, 1})
                  .ok());
  std::vector<float> values(static_cast<std::size_t>(B * S * H * D));
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
  ASSERT_TRUE(t.from_host_float(values).ok());
  const float* raw = static_cast<const float*>(t.view().data);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t s = 0; s < S; ++s) {
      for (std::int64_t h = 0; h < H; ++h) {
        for (std::int64_t d = 0; d < D; ++d) {
          const float want = static_cast<float>(((b * S + s) * H + h) * D + d);
          ASSERT_EQ(raw[b * H * S * D + h * S * D + s * D + d], want);
        }
      }
    }
  }
  EXPECT_EQ(host_floats(t), values);
}

TEST(OwnedTensorTest, FromHostFloatKeepsPadding) {
  OwnedTensor t;
  ASSERT_TRUE(OwnedTensor::create(DType::kFP16, Device::cpu(), {1, 2, 1, 8}, &t, {32, 16, 8, 1})
                  .ok());
  ASSERT_TRUE(t.fill_nan().ok());
  ASSERT_TRUE(t.from_host_float(std::vector<float>(16, 1.5f)).ok());
  const auto* raw = static_cast<const std::uint16_t*>(t.view().data);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(raw[i], float_to_fp16_bits(1.5f));
    EXPECT_EQ(raw[8 + i], 0xFFFF) << "padding element " << i << " was written";
    EXPECT_EQ(raw[16 + i], float_to_fp16_bits(1.5f));
  }
  EXPECT_FALSE(t.from_host_float(std::vector<float>(15, 1.0f)).ok());
}

TEST(OwnedTensorTest, FillNanPoisonsEveryDtype) {
  for (DType dt : kDtypes) {
    OwnedTensor t;
    ASSERT_TRUE(OwnedTensor::create(dt, Device::cpu(), {4, 3, 2, 8}, &t, {}, 32).ok());
    ASSERT_TRUE(t.fill_normal(1, 0, 0.5f, 1.0f).ok());
    ASSERT_TRUE(t.fill_nan().ok());
    for (float x : host_floats(t)) ASSERT_TRUE(std::isnan(x)) << dtype_name(dt);
    // The whole storage is 0xFF bytes; the guard is untouched.
    const auto* raw = static_cast<const std::uint8_t*>(t.view().data);
    for (std::size_t i = 0; i < t.storage_bytes(); ++i) ASSERT_EQ(raw[i], 0xFF);
    bool intact = false;
    ASSERT_TRUE(t.guard_intact(&intact).ok());
    EXPECT_TRUE(intact);
  }
}

TEST(OwnedTensorTest, FillValue) {
  for (DType dt : kDtypes) {
    OwnedTensor t;
    ASSERT_TRUE(OwnedTensor::create(dt, Device::cpu(), {3, 5}, &t).ok());
    ASSERT_TRUE(t.fill_value(0.1f).ok());
    for (float x : host_floats(t)) ASSERT_EQ(x, round_to_dtype(0.1f, dt));
  }
}

TEST(OwnedTensorTest, GuardDetectsOverrun) {
  OwnedTensor t;
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), {2, 3, 1, 8}, &t, {}, 256).ok());
  EXPECT_EQ(t.guard_bytes(), 256u);
  bool intact = false;
  ASSERT_TRUE(t.guard_intact(&intact).ok());
  EXPECT_TRUE(intact);
  // Writing every element (and poisoning the storage) leaves the guard alone.
  ASSERT_TRUE(t.fill_normal(3, 0, 0.5f, 1.0f).ok());
  ASSERT_TRUE(t.fill_nan().ok());
  ASSERT_TRUE(t.guard_intact(&intact).ok());
  EXPECT_TRUE(intact);
  // One element past the end lands in the guard.
  auto* raw = static_cast<std::uint16_t*>(t.view().data);
  raw[t.numel()] = 0x1234;
  ASSERT_TRUE(t.guard_intact(&intact).ok());
  EXPECT_FALSE(intact);
  // Also the guard's last byte.
  raw[t.numel()] = 0xA5A5;
  ASSERT_TRUE(t.guard_intact(&intact).ok());
  EXPECT_TRUE(intact);
  static_cast<std::uint8_t*>(t.view().data)[t.storage_bytes() + 255] = 0;
  ASSERT_TRUE(t.guard_intact(&intact).ok());
  EXPECT_FALSE(intact);
}

TEST(OwnedTensorTest, HostFloatRoundTripRounds) {
  const std::vector<float> values = {0.1f, -2.5f, 1e-3f, 3.14159f, 65504.0f, -0.0f};
  for (DType dt : kDtypes) {
    OwnedTensor t;
    ASSERT_TRUE(OwnedTensor::create(dt, Device::cpu(), {2, 3}, &t).ok());
    ASSERT_TRUE(t.from_host_float(values).ok());
    const std::vector<float> back = host_floats(t);
    for (std::size_t i = 0; i < values.size(); ++i) {
      EXPECT_EQ(back[i], round_to_dtype(values[i], dt)) << dtype_name(dt) << " " << values[i];
    }
  }
}

TEST(OwnedTensorTest, CopyToIsContiguousAndBitExact) {
  OwnedTensor src;
  ASSERT_TRUE(OwnedTensor::create(DType::kFP16, Device::cpu(), {2, 3, 2, 8}, &src,
                                  {2 * 3 * 8, 8, 3 * 8, 1}, 16)
                  .ok());
  ASSERT_TRUE(src.fill_normal(9, 0, 0.5f, 1.0f).ok());
  OwnedTensor dst;
  ASSERT_TRUE(src.copy_to(Device::cpu(), &dst).ok());
  EXPECT_TRUE(dst.contiguous());
  EXPECT_NE(dst.view().data, src.view().data);
  EXPECT_EQ(dst.dtype(), DType::kFP16);
  EXPECT_EQ(dst.guard_bytes(), 16u);
  EXPECT_EQ(host_floats(dst), host_floats(src));
  // A deep copy: changing the source leaves the copy alone.
  const std::vector<float> before = host_floats(dst);
  ASSERT_TRUE(src.fill_value(0.0f).ok());
  EXPECT_EQ(host_floats(dst), before);
  // NaN payloads survive (copy is bitwise, not through float).
  ASSERT_TRUE(src.fill_nan().ok());
  ASSERT_TRUE(src.copy_to(Device::cpu(), &dst).ok());
  const auto* raw = static_cast<const std::uint16_t*>(dst.view().data);
  for (std::int64_t i = 0; i < dst.numel(); ++i) ASSERT_EQ(raw[i], 0xFFFF);
}

TEST(OwnedTensorTest, ConvertTo) {
  OwnedTensor src;
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), {2, 5, 3, 8}, &src,
                                  {5 * 6 * 8, 6 * 8, 8, 1})
                  .ok());
  ASSERT_TRUE(src.fill_normal(5, 2, 0.5f, 1.0f).ok());
  OwnedTensor f32, f16;
  ASSERT_TRUE(src.convert_to(DType::kFP32, &f32).ok());
  EXPECT_EQ(f32.dtype(), DType::kFP32);
  EXPECT_TRUE(f32.contiguous());
  EXPECT_EQ(host_floats(f32), host_floats(src));  // bf16 -> fp32 is exact
  ASSERT_TRUE(f32.convert_to(DType::kFP16, &f16).ok());
  const std::vector<float> a = host_floats(f32), b = host_floats(f16);
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(b[i], round_to_dtype(a[i], DType::kFP16));
}

TEST(OwnedTensorTest, CopiesShareStorage) {
  OwnedTensor a;
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), {4}, &a).ok());
  OwnedTensor b = a;  // shallow
  ASSERT_TRUE(a.fill_value(2.0f).ok());
  EXPECT_EQ(host_floats(b), std::vector<float>(4, 2.0f));
  EXPECT_EQ(a.view().data, b.view().data);
}

TEST(OwnedTensorTest, DeviceTensorWithoutCudaIsAnError) {
  if (testing::have_cuda()) GTEST_SKIP() << "skipped: a CUDA device is present";
  OwnedTensor t;
  const Status st = OwnedTensor::create(DType::kFP32, Device::cuda(0), {4}, &t);
  EXPECT_FALSE(st.ok());
}

// int32 index tensors (cu_seqlens) round-trip exactly, past float's 2^24, strided too; other
// dtypes are refused.
TEST(OwnedTensorTest, Int32RoundTrip) {
  const std::vector<std::int32_t> values = {0, 17, 16777217, 2147483647, -5, 3};
  OwnedTensor t;
  ASSERT_TRUE(OwnedTensor::create(DType::kInt32, Device::cpu(), {6}, &t).ok());
  ASSERT_TRUE(t.from_host_int32(values).ok());
  std::vector<std::int32_t> back;
  ASSERT_TRUE(t.to_host_int32(&back).ok());
  EXPECT_EQ(back, values);
  OwnedTensor strided;
  ASSERT_TRUE(OwnedTensor::create(DType::kInt32, Device::cpu(), {2, 3}, &strided, {8, 2}).ok());
  ASSERT_TRUE(strided.from_host_int32(values).ok());
  ASSERT_TRUE(strided.to_host_int32(&back).ok());
  EXPECT_EQ(back, values);
  EXPECT_EQ(static_cast<const std::int32_t*>(strided.view().data)[8], 2147483647);  // (1, 0)
  OwnedTensor copy;
  ASSERT_TRUE(strided.copy_to(Device::cpu(), &copy).ok());
  ASSERT_TRUE(copy.to_host_int32(&back).ok());
  EXPECT_EQ(back, values);
  EXPECT_EQ(t.from_host_int32({1, 2}).code(), StatusCode::kInvalidShape);
  OwnedTensor f;
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), {6}, &f).ok());
  EXPECT_EQ(f.from_host_int32(values).code(), StatusCode::kInvalidDtype);
  EXPECT_EQ(f.to_host_int32(&back).code(), StatusCode::kInvalidDtype);
}

}  // namespace
}  // namespace flashattn
