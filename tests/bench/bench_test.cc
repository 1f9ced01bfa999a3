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
  EXPECT_EQ(progress.size(), 4u);
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
    EXPECT_NE(progress[i].find("seqlen " + std::to_string(c.seqlen)), std::string::npos);
    EXPECT_NE(progress[i].find(c.backend), std::string::npos);
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
