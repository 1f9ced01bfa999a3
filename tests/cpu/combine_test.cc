// combine() (flashattn/combine.h): the merge of partial attention results over disjoint key sets.
// A random problem's keys are cut into 1 to 5 ranges (empty ones included), cpu-reference runs on
// each range, and the merged result matches the full problem's: to float64 rounding when the
// float64 partials are merged (cpu::combine_f64), to float32 rounding through the public
// combine() on float32 partials. Parts without keys (LSE -inf) contribute nothing and are not
// read; all of them give O = 0, LSE = -inf. Bad input is refused by name with nothing written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "api/backend.h"
#include "common/dtype_convert.h"
#include "common/random.h"
#include "cpu/combine.h"
#include "cpu/reference.h"
#include "flashattn/flashattn.h"
#include "test_util.h"

namespace flashattn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kInfF = std::numeric_limits<float>::infinity();

// A 64-byte aligned host buffer of `bytes`, filled with 0x5A.
class Buffer {
 public:
  explicit Buffer(std::size_t bytes) : storage_(bytes + 128, 0x5A) {
    const auto addr = reinterpret_cast<std::uintptr_t>(storage_.data());
    data_ = storage_.data() + (64 - addr % 64) % 64;
  }
  void* data() { return data_; }
  float* f32() { return reinterpret_cast<float*>(data_); }
  const std::vector<std::uint8_t>& bytes() const { return storage_; }

 private:
  std::vector<std::uint8_t> storage_;
  std::uint8_t* data_;
};

struct Dims {
  std::int64_t batch = 2, seqlen_q = 5, heads = 4, kv_heads = 2, head_dim = 32, seqlen_k = 37;
};

std::int64_t o_numel(const Dims& d) { return d.batch * d.seqlen_q * d.heads * d.head_dim; }
std::int64_t lse_numel(const Dims& d) { return d.batch * d.heads * d.seqlen_q; }

// q, k, v in fp32, N(0.5, 1) from the seed.
struct Problem {
  Dims d;
  Buffer q, k, v;
  Problem(const Dims& dims, std::uint64_t seed)
      : d(dims),
        q(static_cast<std::size_t>(o_numel(dims)) * 4),
        k(static_cast<std::size_t>(dims.batch * dims.seqlen_k * dims.kv_heads * dims.head_dim) * 4),
        v(static_cast<std::size_t>(dims.batch * dims.seqlen_k * dims.kv_heads * dims.head_dim) * 4) {
    const std::int64_t nk = d.batch * d.seqlen_k * d.kv_heads * d.head_dim;
    for (std::int64_t i = 0; i < o_numel(d); ++i) q.f32()[i] = 0.5f + normal_at(seed, 0, i);
    for (std::int64_t i = 0; i < nk; ++i) k.f32()[i] = 0.5f + normal_at(seed, 1, i);
    for (std::int64_t i = 0; i < nk; ++i) v.f32()[i] = 0.5f + normal_at(seed, 2, i);
  }
  // Params over keys [begin, end), writing `out` (fp32) and `lse`.
  ForwardParams params(std::int64_t begin, std::int64_t end, void* out, void* lse) {
    ForwardParams p;
    const Device cpu = Device::cpu();
    p.q = TensorView::contiguous(q.data(), DType::kFP32, cpu,
                                 {d.batch, d.seqlen_q, d.heads, d.head_dim});
    const std::int64_t row = d.kv_heads * d.head_dim;
    p.k = TensorView::strided(k.f32() + begin * row, DType::kFP32, cpu,
                              {d.batch, end - begin, d.kv_heads, d.head_dim},
                              {d.seqlen_k * row, row, d.head_dim, 1});
    p.v = TensorView::strided(v.f32() + begin * row, DType::kFP32, cpu,
                              {d.batch, end - begin, d.kv_heads, d.head_dim},
                              {d.seqlen_k * row, row, d.head_dim, 1});
    p.out = TensorView::contiguous(out, DType::kFP32, cpu,
                                   {d.batch, d.seqlen_q, d.heads, d.head_dim});
    p.lse = TensorView::contiguous(lse, DType::kFP32, cpu, {d.batch, d.heads, d.seqlen_q});
    return p;
  }
};

// `parts` ranges covering [0, n): sorted random cut points. With 3 or more parts one cut repeats
// another (an empty range in the middle), and with 5 the first range is empty too.
std::vector<std::int64_t> cuts(std::int64_t n, int parts, std::uint64_t seed) {
  std::vector<std::int64_t> c = {0, n};
  for (int i = 1; i < parts; ++i) {
    if (i == 2) {
      c.push_back(c.back() == n ? c[2 % c.size()] : c.back());
    } else if (i == 4) {
      c.push_back(0);
    } else {
      c.push_back(static_cast<std::int64_t>(splitmix64(seed + static_cast<std::uint64_t>(i)) %
                                            static_cast<std::uint64_t>(n + 1)));
    }
  }
  std::sort(c.begin(), c.end());
  return c;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;  // -inf == -inf
    m = std::max(m, std::fabs(a[i] - b[i]));
  }
  return m;
}

TEST(Combine, SplitKeysMatchTheFullReference) {
  for (float softcap : {0.0f, 8.0f}) {
    for (int parts = 1; parts <= 5; ++parts) {
      SCOPED_TRACE("parts=" + std::to_string(parts) + " softcap=" + std::to_string(softcap));
      const Dims d;
      Problem prob(d, testing::base_seed() + static_cast<std::uint64_t>(parts));
      Buffer full_out(static_cast<std::size_t>(o_numel(d)) * 4);
      Buffer full_lse(static_cast<std::size_t>(lse_numel(d)) * 4);
      ForwardParams full = prob.params(0, d.seqlen_k, full_out.data(), full_lse.data());
      full.softcap = softcap;
      std::vector<double> ref_o(static_cast<std::size_t>(o_numel(d)));
      std::vector<double> ref_l(static_cast<std::size_t>(lse_numel(d)));
      ASSERT_TRUE(cpu::reference_forward_f64(full, ref_o.data(), ref_l.data()).ok());

      const std::vector<std::int64_t> c = cuts(d.seqlen_k, parts, testing::base_seed() + 99 * parts);
      ASSERT_EQ(c.size(), static_cast<std::size_t>(parts + 1));
      // float64 partials, float64 merge.
      std::vector<std::vector<double>> po(static_cast<std::size_t>(parts)), pl(po.size());
      std::vector<const double*> po_ptr, pl_ptr;
      // float32 partials through forward(), merged by combine().
      std::vector<std::unique_ptr<Buffer>> fo, fl;
      CombineParams cp;
      for (int i = 0; i < parts; ++i) {
        po[i].resize(ref_o.size());
        pl[i].resize(ref_l.size());
        fo.push_back(std::make_unique<Buffer>(static_cast<std::size_t>(o_numel(d)) * 4));
        fl.push_back(std::make_unique<Buffer>(static_cast<std::size_t>(lse_numel(d)) * 4));
        ForwardParams p = prob.params(c[i], c[i + 1], fo.back()->data(), fl.back()->data());
        p.softcap = softcap;
        ASSERT_TRUE(cpu::reference_forward_f64(p, po[i].data(), pl[i].data()).ok());
        po_ptr.push_back(po[i].data());
        pl_ptr.push_back(pl[i].data());
        const Status st = forward(p, "cpu-reference");
        ASSERT_TRUE(st.ok()) << st.to_string();
        cp.outs.push_back(p.out);
        cp.lses.push_back(p.lse);
      }
      std::vector<double> o64(ref_o.size()), l64(ref_l.size());
      cpu::combine_f64(po_ptr, pl_ptr, d.batch, d.seqlen_q, d.heads, d.head_dim, o64.data(),
                       l64.data());
      EXPECT_LE(max_abs_diff(o64, ref_o), 1e-13);
      EXPECT_LE(max_abs_diff(l64, ref_l), 1e-13);

      Buffer out(static_cast<std::size_t>(o_numel(d)) * 4), lse(static_cast<std::size_t>(lse_numel(d)) * 4);
      cp.out = TensorView::contiguous(out.data(), DType::kFP32, Device::cpu(),
                                      {d.batch, d.seqlen_q, d.heads, d.head_dim});
      cp.lse = TensorView::contiguous(lse.data(), DType::kFP32, Device::cpu(),
                                      {d.batch, d.heads, d.seqlen_q});
      const Status st = combine(cp);
      ASSERT_TRUE(st.ok()) << st.to_string();
      std::vector<double> o32(out.f32(), out.f32() + o_numel(d));
      std::vector<double> l32(lse.f32(), lse.f32() + lse_numel(d));
      EXPECT_LE(max_abs_diff(o32, ref_o), 4e-6);  // float32 partials: a few ulps of values ~1
      EXPECT_LE(max_abs_diff(l32, ref_l), 4e-6);

      // The same merge into bf16 and fp16: the float32 result rounded once more.
      for (DType dt : {DType::kBF16, DType::kFP16}) {
        Buffer half(static_cast<std::size_t>(o_numel(d)) * 2);
        CombineParams hp = cp;
        hp.out = TensorView::contiguous(half.data(), dt, Device::cpu(),
                                        {d.batch, d.seqlen_q, d.heads, d.head_dim});
        hp.lse = TensorView();
        ASSERT_TRUE(combine(hp).ok());
        for (std::int64_t e = 0; e < o_numel(d); ++e) {
          const float want = load_as_float(out.data(), DType::kFP32, e);
          Buffer one(4);
          store_from_float(one.data(), dt, 0, want);
          ASSERT_EQ(load_as_float(half.data(), dt, e), load_as_float(one.data(), dt, 0)) << e;
        }
      }
    }
  }
}

// Hand-made parts: out[i] filled with value i + 1, lse[i] per row from a table.
struct Parts {
  Dims d;
  std::vector<std::unique_ptr<Buffer>> o, l;
  Buffer out, lse;
  CombineParams cp;
  explicit Parts(int n, const Dims& dims = Dims())
      : d(dims), out(static_cast<std::size_t>(o_numel(dims)) * 4),
        lse(static_cast<std::size_t>(lse_numel(dims)) * 4) {
    for (int i = 0; i < n; ++i) {
      o.push_back(std::make_unique<Buffer>(static_cast<std::size_t>(o_numel(d)) * 4));
      l.push_back(std::make_unique<Buffer>(static_cast<std::size_t>(lse_numel(d)) * 4));
      std::fill(o.back()->f32(), o.back()->f32() + o_numel(d), static_cast<float>(i + 1));
      std::fill(l.back()->f32(), l.back()->f32() + lse_numel(d), 0.0f);
      cp.outs.push_back(TensorView::contiguous(o.back()->data(), DType::kFP32, Device::cpu(),
                                               {d.batch, d.seqlen_q, d.heads, d.head_dim}));
      cp.lses.push_back(TensorView::contiguous(l.back()->data(), DType::kFP32, Device::cpu(),
                                               {d.batch, d.heads, d.seqlen_q}));
    }
    cp.out = TensorView::contiguous(out.data(), DType::kFP32, Device::cpu(),
                                    {d.batch, d.seqlen_q, d.heads, d.head_dim});
    cp.lse = TensorView::contiguous(lse.data(), DType::kFP32, Device::cpu(),
                                    {d.batch, d.heads, d.seqlen_q});
  }
  // O of (b, r, h, 0) and LSE of (b, h, r) of the merge.
  float o_at(std::int64_t b, std::int64_t r, std::int64_t h, std::int64_t k = 0) const {
    return const_cast<Buffer&>(out).f32()[((b * d.seqlen_q + r) * d.heads + h) * d.head_dim + k];
  }
  float lse_at(std::int64_t b, std::int64_t h, std::int64_t r) const {
    return const_cast<Buffer&>(lse).f32()[(b * d.heads + h) * d.seqlen_q + r];
  }
  void set_part(int i, float lse_value, float o_value) {
    std::fill(l[i]->f32(), l[i]->f32() + lse_numel(d), lse_value);
    std::fill(o[i]->f32(), o[i]->f32() + o_numel(d), o_value);
  }
};

TEST(Combine, MinusInfinityPartsContributeNothingAndAreNotRead) {
  Parts p(3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  p.set_part(0, -kInfF, nan);  // no keys: never read
  p.set_part(1, 2.0f, 3.0f);
  p.set_part(2, -kInfF, kInfF);
  ASSERT_TRUE(combine(p.cp).ok());
  EXPECT_EQ(p.o_at(1, 4, 3, 31), 3.0f);
  EXPECT_EQ(p.lse_at(1, 3, 4), 2.0f);
}

TEST(Combine, EqualWeightsAverage) {
  Parts p(2);
  p.set_part(0, 1.5f, 1.0f);
  p.set_part(1, 1.5f, 3.0f);
  ASSERT_TRUE(combine(p.cp).ok());
  EXPECT_FLOAT_EQ(p.o_at(0, 0, 0), 2.0f);
  EXPECT_FLOAT_EQ(p.lse_at(0, 0, 0), static_cast<float>(1.5 + std::log(2.0)));
}

TEST(Combine, HugeLsesStayFinite) {
  // exp(lse) overflows float64 at 710: the max-subtracted merge does not.
  Parts p(2);
  p.set_part(0, 1000.0f, 1.0f);
  p.set_part(1, 1000.0f - std::log(3.0f), 5.0f);
  ASSERT_TRUE(combine(p.cp).ok());
  // The weights of the float32 LSEs as stored (1000 - log 3 rounds at an ulp of 6e-5).
  const double r = std::exp(static_cast<double>(1000.0f - std::log(3.0f)) - 1000.0);
  EXPECT_NEAR(p.o_at(0, 1, 2), (1.0 + 5.0 * r) / (1.0 + r), 1e-6);
  EXPECT_NEAR(p.lse_at(0, 2, 1), 1000.0 + std::log1p(r), 1e-4);
}

TEST(Combine, AllMinusInfinityGivesZeroAndMinusInfinity) {
  for (int n : {0, 1, 4}) {
    SCOPED_TRACE(n);
    Parts p(n);
    for (int i = 0; i < n; ++i) p.set_part(i, -kInfF, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(combine(p.cp).ok());
    for (std::int64_t e = 0; e < o_numel(p.d); ++e) ASSERT_EQ(p.out.f32()[e], 0.0f) << e;
    for (std::int64_t e = 0; e < lse_numel(p.d); ++e) ASSERT_EQ(p.lse.f32()[e], -kInfF) << e;
  }
}

TEST(Combine, NanLseGivesNan) {
  Parts p(2);
  p.set_part(0, std::numeric_limits<float>::quiet_NaN(), 1.0f);
  ASSERT_TRUE(combine(p.cp).ok());
  EXPECT_TRUE(std::isnan(p.o_at(0, 0, 0)));
  EXPECT_TRUE(std::isnan(p.lse_at(0, 0, 0)));
}

TEST(Combine, StridedPartsAndOutput) {
  // Part 1 is a view with padded heads; out has a padded row; both give the contiguous answer.
  const Dims d;
  Parts ref(2), p(2);
  for (Parts* q : {&ref, &p}) {
    for (std::int64_t e = 0; e < lse_numel(d); ++e) {
      q->l[0]->f32()[e] = 0.1f * static_cast<float>(e % 7);
      q->l[1]->f32()[e] = -0.2f * static_cast<float>(e % 5);
    }
  }
  ASSERT_TRUE(combine(ref.cp).ok());
  const std::int64_t wide = d.heads + 2;
  Buffer o1(static_cast<std::size_t>(d.batch * d.seqlen_q * wide * d.head_dim) * 4);
  Buffer out(static_cast<std::size_t>(d.batch * d.seqlen_q * wide * d.head_dim) * 4);
  std::fill(o1.f32(), o1.f32() + d.batch * d.seqlen_q * wide * d.head_dim, 2.0f);
  const std::initializer_list<std::int64_t> shape = {d.batch, d.seqlen_q, d.heads, d.head_dim};
  const std::initializer_list<std::int64_t> stride = {d.seqlen_q * wide * d.head_dim,
                                                      wide * d.head_dim, d.head_dim, 1};
  p.cp.outs[1] = TensorView::strided(o1.f32() + d.head_dim, DType::kFP32, Device::cpu(), shape,
                                     stride);
  p.cp.out = TensorView::strided(out.f32(), DType::kFP32, Device::cpu(), shape, stride);
  ASSERT_TRUE(combine(p.cp).ok());
  for (std::int64_t b = 0; b < d.batch; ++b)
    for (std::int64_t r = 0; r < d.seqlen_q; ++r)
      for (std::int64_t h = 0; h < d.heads; ++h)
        for (std::int64_t k = 0; k < d.head_dim; ++k)
          ASSERT_EQ(out.f32()[((b * d.seqlen_q + r) * wide + h) * d.head_dim + k],
                    ref.o_at(b, r, h, k));
}

// Refused with `code` and every `words` in the message; no output byte changed.
void expect_refused(Parts& p, StatusCode code, const std::vector<std::string>& words) {
  const std::vector<std::uint8_t> out0 = p.out.bytes(), lse0 = p.lse.bytes();
  const Status st = combine(p.cp);
  EXPECT_EQ(st.code(), code) << st.to_string();
  for (const std::string& w : words) {
    EXPECT_NE(st.message().find(w), std::string::npos) << "'" << w << "' not in: " << st.message();
  }
  EXPECT_EQ(validate_combine(p.cp).code(), code);
  EXPECT_TRUE(p.out.bytes() == out0) << "out written despite the error";
  EXPECT_TRUE(p.lse.bytes() == lse0) << "lse written despite the error";
}

TEST(CombineBadInput, PartCounts) {
  Parts p(3);
  p.cp.lses.pop_back();
  expect_refused(p, StatusCode::kInvalidArgument, {"lses has 2 parts but outs has 3"});
}

TEST(CombineBadInput, Ranks) {
  Parts p(2);
  p.cp.outs[1].rank = 3;
  expect_refused(p, StatusCode::kInvalidRank, {"outs[1].rank = 3", "expected 4"});
  Parts q(2);
  q.cp.lses[0].rank = 4;
  expect_refused(q, StatusCode::kInvalidRank, {"lses[0].rank = 4", "expected 3"});
  Parts r(1);
  r.cp.out.rank = 2;
  expect_refused(r, StatusCode::kInvalidRank, {"out.rank = 2"});
}

TEST(CombineBadInput, Dtypes) {
  Parts p(2);
  p.cp.outs[1].dtype = DType::kBF16;
  expect_refused(p, StatusCode::kInvalidDtype, {"outs[1].dtype = bf16", "expected fp32"});
  Parts q(2);
  q.cp.lses[1].dtype = DType::kInt32;
  expect_refused(q, StatusCode::kInvalidDtype, {"lses[1].dtype = int32"});
  Parts r(2);
  r.cp.out.dtype = DType::kInt32;
  expect_refused(r, StatusCode::kInvalidDtype, {"out.dtype = int32"});
  Parts s(2);
  s.cp.lse.dtype = DType::kBF16;
  expect_refused(s, StatusCode::kInvalidDtype, {"lse.dtype = bf16"});
}

TEST(CombineBadInput, Shapes) {
  Parts p(2);
  p.cp.outs[1].shape[1] = 4;
  expect_refused(p, StatusCode::kInvalidShape, {"outs[1].shape[1] (seqlen_q) = 4", "out.shape[1] = 5"});
  Parts q(2);
  q.cp.lses[0].shape[1] = 3;
  expect_refused(q, StatusCode::kInvalidShape, {"lses[0].shape[1] (heads) = 3"});
  Parts r(2);
  r.cp.lse.shape[2] = 4;
  expect_refused(r, StatusCode::kInvalidShape, {"lse.shape[2] (seqlen_q) = 4"});
  Parts s(1);
  s.cp.outs[0].shape[0] = -1;
  expect_refused(s, StatusCode::kInvalidShape, {"outs[0].shape[0] = -1"});
}

TEST(CombineBadInput, HeadDim) {
  Dims d;
  d.head_dim = 12;
  Parts p(2, d);
  expect_refused(p, StatusCode::kUnsupportedHeadDim, {"out.shape[3] (head_dim) = 12"});
}

TEST(CombineBadInput, StridesAndPointers) {
  Parts p(2);
  p.cp.outs[0].stride[3] = 2;
  expect_refused(p, StatusCode::kInvalidStride, {"outs[0].stride[3] = 2"});
  Parts q(2);
  q.cp.out.stride[2] = 33;
  expect_refused(q, StatusCode::kInvalidStride, {"out.stride[2] = 33"});
  Parts r(2);
  r.cp.outs[1].data = static_cast<char*>(r.cp.outs[1].data) + 4;
  expect_refused(r, StatusCode::kMisaligned, {"outs[1].data"});
  Parts s(2);
  s.cp.lses[1].data = nullptr;
  expect_refused(s, StatusCode::kNullPointer, {"lses[1].data is null"});
  Parts t(2);
  t.cp.out.stride[1] = 0;
  expect_refused(t, StatusCode::kInvalidStride, {"out.stride[1] = 0"});
}

TEST(CombineBadInput, Devices) {
  Parts p(2);
  p.cp.outs[1].device = Device::cuda(0);
  expect_refused(p, StatusCode::kInvalidDevice, {"outs[1].device = cuda:0", "out.device = cpu"});
}

TEST(CombineBadInput, Aliasing) {
  Parts p(2);
  p.cp.out.data = p.cp.outs[1].data;
  expect_refused(p, StatusCode::kAliasing, {"out overlaps outs[1]"});
  Parts q(2);
  q.cp.lse.data = q.cp.lses[0].data;
  expect_refused(q, StatusCode::kAliasing, {"lse overlaps lses[0]"});
}

// Empty CUDA views pass validation on any machine (no pointer to check) and go to the CUDA
// implementation: with the kernels built it has nothing to write (ok) and refuses more than 32
// parts by count; without them it says it was not built. (The GPU results:
// tests/cuda/gpu_kv_cache_test.cc.)
TEST(CombineBadInput, CudaTensorsGoToTheCudaPath) {
  const bool built = find_backend("flash-decode")->usable(Device::cuda(0)).message().find(
                         "not built") == std::string::npos;
  for (int n : {2, 33}) {
    Dims d;
    d.batch = 0;
    Parts p(n, d);
    for (TensorView& t : p.cp.outs) t.device = Device::cuda(0);
    for (TensorView& t : p.cp.lses) t.device = Device::cuda(0);
    p.cp.out.device = p.cp.lse.device = Device::cuda(0);
    ASSERT_TRUE(validate_combine(p.cp).ok()) << validate_combine(p.cp).to_string();
    const Status st = combine(p.cp);
    if (!built) {
      EXPECT_EQ(st.code(), StatusCode::kBackendUnavailable) << st.to_string();
      EXPECT_NE(st.message().find("not built"), std::string::npos) << st.message();
    } else if (n == 2) {
      EXPECT_TRUE(st.ok()) << st.to_string();
    } else {
      EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
      EXPECT_NE(st.message().find("at most 32 parts; got 33"), std::string::npos) << st.message();
    }
  }
}

}  // namespace
}  // namespace flashattn
