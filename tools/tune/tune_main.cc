// The tile-shape tuners' main (tune_sm80, tune_sm90): times every candidate configuration of
// the kernel on FlashAttention's benchmark grid (bf16, batch * seqlen = 16384, heads = 2048 /
// head_dim), causal and not, and checks each against the CUDA-core "flash" backend on the same
// inputs. Prints one row per candidate and cell; the choice goes into Sm80ConfigFor
// (flash_sm80_config.h) or Sm90ConfigFor (flash_sm90_config.h).
//
//   [TUNE_HEAD_DIMS="64 128"] tune_sm80 [seqlen ...]   default 1024 4096 16384, every head dim
//
// Timing: candidates alternate within a cell (round-robin over repetitions), L2 flushed before
// every run, CUDA events, median of 15. TFLOP/s in FlashAttention's convention (4 b h s^2 d,
// halved for causal).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/timer.h"
#include "candidates.h"
#include "common/owned_tensor.h"
#include "cuda/common/runtime.h"

namespace flashattn::tune {
namespace {

void check(const Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "%s: %s: %s\n", kToolName, what, st.to_string().c_str());
    std::exit(1);
  }
}

double max_abs_diff(const OwnedTensor& a, const OwnedTensor& b) {
  std::vector<float> x, y;
  check(a.to_host_float(&x), "copy out");
  check(b.to_host_float(&y), "copy out");
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double d = std::fabs(static_cast<double>(x[i]) - y[i]);
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
  }
  return worst;
}

void run_cell(const std::vector<Candidate>& cands, std::int64_t seqlen, bool causal, int seed) {
  const int d = cands.front().head_dim;
  ProblemShape shape;
  shape.batch = std::max<std::int64_t>(1, 16384 / seqlen);
  shape.heads = shape.kv_heads = 2048 / d;
  shape.seqlen_q = shape.seqlen_k = seqlen;
  shape.head_dim = d;
  shape.causal = causal;
  const Device dev = Device::cuda(0);
  const std::vector<std::int64_t> qshape = {shape.batch, seqlen, shape.heads, d};
  OwnedTensor q, k, v, ref, out;
  for (OwnedTensor* t : {&q, &k, &v, &ref, &out}) {
    check(OwnedTensor::create(DType::kBF16, dev, qshape, t), "allocate");
  }
  check(q.fill_normal(seed, 0, 0.0f, 1.0f), "fill q");
  check(k.fill_normal(seed, 1, 0.0f, 1.0f), "fill k");
  check(v.fill_normal(seed, 2, 0.0f, 1.0f), "fill v");
  ForwardParams p;
  p.q = q.view(); p.k = k.view(); p.v = v.view(); p.out = ref.view();
  p.causal = causal;
  check(forward(p, "flash"), "reference (flash backend)");
  p.out = out.view();
  // A workspace for every candidate (flash-sm90's tile counter, for causal tiles: 16 bytes).
  cuda::DeviceBuffer workspace;
  check(workspace.allocate(1024, "candidates' workspace"), "workspace");
  p.workspace = workspace.data();
  p.workspace_size = workspace.bytes();

  bench::L2Flusher flusher;
  check(flusher.init(0), "L2 flusher");
  bench::CudaEventTimer timer;
  check(timer.init(), "timer");
  constexpr int kReps = 15;
  std::vector<std::vector<double>> ms(cands.size());
  std::vector<double> err(cands.size());
  for (std::size_t c = 0; c < cands.size(); ++c) {
    check(out.fill_nan(), "poison");
    check(cands[c].launch(p, nullptr), cands[c].name.c_str());
    check(cuda::status_from_cuda(cudaDeviceSynchronize(), "run"), cands[c].name.c_str());
    err[c] = max_abs_diff(out, ref);
  }
  for (int r = 0; r < kReps; ++r) {
    for (std::size_t c = 0; c < cands.size(); ++c) {
      check(flusher.flush(nullptr), "flush");
      check(timer.start(nullptr), "event");
      check(cands[c].launch(p, nullptr), cands[c].name.c_str());
      check(timer.stop(nullptr), "event");
      double t = 0;
      check(timer.elapsed_ms(&t), "event");
      ms[c].push_back(t);
    }
  }
  const double flops = attention_flops(shape);
  for (std::size_t c = 0; c < cands.size(); ++c) {
    const bench::TimingSummary s = bench::summarize(ms[c]);
    cudaFuncAttributes attr{};
    cudaFuncGetAttributes(&attr, cands[c].kernel);
    int blocks = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, cands[c].kernel, cands[c].threads,
                                                  cands[c].smem_bytes);
    std::printf("d%-3d %-6s s%-6lld %-22s regs %3d smem %3d KB blocks/SM %d  %8.3f ms  %6.1f "
                "TFLOP/s  max|diff| %.3g\n",
                d, causal ? "causal" : "full", static_cast<long long>(seqlen),
                cands[c].name.c_str(), attr.numRegs, cands[c].smem_bytes / 1024, blocks,
                s.median_ms, flops / (s.median_ms * 1e-3) / 1e12, err[c]);
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace flashattn::tune

int main(int argc, char** argv) {
  using namespace flashattn;
  std::vector<std::int64_t> seqlens;
  for (int i = 1; i < argc; ++i) {
    char* end = nullptr;
    const long long s = std::strtoll(argv[i], &end, 10);
    if (end == argv[i] || *end != '\0' || s < 1 || s > 16384 * 8) {
      std::fprintf(stderr, "%s: seqlen \"%s\" is not an integer in [1, 131072]\n",
                   tune::kToolName, argv[i]);
      return 2;
    }
    seqlens.push_back(s);
  }
  const std::vector<std::vector<tune::Candidate>> groups = tune::candidate_groups();
  // TUNE_HEAD_DIMS="64 128": only those groups (default every one); each must have candidates.
  std::set<int> dims;
  if (const char* env = std::getenv("TUNE_HEAD_DIMS")) {
    std::string tuned;
    for (const auto& g : groups) {
      if (!g.empty()) tuned += (tuned.empty() ? "" : " ") + std::to_string(g[0].head_dim);
    }
    std::istringstream in(env);
    std::string word;
    while (in >> word) {
      const bool known = std::any_of(groups.begin(), groups.end(), [&](const auto& g) {
        return !g.empty() && std::to_string(g[0].head_dim) == word;
      });
      if (!known) {
        std::fprintf(stderr, "%s: TUNE_HEAD_DIMS has \"%s\", expected head dims from {%s}\n",
                     tune::kToolName, word.c_str(), tuned.c_str());
        return 2;
      }
      dims.insert(std::stoi(word));
    }
  }
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "%s: %s\n", tune::kToolName, cuda::unavailable_reason().c_str());
    return 1;
  }
  if (seqlens.empty()) seqlens = {1024, 4096, 16384};
  int seed = 1;
  for (const auto& g : groups) {
    if (g.empty()) continue;
    if (!dims.empty() && dims.count(g[0].head_dim) == 0) continue;
    for (bool causal : {false, true}) {
      for (std::int64_t s : seqlens) tune::run_cell(g, s, causal, seed++);
    }
  }
  return 0;
}
