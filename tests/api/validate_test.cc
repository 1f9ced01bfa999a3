// Bad input (docs/testing.md "Bad input"): every case gets its specific status code, a message
// that names the argument with expected vs actual, and leaves every buffer untouched. Valid edge
// cases (empty dims, head dims 8 and 256, GQA, default scale) succeed. Runs without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "common/random.h"
#include "flashattn/flashattn.h"
#include "test_util.h"

namespace flashattn {
namespace {

constexpr std::uint8_t kSentinel = 0x5A;
constexpr std::size_t kAlign = 64;

// Host bytes with a 64-byte aligned start, pre-filled with kSentinel.
class HostBuffer {
 public:
  explicit HostBuffer(std::size_t bytes) : storage_(bytes + kAlign, kSentinel) {
    const auto addr = reinterpret_cast<std::uintptr_t>(storage_.data());
    data_ = storage_.data() + (kAlign - addr % kAlign) % kAlign;
    bytes_ = bytes;
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  std::uint8_t* data() { return bytes_ == 0 ? nullptr : data_; }
  std::vector<std::uint8_t> snapshot() const { return storage_; }

 private:
  std::vector<std::uint8_t> storage_;
  std::uint8_t* data_ = nullptr;
  std::size_t bytes_ = 0;
};

struct Shape {
  std::int64_t batch = 2, seqlen_q = 16, seqlen_k = 24, heads = 8, kv_heads = 2, head_dim = 64;
  DType dtype = DType::kBF16;
};

// A valid problem on the host: q, k, v filled with N(0.5, 1), out and lse holding the sentinel.
// Tests break one thing in `params` and check the call is refused.
class Problem {
 public:
  explicit Problem(const Shape& s = Shape())
      : shape(s),
        q(bytes(s.batch * s.seqlen_q * s.heads * s.head_dim, s.dtype)),
        k(bytes(s.batch * s.seqlen_k * s.kv_heads * s.head_dim, s.dtype)),
        v(bytes(s.batch * s.seqlen_k * s.kv_heads * s.head_dim, s.dtype)),
        out(bytes(s.batch * s.seqlen_q * s.heads * s.head_dim, s.dtype)),
        lse(bytes(s.batch * s.heads * s.seqlen_q, DType::kFP32)) {
    const Device cpu = Device::cpu();
    params.q = TensorView::contiguous(q.data(), s.dtype, cpu,
                                      {s.batch, s.seqlen_q, s.heads, s.head_dim});
    params.k = TensorView::contiguous(k.data(), s.dtype, cpu,
                                      {s.batch, s.seqlen_k, s.kv_heads, s.head_dim});
    params.v = TensorView::contiguous(v.data(), s.dtype, cpu,
                                      {s.batch, s.seqlen_k, s.kv_heads, s.head_dim});
    params.out = TensorView::contiguous(out.data(), s.dtype, cpu,
                                        {s.batch, s.seqlen_q, s.heads, s.head_dim});
    params.lse = TensorView::contiguous(lse.data(), DType::kFP32, cpu,
                                        {s.batch, s.heads, s.seqlen_q});
    fill(params.q, 0);
    fill(params.k, 1);
    fill(params.v, 2);
  }

  // Every byte of every buffer (guard margins included), to prove a refused call wrote nothing.
  std::vector<std::vector<std::uint8_t>> snapshot() const {
    return {q.snapshot(), k.snapshot(), v.snapshot(), out.snapshot(), lse.snapshot()};
  }

  Shape shape;
  HostBuffer q, k, v, out, lse;
  ForwardParams params;

 private:
  static std::size_t bytes(std::int64_t numel, DType dtype) {
    return static_cast<std::size_t>(numel) * dtype_size(dtype);
  }
  static void fill(const TensorView& t, std::uint64_t stream) {
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const float x = 0.5f + normal_at(testing::base_seed(), stream, static_cast<std::uint64_t>(i));
      store_from_float(t.data, t.dtype, i, x);
    }
  }
};

// Calls forward() (and validate() when `validation` is set) and checks: the code, every expected
// substring of the message, and that no byte of any buffer changed.
void expect_refused(const Problem& problem, StatusCode code,
                    std::initializer_list<std::string> message_parts,
                    const std::string& backend = "auto", bool validation = true) {
  const auto before = problem.snapshot();
  if (validation) {
    const Status st = validate(problem.params);
    EXPECT_EQ(st.code(), code) << st.to_string();
  }
  const Status st = forward(problem.params, backend);
  EXPECT_EQ(st.code(), code) << st.to_string();
  for (const std::string& part : message_parts) {
    EXPECT_NE(st.message().find(part), std::string::npos)
        << "message \"" << st.message() << "\" lacks \"" << part << "\"";
  }
  EXPECT_TRUE(problem.snapshot() == before) << "a refused call (" << st.to_string()
                                            << ") wrote to a buffer";
}

// ---- dtypes ----

TEST(Validate, DtypeMismatch) {
  Problem p;
  p.params.k.dtype = DType::kFP16;
  expect_refused(p, StatusCode::kInvalidDtype, {"k.dtype = fp16", "q.dtype = bf16"});
}

TEST(Validate, OutDtypeMismatch) {
  Problem p;
  p.params.out.dtype = DType::kFP32;
  expect_refused(p, StatusCode::kInvalidDtype, {"out.dtype = fp32", "q.dtype = bf16"});
}

TEST(Validate, LseNotFloat32) {
  Problem p;
  p.params.lse.dtype = DType::kBF16;
  expect_refused(p, StatusCode::kInvalidDtype, {"lse.dtype = bf16", "expected fp32"});
}

TEST(Validate, UnsupportedDtype) {
  Problem p;
  const auto bogus = static_cast<DType>(7);
  for (TensorView* t : {&p.params.q, &p.params.k, &p.params.v, &p.params.out}) t->dtype = bogus;
  expect_refused(p, StatusCode::kInvalidDtype, {"q.dtype = 7", "bf16, fp16, fp32"});
}

// ---- ranks and shapes ----

TEST(Validate, WrongRanks) {
  {
    Problem p;
    p.params.q.rank = 3;
    expect_refused(p, StatusCode::kInvalidRank, {"q.rank = 3", "expected 4"});
  }
  {
    Problem p;
    p.params.v.rank = 2;
    expect_refused(p, StatusCode::kInvalidRank, {"v.rank = 2", "expected 4"});
  }
  {
    Problem p;
    p.params.lse.rank = 4;
    expect_refused(p, StatusCode::kInvalidRank, {"lse.rank = 4", "expected 3"});
  }
}

TEST(Validate, NegativeSize) {
  Problem p;
  p.params.k.shape[1] = -1;
  p.params.v.shape[1] = -1;
  expect_refused(p, StatusCode::kInvalidShape, {"k.shape[1] = -1", ">= 0"});
}

TEST(Validate, MismatchedBatch) {
  Problem p;
  p.params.k.shape[0] = 3;
  expect_refused(p, StatusCode::kInvalidShape, {"k.shape[0] (batch) = 3", "q.shape[0] = 2"});
}

TEST(Validate, MismatchedSeqlenKBetweenKAndV) {
  Problem p;
  p.params.v.shape[1] = 23;
  expect_refused(p, StatusCode::kInvalidShape, {"v.shape[1] (seqlen_k) = 23", "k.shape[1] = 24"});
}

TEST(Validate, MismatchedHeadDim) {
  {
    Problem p;
    p.params.k.shape[3] = 32;
    expect_refused(p, StatusCode::kInvalidShape, {"k.shape[3] (head_dim) = 32", "q.shape[3] = 64"});
  }
  {
    Problem p;
    p.params.v.shape[3] = 32;
    expect_refused(p, StatusCode::kInvalidShape, {"v.shape[3] (head_dim) = 32", "k.shape[3] = 64"});
  }
}

TEST(Validate, MismatchedOutShape) {
  {
    Problem p;
    p.params.out.shape[1] = 15;
    expect_refused(p, StatusCode::kInvalidShape,
                   {"out.shape[1] (seqlen_q) = 15", "q.shape[1] = 16"});
  }
  {
    Problem p;
    p.params.out.shape[2] = 4;
    expect_refused(p, StatusCode::kInvalidShape, {"out.shape[2] (heads) = 4", "q.shape[2] = 8"});
  }
}

TEST(Validate, MismatchedLseShape) {
  {
    Problem p;
    p.params.lse.shape[2] = 15;
    expect_refused(p, StatusCode::kInvalidShape,
                   {"lse.shape[2] (seqlen_q) = 15", "q.shape[1] = 16"});
  }
  {
    Problem p;
    p.params.lse.shape[1] = 2;
    expect_refused(p, StatusCode::kInvalidShape, {"lse.shape[1] (heads) = 2", "q.shape[2] = 8"});
  }
}

TEST(Validate, HeadsNotDivisibleByKvHeads) {
  Shape s;
  s.kv_heads = 3;
  Problem p(s);
  expect_refused(p, StatusCode::kInvalidShape,
                 {"k.shape[2] (kv heads) = 3 must divide q.shape[2] (heads) = 8"});
}

TEST(Validate, ZeroKvHeads) {
  Shape s;
  s.kv_heads = 0;
  Problem p(s);
  expect_refused(p, StatusCode::kInvalidShape,
                 {"k.shape[2] (kv heads) = 0", "q.shape[2] (heads) = 8"});
}

TEST(Validate, UnsupportedHeadDims) {
  for (std::int64_t d : {0, 4, 12, 264, 512}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    Shape s;
    s.head_dim = d;
    Problem p(s);
    expect_refused(p, StatusCode::kUnsupportedHeadDim,
                   {"q.shape[3] (head_dim) = " + std::to_string(d), "supported",
                    "multiples of 8 from 8 to 256"});
  }
}

// ---- strides, alignment, pointers ----

TEST(Validate, LastDimStrideNotOne) {
  Problem p;
  const Shape& s = p.shape;
  p.params.q = TensorView::strided(p.q.data(), s.dtype, Device::cpu(),
                                   {s.batch, s.seqlen_q, s.heads, s.head_dim / 2},
                                   {s.seqlen_q * s.heads * s.head_dim, s.heads * s.head_dim,
                                    s.head_dim, 2});
  p.params.k.shape[3] = p.params.v.shape[3] = p.params.out.shape[3] = s.head_dim / 2;
  expect_refused(p, StatusCode::kInvalidStride, {"q.stride[3] = 2", "expected 1"});
}

TEST(Validate, NegativeStride) {
  Problem p;
  p.params.k.stride[1] = -p.params.k.stride[1];
  expect_refused(p, StatusCode::kInvalidStride, {"k.stride[1] = -128", "expected >= 0"});
}

// q[..., ::-1]: the data pointer is the row's last element, so it is misaligned too; the stride
// is the cause and is what the message names.
TEST(Validate, NegativeLastDimStride) {
  Problem p;
  const Shape& s = p.shape;
  p.params.q = TensorView::strided(p.q.data() + (s.head_dim - 1) * dtype_size(s.dtype), s.dtype,
                                   Device::cpu(), {s.batch, s.seqlen_q, s.heads, s.head_dim},
                                   {s.seqlen_q * s.heads * s.head_dim, s.heads * s.head_dim,
                                    s.head_dim, -1});
  expect_refused(p, StatusCode::kInvalidStride, {"q.stride[3] = -1", "expected 1"});
}

TEST(Validate, StrideNotMultipleOf16Bytes) {
  // Heads 68 elements (136 bytes) apart: the rows stay 16-byte multiples, the head stride not.
  const Shape s;
  HostBuffer wide(static_cast<std::size_t>(s.batch * s.seqlen_q * s.heads * 68) * 2);
  Problem p(s);
  p.params.q = TensorView::strided(wide.data(), s.dtype, Device::cpu(),
                                   {s.batch, s.seqlen_q, s.heads, s.head_dim},
                                   {s.seqlen_q * s.heads * 68, s.heads * 68, 68, 1});
  expect_refused(p, StatusCode::kInvalidStride,
                 {"q.stride[2] = 68 elements (136 bytes)", "multiple of 8 elements (16 bytes)"});
}

TEST(Validate, MisalignedBasePointer) {
  Problem p;
  p.params.v.data = static_cast<std::uint8_t*>(p.params.v.data) + 2;
  expect_refused(p, StatusCode::kMisaligned, {"v.data", "not 16-byte aligned", "mod 16 = 2"});
}

TEST(Validate, NullPointer) {
  Problem p;
  p.params.k.data = nullptr;
  const std::int64_t numel = p.params.k.numel();
  expect_refused(p, StatusCode::kNullPointer,
                 {"k.data is null", "has " + std::to_string(numel) + " elements"});
}

TEST(Validate, NullOutPointer) {
  Problem p;
  p.params.out.data = nullptr;
  expect_refused(p, StatusCode::kNullPointer, {"out.data is null"});
}

// ---- scale ----

TEST(Validate, BadSoftmaxScale) {
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  for (float scale : {kNan, kInf, -kInf, 0.0f, -0.0f, -0.125f}) {
    SCOPED_TRACE("scale " + std::to_string(scale));
    Problem p;
    p.params.softmax_scale = scale;
    expect_refused(p, StatusCode::kInvalidScale,
                   {"softmax_scale = ", "expected a finite value > 0"});
  }
}

// ---- aliasing ----

TEST(Validate, OutputAliasesQ) {
  Problem p;
  p.params.out.data = p.params.q.data;
  expect_refused(p, StatusCode::kAliasing, {"out overlaps q"});
}

TEST(Validate, OutputPartlyOverlapsV) {
  Shape s;
  s.seqlen_q = s.seqlen_k;
  s.heads = s.kv_heads;
  Problem p(s);
  // v and out share one allocation; out starts in the middle of v.
  const auto v_bytes = static_cast<std::size_t>(p.params.v.span_bytes());
  HostBuffer shared(v_bytes + v_bytes / 2);
  p.params.v.data = shared.data();
  p.params.out.data = shared.data() + v_bytes / 2;
  const auto shared_before = shared.snapshot();
  expect_refused(p, StatusCode::kAliasing, {"out overlaps v"});
  EXPECT_TRUE(shared.snapshot() == shared_before);
}

TEST(Validate, LseAliasesOut) {
  Problem p;
  p.params.lse.data = p.params.out.data;
  expect_refused(p, StatusCode::kAliasing, {"lse overlaps out"});
}

TEST(Validate, LseAliasesK) {
  Problem p;
  p.params.lse.data = p.params.k.data;
  expect_refused(p, StatusCode::kAliasing, {"lse overlaps k"});
}

// ---- devices ----

TEST(Validate, TensorsOnDifferentDevices) {
  Problem p;
  p.params.k.device = Device::cuda(0);
  expect_refused(p, StatusCode::kInvalidDevice, {"k.device = cuda:0", "q.device = cpu"});
}

TEST(Validate, CudaViewOfHostMemory) {
  Problem p;
  for (TensorView* t : {&p.params.q, &p.params.k, &p.params.v, &p.params.out, &p.params.lse}) {
    t->device = Device::cuda(0);
  }
  if (testing::have_cuda()) {
    expect_refused(p, StatusCode::kInvalidDevice,
                   {"q.data is host memory", "expected device memory of cuda:0"});
  } else {
    expect_refused(p, StatusCode::kInvalidDevice, {"q.device = cuda:0", "no CUDA device"});
  }
}

// ---- backends ----

TEST(Validate, UnknownBackend) {
  Problem p;
  expect_refused(p, StatusCode::kUnknownBackend,
                 {"\"no-such-backend\"", "cpu-reference", "cpu-flash", "naive", "flash", "auto"},
                 "no-such-backend", /*validation=*/false);
}

TEST(Validate, CudaBackendOnCpuTensors) {
  for (const char* backend : {"flash", "naive"}) {
    SCOPED_TRACE(backend);
    Problem p;
    expect_refused(p, StatusCode::kInvalidDevice,
                   {std::string("backend \"") + backend + "\"", "cuda", "q.device = cpu"}, backend,
                   /*validation=*/false);
  }
}

// ---- valid edge cases ----

bool run(Problem& p, const char* backend) {
  const Status st = forward(p.params, backend);
  EXPECT_TRUE(st.ok()) << backend << ": " << st.to_string();
  return st.ok();
}

// Every output element was written (no sentinel left) and is finite.
void expect_outputs_written(const Problem& p) {
  const TensorView& out = p.params.out;
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const float o = load_as_float(out.data, out.dtype, i);
    ASSERT_TRUE(std::isfinite(o)) << "out[" << i << "] = " << o;
    ASSERT_NE(static_cast<const std::uint16_t*>(out.data)[i], 0x5A5A)
        << "out[" << i << "] unwritten";
  }
  const auto* lse = static_cast<const float*>(p.params.lse.data);
  for (std::int64_t i = 0; i < p.params.lse.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(lse[i])) << "lse[" << i << "] = " << lse[i];
  }
}

TEST(ValidEdgeCases, ValidProblemPasses) {
  Problem p;
  EXPECT_TRUE(validate(p.params).ok()) << validate(p.params).to_string();
  for (const char* backend : {"auto", "cpu-flash", "cpu-reference"}) {
    SCOPED_TRACE(backend);
    run(p, backend);
    expect_outputs_written(p);
  }
}

TEST(ValidEdgeCases, LseIsOptional) {
  Problem p;
  p.params.lse = TensorView();
  for (const char* backend : {"cpu-flash", "cpu-reference"}) {
    run(p, backend);
    expect_outputs_written(p);
  }
}

TEST(ValidEdgeCases, EmptyBatchAndEmptyQuery) {
  for (int which = 0; which < 2; ++which) {
    Shape s;
    (which == 0 ? s.batch : s.seqlen_q) = 0;
    SCOPED_TRACE(which == 0 ? "batch 0" : "seqlen_q 0");
    Problem p(s);
    const auto before = p.snapshot();
    for (const char* backend : {"auto", "cpu-flash", "cpu-reference"}) run(p, backend);
    EXPECT_TRUE(p.snapshot() == before) << "an empty problem wrote to a buffer";
  }
}

TEST(ValidEdgeCases, EmptyKeysGiveZeroAndMinusInf) {
  Shape s;
  s.seqlen_k = 0;
  for (const char* backend : {"auto", "cpu-flash", "cpu-reference"}) {
    SCOPED_TRACE(backend);
    Problem p(s);
    ASSERT_EQ(p.params.k.data, nullptr);  // empty k and v carry null pointers: allowed
    if (!run(p, backend)) continue;
    const TensorView& out = p.params.out;
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      ASSERT_EQ(static_cast<const std::uint16_t*>(out.data)[i], 0) << "out[" << i << "]";
    }
    const auto* lse = static_cast<const float*>(p.params.lse.data);
    for (std::int64_t i = 0; i < p.params.lse.numel(); ++i) {
      ASSERT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "lse[" << i << "] = " << lse[i];
    }
  }
}

// NumPy reports every stride of an empty array as 0 (and DLPack carries that): an empty tensor's
// strides address nothing and are not checked. Batch 0, seqlen_q 0 and heads 0 leave out and lse
// empty and nothing is written; seqlen_k 0 gives O = 0 and LSE = -inf.
TEST(ValidEdgeCases, EmptyTensorsWithZeroStrides) {
  enum Empty { kBatch, kSeqlenQ, kHeads, kSeqlenK };
  for (Empty which : {kBatch, kSeqlenQ, kHeads, kSeqlenK}) {
    static const char* kNames[] = {"batch 0", "seqlen_q 0", "heads 0", "seqlen_k 0"};
    SCOPED_TRACE(kNames[which]);
    Shape s;
    if (which == kBatch) s.batch = 0;
    if (which == kSeqlenQ) s.seqlen_q = 0;
    if (which == kHeads) s.heads = s.kv_heads = 0;
    if (which == kSeqlenK) s.seqlen_k = 0;
    for (const char* backend : {"auto", "cpu-flash", "cpu-reference"}) {
      SCOPED_TRACE(backend);
      Problem p(s);
      for (TensorView* t : {&p.params.q, &p.params.k, &p.params.v, &p.params.out, &p.params.lse}) {
        if (t->numel() == 0) {
          for (int d = 0; d < t->rank; ++d) t->stride[d] = 0;
        }
      }
      EXPECT_TRUE(validate(p.params).ok()) << validate(p.params).to_string();
      const auto before = p.snapshot();
      if (!run(p, backend)) continue;
      if (which != kSeqlenK) {
        EXPECT_TRUE(p.snapshot() == before) << "an empty problem wrote to a buffer";
        continue;
      }
      const TensorView& out = p.params.out;
      for (std::int64_t i = 0; i < out.numel(); ++i) {
        ASSERT_EQ(static_cast<const std::uint16_t*>(out.data)[i], 0) << "out[" << i << "]";
      }
      const auto* lse = static_cast<const float*>(p.params.lse.data);
      for (std::int64_t i = 0; i < p.params.lse.numel(); ++i) {
        ASSERT_TRUE(std::isinf(lse[i]) && lse[i] < 0) << "lse[" << i << "] = " << lse[i];
      }
    }
  }
}

// A dim of size 1 is only ever indexed at 0, so its stride is irrelevant: NumPy and torch give
// such dims arbitrary strides (a slice x[:, :, 2:3], a broadcast view). Negative and unaligned
// strides there are accepted, and the result is the contiguous one.
TEST(ValidEdgeCases, SizeOneDimsIgnoreStrides) {
  Shape s;
  s.batch = 1;
  s.seqlen_q = 1;
  s.kv_heads = 1;
  Problem p(s);
  ASSERT_TRUE(run(p, "cpu-flash"));
  const auto contiguous_out = p.out.snapshot();
  const auto contiguous_lse = p.lse.snapshot();
  p.params.q.stride[0] = -5;       // batch
  p.params.q.stride[1] = 3;        // seqlen_q: 6 bytes, not a multiple of 16
  p.params.k.stride[2] = -1;       // kv heads
  p.params.v.stride[0] = 0;
  p.params.out.stride[1] = -7;
  p.params.lse.stride[0] = -1;
  p.params.lse.stride[2] = 3;      // seqlen_q, lse's last dim
  EXPECT_TRUE(validate(p.params).ok()) << validate(p.params).to_string();
  ASSERT_TRUE(run(p, "cpu-flash"));
  EXPECT_TRUE(p.out.snapshot() == contiguous_out);
  EXPECT_TRUE(p.lse.snapshot() == contiguous_lse);
  ASSERT_TRUE(run(p, "cpu-reference"));
}

TEST(ValidEdgeCases, SmallestAndLargestHeadDim) {
  for (std::int64_t d : {8, 256}) {
    SCOPED_TRACE("head_dim " + std::to_string(d));
    Shape s;
    s.head_dim = d;
    Problem p(s);
    for (const char* backend : {"cpu-flash", "cpu-reference"}) {
      run(p, backend);
      expect_outputs_written(p);
    }
  }
}

TEST(ValidEdgeCases, GroupedQueryHeads) {
  for (std::int64_t kv_heads : {2, 1}) {
    SCOPED_TRACE("6 heads on " + std::to_string(kv_heads) + " kv heads");
    Shape s;
    s.heads = 6;
    s.kv_heads = kv_heads;
    Problem p(s);
    EXPECT_TRUE(validate(p.params).ok()) << validate(p.params).to_string();
    run(p, "cpu-flash");
    expect_outputs_written(p);
  }
}

TEST(ValidEdgeCases, DefaultScaleIsInverseSqrtHeadDim) {
  for (std::int64_t d : {8, 64, 72, 256}) {
    Shape s;
    s.head_dim = d;
    Problem p(s);
    EXPECT_EQ(p.params.scale(), 1.0f / std::sqrt(static_cast<float>(d)));
    run(p, "cpu-flash");
    const auto with_default = p.out.snapshot();
    p.params.softmax_scale = 1.0f / std::sqrt(static_cast<float>(d));
    run(p, "cpu-flash");
    EXPECT_TRUE(p.out.snapshot() == with_default) << "head_dim " << d;
    p.params.softmax_scale = 0.5f / std::sqrt(static_cast<float>(d));
    run(p, "cpu-flash");
    EXPECT_FALSE(p.out.snapshot() == with_default) << "the scale is ignored, head_dim " << d;
  }
}

}  // namespace
}  // namespace flashattn
