// Caller-provided workspaces on the GPU (api/workspace.h, flashattn/forward.h): the naive
// backend's run() and forward() with a workspace of workspace_bytes() give the convenience
// path's results bit for bit; a too-small or missing one is refused with nothing written (the
// outputs nor the workspace); the convenience path refuses a capturing stream; and a forward with
// a caller workspace is captured into a CUDA graph and replayed with identical results, for every
// GPU backend. Every test reports skipped, not passed, on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "api/backend.h"
#include "cuda/common/runtime.h"
#include "flashattn/flashattn.h"
#include "test_util.h"
#include "variant_cases.h"
#include "verify/inputs.h"

namespace flashattn {
namespace {

using testing::dense;

#define ASSERT_CUDA_OK(call)                                                        \
  do {                                                                              \
    const cudaError_t _err = (call);                                                \
    ASSERT_EQ(_err, cudaSuccess) << #call << ": " << cudaGetErrorString(_err);      \
  } while (0)

// Every variant at once (window, softcap, ALiBi, sinks), dense; and packed varlen with an empty
// sequence and one without keys. bf16 d64 so that every GPU backend takes them.
ProblemShape all_variants_dense() {
  ProblemShape s = testing::with_sinks(testing::with_alibi(
      testing::with_softcap(testing::with_window(dense(2, 4, 2, 177, 301, 64, DType::kBF16, true),
                                                 96, -1),
                            30.0f),
      AlibiMode::kHeads));
  return s;
}
ProblemShape all_variants_varlen() {
  ProblemShape s = all_variants_dense();
  s.set_varlen({100, 0, 150, 60}, {120, 40, 0, 20});
  return s;
}

// Inputs and NaN-poisoned outputs on cuda:0 for `s`.
struct GpuRun {
  verifier::Inputs in;
  verifier::Outputs outs;
  ForwardParams params;
};

void make_run(const ProblemShape& s, GpuRun* r) {
  ASSERT_TRUE(verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kNormal,
                                    Device::cuda(0), testing::base_seed(), &r->in)
                  .ok());
  ASSERT_TRUE(verifier::make_outputs(s, InputLayout::kContiguous, s.dtype, Device::cuda(0),
                                     /*with_lse=*/true, &r->outs)
                  .ok());
  r->params = verifier::make_params(s, r->in, r->outs);
  ASSERT_TRUE(validate(r->params).ok()) << validate(r->params).to_string();
}

// O and LSE as floats (O converted from bf16 exactly).
struct HostOut {
  std::vector<float> o, l;
  // Bit for bit (a NaN left anywhere compares equal only to the same NaN).
  bool operator==(const HostOut& x) const {
    return o.size() == x.o.size() && l.size() == x.l.size() &&
           std::memcmp(o.data(), x.o.data(), o.size() * sizeof(float)) == 0 &&
           std::memcmp(l.data(), x.l.data(), l.size() * sizeof(float)) == 0;
  }
};

void read_outputs(const GpuRun& r, HostOut* h) {
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(r.outs.out.to_host_float(&h->o).ok());
  ASSERT_TRUE(r.outs.lse.to_host_float(&h->l).ok());
}

bool all_nan(const OwnedTensor& t) {
  std::vector<float> v;
  if (!t.to_host_float(&v).ok()) return false;
  for (float x : v) {
    if (!std::isnan(x)) return false;
  }
  return true;
}

void poison(GpuRun* r) {
  ASSERT_TRUE(r->outs.out.fill_nan().ok());
  ASSERT_TRUE(r->outs.lse.fill_nan().ok());
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

class GpuNaiveWorkspaceTest : public ::testing::TestWithParam<bool> {};  // varlen?

// forward() with the caller's workspace and naive's run() called directly give the convenience
// path's outputs bit for bit; the workspace is exactly workspace_bytes().
TEST_P(GpuNaiveWorkspaceTest, CallerWorkspaceMatchesTheConveniencePath) {
  FA_SKIP_WITHOUT_CUDA();
  const ProblemShape s = GetParam() ? all_variants_varlen() : all_variants_dense();
  GpuRun r;
  make_run(s, &r);
  std::size_t bytes = 0;
  ASSERT_TRUE(workspace_bytes(r.params, "naive", &bytes).ok());
  // (batch, heads, max_seqlen_q, max_seqlen_k) floats, dense or packed.
  EXPECT_EQ(bytes, static_cast<std::size_t>(s.batch * s.heads * s.seqlen_q * s.seqlen_k * 4));
  ASSERT_TRUE(forward(r.params, "naive").ok());
  HostOut ref, got;
  read_outputs(r, &ref);

  cuda::DeviceBuffer ws;
  ASSERT_TRUE(ws.allocate(bytes, "test workspace").ok());
  ForwardParams p = r.params;
  p.workspace = ws.data();
  p.workspace_size = bytes;
  poison(&r);
  ASSERT_TRUE(forward(p, "naive").ok());
  read_outputs(r, &got);
  EXPECT_TRUE(got == ref) << "O or LSE differs with the caller's workspace";

  poison(&r);
  cudaStream_t stream = nullptr;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Status st = find_backend("naive")->run(p, stream);
  EXPECT_TRUE(st.ok()) << st.to_string();
  ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
  read_outputs(r, &got);
  EXPECT_TRUE(got == ref) << "O or LSE differs from run() on a stream";
}

// One byte short, or none at all for run() itself: refused, and neither the outputs nor the
// workspace is written.
TEST_P(GpuNaiveWorkspaceTest, TooSmallWorkspaceIsRefusedWithoutWriting) {
  FA_SKIP_WITHOUT_CUDA();
  const ProblemShape s = GetParam() ? all_variants_varlen() : all_variants_dense();
  GpuRun r;
  make_run(s, &r);
  std::size_t bytes = 0;
  ASSERT_TRUE(workspace_bytes(r.params, "naive", &bytes).ok());
  cuda::DeviceBuffer ws;
  ASSERT_TRUE(ws.allocate(bytes, "test workspace").ok());
  ASSERT_CUDA_OK(cudaMemset(ws.data(), 0x3c, bytes));
  ForwardParams p = r.params;
  p.workspace = ws.data();
  p.workspace_size = bytes - 1;
  const Status st = forward(p, "naive");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("workspace_size = " + std::to_string(bytes - 1) +
                              " bytes, expected at least " + std::to_string(bytes) +
                              " for backend naive (the float32 S matrix"),
            std::string::npos)
      << st.message();
  const Status direct = find_backend("naive")->run(p, nullptr);
  EXPECT_EQ(direct.code(), StatusCode::kInvalidArgument) << direct.to_string();
  ForwardParams none = r.params;
  const Status null_ws = find_backend("naive")->run(none, nullptr);
  EXPECT_EQ(null_ws.code(), StatusCode::kInvalidArgument) << null_ws.to_string();
  EXPECT_NE(null_ws.message().find("workspace is null"), std::string::npos) << null_ws.message();
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(all_nan(r.outs.out)) << "O written by a refused call";
  EXPECT_TRUE(all_nan(r.outs.lse)) << "LSE written by a refused call";
  std::vector<std::uint8_t> back(bytes);
  ASSERT_CUDA_OK(cudaMemcpy(back.data(), ws.data(), bytes, cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], 0x3c) << "workspace written at " << i;
}

INSTANTIATE_TEST_SUITE_P(Naive, GpuNaiveWorkspaceTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return std::string(p.param ? "varlen" : "dense");
                         });

// Without a workspace forward() would allocate and synchronize: on a capturing stream it refuses
// instead, and the capture stays valid (nothing illegal was called in it).
TEST(GpuNaiveWorkspace, ConveniencePathRefusesACapturingStream) {
  FA_SKIP_WITHOUT_CUDA();
  GpuRun r;
  make_run(all_variants_dense(), &r);
  ASSERT_TRUE(forward(r.params, "naive").ok());  // loads the kernels outside the capture
  poison(&r);
  cudaStream_t stream = nullptr;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  const Status st = forward(r.params, "naive", stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("capturing a CUDA graph"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("pass params.workspace"), std::string::npos) << st.message();
  EXPECT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  if (graph != nullptr) cudaGraphDestroy(graph);
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
  EXPECT_TRUE(all_nan(r.outs.out));
}

struct GraphCase {
  const char* backend;
  bool varlen;
};

class GpuGraphTest : public ::testing::TestWithParam<GraphCase> {};

// Eager forward on a stream, then the same forward (the caller's workspace where the backend
// needs one) captured in global mode, instantiated, and replayed twice: each replay writes what
// the eager run wrote, bit for bit, and the capture itself wrote nothing.
TEST_P(GpuGraphTest, CapturedForwardReplaysIdentically) {
  FA_SKIP_WITHOUT_CUDA();
  const GraphCase& c = GetParam();
  FA_SKIP_UNLESS_BACKEND_USABLE(std::string(c.backend));
  GpuRun r;
  make_run(c.varlen ? all_variants_varlen() : all_variants_dense(), &r);
  std::size_t bytes = 0;
  ASSERT_TRUE(workspace_bytes(r.params, c.backend, &bytes).ok());
  // naive: its S matrix; flash-sm90: the tile counter of its persistent grid (these problems
  // have a window, so their tiles differ in cost).
  const std::string name = c.backend;
  EXPECT_EQ(bytes > 0, name == "naive" || name == "flash-sm90");
  cuda::DeviceBuffer ws;
  ASSERT_TRUE(ws.allocate(bytes, "test workspace").ok());
  ForwardParams p = r.params;
  p.workspace = ws.data();
  p.workspace_size = bytes;

  cudaStream_t stream = nullptr;
  ASSERT_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Eager (also loads the kernels and sets their attributes before the capture).
  Status st = forward(p, c.backend, stream);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
  HostOut ref, got;
  read_outputs(r, &ref);
  poison(&r);

  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  st = forward(p, c.backend, stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &graph);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(end, cudaSuccess) << cudaGetErrorString(end);
  std::size_t nodes = 0;
  ASSERT_CUDA_OK(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_GE(nodes, 1u);
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
  EXPECT_TRUE(all_nan(r.outs.out)) << "the capture ran the kernels";

  for (int replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    ASSERT_CUDA_OK(cudaStreamSynchronize(stream));
    read_outputs(r, &got);
    EXPECT_TRUE(got == ref) << "O or LSE differs from the eager run";
    poison(&r);
  }
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));
  ASSERT_CUDA_OK(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(
    Backends, GpuGraphTest,
    ::testing::Values(GraphCase{"naive", false}, GraphCase{"naive", true},
                      GraphCase{"flash", false}, GraphCase{"flash", true},
                      GraphCase{"flash-sm80", false}, GraphCase{"flash-sm80", true},
                      GraphCase{"flash-sm90", false}, GraphCase{"flash-sm90", true}),
    [](const ::testing::TestParamInfo<GraphCase>& p) {
      std::string b = p.param.backend;
      for (char& ch : b) ch = ch == '-' ? '_' : ch;
      return b + (p.param.varlen ? "_varlen" : "_dense");
    });

}  // namespace
}  // namespace flashattn
