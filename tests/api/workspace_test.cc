// The workspace logic of the API layer (api/workspace.h), on the CPU: check_workspace's verdicts
// and messages, run_with_workspace's three paths (the caller's workspace, none needed, a temporary
// one) through a CPU test double, OwnedWorkspace, and the public workspace_bytes() and forward()
// with a caller workspace on the CPU backends, and flash-sm90's tile-counter bytes.
// tests/cuda/gpu_workspace_test.cc does the GPU side (naive's run() with a caller workspace,
// CUDA-graph capture).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "api/backend.h"
#include "api/workspace.h"
#include "flashattn/flashattn.h"
#include "test_util.h"
#include "variant_cases.h"
#include "verify/inputs.h"

namespace flashattn {
namespace {

constexpr std::size_t kSaturated = std::numeric_limits<std::size_t>::max();

// A CPU backend that needs `need` workspace bytes; run() records the workspace it was given and
// returns `result`.
class WorkspaceDouble final : public Backend {
 public:
  explicit WorkspaceDouble(std::size_t need, Status result = Status::Ok())
      : need_(need), result_(std::move(result)) {}
  std::string_view name() const override { return "double"; }
  std::string_view description() const override { return "a test double"; }
  DeviceType device_type() const override { return DeviceType::kCPU; }
  Status usable(Device) const override { return Status::Ok(); }
  unsigned variants() const override { return kAllVariants; }
  Status supports(const ForwardParams&) const override { return Status::Ok(); }
  std::size_t workspace_bytes(const ForwardParams&) const override { return need_; }
  std::string_view workspace_purpose() const override { return "its test scratch"; }
  Status run(const ForwardParams& p, StreamHandle) const override {
    ++runs;
    seen_workspace = p.workspace;
    seen_size = p.workspace_size;
    // Writes every byte it was given: a workspace shorter than promised would show under ASan,
    // and the alignment is the kernels' (16 bytes, validate()).
    if (p.workspace != nullptr) {
      seen_aligned = reinterpret_cast<std::uintptr_t>(p.workspace) % 16 == 0;
      auto* bytes = static_cast<unsigned char*>(p.workspace);
      for (std::size_t i = 0; i < p.workspace_size; ++i) bytes[i] = 0x5a;
    }
    return result_;
  }
  mutable int runs = 0;
  mutable void* seen_workspace = nullptr;
  mutable std::size_t seen_size = 0;
  mutable bool seen_aligned = false;

 private:
  std::size_t need_;
  Status result_;
};

ForwardParams with_workspace(ForwardParams p, void* data, std::size_t bytes) {
  p.workspace = data;
  p.workspace_size = bytes;
  return p;
}

TEST(CheckWorkspace, NoneNeededIsOk) {
  const WorkspaceDouble b(0);
  EXPECT_TRUE(check_workspace(b, ForwardParams{}).ok());
  std::vector<unsigned char> buf(8);
  EXPECT_TRUE(check_workspace(b, with_workspace({}, buf.data(), 8)).ok());
}

TEST(CheckWorkspace, LargeEnoughIsOk) {
  const WorkspaceDouble b(4096);
  std::vector<unsigned char> buf(5000);
  EXPECT_TRUE(check_workspace(b, with_workspace({}, buf.data(), 4096)).ok());
  EXPECT_TRUE(check_workspace(b, with_workspace({}, buf.data(), 5000)).ok());
}

TEST(CheckWorkspace, TooSmallNamesBothSizesAndTheBackend) {
  const WorkspaceDouble b(4096);
  std::vector<unsigned char> buf(4096);
  for (std::size_t given : {std::size_t{0}, std::size_t{1}, std::size_t{4095}}) {
    const Status st = check_workspace(b, with_workspace({}, buf.data(), given));
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("workspace_size = " + std::to_string(given) +
                                " bytes, expected at least 4096 for backend double "
                                "(its test scratch)"),
              std::string::npos)
        << st.message();
  }
  const Status st = check_workspace(b, ForwardParams{});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("workspace is null, expected 4096 bytes for backend double"),
            std::string::npos)
      << st.message();
}

TEST(RunWithWorkspace, NoneNeededPassesTheParamsThrough) {
  const WorkspaceDouble b(0);
  ASSERT_TRUE(run_with_workspace(b, ForwardParams{}, nullptr).ok());
  EXPECT_EQ(b.runs, 1);
  EXPECT_EQ(b.seen_workspace, nullptr);
  std::vector<unsigned char> buf(16);
  ASSERT_TRUE(run_with_workspace(b, with_workspace({}, buf.data(), 16), nullptr).ok());
  EXPECT_EQ(b.seen_workspace, buf.data()) << "a workspace nobody needs is left as given";
}

TEST(RunWithWorkspace, TheCallersWorkspaceIsUsedAsGiven) {
  const WorkspaceDouble b(1000);
  alignas(64) static unsigned char buf[1024];
  ASSERT_TRUE(run_with_workspace(b, with_workspace({}, buf, 1024), nullptr).ok());
  EXPECT_EQ(b.runs, 1);
  EXPECT_EQ(b.seen_workspace, buf);
  EXPECT_EQ(b.seen_size, 1024u);
}

TEST(RunWithWorkspace, TooSmallIsRefusedBeforeRun) {
  const WorkspaceDouble b(1000);
  std::vector<unsigned char> buf(999, 0x11);
  const Status st = run_with_workspace(b, with_workspace({}, buf.data(), 999), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  EXPECT_NE(st.message().find("workspace_size = 999 bytes, expected at least 1000"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(b.runs, 0) << "run() called with a short workspace";
  for (unsigned char x : buf) ASSERT_EQ(x, 0x11) << "the workspace was written";
}

TEST(RunWithWorkspace, NoneGivenAllocatesExactlyWhatIsNeeded) {
  for (std::size_t need : {std::size_t{1}, std::size_t{4096}, std::size_t{1} << 20}) {
    const WorkspaceDouble b(need);
    ASSERT_TRUE(run_with_workspace(b, ForwardParams{}, nullptr).ok());
    EXPECT_EQ(b.runs, 1);
    EXPECT_NE(b.seen_workspace, nullptr);
    EXPECT_EQ(b.seen_size, need);
    EXPECT_TRUE(b.seen_aligned);
  }
}

TEST(RunWithWorkspace, RunsErrorComesBackFromTheTemporaryPath) {
  const WorkspaceDouble b(64, Status(StatusCode::kCudaError, "double: a launch failed"));
  const Status st = run_with_workspace(b, ForwardParams{}, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kCudaError);
  EXPECT_EQ(st.message(), "double: a launch failed");
}

// A count too large for 64 bits: run() is asked without a workspace (it names the factors; the
// naive backend's message is tested on the GPU), nothing is allocated.
TEST(RunWithWorkspace, SaturatedCountGoesToRunWhichRefuses) {
  const WorkspaceDouble b(kSaturated, Status(StatusCode::kOutOfMemory, "double: 2^70 bytes"));
  const Status st = run_with_workspace(b, ForwardParams{}, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(b.runs, 1);
  EXPECT_EQ(b.seen_workspace, nullptr);
}

TEST(OwnedWorkspace, AllocatesAttachesAndFrees) {
  const WorkspaceDouble b(300);
  OwnedWorkspace ws;
  ASSERT_TRUE(ws.allocate(b, ForwardParams{}).ok());
  ASSERT_NE(ws.data(), nullptr);
  EXPECT_EQ(ws.bytes(), 300u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ws.data()) % 64, 0u);
  const ForwardParams p = ws.attach(ForwardParams{});
  EXPECT_EQ(p.workspace, ws.data());
  EXPECT_EQ(p.workspace_size, 300u);
  EXPECT_TRUE(check_workspace(b, p).ok());
  OwnedWorkspace none;
  ASSERT_TRUE(none.allocate(WorkspaceDouble(0), ForwardParams{}).ok());
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_EQ(none.bytes(), 0u);
}

TEST(OwnedWorkspace, HostOutOfMemoryNamesTheBytes) {
  // 2^62 bytes: no host has them, and the allocation fails (it does not throw).
  const WorkspaceDouble b(std::size_t{1} << 62);
  OwnedWorkspace ws;
  const Status st = ws.allocate(b, ForwardParams{});
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory) << st.to_string();
  EXPECT_NE(st.message().find("backend double: its workspace (its test scratch) needs"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find(std::to_string(std::size_t{1} << 62) + " bytes"), std::string::npos)
      << st.message();
  EXPECT_EQ(ws.data(), nullptr);
}

// The public entry points on the CPU backends: they need no workspace, and one given is accepted
// and ignored (the outputs match a run without it).
TEST(PublicWorkspace, CpuBackendsNeedNoneAndAcceptOne) {
  ProblemShape s = testing::with_sinks(
      testing::with_window(testing::dense(1, 2, 1, 40, 50, 32, DType::kBF16, true), 8, -1));
  verifier::Inputs in;
  ASSERT_TRUE(verifier::make_inputs(s, InputLayout::kContiguous, InputKind::kNormal,
                                    Device::cpu(), testing::base_seed(), &in)
                  .ok());
  for (const char* backend : {"cpu-flash", "cpu-reference"}) {
    SCOPED_TRACE(backend);
    verifier::Outputs plain, with;
    ASSERT_TRUE(
        verifier::make_outputs(s, InputLayout::kContiguous, s.dtype, Device::cpu(), true, &plain)
            .ok());
    ASSERT_TRUE(
        verifier::make_outputs(s, InputLayout::kContiguous, s.dtype, Device::cpu(), true, &with)
            .ok());
    const ForwardParams p = verifier::make_params(s, in, plain);
    std::size_t bytes = 1;
    ASSERT_TRUE(workspace_bytes(p, backend, &bytes).ok());
    EXPECT_EQ(bytes, 0u);
    ASSERT_TRUE(forward(p, backend).ok());
    alignas(64) static unsigned char buf[256];
    ForwardParams q = verifier::make_params(s, in, with);
    q.workspace = buf;
    q.workspace_size = sizeof(buf);
    const Status st = forward(q, backend);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<float> a, b;
    ASSERT_TRUE(plain.out.to_host_float(&a).ok());
    ASSERT_TRUE(with.out.to_host_float(&b).ok());
    EXPECT_EQ(a, b);
  }
}

// flash-sm90's tile counter (host code: its workspace_bytes() reads the params only): 16 bytes
// for the problems whose work tiles differ in cost (causal, a window, varlen), which its
// persistent grid hands out from the counter; none for dense ones, which it deals out statically.
TEST(PublicWorkspace, FlashSm90CountsItsTileCounterForUnequalTiles) {
#if !defined(FLASHATTN_TEST_HAVE_SM90A)
  GTEST_SKIP() << "flash-sm90 is not built (no sm_90a in FLASHATTN_CUDA_ARCHS)";
#else
  const Device gpu = Device::cuda(0);
  auto params = [&](bool causal, std::int64_t left, std::int64_t right) {
    ForwardParams p;
    p.q = TensorView::contiguous(nullptr, DType::kBF16, gpu, {2, 300, 4, 128});
    p.k = TensorView::contiguous(nullptr, DType::kBF16, gpu, {2, 500, 4, 128});
    p.v = p.k;
    p.out = p.q;
    p.causal = causal;
    p.window_left = left;
    p.window_right = right;
    return p;
  };
  struct Case {
    bool causal;
    std::int64_t left, right;
    std::size_t bytes;
  };
  for (const Case& c : {Case{false, -1, -1, 0}, Case{true, -1, -1, 16}, Case{false, 64, -1, 16},
                        Case{false, -1, 8, 16}, Case{false, 64, 8, 16}}) {
    SCOPED_TRACE(std::to_string(c.causal) + " " + std::to_string(c.left) + "," +
                 std::to_string(c.right));
    std::size_t bytes = 99;
    const Status st = workspace_bytes(params(c.causal, c.left, c.right), "flash-sm90", &bytes);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(bytes, c.bytes);
  }
#endif
}

}  // namespace
}  // namespace flashattn
