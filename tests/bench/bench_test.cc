// The benchmark on the CPU backends: cells, TFLOP/s arithmetic, the table and the CSV.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/timer.h"
#include "test_util.h"

namespace flashattn {
namespace {

ProblemShape tiny_shape() {
  ProblemShape s;
  s.batch = 1;
  s.heads = 2;
  s.kv_heads = 1;
  s.head_dim = 32;
  s.dtype = DType::kBF16;
  return s;
}

BenchOptions cpu_options() {
  BenchOptions o;
  o.shape = tiny_shape();
  o.seqlens = {64, 128};
  o.backends = {"cpu-reference", "cpu-flash"};
  o.device = Device::cpu();
  o.warmup = 1;
  o.min_iters = 2;
  o.max_iters = 4;
  o.max_seconds_per_cell = 0.5;
  o.seed = testing::base_seed();
  return o;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) out.push_back(line);
  return out;
}

TEST(BenchTest, AttentionFlops) {
  ProblemShape s;
  s.batch = 2;
  s.heads = 3;
  s.seqlen_q = 5;
  s.seqlen_k = 7;
  s.head_dim = 64;
  EXPECT_DOUBLE_EQ(attention_flops(s), 4.0 * 2 * 3 * 5 * 7 * 64);
  s.causal = true;
  EXPECT_DOUBLE_EQ(attention_flops(s), 2.0 * 2 * 3 * 5 * 7 * 64);
  // FlashAttention's benchmark point: b=2, h=16, 16k, d=128 non-causal is 8.8 TFLOP.
  s = ProblemShape{};
  s.batch = 2;
  s.heads = 16;
  s.seqlen_q = s.seqlen_k = 16384;
  s.head_dim = 128;
  EXPECT_NEAR(attention_flops(s), 4.0 * 2 * 16 * 16384.0 * 16384.0 * 128, 1.0);
  s.seqlen_q = 0;
  EXPECT_EQ(attention_flops(s), 0.0);
}

// With a window the FLOPs count the pairs it keeps; causal as the window (-1, 0) keeps the
// halved convention; softcap, ALiBi and sinks count nothing.
TEST(BenchTest, AttentionFlopsOfVariants) {
  ProblemShape s;
  s.batch = 2;
  s.heads = 3;
  s.seqlen_q = s.seqlen_k = 100;
  s.head_dim = 64;
  s.window_left = 10;
  s.window_right = 0;
  // Row i sees min(i, 10) + 1 keys: 100 * 11 - (10 * 11) / 2 pairs per (batch, head).
  EXPECT_DOUBLE_EQ(attention_flops(s), 4.0 * 3 * 64 * 2 * (100 * 11 - 55));
  s.window_left = -1;
  s.causal = true;
  EXPECT_DOUBLE_EQ(attention_flops(s), 2.0 * 2 * 3 * 100 * 100 * 64);
  s.causal = false;
  s.window_right = -1;
  s.softcap = 30.0f;
  s.alibi = AlibiMode::kHeads;
  s.sinks = true;
  EXPECT_DOUBLE_EQ(attention_flops(s), 4.0 * 2 * 3 * 100 * 100 * 64);
}

TEST(BenchTest, Summarize) {
  bench::TimingSummary t = bench::summarize({3.0, 1.0, 2.0});
  EXPECT_EQ(t.median_ms, 2.0);
  EXPECT_EQ(t.min_ms, 1.0);
  EXPECT_EQ(t.max_ms, 3.0);
  t = bench::summarize({4.0, 1.0, 2.0, 10.0});
  EXPECT_EQ(t.median_ms, 3.0);
  t = bench::summarize({});
  EXPECT_EQ(t.median_ms, 0.0);
}

TEST(BenchTest, CpuBackendsProduceCells) {
  const BenchOptions o = cpu_options();
  BenchResult r;
  std::vector<std::string> progress;
  ASSERT_TRUE(run_bench(o, &r, [&](const std::string& l) { progress.push_back(l); }).ok());
  ASSERT_EQ(r.cells.size(), 4u);
  EXPECT_EQ(progress.size(), 8u);  // a start and an end line per cell
  const std::vector<std::string> order = {"cpu-reference", "cpu-flash"};
  for (std::size_t i = 0; i < r.cells.size(); ++i) {
    const BenchCell& c = r.cells[i];
    EXPECT_EQ(c.backend, order[i % 2]);
    EXPECT_EQ(c.seqlen, o.seqlens[i / 2]);
    ASSERT_EQ(c.status, CellStatus::kOk) << c.message;
    EXPECT_GE(c.iters, o.min_iters);
    EXPECT_LE(c.iters, o.max_iters);
    EXPECT_GT(c.median_ms, 0.0);
    EXPECT_LE(c.min_ms, c.median_ms);
    EXPECT_LE(c.median_ms, c.max_ms);
    // TFLOP/s = FLOPs / median time.
    ProblemShape s = o.shape;
    s.seqlen_q = s.seqlen_k = c.seqlen;
    EXPECT_NEAR(c.tflops, attention_flops(s) / (c.median_ms * 1e-3) / 1e12, 1e-9 * c.tflops);
    // q, k, v, out in bf16 and LSE in fp32; the CPU backends need no workspace.
    const std::size_t q = 1 * c.seqlen * 2 * 32, kv = 1 * c.seqlen * 1 * 32;
    EXPECT_EQ(c.memory_bytes, (2 * q + 2 * kv) * 2 + 1 * 2 * c.seqlen * 4);
    ASSERT_EQ(progress.size(), 8u);
    EXPECT_EQ(progress[2 * i].rfind("seqlen " + std::to_string(c.seqlen) + ": " + c.backend +
                                        ": start",
                                    0),
              0u)
        << progress[2 * i];
    EXPECT_EQ(progress[2 * i + 1].rfind("seqlen " + std::to_string(c.seqlen) + ": " + c.backend +
                                            " ",
                                        0),
              0u)
        << progress[2 * i + 1];
    EXPECT_NE(progress[2 * i + 1].find(" ms, "), std::string::npos) << progress[2 * i + 1];
  }
}

TEST(BenchTest, TableHasConventionAndOneRowPerLength) {
  const BenchOptions o = cpu_options();
  BenchResult r;
  ASSERT_TRUE(run_bench(o, &r).ok());
  const std::string table = r.table();
  const std::vector<std::string> ls = lines(table);
  ASSERT_GE(ls.size(), 5u) << table;
  EXPECT_NE(ls[0].find("FLOPs = 4 * batch * heads * seqlen_q * seqlen_k * head_dim"),
            std::string::npos)
      << table;
  EXPECT_NE(ls[0].find("halved for causal"), std::string::npos) << table;
  EXPECT_NE(ls[1].find("b=1 h=2/1"), std::string::npos) << table;
  // Header with a column block per backend and the speedup of the last over the first.
  EXPECT_NE(ls[2].find("cpu-reference ms"), std::string::npos) << table;
  EXPECT_NE(ls[2].find("cpu-flash ms"), std::string::npos) << table;
  EXPECT_NE(ls[2].find("TFLOP/s"), std::string::npos) << table;
  EXPECT_NE(ls[2].find("mem GB"), std::string::npos) << table;
  EXPECT_NE(ls[2].find("cpu-flash/cpu-reference"), std::string::npos) << table;
  // One row per length, starting with the length, ending with a speedup "N.NNx".
  int rows = 0;
  for (std::size_t i = 3; i < ls.size(); ++i) {
    if (ls[i].empty() || ls[i][0] == '#') continue;
    std::istringstream is(ls[i]);
    std::int64_t len = 0;
    is >> len;
    EXPECT_EQ(len, o.seqlens[static_cast<std::size_t>(rows)]) << ls[i];
    EXPECT_EQ(ls[i].back(), 'x') << ls[i];
    ++rows;
  }
  EXPECT_EQ(rows, 2) << table;
}

TEST(BenchTest, CsvHasHeaderAndOneLinePerCell) {
  BenchResult r;
  ASSERT_TRUE(run_bench(cpu_options(), &r).ok());
  const std::vector<std::string> ls = lines(r.csv());
  ASSERT_EQ(ls.size(), 1u + r.cells.size());
  EXPECT_EQ(ls[0].rfind("seqlen,backend,status,iters,median_ms,min_ms,max_ms,tflops,memory_bytes", 0),
            0u)
      << ls[0];
  EXPECT_EQ(ls[1].rfind("64,cpu-reference,ok,", 0), 0u) << ls[1];
  EXPECT_EQ(ls[4].rfind("128,cpu-flash,ok,", 0), 0u) << ls[4];
  // Every line has as many fields as the header (the message is quoted).
  const auto fields = [](const std::string& l) {
    int n = 1;
    bool quoted = false;
    for (char c : l) {
      if (c == '"') quoted = !quoted;
      if (c == ',' && !quoted) ++n;
    }
    return n;
  };
  for (const std::string& l : ls) EXPECT_EQ(fields(l), fields(ls[0])) << l;
}

TEST(BenchTest, UnavailableBackendIsAnUnsupportedCellNotAFailure) {
  BenchOptions o = cpu_options();
  o.seqlens = {32};
  o.backends = {"cpu-flash", "flash"};  // "flash" runs on CUDA tensors; the bench device is cpu
  BenchResult r;
  ASSERT_TRUE(run_bench(o, &r).ok());
  ASSERT_EQ(r.cells.size(), 2u);
  EXPECT_EQ(r.cells[0].status, CellStatus::kOk);
  EXPECT_EQ(r.cells[1].status, CellStatus::kUnsupported) << r.cells[1].message;
  EXPECT_FALSE(r.cells[1].message.empty());
  const std::string table = r.table();
  EXPECT_NE(table.find("unsupported"), std::string::npos) << table;
  EXPECT_NE(table.find("# seqlen 32 flash:"), std::string::npos) << table;
}

TEST(BenchTest, UnknownBackendIsAnErrorCell) {
  BenchOptions o = cpu_options();
  o.seqlens = {16};
  o.backends = {"no-such-backend"};
  BenchResult r;
  ASSERT_TRUE(run_bench(o, &r).ok());
  ASSERT_EQ(r.cells.size(), 1u);
  EXPECT_EQ(r.cells[0].status, CellStatus::kError);
  EXPECT_NE(r.cells[0].message.find("unknown"), std::string::npos) << r.cells[0].message;
}

TEST(BenchTest, TimeBudgetStopsRepetitions) {
  BenchOptions o = cpu_options();
  o.seqlens = {64};
  o.backends = {"cpu-flash"};
  o.min_iters = 2;
  o.max_iters = 1000;
  o.max_seconds_per_cell = 0.0;  // spent at once: exactly min_iters runs
  BenchResult r;
  ASSERT_TRUE(run_bench(o, &r).ok());
  ASSERT_EQ(r.cells.size(), 1u);
  EXPECT_EQ(r.cells[0].iters, 2);
}

// One line as each cell starts (with its estimate once the backend has a measured rate) and one as
// it ends, so a long cell shows what it is doing.
TEST(BenchTest, ProgressAsEachCellStartsAndEnds) {
  BenchOptions o = cpu_options();
  o.backends = {"cpu-flash"};
  o.seqlens = {64, 128};
  std::vector<std::string> progress;
  BenchResult r;
  ASSERT_TRUE(run_bench(o, &r, [&](const std::string& l) { progress.push_back(l); }).ok());
  ASSERT_EQ(progress.size(), 4u);
  EXPECT_EQ(progress[0], "seqlen 64: cpu-flash: start");
  EXPECT_EQ(progress[1].rfind("seqlen 64: cpu-flash ", 0), 0u) << progress[1];
  EXPECT_EQ(progress[2].rfind("seqlen 128: cpu-flash: start, est. ", 0), 0u) << progress[2];
  EXPECT_NE(progress[2].find(" s per run"), std::string::npos) << progress[2];
  EXPECT_EQ(progress[3].rfind("seqlen 128: cpu-flash ", 0), 0u) << progress[3];
}

// A cell whose estimate (FLOPs / the rate of the backend's previous cell) is over the budget is
// skipped, said so in the table, and costs no run.
TEST(BenchTest, CellEstimatedOverBudgetIsSkipped) {
  BenchOptions o = cpu_options();
  o.backends = {"cpu-reference"};
  o.seqlens = {64, 2048};          // 2048: 1.1e9 FLOPs, about 0.4 s a run at 2.5 GFLOP/s
  o.max_seconds_per_cell = 0.001;  // 1 ms: below the estimate on any host we run on
  std::vector<std::string> progress;
  BenchResult r;
  ASSERT_TRUE(run_bench(o, &r, [&](const std::string& l) { progress.push_back(l); }).ok());
  ASSERT_EQ(r.cells.size(), 2u);
  EXPECT_EQ(r.cells[0].status, CellStatus::kOk) << r.cells[0].message;
  const BenchCell& big = r.cells[1];
  EXPECT_EQ(big.status, CellStatus::kSkipped);
  EXPECT_EQ(big.iters, 0);
  EXPECT_GT(big.estimated_s, 0.001);
  // The estimate scales the measured rate: FLOPs grow 1024x from 64 to 2048.
  EXPECT_NEAR(big.estimated_s, r.cells[0].median_ms * 1e-3 * 1024, 1e-9 + 1e-6 * big.estimated_s);
  EXPECT_EQ(big.message.rfind("est. ", 0), 0u) << big.message;
  EXPECT_NE(big.message.find(" s per run > --max-seconds 0.001: "), std::string::npos)
      << big.message;
  EXPECT_NE(big.message.find(" FLOP/s, measured at seqlen 64"), std::string::npos) << big.message;
  ASSERT_EQ(progress.size(), 3u);  // start and end of the first cell, one line for the skipped
  EXPECT_EQ(progress[2], "seqlen 2048: cpu-reference skipped (" + big.message + ")");
  const std::string table = r.table();
  EXPECT_NE(table.find("skipped"), std::string::npos) << table;
  EXPECT_NE(table.find("# seqlen 2048 cpu-reference: est. "), std::string::npos) << table;
  EXPECT_NE(r.csv().find("2048,cpu-reference,skipped,0,"), std::string::npos) << r.csv();
}

// A first cell above kProbeFlopsCpu is estimated from a probe of about that size, never run whole:
// at seqlen 2^20, b=1 h=2 d=32 is 2.8e14 FLOPs (a day at 2.5 GFLOP/s).
TEST(BenchTest, FirstLargeCellIsEstimatedFromAProbe) {
  BenchOptions o = cpu_options();
  o.backends = {"cpu-reference", "cpu-flash"};
  o.seqlens = {std::int64_t{1} << 20};
  BenchResult r;
  ASSERT_TRUE(run_bench(o, &r).ok());
  ASSERT_EQ(r.cells.size(), 2u);
  for (const BenchCell& c : r.cells) {
    EXPECT_EQ(c.status, CellStatus::kSkipped) << c.backend << ": " << c.message;
    EXPECT_GT(c.estimated_s, 1e3) << c.backend;
    EXPECT_NE(c.message.find("probed at seqlen "), std::string::npos) << c.message;
  }
}

TEST(BenchTest, TableSaysHowManyRuns) {
  BenchOptions o = cpu_options();
  o.seqlens = {16};
  o.backends = {"cpu-flash"};
  BenchResult r;
  ASSERT_TRUE(run_bench(o, &r).ok());
  EXPECT_NE(r.table().find("median of 2-4 runs after 1 warm-up run;"), std::string::npos)
      << r.table();
  o.min_iters = o.max_iters = 3;
  o.warmup = 2;
  ASSERT_TRUE(run_bench(o, &r).ok());
  EXPECT_NE(r.table().find("median of 3 runs after 2 warm-up runs;"), std::string::npos)
      << r.table();
}

// Sizes that overflow 64 bits are refused before anything runs (the memory column showed
// -576460752.303 GB for b = 2^45 at 512).
TEST(BenchTest, SizesThatOverflowAreRejected) {
  BenchOptions o = cpu_options();
  o.shape.batch = std::int64_t{1} << 45;
  o.shape.heads = o.shape.kv_heads = 4;
  o.shape.head_dim = 64;
  o.shape.dtype = DType::kFP32;
  o.seqlens = {8, 512};
  BenchResult r;
  const Status st = run_bench(o, &r);
  EXPECT_EQ(st.code(), StatusCode::kInvalidShape) << st.to_string();
  EXPECT_NE(st.message().find("bench: batch * seqlen_q * heads * head_dim * 4 bytes (q in fp32)"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(r.cells.empty());
}

TEST(BenchTest, BadOptionsAreRejected) {
  BenchResult r;
  BenchOptions o = cpu_options();
  o.backends.clear();
  EXPECT_FALSE(run_bench(o, &r).ok());
  o = cpu_options();
  o.min_iters = 5;
  o.max_iters = 2;
  EXPECT_FALSE(run_bench(o, &r).ok());
  o = cpu_options();
  o.seqlens = {-1};
  EXPECT_FALSE(run_bench(o, &r).ok());
}

}  // namespace
}  // namespace flashattn
