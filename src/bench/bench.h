// The benchmark: the lesson's table. For each sequence length, each backend's median time, TFLOP/s,
// the memory it needed, flash's speedup over naive, and OOM where naive does not fit.
//
// Timing: CUDA events around each run, warm-up first, L2 flushed (a 2x-L2 buffer written) before
// every timed run, median of the repetitions; CPU backends use a steady clock.
// FLOPs: FlashAttention's convention, 4 * batch * heads * seqlen_q * seqlen_k * head_dim, halved
// for causal (the masked half is not counted); with a sliding window 4 * heads * head_dim * the
// (query, key) pairs the mask keeps (ShapeSizes::visible_pairs), since a window of 128 keys at
// seqlen 32k does 0.4% of the full product's work. The other variants (softcap, ALiBi, sinks)
// add elementwise work only and count nothing. The shape's variants apply to every cell.
//
// Bounding a cell: before a cell runs, its time per run is estimated as FLOPs / rate, the rate
// being what the same backend reached on its largest cell so far, or, for its first cell of more
// than kProbeFlops, what it reaches on a probe (the cell's shape cut down to about kProbeFlops).
// A cell estimated above max_seconds_per_cell per run is skipped (status "skipped", the message
// gives the estimate): a CPU cell at seqlen 2e6 (1.3e14 FLOPs at 6 GFLOP/s, 6 hours a run) is no
// longer run 5 times. A cell that runs makes its warm-up runs and at least min_iters timed runs,
// then repeats until max_seconds_per_cell is spent, so it takes at most about
// (warmup + min_iters + 1) * max_seconds_per_cell when the estimate holds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "flashattn/forward.h"
#include "verify/verify.h"

namespace flashattn {

double attention_flops(const ProblemShape& shape);

// A first cell of at most this many FLOPs runs without an estimate (it costs no more than a probe
// would); a larger one is estimated from a probe of about this size. CPU: 1e8 FLOPs take 40 ms on
// cpu-reference (2.5 GFLOP/s on 2 cores). CUDA: 1e10 FLOPs take 1 ms on naive (10-15 TFLOP/s on an
// H200), long enough that the ~10 us launch overhead costs the estimate under 1%.
constexpr double kProbeFlopsCpu = 1e8;
constexpr double kProbeFlopsCuda = 1e10;

struct BenchOptions {
  ProblemShape shape;                  // seqlen_q / seqlen_k replaced by each sweep length
  std::vector<std::int64_t> seqlens;   // seqlen_q = seqlen_k = each
  std::vector<std::string> backends;   // e.g. {"naive", "flash"}
  Device device = Device::cpu();
  int warmup = 2;
  int min_iters = 3, max_iters = 20;
  double max_seconds_per_cell = 2.0;   // stop repeating once this much time was spent; skip a
                                       // cell estimated above it per run (`flashattn bench
                                       // --max-seconds`)
  std::uint64_t seed = 0;
};

enum class CellStatus { kOk, kOutOfMemory, kUnsupported, kSkipped, kError };

struct BenchCell {
  std::string backend;
  std::int64_t seqlen = 0;
  CellStatus status = CellStatus::kOk;
  std::string message;       // for non-ok cells
  int iters = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double tflops = 0;
  std::size_t memory_bytes = 0;  // q, k, v, out, lse + backend workspace
  double estimated_s = 0;        // estimated seconds per run; 0 when it ran without an estimate
};

struct BenchResult {
  BenchOptions options;
  std::vector<BenchCell> cells;  // seqlen-major, backends in option order
  // The lesson's table: one row per seqlen, a column block per backend, flash/naive speedup.
  std::string table() const;
  std::string csv() const;
};

// Progress goes to `progress` when set: one line as each cell starts ("seqlen 4096: flash:
// start, est. 0.028 s per run") and one as it ends ("seqlen 4096: flash 3.21 ms, ..."); a skipped
// cell gets one line. kInvalidShape before anything runs when a size of the longest sequence
// length does not fit 64 bits (verify/verify.h shape_sizes).

Status run_bench(const BenchOptions& options, BenchResult* result,
                 const std::function<void(const std::string&)>& progress = {});

}  // namespace flashattn
