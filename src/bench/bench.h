// The benchmark: the lesson's table. For each sequence length, each backend's median time, TFLOP/s,
// the memory it needed, flash's speedup over naive, and OOM where naive does not fit.
//
// Timing: CUDA events around each run, warm-up first, L2 flushed (a 2x-L2 buffer written) before
// every timed run, median of the repetitions; CPU backends use a steady clock.
// FLOPs: FlashAttention's convention, 4 * batch * heads * seqlen_q * seqlen_k * head_dim, halved
// for causal (the masked half is not counted).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flashattn/forward.h"
#include "verify/verify.h"

namespace flashattn {

double attention_flops(const ProblemShape& shape);

struct BenchOptions {
  ProblemShape shape;                  // seqlen_q / seqlen_k replaced by each sweep length
  std::vector<std::int64_t> seqlens;   // seqlen_q = seqlen_k = each
  std::vector<std::string> backends;   // e.g. {"naive", "flash"}
  Device device = Device::cpu();
  int warmup = 2;
  int min_iters = 3, max_iters = 20;
  double max_seconds_per_cell = 2.0;   // stop repeating once this much time was spent
  std::uint64_t seed = 0;
};

enum class CellStatus { kOk, kOutOfMemory, kUnsupported, kError };

struct BenchCell {
  std::string backend;
  std::int64_t seqlen = 0;
  CellStatus status = CellStatus::kOk;
  std::string message;       // for non-ok cells
  int iters = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double tflops = 0;
  std::size_t memory_bytes = 0;  // q, k, v, out, lse + backend workspace
};

struct BenchResult {
  BenchOptions options;
  std::vector<BenchCell> cells;  // seqlen-major, backends in option order
  // The lesson's table: one row per seqlen, a column block per backend, flash/naive speedup.
  std::string table() const;
  std::string csv() const;
};

// Progress lines ("seqlen 4096: flash 3.21 ms") go to `progress` when set.
Status run_bench(const BenchOptions& options, BenchResult* result,
                 const std::function<void(const std::string&)>& progress = {});

}  // namespace flashattn
