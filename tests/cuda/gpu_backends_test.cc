// GPU backends ("naive", "flash", "flash-sm80", "flash-sm90") against the references, through the verifier (docs/testing.md).
// Every test reports skipped, not passed, on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "api/backend.h"
#include "common/owned_tensor.h"
#include "cpu/reference.h"
#include "cuda/common/runtime.h"
#include "flashattn/flashattn.h"
#include "test_util.h"
#include "variant_cases.h"
#include "verify/compare.h"
#include "verify/verify.h"

namespace flashattn {
namespace {

struct GpuCase {
  std::string backend;
  ProblemShape shape;
  InputLayout layout = InputLayout::kContiguous;
  InputKind kind = InputKind::kNormal;
};

// A backend name as a gtest name part ("flash-sm80" -> "flash_sm80").
std::string test_name_of(std::string backend) {
  for (char& ch : backend) ch = ch == '-' ? '_' : ch;
  return backend;
}

// For INSTANTIATE_TEST_SUITE_P over backend names.
std::string backend_param_name(const ::testing::TestParamInfo<const char*>& p) {
  return test_name_of(p.param);
}

std::string case_name(const GpuCase& c) {
  std::ostringstream os;
  os << test_name_of(c.backend) << "_b" << c.shape.batch << "_h" << c.shape.heads
     << "_" << c.shape.kv_heads << "_q" << c.shape.seqlen_q << "_k" << c.shape.seqlen_k << "_d"
     << c.shape.head_dim << "_" << dtype_name(c.shape.dtype) << (c.shape.causal ? "_causal" : "")
     << (c.layout == InputLayout::kStridedBHSD   ? "_bhsd"
         : c.layout == InputLayout::kPaddedHeads ? "_padded"
                                                 : "")
     << (c.kind == InputKind::kLargeScores      ? "_largescores"
         : c.kind == InputKind::kVeryNegative   ? "_verynegative"
         : c.kind == InputKind::kLargeMagnitude ? "_largemag"
         : c.kind == InputKind::kHugeScores     ? "_hugescores"
                                                : "");
  return os.str();
}

// For gtest's listing and failure lines.
void PrintTo(const GpuCase& c, std::ostream* os) { *os << case_name(c); }

// The grid of docs/testing.md. Quick tier ("Quick" suites): every 7th cell of the cross product
// of lengths x head dims x dtypes x causal, plus GQA, layouts and adversarial inputs; the other
// cells form the "Full" suites, run by FLASHATTN_TEST_TIER=full.
std::vector<GpuCase> grid(bool full) {
  std::vector<std::pair<std::int64_t, std::int64_t>> lengths = {
      {1, 1},     {17, 17},     {113, 113},   {127, 127}, {203, 203},   {239, 239},
      {339, 339}, {1023, 1023}, {1025, 1025}, {113, 203}, {203, 113},   {1, 4097},
      {4097, 1},  {1023, 1024}, {1024, 1023}, {17, 1},    {4097, 4097}};
  std::vector<GpuCase> cases;
  for (const std::string backend : {"naive", "flash", "flash-sm80", "flash-sm90"}) {
    // The tensor-core kernels take bf16 / fp16 and their own head dims only.
    const bool sm80 = backend == "flash-sm80" || backend == "flash-sm90";
    const std::vector<std::int64_t> head_dims =
        sm80 ? std::vector<std::int64_t>{64, 96, 128, 192, 256}
             : std::vector<std::int64_t>{8, 32, 64, 72, 96, 128, 160, 256};
    const std::vector<DType> dtypes =
        sm80 ? std::vector<DType>{DType::kBF16, DType::kFP16}
             : std::vector<DType>{DType::kBF16, DType::kFP16, DType::kFP32};
    int i = 0;
    for (auto [sq, sk] : lengths) {
      for (std::int64_t d : head_dims) {
        for (DType dt : dtypes) {
          for (bool causal : {false, true}) {
            ++i;
            // Quick tier: rotate dtype / causal / head dim across the length list.
            if ((i % 7 == 0) == full) continue;
            const std::int64_t big = sq * sk > 1 << 22;
            cases.push_back({backend, testing::dense(big ? 1 : 2, big ? 2 : 4, big ? 1 : 2, sq, sk, d, dt,
                                            causal)});
          }
        }
      }
    }
    if (full) continue;
    // GQA / MQA head mappings, layouts and adversarial inputs, in the quick tier.
    for (DType dt : dtypes) {
      cases.push_back({backend, testing::dense(2, 6, 2, 113, 203, 64, dt, true)});
      cases.push_back({backend, testing::dense(2, 6, 1, 203, 113, 128, dt, false)});
      // 8 x 16 x 3 = 384 tiles of 128 query rows: a persistent grid of 132 blocks takes each
      // block through 3 rounds (flash-sm90: TileScheduler::dealt), causal and not.
      cases.push_back({backend, testing::dense(8, 16, 4, 300, 300, 128, dt, dt == DType::kFP16)});
      // The shape of the v6 trial's slow cell (d128 causal 512, docs/performance.md), smaller:
      // 16 x 8 x 4 = 512 tiles of 1-3 key tiles, longest first over 2 sections of 64 pairs.
      cases.push_back({backend, testing::dense(16, 8, 8, 512, 512, 128, dt, true)});
      // Causal work tiles of 1 to 23 (d128) or 32 (d64) key tiles in one launch: since
      // flash-sm90 v13 the ping-pong turns run on every one and carry over from tile to tile.
      cases.push_back({backend, testing::dense(1, 4, 2, 4000, 4000, dt == DType::kBF16 ? 128 : 64,
                                               dt, true)});
      cases.push_back({backend, testing::dense(2, 4, 2, 239, 339, 128, dt, false), InputLayout::kStridedBHSD});
      cases.push_back({backend, testing::dense(2, 4, 4, 339, 239, 64, dt, true), InputLayout::kPaddedHeads});
      cases.push_back({backend, testing::dense(1, 4, 4, 203, 203, 64, dt, false), InputLayout::kContiguous,
                       InputKind::kLargeScores});
      cases.push_back({backend, testing::dense(1, 4, 4, 203, 203, 64, dt, true), InputLayout::kContiguous,
                       InputKind::kVeryNegative});
      // Scaled scores near 1e10 (finite in float32): no NaN, no row taken for empty.
      cases.push_back({backend, testing::dense(1, 4, 4, 203, 203, 64, dt, false), InputLayout::kContiguous,
                       InputKind::kHugeScores});
      cases.push_back({backend, testing::dense(2, 4, 2, 339, 1023, 128, dt, true),
                       InputLayout::kContiguous, InputKind::kHugeScores});
    }
    cases.push_back({backend, testing::dense(1, 4, 4, 203, 203, 64, DType::kBF16, false),
                     InputLayout::kContiguous, InputKind::kLargeMagnitude});
    cases.push_back({backend, testing::dense(1, 4, 4, 203, 203, 64, DType::kFP16, false),
                     InputLayout::kContiguous, InputKind::kLargeMagnitude});
    // Causal with seqlen_q > seqlen_k: the first rows see no key (O = 0, LSE = -inf).
    cases.push_back({backend, testing::dense(1, 2, 2, 339, 17, 64, DType::kBF16, true)});
    cases.push_back({backend, testing::dense(1, 2, 2, 4097, 1, 128, DType::kFP16, true)});
  }
  return cases;
}

class GpuGridTest : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuGridTest, MatchesReference) {
  FA_SKIP_WITHOUT_CUDA();
  const GpuCase& c = GetParam();
  FA_SKIP_UNLESS_BACKEND_USABLE(c.backend);
  VerifyOptions opt;
  opt.backend = c.backend;
  opt.device = Device::cuda(0);
  opt.seed = testing::base_seed() + std::hash<std::string>{}(case_name(c)) % 100000;
  opt.layout = c.layout;
  opt.kind = c.kind;
  VerifyReport report;
  Status st = verify(c.shape, opt, &report);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(report.passed) << report.to_string();
  EXPECT_TRUE(report.baseline_passed) << report.to_string();
  // Above cpu_reference_limit the reference is the GPU naive kernel in float32: the baseline and
  // that reference then meet the float64 CPU reference on a sample of rows.
  if (report.reference == "naive (float32)") {
    EXPECT_GT(report.sample_rows, 0) << report.to_string();
    EXPECT_TRUE(report.reference_sampled);
  }
  EXPECT_TRUE(report.sample_baseline_passed) << report.to_string();
  EXPECT_TRUE(report.sample_reference_passed) << report.to_string();
  // The naive backend is never its own baseline (verify.cc): it gets the float32 CPU naive.
  const std::string dt(dtype_name(c.shape.dtype));
  EXPECT_EQ(report.baseline, c.backend == "naive" ? "cpu naive (float32 accumulate, " + dt + " out)"
                                                  : "naive (" + dt + ")");
  testing::expect_huge_scores_tight(c.kind, report);
}

std::string param_name(const ::testing::TestParamInfo<GpuCase>& p) { return case_name(p.param); }

INSTANTIATE_TEST_SUITE_P(Quick, GpuGridTest, ::testing::ValuesIn(grid(false)), param_name);
INSTANTIATE_TEST_SUITE_P(Full, GpuGridTest, ::testing::ValuesIn(grid(true)), param_name);

// Allocates q, k, v, out, lse on the GPU for `s`, filled (q/k/v) with seeded normals.
struct GpuProblem {
  OwnedTensor q, k, v, out, lse;
  ForwardParams params;
};

void make_problem(const ProblemShape& s, std::uint64_t seed, GpuProblem* p) {
  const Device dev = Device::cuda(0);
  ASSERT_TRUE(OwnedTensor::create(s.dtype, dev, {s.batch, s.seqlen_q, s.heads, s.head_dim}, &p->q).ok());
  ASSERT_TRUE(OwnedTensor::create(s.dtype, dev, {s.batch, s.seqlen_k, s.kv_heads, s.head_dim}, &p->k).ok());
  ASSERT_TRUE(OwnedTensor::create(s.dtype, dev, {s.batch, s.seqlen_k, s.kv_heads, s.head_dim}, &p->v).ok());
  ASSERT_TRUE(OwnedTensor::create(s.dtype, dev, {s.batch, s.seqlen_q, s.heads, s.head_dim}, &p->out).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, dev, {s.batch, s.heads, s.seqlen_q}, &p->lse).ok());
  ASSERT_TRUE(p->q.fill_normal(seed, 0, 0.5f, 1.0f).ok());
  ASSERT_TRUE(p->k.fill_normal(seed, 1, 0.5f, 1.0f).ok());
  ASSERT_TRUE(p->v.fill_normal(seed, 2, 0.5f, 1.0f).ok());
  ASSERT_TRUE(p->out.fill_nan().ok());
  ASSERT_TRUE(p->lse.fill_nan().ok());
  p->params.q = p->q.view(); p->params.k = p->k.view(); p->params.v = p->v.view();
  p->params.out = p->out.view(); p->params.lse = p->lse.view();
  p->params.causal = s.causal;
}

class GpuBackendTest : public ::testing::TestWithParam<const char*> {};

// Determinism: the forward pass is bit-identical when run twice.
TEST_P(GpuBackendTest, BitIdenticalRerun) {
  FA_SKIP_WITHOUT_CUDA();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string(GetParam()));
  for (bool causal : {false, true}) {
    GpuProblem p;
    make_problem(testing::dense(2, 8, 2, 1023, 1025, 128, DType::kBF16, causal), testing::base_seed(), &p);
    ASSERT_TRUE(forward(p.params, GetParam()).ok());
    std::vector<float> o1, l1, o2, l2;
    ASSERT_TRUE(p.out.to_host_float(&o1).ok());
    ASSERT_TRUE(p.lse.to_host_float(&l1).ok());
    ASSERT_TRUE(p.out.fill_nan().ok());
    ASSERT_TRUE(p.lse.fill_nan().ok());
    ASSERT_TRUE(forward(p.params, GetParam()).ok());
    ASSERT_TRUE(p.out.to_host_float(&o2).ok());
    ASSERT_TRUE(p.lse.to_host_float(&l2).ok());
    ASSERT_EQ(o1.size(), o2.size());
    EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(float))) << "O differs";
    EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(float))) << "LSE differs";
  }
}

// batch * heads above 65535: no grid-dimension limit.
TEST_P(GpuBackendTest, ManyHeadsBeyondGridLimit) {
  FA_SKIP_WITHOUT_CUDA();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string(GetParam()));
  VerifyOptions opt;
  opt.backend = GetParam();
  opt.device = Device::cuda(0);
  opt.seed = testing::base_seed();
  VerifyReport report;
  ASSERT_TRUE(verify(testing::dense(3, 24000, 24000, 3, 5, 64, DType::kBF16, false), opt, &report).ok());
  EXPECT_TRUE(report.passed) << report.to_string();
}

// Empty tensors with every stride 0, as NumPy reports them (validate() does not check them).
void zero_strides_of_empty(ForwardParams* p) {
  for (TensorView* t : {&p->q, &p->k, &p->v, &p->out, &p->lse}) {
    if (t->numel() == 0) {
      for (int d = 0; d < t->rank; ++d) t->stride[d] = 0;
    }
  }
}

// seqlen_k = 0: every row sees no key, O = 0 and LSE = -inf; seqlen_q = 0 / batch = 0 /
// heads = 0: nothing to write, ok. The empty tensors carry zero strides.
TEST_P(GpuBackendTest, EmptySequences) {
  FA_SKIP_WITHOUT_CUDA();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string(GetParam()));
  GpuProblem p;
  make_problem(testing::dense(2, 4, 2, 37, 0, 64, DType::kFP16, false), testing::base_seed(), &p);
  zero_strides_of_empty(&p.params);
  ASSERT_TRUE(forward(p.params, GetParam()).ok());
  std::vector<float> o, l;
  ASSERT_TRUE(p.out.to_host_float(&o).ok());
  ASSERT_TRUE(p.lse.to_host_float(&l).ok());
  for (float x : o) ASSERT_EQ(x, 0.0f);
  for (float x : l) ASSERT_TRUE(std::isinf(x) && x < 0);
  GpuProblem e;
  make_problem(testing::dense(2, 4, 2, 0, 17, 64, DType::kFP16, false), testing::base_seed(), &e);
  zero_strides_of_empty(&e.params);
  EXPECT_TRUE(forward(e.params, GetParam()).ok());
  GpuProblem z;
  make_problem(testing::dense(0, 4, 2, 17, 17, 64, DType::kFP16, false), testing::base_seed(), &z);
  zero_strides_of_empty(&z.params);
  EXPECT_TRUE(forward(z.params, GetParam()).ok());
  GpuProblem h;
  make_problem(testing::dense(2, 0, 0, 17, 17, 64, DType::kFP16, false), testing::base_seed(), &h);
  zero_strides_of_empty(&h.params);
  const Status st = forward(h.params, GetParam());
  EXPECT_TRUE(st.ok()) << st.to_string();
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuBackendTest,
                         ::testing::Values("naive", "flash", "flash-sm80", "flash-sm90"),
                         backend_param_name);

// Tensors past 2^31 elements: 64-bit offsets. q, k, v, out have 2^31 + 2^24 elements each
// (4.3 GB in bf16); the last batch entry is judged by the rule (verify/compare.h) against the
// float64 reference, with the float32 CPU naive on the same slices as the baseline.
class GpuLargeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuLargeTest, Beyond2To31Elements) {
  FA_SKIP_WITHOUT_CUDA();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string(GetParam()));
  const ProblemShape s = testing::dense(16385, 64, 16, 16, 16, 128, DType::kBF16, false);
  GpuProblem p;
  make_problem(s, testing::base_seed(), &p);
  ASSERT_GT(p.q.numel(), std::int64_t{1} << 31);
  ASSERT_TRUE(forward(p.params, GetParam()).ok());
  std::vector<float> q, k, v, o, lse;
  ASSERT_TRUE(p.q.to_host_float(&q).ok());
  ASSERT_TRUE(p.k.to_host_float(&k).ok());
  ASSERT_TRUE(p.v.to_host_float(&v).ok());
  ASSERT_TRUE(p.out.to_host_float(&o).ok());
  ASSERT_TRUE(p.lse.to_host_float(&lse).ok());
  // The last batch entry's slices on the host, in bf16 (the values are bf16 already).
  const std::int64_t per_q = s.seqlen_q * s.heads * s.head_dim;
  const std::int64_t per_kv = s.seqlen_k * s.kv_heads * s.head_dim;
  const std::int64_t per_lse = s.heads * s.seqlen_q;
  const std::int64_t b = s.batch - 1;
  auto slice = [b](const std::vector<float>& x, std::int64_t n) {
    return std::vector<float>(x.begin() + b * n, x.begin() + (b + 1) * n);
  };
  OwnedTensor qb, kb, vb, ob, lb;
  const std::vector<std::int64_t> q_dims = {1, s.seqlen_q, s.heads, s.head_dim};
  const std::vector<std::int64_t> kv_dims = {1, s.seqlen_k, s.kv_heads, s.head_dim};
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), q_dims, &qb).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), kv_dims, &kb).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), kv_dims, &vb).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cpu(), q_dims, &ob).ok());
  ASSERT_TRUE(OwnedTensor::create(DType::kFP32, Device::cpu(), {1, s.heads, s.seqlen_q}, &lb).ok());
  ASSERT_TRUE(qb.from_host_float(slice(q, per_q)).ok());
  ASSERT_TRUE(kb.from_host_float(slice(k, per_kv)).ok());
  ASSERT_TRUE(vb.from_host_float(slice(v, per_kv)).ok());
  ForwardParams r;
  r.q = qb.view();
  r.k = kb.view();
  r.v = vb.view();
  r.out = ob.view();
  r.lse = lb.view();
  verifier::ReferenceOutputs ref;
  ref.out.resize(static_cast<std::size_t>(per_q));
  ref.lse.resize(static_cast<std::size_t>(per_lse));
  ASSERT_TRUE(cpu::reference_forward_f64(r, ref.out.data(), ref.lse.data()).ok());
  ASSERT_TRUE(cpu::naive_forward<float>(r).ok());
  verifier::HostOutputs result{slice(o, per_q), slice(lse, per_lse)}, baseline;
  ASSERT_TRUE(ob.to_host_float(&baseline.out).ok());
  ASSERT_TRUE(lb.to_host_float(&baseline.lse).ok());
  VerifyReport report;
  report.shape = s;
  report.shape.batch = 1;
  report.backend = std::string(GetParam()) + " (batch entry 16384)";
  report.reference = "cpu-reference (float64)";
  report.baseline = "cpu naive (float32 accumulate, bf16 out)";
  ProblemShape last = s;
  last.batch = 1;
  verifier::judge(verifier::output_dims(last), DType::kBF16, result, baseline, ref,
                  /*check_lse=*/true, &report);
  EXPECT_TRUE(report.passed) << report.to_string();
}

INSTANTIATE_TEST_SUITE_P(Flash, GpuLargeTest, ::testing::Values("flash", "flash-sm80", "flash-sm90"),
                         backend_param_name);

// "auto" takes the tensor-core kernel where it applies (flash-sm90 where it is usable, i.e. on
// compute capability 9.0 with sm_90a code built, else flash-sm80) and the CUDA-core kernel
// elsewhere; the tensor-core kernels say exactly what they do not cover.
TEST(GpuAutoTest, PicksTensorCoreKernelWhereItApplies) {
  FA_SKIP_WITHOUT_CUDA();
  std::string why;
  bool must_run = false;
  const bool sm90 = testing::backend_usable_here("flash-sm90", &why, &must_run);
  if (!sm90 && must_run) ADD_FAILURE() << "flash-sm90 must be usable here: " << why;
  const char* tensor_core = sm90 ? "flash-sm90" : "flash-sm80";
  struct Want { std::int64_t d; DType dtype; const char* backend; };
  for (const Want& w : {Want{128, DType::kBF16, tensor_core}, Want{64, DType::kFP16, tensor_core},
                        Want{192, DType::kFP16, tensor_core},
                        Want{256, DType::kBF16, tensor_core}, Want{72, DType::kBF16, "flash"},
                        Want{128, DType::kFP32, "flash"}}) {
    GpuProblem p;
    make_problem(testing::dense(1, 2, 2, 5, 5, w.d, w.dtype, false), testing::base_seed(), &p);
    std::string name;
    ASSERT_TRUE(resolve_backend(p.params, "auto", &name).ok());
    EXPECT_EQ(name, w.backend) << "d" << w.d << " " << dtype_name(w.dtype);
    if (name == "flash") {
      for (const char* tc : {"flash-sm80", "flash-sm90"}) {
        if (std::string(tc) == "flash-sm90" && !sm90) continue;
        const Status st = forward(p.params, tc);
        EXPECT_EQ(st.code(), StatusCode::kUnsupported) << tc << ": " << st.to_string();
        EXPECT_NE(st.message().find(w.dtype == DType::kFP32 ? "fp32" : "q.shape[3] = 72"),
                  std::string::npos)
            << st.message();
        std::vector<float> o;
        ASSERT_TRUE(p.out.to_host_float(&o).ok());
        for (float x : o) ASSERT_TRUE(std::isnan(x)) << tc << " wrote an unsupported problem";
      }
    }
  }
}

// The naive backend computes the bytes S needs and reports OOM with them, writing nothing.
TEST(GpuNaiveTest, OutOfMemoryIsMeasuredAndReported) {
  FA_SKIP_WITHOUT_CUDA();
  // S = 64 heads * 65536^2 * 4 bytes = 1.1 TB: more than any GPU has.
  const ProblemShape s = testing::dense(1, 64, 64, 65536, 65536, 8, DType::kBF16, false);
  GpuProblem p;
  make_problem(s, testing::base_seed(), &p);
  std::size_t bytes = 0;
  ASSERT_TRUE(workspace_bytes(p.params, "naive", &bytes).ok());
  EXPECT_EQ(bytes, std::size_t{64} * 65536 * 65536 * 4);
  const Status st = forward(p.params, "naive");
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory) << st.to_string();
  EXPECT_NE(st.message().find(std::to_string(bytes)), std::string::npos) << st.message();
  std::vector<float> o;
  ASSERT_TRUE(p.out.to_host_float(&o).ok());
  for (std::size_t i = 0; i < o.size(); i += 4097) ASSERT_TRUE(std::isnan(o[i])) << "written at " << i;
}

// usable() is answered per device: each GPU backend is usable on every device that exists here
// (flash-sm90: where backend_usable_here says it must run) and refuses, naming it, one past the
// last.
TEST(GpuBackendUsable, AnsweredPerDevice) {
  FA_SKIP_WITHOUT_CUDA();
  const int n = cuda::device_count();
  for (const char* name : {"naive", "flash", "flash-sm80", "flash-sm90"}) {
    SCOPED_TRACE(name);
    const Backend* b = find_backend(name);
    ASSERT_NE(b, nullptr);
    std::string why;
    bool must_run = false;
    const bool usable = testing::backend_usable_here(name, &why, &must_run);
    EXPECT_TRUE(usable || !must_run) << why;
    for (int d = 0; d < n && usable; ++d) EXPECT_TRUE(b->usable(Device::cuda(d)).ok()) << d;
    const Status st = b->usable(Device::cuda(n));
    EXPECT_EQ(st.code(), StatusCode::kBackendUnavailable);
    EXPECT_NE(st.message().find("cuda:" + std::to_string(n) + " does not exist"),
              std::string::npos)
        << st.message();
  }
}

// An S matrix whose byte count overflows 64 bits is out of memory with the factors, never a
// wrapped (here: 0-byte) buffer the kernels would write through. batch 2^16, seqlen_q = seqlen_k
// = 2^24: S is 2^16 * 2^48 * 4 = 2^66 bytes. Zero strides keep q, k, v and out 16 bytes each;
// validate() refuses a zero-stride output (two elements, one address), so the backend's run()
// is called directly: its own size check is what this test is about.
TEST(GpuNaiveTest, SMatrixBytesThatOverflowAreOutOfMemory) {
  FA_SKIP_WITHOUT_CUDA();
  constexpr std::int64_t kBatch = std::int64_t{1} << 16, kLen = std::int64_t{1} << 24;
  OwnedTensor q, k, v, out;
  for (OwnedTensor* t : {&q, &k, &v, &out}) {
    ASSERT_TRUE(OwnedTensor::create(DType::kBF16, Device::cuda(0), {1, 1, 1, 8}, t).ok());
  }
  ForwardParams p;
  auto broadcast = [](const OwnedTensor& t) {
    return TensorView::strided(t.view().data, DType::kBF16, Device::cuda(0), {kBatch, kLen, 1, 8},
                               {0, 0, 0, 1});
  };
  p.q = broadcast(q);
  p.k = broadcast(k);
  p.v = broadcast(v);
  p.out = broadcast(out);
  std::size_t bytes = 0;
  ASSERT_TRUE(workspace_bytes(p, "naive", &bytes).ok());
  EXPECT_EQ(bytes, std::numeric_limits<std::size_t>::max()) << "saturates";
  EXPECT_EQ(validate(p).code(), StatusCode::kInvalidStride) << "out has zero strides";
  const Status st = find_backend("naive")->run(p, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory) << st.to_string();
  EXPECT_NE(st.message().find("= 65536 * 1 * 16777216 * 16777216 * 4 bytes, more than 64 bits"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace flashattn
