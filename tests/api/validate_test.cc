// Bad input (docs/testing.md "Bad input"): every case gets its specific status code, a message
// that names the argument with expected vs actual, and leaves every buffer untouched. Valid edge
// cases (empty dims, head dims 8 and 256, GQA, default scale) succeed. The variants (window,
// softcap, ALiBi slopes, sinks, variable length) are validated the same way, and the registry
// refuses a backend that does not implement one (check_supported, through a fake backend). Runs
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "api/backend.h"
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
// Tests break one thing in `params` and check the call is refused. Side inputs (ALiBi slopes,
// sinks, varlen offsets) live in buffers the problem owns (side_input()), so snapshot() covers
// them too.
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

  // A valid variable-length problem: one sequence per entry of `lens_q` / `lens_k` (query and key
  // lengths), packed along one token axis: q, out (total_q, heads, head_dim), k, v (total_k,
  // kv_heads, head_dim), lse (heads, total_q); cu_seqlens_q / cu_seqlens_k are the running sums
  // and max_seqlen_q / max_seqlen_k the longest lengths. `s` gives heads, kv heads, head dim and
  // dtype; `shape` keeps batch 1 with the totals as seqlen_q / seqlen_k (params.batch() is the
  // number of sequences).
  Problem(const std::vector<std::int32_t>& lens_q, const std::vector<std::int32_t>& lens_k,
          const Shape& s = Shape())
      : Problem(packed(s, lens_q, lens_k)) {
    const Device cpu = Device::cpu();
    const std::int64_t total_q = shape.seqlen_q, total_k = shape.seqlen_k;
    params.q = TensorView::contiguous(q.data(), s.dtype, cpu, {total_q, s.heads, s.head_dim});
    params.k = TensorView::contiguous(k.data(), s.dtype, cpu, {total_k, s.kv_heads, s.head_dim});
    params.v = TensorView::contiguous(v.data(), s.dtype, cpu, {total_k, s.kv_heads, s.head_dim});
    params.out = TensorView::contiguous(out.data(), s.dtype, cpu, {total_q, s.heads, s.head_dim});
    params.lse = TensorView::contiguous(lse.data(), DType::kFP32, cpu, {s.heads, total_q});
    const auto batch = static_cast<std::int64_t>(lens_q.size());
    params.cu_seqlens_q = side_input(DType::kInt32, {batch + 1}, offsets(lens_q));
    params.cu_seqlens_k = side_input(DType::kInt32, {batch + 1}, offsets(lens_k));
    params.max_seqlen_q = lens_q.empty() ? 0 : *std::max_element(lens_q.begin(), lens_q.end());
    params.max_seqlen_k = lens_k.empty() ? 0 : *std::max_element(lens_k.begin(), lens_k.end());
  }

  // A contiguous host tensor of `dims` holding `values` (as `dtype`: int32, or a float dtype),
  // the rest of it the sentinel; owned by the problem and part of snapshot().
  TensorView side_input(DType dtype, std::initializer_list<std::int64_t> dims,
                        const std::vector<double>& values = {}) {
    std::int64_t numel = 1;
    for (std::int64_t n : dims) numel *= n;
    side_.push_back(std::make_unique<HostBuffer>(bytes(numel, dtype)));
    const TensorView t = TensorView::contiguous(side_.back()->data(), dtype, Device::cpu(), dims);
    for (std::size_t i = 0; i < values.size() && static_cast<std::int64_t>(i) < numel; ++i) {
      if (dtype == DType::kInt32) {
        static_cast<std::int32_t*>(t.data)[i] = static_cast<std::int32_t>(values[i]);
      } else {
        store_from_float(t.data, dtype, static_cast<std::int64_t>(i),
                         static_cast<float>(values[i]));
      }
    }
    return t;
  }

  // Every byte of every buffer (guard margins included), to prove a refused call wrote nothing.
  std::vector<std::vector<std::uint8_t>> snapshot() const {
    std::vector<std::vector<std::uint8_t>> all = {q.snapshot(), k.snapshot(), v.snapshot(),
                                                  out.snapshot(), lse.snapshot()};
    for (const auto& buffer : side_) all.push_back(buffer->snapshot());
    return all;
  }

  Shape shape;
  HostBuffer q, k, v, out, lse;
  ForwardParams params;

 private:
  static std::size_t bytes(std::int64_t numel, DType dtype) {
    return static_cast<std::size_t>(numel) * dtype_size(dtype);
  }
  static Shape packed(Shape s, const std::vector<std::int32_t>& lens_q,
                      const std::vector<std::int32_t>& lens_k) {
    s.batch = 1;
    s.seqlen_q = std::accumulate(lens_q.begin(), lens_q.end(), std::int64_t{0});
    s.seqlen_k = std::accumulate(lens_k.begin(), lens_k.end(), std::int64_t{0});
    return s;
  }
  static std::vector<double> offsets(const std::vector<std::int32_t>& lens) {
    std::vector<double> c = {0.0};
    for (std::int32_t n : lens) c.push_back(c.back() + n);
    return c;
  }
  static void fill(const TensorView& t, std::uint64_t stream) {
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const float x = 0.5f + normal_at(testing::base_seed(), stream, static_cast<std::uint64_t>(i));
      store_from_float(t.data, t.dtype, i, x);
    }
  }

  std::vector<std::unique_ptr<HostBuffer>> side_;
};

// The default variable-length problem: 3 sequences, the middle one without queries, packed into
// q (16, 8, 64) and k, v (24, 2, 64); cu_seqlens_q = {0, 5, 5, 16}, cu_seqlens_k = {0, 7, 10, 24},
// max_seqlen_q = 11, max_seqlen_k = 14.
const std::vector<std::int32_t> kLensQ = {5, 0, 11};
const std::vector<std::int32_t> kLensK = {7, 3, 14};

// The int32 elements of a (host) index tensor, to break its values in place.
std::int32_t* ints(const TensorView& t) { return static_cast<std::int32_t*>(t.data); }

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

TEST(Validate, SideInputsOnAnotherDevice) {
  // A CUDA view of host memory next to host q: the device mismatch is the error, as for k.
  for (int which = 0; which < 5; ++which) {
    Problem p(kLensQ, kLensK);
    p.params.seqused_k = p.side_input(DType::kInt32, {3}, {7, 3, 14});
    p.params.alibi_slopes = p.side_input(DType::kFP32, {8}, {0.5});
    p.params.sinks = p.side_input(DType::kFP32, {8}, {1.0});
    const std::pair<TensorView*, const char*> inputs[] = {
        {&p.params.cu_seqlens_q, "cu_seqlens_q"}, {&p.params.cu_seqlens_k, "cu_seqlens_k"},
        {&p.params.seqused_k, "seqused_k"},       {&p.params.alibi_slopes, "alibi_slopes"},
        {&p.params.sinks, "sinks"}};
    const auto [t, name] = inputs[which];
    SCOPED_TRACE(name);
    t->device = Device::cuda(0);
    expect_refused(p, StatusCode::kInvalidDevice,
                   {std::string(name) + ".device = cuda:0", "q.device = cpu"});
  }
}

// ---- variable length: cu_seqlens, max_seqlen, seqused_k ----

TEST(Validate, OnlyOneCuSeqlens) {
  {
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_k = TensorView();
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"cu_seqlens_q is given without cu_seqlens_k", "needs both"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_q = TensorView();
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"cu_seqlens_k is given without cu_seqlens_q", "needs both"});
  }
}

TEST(Validate, CuSeqlensNotInt32) {
  {
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_q = p.side_input(DType::kFP32, {4}, {0, 5, 5, 16});
    expect_refused(p, StatusCode::kInvalidDtype, {"cu_seqlens_q.dtype = fp32", "expected int32"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_k.dtype = DType::kFP16;
    expect_refused(p, StatusCode::kInvalidDtype, {"cu_seqlens_k.dtype = fp16", "expected int32"});
  }
}

TEST(Validate, CuSeqlensWrongRank) {
  {
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_q = p.side_input(DType::kInt32, {2, 2}, {0, 5, 5, 16});
    expect_refused(p, StatusCode::kInvalidRank,
                   {"cu_seqlens_q.rank = 2", "expected 1 (batch + 1)"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_k = p.side_input(DType::kInt32, {4, 1}, {0, 7, 10, 24});
    expect_refused(p, StatusCode::kInvalidRank, {"cu_seqlens_k.rank = 2", "expected 1"});
  }
  {
    // No element at all: not even the leading 0.
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_q = p.side_input(DType::kInt32, {0});
    expect_refused(p, StatusCode::kInvalidShape,
                   {"cu_seqlens_q.shape[0] = 0", "expected >= 1 (batch + 1)"});
  }
}

// The batch of a varlen problem is cu_seqlens_q's length - 1: a bad cu_seqlens_q is reported as
// itself, not as (batch, heads) slopes of the wrong batch.
TEST(Validate, BadCuSeqlensReportedBeforeSlopes) {
  Problem p(kLensQ, kLensK);
  p.params.alibi_slopes = p.side_input(DType::kFP32, {3, 8}, {0.5});
  p.params.cu_seqlens_q = p.side_input(DType::kInt32, {0});
  expect_refused(p, StatusCode::kInvalidShape, {"cu_seqlens_q.shape[0] = 0"});
}

TEST(Validate, CuSeqlensLengthsDiffer) {
  for (std::int64_t len : {5, 3}) {
    SCOPED_TRACE("cu_seqlens_k of " + std::to_string(len));
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_k = len == 5 ? p.side_input(DType::kInt32, {5}, {0, 7, 10, 20, 24})
                                     : p.side_input(DType::kInt32, {3}, {0, 10, 24});
    expect_refused(p, StatusCode::kInvalidShape,
                   {"cu_seqlens_k.shape[0] = " + std::to_string(len), "expected 4",
                    "as cu_seqlens_q"});
  }
}

TEST(Validate, CuSeqlensNotContiguous) {
  for (const char* name : {"cu_seqlens_q", "cu_seqlens_k"}) {
    SCOPED_TRACE(name);
    Problem p(kLensQ, kLensK);
    const bool is_q = std::string(name) == "cu_seqlens_q";
    TensorView t = is_q ? p.side_input(DType::kInt32, {8}, {0, -1, 5, -1, 5, -1, 16, -1})
                        : p.side_input(DType::kInt32, {8}, {0, -1, 7, -1, 10, -1, 24, -1});
    t.shape[0] = 4;
    t.stride[0] = 2;
    (is_q ? p.params.cu_seqlens_q : p.params.cu_seqlens_k) = t;
    expect_refused(p, StatusCode::kInvalidStride,
                   {std::string(name) + ".stride[0] = 2", "expected 1 (contiguous)"});
  }
}

TEST(Validate, CuSeqlensNotStartingAtZero) {
  {
    Problem p(kLensQ, kLensK);
    ints(p.params.cu_seqlens_q)[0] = 1;
    expect_refused(p, StatusCode::kInvalidArgument, {"cu_seqlens_q[0] = 1", "expected 0"});
  }
  {
    Problem p(kLensQ, kLensK);
    ints(p.params.cu_seqlens_k)[0] = -2;
    expect_refused(p, StatusCode::kInvalidArgument, {"cu_seqlens_k[0] = -2", "expected 0"});
  }
}

TEST(Validate, CuSeqlensDecreasing) {
  {
    Problem p(kLensQ, kLensK);
    ints(p.params.cu_seqlens_q)[2] = 4;  // {0, 5, 4, 16}
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"cu_seqlens_q[2] = 4 < cu_seqlens_q[1] = 5", "must not decrease"});
  }
  {
    Problem p(kLensQ, kLensK);
    ints(p.params.cu_seqlens_k)[2] = 6;  // {0, 7, 6, 24}
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"cu_seqlens_k[2] = 6 < cu_seqlens_k[1] = 7", "must not decrease"});
  }
}

TEST(Validate, CuSeqlensPastTotal) {
  {
    Problem p(kLensQ, kLensK);
    ints(p.params.cu_seqlens_q)[2] = 6;  // {0, 5, 6, 17}: every length within max_seqlen_q
    ints(p.params.cu_seqlens_q)[3] = 17;
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"cu_seqlens_q[3] = 17", "past q.shape[0] (total_q) = 16"});
  }
  {
    Problem p(kLensQ, kLensK);
    ints(p.params.cu_seqlens_k)[2] = 11;  // {0, 7, 11, 25}
    ints(p.params.cu_seqlens_k)[3] = 25;
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"cu_seqlens_k[3] = 25", "past k.shape[0] (total_k) = 24"});
  }
  {
    // Far past the tensor, and longer than max_seqlen_q too: the offset outside q is the error.
    Problem p(kLensQ, kLensK);
    ints(p.params.cu_seqlens_q)[3] = 40;
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"cu_seqlens_q[3] = 40", "past q.shape[0] (total_q) = 16"});
  }
  {
    // Every offset from [1] on past the tensor: the first of them is named.
    Problem p(kLensQ, kLensK);
    ints(p.params.cu_seqlens_k)[1] = 30;
    ints(p.params.cu_seqlens_k)[2] = 30;
    ints(p.params.cu_seqlens_k)[3] = 30;
    p.params.max_seqlen_k = 30;
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"cu_seqlens_k[1] = 30", "past k.shape[0] (total_k) = 24"});
  }
}

TEST(Validate, MaxSeqlenBelowASequence) {
  {
    Problem p(kLensQ, kLensK);
    p.params.max_seqlen_q = 10;
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"max_seqlen_q = 10", "below the length of sequence 2 (11, from cu_seqlens_q)"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.max_seqlen_k = 6;
    expect_refused(p, StatusCode::kInvalidArgument,
                   {"max_seqlen_k = 6", "below the length of sequence 0 (7, from cu_seqlens_k)"});
  }
}

TEST(Validate, NegativeMaxSeqlen) {
  {
    Problem p(kLensQ, kLensK);
    p.params.max_seqlen_q = -1;
    expect_refused(p, StatusCode::kInvalidArgument, {"max_seqlen_q = -1", "expected >= 0"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.max_seqlen_k = -3;
    expect_refused(p, StatusCode::kInvalidArgument, {"max_seqlen_k = -3", "expected >= 0"});
  }
}

TEST(Validate, SequsedKWithoutVarlen) {
  Problem p;
  p.params.seqused_k = p.side_input(DType::kInt32, {2}, {4, 4});
  expect_refused(p, StatusCode::kInvalidArgument,
                 {"seqused_k is given without cu_seqlens_q / cu_seqlens_k"});
}

TEST(Validate, SequsedKWrongLengthOrDtype) {
  {
    Problem p(kLensQ, kLensK);
    p.params.seqused_k = p.side_input(DType::kInt32, {4}, {7, 3, 14, 0});
    expect_refused(p, StatusCode::kInvalidShape, {"seqused_k.shape[0] = 4", "expected 3 (batch)"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.seqused_k = p.side_input(DType::kInt32, {3, 1}, {7, 3, 14});
    expect_refused(p, StatusCode::kInvalidRank, {"seqused_k.rank = 2", "expected 1 (batch)"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.seqused_k = p.side_input(DType::kFP32, {3}, {7, 3, 14});
    expect_refused(p, StatusCode::kInvalidDtype, {"seqused_k.dtype = fp32", "expected int32"});
  }
}

TEST(Validate, SequsedKOutOfRange) {
  struct Case {
    std::vector<double> used;
    std::string bad, range;
  };
  for (const Case& c : {Case{{7, 3, -1}, "seqused_k[2] = -1", "expected 0 to 14"},
                        Case{{8, 3, 14}, "seqused_k[0] = 8", "expected 0 to 7"},
                        Case{{7, 4, 14}, "seqused_k[1] = 4", "expected 0 to 3"}}) {
    SCOPED_TRACE(c.bad);
    Problem p(kLensQ, kLensK);
    p.params.seqused_k = p.side_input(DType::kInt32, {3}, c.used);
    expect_refused(p, StatusCode::kInvalidArgument, {c.bad, c.range, "cu_seqlens_k"});
  }
}

TEST(Validate, VarlenNeedsPackedRank3) {
  {
    Problem p(kLensQ, kLensK);
    p.params.q = TensorView::contiguous(p.q.data(), DType::kBF16, Device::cpu(), {1, 16, 8, 64});
    expect_refused(p, StatusCode::kInvalidRank,
                   {"q.rank = 4", "expected 3 (total_q, heads, head_dim)"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.v = TensorView::contiguous(p.v.data(), DType::kBF16, Device::cpu(), {1, 24, 2, 64});
    expect_refused(p, StatusCode::kInvalidRank,
                   {"v.rank = 4", "expected 3 (total_k, kv_heads, head_dim)"});
  }
}

TEST(Validate, VarlenLseShape) {
  {
    Problem p(kLensQ, kLensK);
    p.params.lse = TensorView::contiguous(p.lse.data(), DType::kFP32, Device::cpu(), {1, 8, 16});
    expect_refused(p, StatusCode::kInvalidRank, {"lse.rank = 3", "expected 2 (heads, total_q)"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.lse = TensorView::contiguous(p.lse.data(), DType::kFP32, Device::cpu(), {16, 8});
    expect_refused(p, StatusCode::kInvalidShape, {"lse.shape[0] (heads) = 16", "q.shape[1] = 8"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.lse = TensorView::contiguous(p.lse.data(), DType::kFP32, Device::cpu(), {8, 15});
    expect_refused(p, StatusCode::kInvalidShape,
                   {"lse.shape[1] (total_q) = 15", "q.shape[0] = 16"});
  }
}

TEST(Validate, VarlenOutAndValueMismatch) {
  {
    Problem p(kLensQ, kLensK);
    p.params.out.shape[0] = 15;
    expect_refused(p, StatusCode::kInvalidShape,
                   {"out.shape[0] (total_q) = 15", "q.shape[0] = 16"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.out.shape[1] = 4;
    expect_refused(p, StatusCode::kInvalidShape, {"out.shape[1] (heads) = 4", "q.shape[1] = 8"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.out = TensorView::contiguous(p.out.data(), DType::kBF16, Device::cpu(),
                                          {1, 16, 8, 64});
    expect_refused(p, StatusCode::kInvalidRank,
                   {"out.rank = 4", "expected 3 (total_q, heads, head_dim)"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.v.shape[0] = 23;
    expect_refused(p, StatusCode::kInvalidShape,
                   {"v.shape[0] (total_k) = 23", "k.shape[0] = 24"});
  }
}

// ---- window, softcap ----

TEST(Validate, WindowBelowMinusOne) {
  struct Case {
    std::int64_t left, right;
    std::string bad;
  };
  for (const Case& c : {Case{-2, -1, "window_left = -2"}, Case{-1, -2, "window_right = -2"},
                        Case{3, -100, "window_right = -100"}}) {
    SCOPED_TRACE(c.bad);
    Problem p;
    p.params.window_left = c.left;
    p.params.window_right = c.right;
    expect_refused(p, StatusCode::kInvalidArgument,
                   {c.bad, "expected -1 (unbounded) or a key count >= 0"});
  }
}

TEST(Validate, BadSoftcap) {
  const float kNan = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  struct Case {
    float softcap;
    std::string shown;
  };
  for (const Case& c : {Case{-1.0f, "softcap = -1,"}, Case{-30.0f, "softcap = -30,"},
                        Case{kNan, "softcap = nan"}, Case{kInf, "softcap = inf"},
                        Case{-kInf, "softcap = -inf"}}) {
    SCOPED_TRACE(c.shown);
    Problem p;
    p.params.softcap = c.softcap;
    expect_refused(p, StatusCode::kInvalidArgument,
                   {c.shown, "expected a finite value >= 0 (0 is off)"});
  }
}

// ---- ALiBi slopes, sinks ----

TEST(Validate, AlibiSlopesWrongDtype) {
  Problem p;
  p.params.alibi_slopes = p.side_input(DType::kFP16, {8}, {0.5});
  expect_refused(p, StatusCode::kInvalidDtype, {"alibi_slopes.dtype = fp16", "expected fp32"});
}

TEST(Validate, AlibiSlopesWrongShape) {
  {
    Problem p;
    p.params.alibi_slopes = p.side_input(DType::kFP32, {9});
    expect_refused(p, StatusCode::kInvalidShape,
                   {"alibi_slopes.shape[0] = 9", "expected 8 (heads) or (batch, heads)"});
  }
  {
    Problem p;
    p.params.alibi_slopes = p.side_input(DType::kFP32, {2, 9});
    expect_refused(p, StatusCode::kInvalidShape,
                   {"alibi_slopes.shape[1] = 9", "expected 8 (batch, heads)"});
  }
  {
    Problem p;
    p.params.alibi_slopes = p.side_input(DType::kFP32, {3, 8});
    expect_refused(p, StatusCode::kInvalidShape,
                   {"alibi_slopes.shape[0] = 3", "expected 2 (batch, heads)"});
  }
  {
    // Varlen: the batch is the number of sequences.
    Problem p(kLensQ, kLensK);
    p.params.alibi_slopes = p.side_input(DType::kFP32, {1, 8});
    expect_refused(p, StatusCode::kInvalidShape,
                   {"alibi_slopes.shape[0] = 1", "expected 3 (batch, heads)"});
  }
  {
    Problem p;
    p.params.alibi_slopes = p.side_input(DType::kFP32, {1, 2, 8});
    expect_refused(p, StatusCode::kInvalidRank,
                   {"alibi_slopes.rank = 3", "(heads) or (batch, heads)"});
  }
}

TEST(Validate, AlibiSlopesNotContiguous) {
  {
    Problem p;
    TensorView t = p.side_input(DType::kFP32, {16});
    t.shape[0] = 8;
    t.stride[0] = 2;
    p.params.alibi_slopes = t;
    expect_refused(p, StatusCode::kInvalidStride,
                   {"alibi_slopes.stride[0] = 2", "expected 1 (contiguous)"});
  }
  {
    // (batch, heads) rows 16 floats apart.
    Problem p;
    TensorView t = p.side_input(DType::kFP32, {2, 16});
    t.shape[1] = 8;
    p.params.alibi_slopes = t;
    expect_refused(p, StatusCode::kInvalidStride,
                   {"alibi_slopes.stride[0] = 16", "expected 8 (contiguous)"});
  }
  {
    // A transposed (heads, batch) buffer.
    Problem p;
    p.params.alibi_slopes = TensorView::strided(p.side_input(DType::kFP32, {16}).data,
                                                DType::kFP32, Device::cpu(), {2, 8}, {1, 2});
    expect_refused(p, StatusCode::kInvalidStride,
                   {"alibi_slopes.stride[1] = 2", "expected 1 (contiguous)"});
  }
}

TEST(Validate, AlibiSlopesNull) {
  for (bool per_batch : {false, true}) {
    SCOPED_TRACE(per_batch ? "(batch, heads)" : "(heads)");
    Problem p;
    p.params.alibi_slopes = per_batch ? p.side_input(DType::kFP32, {2, 8})
                                      : p.side_input(DType::kFP32, {8});
    p.params.alibi_slopes.data = nullptr;
    expect_refused(p, StatusCode::kNullPointer,
                   {"alibi_slopes.data is null",
                    "has " + std::to_string(per_batch ? 16 : 8) + " elements"});
  }
}

TEST(Validate, SinksWrongDtype) {
  Problem p;
  p.params.sinks = p.side_input(DType::kBF16, {8}, {1.0});
  expect_refused(p, StatusCode::kInvalidDtype, {"sinks.dtype = bf16", "expected fp32"});
}

TEST(Validate, SinksWrongShape) {
  {
    Problem p;
    p.params.sinks = p.side_input(DType::kFP32, {7});
    expect_refused(p, StatusCode::kInvalidShape, {"sinks.shape[0] = 7", "expected 8 (heads)"});
  }
  {
    // One logit per head, not per (batch, head).
    Problem p;
    p.params.sinks = p.side_input(DType::kFP32, {2, 8});
    expect_refused(p, StatusCode::kInvalidRank, {"sinks.rank = 2", "expected 1 (heads)"});
  }
  {
    Problem p;
    TensorView t = p.side_input(DType::kFP32, {16});
    t.shape[0] = 8;
    t.stride[0] = 2;
    p.params.sinks = t;
    expect_refused(p, StatusCode::kInvalidStride,
                   {"sinks.stride[0] = 2", "expected 1 (contiguous)"});
  }
}

TEST(Validate, SinksNull) {
  Problem p;
  p.params.sinks = p.side_input(DType::kFP32, {8});
  p.params.sinks.data = nullptr;
  expect_refused(p, StatusCode::kNullPointer, {"sinks.data is null", "has 8 elements"});
}

// ---- output strides, workspace ----

// A zero stride on a dim of size > 1 makes two output elements one address (a broadcast view,
// torch's expand()); inputs may be broadcast, outputs not.
TEST(Validate, OutputZeroStride) {
  struct Case {
    bool varlen, lse;
    int dim;
    std::string parts;
  };
  for (const Case& c : {Case{false, false, 0, "out.stride[0] = 0 with out.shape[0] = 2"},
                        Case{false, false, 1, "out.stride[1] = 0 with out.shape[1] = 16"},
                        Case{false, false, 2, "out.stride[2] = 0 with out.shape[2] = 8"},
                        Case{false, true, 0, "lse.stride[0] = 0 with lse.shape[0] = 2"},
                        Case{false, true, 1, "lse.stride[1] = 0 with lse.shape[1] = 8"},
                        Case{true, false, 0, "out.stride[0] = 0 with out.shape[0] = 16"},
                        Case{true, true, 0, "lse.stride[0] = 0 with lse.shape[0] = 8"}}) {
    SCOPED_TRACE(c.parts);
    std::unique_ptr<Problem> p =
        c.varlen ? std::make_unique<Problem>(kLensQ, kLensK) : std::make_unique<Problem>();
    (c.lse ? p->params.lse : p->params.out).stride[c.dim] = 0;
    expect_refused(*p, StatusCode::kInvalidStride,
                   {c.parts, "an output needs a distinct address per element"});
  }
  {
    // On the last dim the contiguity rule speaks first.
    Problem p;
    p.params.lse.stride[2] = 0;
    expect_refused(p, StatusCode::kInvalidStride, {"lse.stride[2] = 0", "expected 1"});
  }
}

TEST(Validate, WorkspaceSizeWithoutWorkspace) {
  Problem p;
  p.params.workspace_size = 1024;
  expect_refused(p, StatusCode::kNullPointer,
                 {"workspace is null", "workspace_size = 1024 bytes"});
}

TEST(Validate, WorkspaceMisaligned) {
  Problem p;
  HostBuffer workspace(256);  // 64-byte aligned
  p.params.workspace = workspace.data() + 4;
  p.params.workspace_size = 128;
  expect_refused(p, StatusCode::kMisaligned,
                 {"workspace = ", "is not 16-byte aligned (address mod 16 = 4)"});
  p.params.workspace = workspace.data() + 16;
  EXPECT_TRUE(validate(p.params).ok()) << validate(p.params).to_string();
}

// The backend writes its workspace (naive's S): one overlapping a tensor is refused, an input as
// much as an output.
TEST(Validate, WorkspaceOverlapsATensor) {
  for (const char* name : {"out", "q", "lse"}) {
    SCOPED_TRACE(name);
    Problem p;
    const TensorView& t = std::string(name) == "out" ? p.params.out
                          : std::string(name) == "q" ? p.params.q
                                                     : p.params.lse;
    p.params.workspace = static_cast<unsigned char*>(t.data) + 16;
    p.params.workspace_size = 64;
    expect_refused(p, StatusCode::kAliasing,
                   {std::string("workspace overlaps ") + name,
                    "the backend writes its workspace"});
  }
  // A workspace of its own passes.
  Problem p;
  HostBuffer workspace(64);
  p.params.workspace = workspace.data();
  p.params.workspace_size = 64;
  EXPECT_TRUE(validate(p.params).ok()) << validate(p.params).to_string();
}

// ---- aliasing of side inputs ----

TEST(Validate, SideInputAliasesOutput) {
  {
    Problem p;
    p.params.alibi_slopes = TensorView::contiguous(p.params.out.data, DType::kFP32,
                                                   Device::cpu(), {8});
    expect_refused(p, StatusCode::kAliasing, {"out overlaps alibi_slopes"});
  }
  {
    Problem p;
    p.params.alibi_slopes = TensorView::contiguous(
        static_cast<std::uint8_t*>(p.params.lse.data) + 16, DType::kFP32, Device::cpu(), {2, 8});
    expect_refused(p, StatusCode::kAliasing, {"lse overlaps alibi_slopes"});
  }
  {
    Problem p;
    p.params.sinks = TensorView::contiguous(p.params.lse.data, DType::kFP32, Device::cpu(), {8});
    expect_refused(p, StatusCode::kAliasing, {"lse overlaps sinks"});
  }
  // Offsets inside an output, holding valid values (so the values pass and the overlap is what
  // is reported).
  auto place = [](const TensorView& within, std::size_t byte_offset, const TensorView& from) {
    TensorView t = from;
    t.data = static_cast<std::uint8_t*>(within.data) + byte_offset;
    std::memcpy(t.data, from.data, static_cast<std::size_t>(from.span_bytes()));
    return t;
  };
  {
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_q = place(p.params.out, 0, p.params.cu_seqlens_q);
    expect_refused(p, StatusCode::kAliasing, {"out overlaps cu_seqlens_q"});
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.cu_seqlens_k = place(p.params.lse, 32, p.params.cu_seqlens_k);
    expect_refused(p, StatusCode::kAliasing, {"lse overlaps cu_seqlens_k"});
  }
  {
    Problem p(kLensQ, kLensK);
    const auto last = static_cast<std::size_t>(p.params.out.span_bytes()) - 16;
    p.params.seqused_k = place(p.params.out, last, p.side_input(DType::kInt32, {3}, {7, 3, 14}));
    expect_refused(p, StatusCode::kAliasing, {"out overlaps seqused_k"});
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


// ---- valid variants (validate() only: which backends run them is the registry's business) ----

// validate() accepts the params and wrote nothing.
void expect_valid(const Problem& p) {
  const auto before = p.snapshot();
  const Status st = validate(p.params);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(p.snapshot() == before) << "validate() wrote to a buffer";
}

TEST(ValidEdgeCases, VarlenWithEmptySequences) {
  struct Case {
    std::vector<std::int32_t> lens_q, lens_k;
    const char* what;
  };
  for (const Case& c : {Case{kLensQ, kLensK, "a sequence without queries"},
                        Case{{0, 4, 0}, {3, 0, 0}, "sequences without queries or keys"},
                        Case{{0, 0}, {0, 0}, "every sequence empty (q, k, v null)"},
                        Case{{}, {}, "no sequence (cu_seqlens = {0})"},
                        Case{{16}, {24}, "one sequence"}}) {
    SCOPED_TRACE(c.what);
    Problem p(c.lens_q, c.lens_k);
    expect_valid(p);
    p.params.lse = TensorView();
    expect_valid(p);
  }
  {
    SCOPED_TRACE("max_seqlen above every length");
    Problem p(kLensQ, kLensK);
    p.params.max_seqlen_q = 100;
    p.params.max_seqlen_k = 100;
    expect_valid(p);
  }
  for (const std::vector<double>& used : {std::vector<double>{7, 3, 14},
                                          std::vector<double>{0, 0, 0},
                                          std::vector<double>{1, 3, 0}}) {
    SCOPED_TRACE("seqused_k");
    Problem p(kLensQ, kLensK);
    p.params.seqused_k = p.side_input(DType::kInt32, {3}, used);
    expect_valid(p);
  }
}

TEST(ValidEdgeCases, WindowsPassValidation) {
  for (auto [left, right] : {std::pair<std::int64_t, std::int64_t>{-1, -1}, {-1, 0}, {0, 0},
                             {5, 3}, {0, -1}, {1000, 1000}}) {
    for (bool causal : {false, true}) {
      if (causal && right > 0) continue;  // contradicts causal: Validate.CausalWithAWiderRightWindow
      for (bool varlen : {false, true}) {
        SCOPED_TRACE("window (" + std::to_string(left) + ", " + std::to_string(right) + ")" +
                     (causal ? " causal" : "") + (varlen ? " varlen" : ""));
        std::unique_ptr<Problem> p =
            varlen ? std::make_unique<Problem>(kLensQ, kLensK) : std::make_unique<Problem>();
        p->params.window_left = left;
        p->params.window_right = right;
        p->params.causal = causal;
        expect_valid(*p);
      }
    }
  }
}

TEST(ValidEdgeCases, SoftcapPassesValidation) {
  for (float softcap : {0.0f, 30.0f, 1e-3f, 50.0f}) {
    SCOPED_TRACE("softcap " + std::to_string(softcap));
    Problem p;
    p.params.softcap = softcap;
    expect_valid(p);
  }
}

TEST(ValidEdgeCases, AlibiSlopesBothShapes) {
  {
    Problem p;
    p.params.alibi_slopes = p.side_input(DType::kFP32, {8}, {0.5, 0.25, 0.125, 0.0625});
    expect_valid(p);
    p.params.alibi_slopes = p.side_input(DType::kFP32, {2, 8}, {0.5, 0.25});
    expect_valid(p);
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.alibi_slopes = p.side_input(DType::kFP32, {8}, {0.5});
    expect_valid(p);
    p.params.alibi_slopes = p.side_input(DType::kFP32, {3, 8}, {0.5});
    expect_valid(p);
  }
  {
    // GQA: one slope per query head, not per kv head.
    Shape s;
    s.kv_heads = 1;
    Problem p(s);
    p.params.alibi_slopes = p.side_input(DType::kFP32, {8}, {0.5});
    expect_valid(p);
  }
}

TEST(ValidEdgeCases, SinksPassValidation) {
  {
    Problem p;
    p.params.sinks = p.side_input(DType::kFP32, {8}, {0.0, -1.0, 2.0});
    expect_valid(p);
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.sinks = p.side_input(DType::kFP32, {8}, {1.0});
    expect_valid(p);
  }
}

TEST(ValidEdgeCases, EveryVariantTogether) {
  Problem p(kLensQ, kLensK);
  p.params.window_left = 4;
  p.params.window_right = 0;
  p.params.softcap = 30.0f;
  p.params.alibi_slopes = p.side_input(DType::kFP32, {3, 8}, {0.5});
  p.params.sinks = p.side_input(DType::kFP32, {8}, {1.0});
  p.params.seqused_k = p.side_input(DType::kInt32, {3}, {5, 3, 14});
  HostBuffer workspace(256);
  p.params.workspace = workspace.data();
  p.params.workspace_size = 256;
  expect_valid(p);
}

// ---- variants and the registry ----

// A backend that implements `variants` and answers supports() with `supports`; it never runs.
class FakeBackend : public Backend {
 public:
  explicit FakeBackend(unsigned variants, Status supports = Status::Ok())
      : variants_(variants), supports_(std::move(supports)) {}
  std::string_view name() const override { return "fake"; }
  std::string_view description() const override { return "a test double"; }
  DeviceType device_type() const override { return DeviceType::kCPU; }
  Status usable(Device) const override { return Status::Ok(); }
  unsigned variants() const override { return variants_; }
  Status supports(const ForwardParams& /*params*/) const override {
    ++supports_calls;
    return supports_;
  }
  Status run(const ForwardParams& /*params*/, StreamHandle /*stream*/) const override {
    return Status(StatusCode::kInternal, "the fake backend never runs");
  }
  mutable int supports_calls = 0;

 private:
  unsigned variants_;
  Status supports_;
};

// One problem per variant, using that variant only, with the name check_supported() gives it.
struct VariantCase {
  Variant variant;
  const char* name;
  std::unique_ptr<Problem> problem;
};

std::vector<VariantCase> variant_cases() {
  std::vector<VariantCase> cases;
  auto add = [&](Variant v, const char* name, std::unique_ptr<Problem> p) {
    cases.push_back({v, name, std::move(p)});
  };
  {
    auto p = std::make_unique<Problem>();
    p->params.window_left = 5;
    add(kVariantWindow, "a sliding window (window_left / window_right)", std::move(p));
  }
  {
    auto p = std::make_unique<Problem>();
    p->params.window_right = 0;
    add(kVariantWindow, "a sliding window (window_left / window_right)", std::move(p));
  }
  {
    auto p = std::make_unique<Problem>();
    p->params.softcap = 30.0f;
    add(kVariantSoftcap, "softcap", std::move(p));
  }
  {
    auto p = std::make_unique<Problem>();
    p->params.alibi_slopes = p->side_input(DType::kFP32, {8}, {0.5});
    add(kVariantAlibi, "ALiBi slopes (alibi_slopes)", std::move(p));
  }
  {
    auto p = std::make_unique<Problem>();
    p->params.alibi_slopes = p->side_input(DType::kFP32, {2, 8}, {0.5});
    add(kVariantAlibi, "ALiBi slopes (alibi_slopes)", std::move(p));
  }
  {
    auto p = std::make_unique<Problem>();
    p->params.sinks = p->side_input(DType::kFP32, {8}, {1.0});
    add(kVariantSinks, "attention sinks (sinks)", std::move(p));
  }
  add(kVariantVarlen, "variable length (cu_seqlens_q / cu_seqlens_k)",
      std::make_unique<Problem>(kLensQ, kLensK));
  {
    auto p = std::make_unique<Problem>(kLensQ, kLensK);
    p->params.seqused_k = p->side_input(DType::kInt32, {3}, {7, 3, 14});
    add(kVariantVarlen, "variable length (cu_seqlens_q / cu_seqlens_k)", std::move(p));
  }
  return cases;
}

// causal fixes the window's right edge at the diagonal: an explicit wider right edge contradicts it.
TEST(Validate, CausalWithAWiderRightWindow) {
  Problem p;
  p.params.causal = true;
  p.params.window_right = 5;
  expect_refused(p, StatusCode::kInvalidArgument,
                 {"window_right = 5 with causal = true", "expected window_right = 0 or -1"});
  p.params.window_right = 0;
  EXPECT_TRUE(validate(p.params).ok());
  p.params.window_left = 7;
  EXPECT_TRUE(validate(p.params).ok());
}

TEST(Variants, UsedPerField) {
  {
    // The dense problem, causal or not, with a scale or a workspace, uses no variant.
    Problem p;
    EXPECT_EQ(variants_used(p.params), 0u);
    p.params.causal = true;
    p.params.softmax_scale = 0.5f;
    p.params.softcap = 0.0f;
    HostBuffer workspace(64);
    p.params.workspace = workspace.data();
    p.params.workspace_size = 64;
    EXPECT_EQ(variants_used(p.params), 0u);
    // Causal written as its window (right edge 0) is still causal alone.
    p.params.window_right = 0;
    EXPECT_EQ(variants_used(p.params), 0u);
    // Without causal, a right edge of 0 is a window: a backend without windows must refuse it.
    p.params.causal = false;
    EXPECT_EQ(variants_used(p.params), static_cast<unsigned>(kVariantWindow));
  }
  for (const VariantCase& c : variant_cases()) {
    SCOPED_TRACE(c.name);
    ASSERT_TRUE(validate(c.problem->params).ok()) << validate(c.problem->params).to_string();
    EXPECT_EQ(variants_used(c.problem->params), static_cast<unsigned>(c.variant));
  }
  {
    Problem p(kLensQ, kLensK);
    p.params.window_left = 2;
    p.params.softcap = 5.0f;
    p.params.alibi_slopes = p.side_input(DType::kFP32, {8}, {0.5});
    p.params.sinks = p.side_input(DType::kFP32, {8}, {1.0});
    EXPECT_EQ(variants_used(p.params), kAllVariants);
  }
}

TEST(Variants, CheckSupportedRefusesAMissingVariant) {
  for (const VariantCase& c : variant_cases()) {
    SCOPED_TRACE(c.name);
    const ForwardParams& params = c.problem->params;
    for (unsigned implemented : {0u, kAllVariants & ~static_cast<unsigned>(c.variant)}) {
      const FakeBackend backend(implemented);
      const Status st = check_supported(backend, params);
      EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
      EXPECT_NE(st.message().find(std::string("backend \"fake\" does not implement ") + c.name),
                std::string::npos)
          << st.message();
      EXPECT_EQ(backend.supports_calls, 0) << "supports() asked despite a missing variant";
    }
    for (unsigned implemented : {static_cast<unsigned>(c.variant), kAllVariants}) {
      const FakeBackend backend(implemented);
      const Status st = check_supported(backend, params);
      EXPECT_TRUE(st.ok()) << st.to_string();
      EXPECT_EQ(backend.supports_calls, 1);
    }
  }
}

TEST(Variants, CheckSupportedNamesTheFirstMissingVariant) {
  Problem p;
  p.params.softcap = 30.0f;
  p.params.sinks = p.side_input(DType::kFP32, {8}, {1.0});
  const Status st = check_supported(FakeBackend(kVariantWindow), p.params);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("does not implement softcap"), std::string::npos) << st.message();
  const Status st2 = check_supported(FakeBackend(kVariantSoftcap), p.params);
  EXPECT_NE(st2.message().find("does not implement attention sinks (sinks)"), std::string::npos)
      << st2.message();
}

TEST(Variants, CheckSupportedThenAsksSupports) {
  Problem p;
  const Status why(StatusCode::kUnsupported, "fake: head_dim 64 is not compiled in");
  const Status st = check_supported(FakeBackend(0, why), p.params);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_EQ(st.message(), why.message());
  EXPECT_TRUE(check_supported(FakeBackend(0), p.params).ok());
}

}  // namespace
}  // namespace flashattn
