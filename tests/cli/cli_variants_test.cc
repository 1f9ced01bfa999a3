// The variant flags of the `flashattn` tool end to end (verify, bench, run): every flag on the
// CPU, every bad value a one-line usage error (exit 2) naming the flag, expected vs actual, and
// run's side-input files (ALiBi slopes, sinks, varlen offsets) against a direct forward() call.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "api/backend.h"
#include "flashattn/flashattn.h"
#include "npy.h"
#include "test_util.h"

#ifndef FLASHATTN_CLI_PATH
#error "FLASHATTN_CLI_PATH must be defined by tests/CMakeLists.txt"
#endif

namespace flashattn {
namespace {

constexpr const char* kNoGpu = "CUDA_VISIBLE_DEVICES=";

bool cuda_backends_usable() {
  for (const BackendInfo& b : list_backends()) {
    if (b.device_type == DeviceType::kCUDA && b.usable) return true;
  }
  return false;
}

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::size_t count_lines(const std::string& text) {
  std::size_t n = 0;
  for (char c : text) n += c == '\n';
  if (!text.empty() && text.back() != '\n') ++n;
  return n;
}

class CliVariantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "flashattn_cli_variants_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl + "/";
  }
  void TearDown() override {
    if (!HasFailure() && std::system(("rm -rf '" + dir_ + "'").c_str()) != 0) ADD_FAILURE();
  }
  std::string path(const std::string& name) const { return dir_ + name; }

  CliResult cli(const std::string& args, const std::string& env = "") {
    const std::string out = path("stdout.txt"), err = path("stderr.txt");
    const std::string command = (env.empty() ? "" : "env " + env + " ") + std::string("'") +
                                FLASHATTN_CLI_PATH + "' " + args + " >'" + out + "' 2>'" + err +
                                "'";
    const int status = std::system(command.c_str());
    CliResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_text(out);
    r.err = read_text(err);
    std::remove(out.c_str());
    std::remove(err.c_str());
    return r;
  }

  bool exists(const std::string& name) const { return std::ifstream(path(name)).good(); }

  std::string dir_;
};

// ---------------------------------------------------------------------------------------------
// Help and usage errors

TEST_F(CliVariantsTest, HelpDocumentsEveryVariantFlag) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"verify",
       {"--window L,R", "--softcap X", "--alibi none|heads|batch-heads", "--sinks",
        "--varlen random|L1,L2,...", "--varlen-k L1,L2,...", "--seqused-k N1,N2,..."}},
      {"bench", {"--window L,R", "--softcap X", "--alibi none|heads|batch-heads", "--sinks"}},
      {"run",
       {"--window L,R", "--softcap X", "--alibi-slopes FILE", "--sinks FILE", "--cu-seqlens-q FILE",
        "--cu-seqlens-k FILE", "--max-seqlen-q N", "--max-seqlen-k N"}},
  };
  for (const auto& [cmd, flags] : expected) {
    const CliResult r = cli(cmd + " --help");
    EXPECT_EQ(r.exit_code, 0);
    for (const std::string& flag : flags) {
      // The flag and its metavar, then the help on the same line or (long ones) the next.
      const bool documented = r.out.find("\n  " + flag + " ") != std::string::npos ||
                              r.out.find("\n  " + flag + "\n") != std::string::npos;
      EXPECT_TRUE(documented) << cmd << " does not document " << flag << ":\n" << r.out;
    }
    // The semantics, not just the names.
    EXPECT_NE(r.out.find("-1 leaves a side unbounded"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("X * tanh(scores / X)"), std::string::npos) << r.out;
  }
  const CliResult verify = cli("verify --help");
  for (const char* text : {"slope_h = 2^(-8 (h + 1) / heads)", "slope_h * (1 + b / batch)",
                           "joins every row's softmax denominator", "one sequence empty",
                           "first N_b keys"}) {
    EXPECT_NE(verify.out.find(text), std::string::npos) << text << "\n" << verify.out;
  }
  // bench and run have no --varlen / --alibi of their own kind.
  EXPECT_EQ(cli("bench --help").out.find("--varlen"), std::string::npos);
  EXPECT_EQ(cli("run --help").out.find("--alibi "), std::string::npos);
}

TEST_F(CliVariantsTest, BadValuesAreOneLineUsageErrors) {
  const std::string window_expected =
      "expects L,R: two integers >= -1 (keys left and right of the diagonal; -1 is unbounded), "
      "got ";
  const std::string files = " --q q.npy --k k.npy --v v.npy --out o.npy";
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {"verify --window 5", "flashattn verify: --window " + window_expected + "\"5\"\n"},
      {"verify --window 64,-2", "--window " + window_expected + "\"64,-2\""},
      {"verify --window a,0", "--window " + window_expected + "\"a,0\""},
      {"verify --window 1,2,3", "--window " + window_expected + "\"1,2,3\""},
      {"verify --window ,", "--window " + window_expected + "\",\""},
      {"verify --window", "flashattn verify: --window expects a value (L,R)\n"},
      {"bench --window -3,0", "flashattn bench: --window " + window_expected + "\"-3,0\"\n"},
      {"run --window 8" + files, "flashattn run: --window " + window_expected + "\"8\"\n"},
      {"verify --causal --window 8,4",
       "flashattn verify: --window 8,4 with --causal: causal fixes R = 0 (give --window 8,0, or "
       "drop --causal)\n"},
      {"bench --causal --window 8,4", "--window 8,4 with --causal: causal fixes R = 0"},
      {"run --causal --window 8,4" + files, "--window 8,4 with --causal: causal fixes R = 0"},
      {"verify --softcap -1", "flashattn verify: --softcap expects a number >= 0, got \"-1\"\n"},
      {"verify --softcap inf", "--softcap expects a number, got \"inf\""},
      {"bench --softcap abc", "--softcap expects a number, got \"abc\""},
      {"run --softcap -0.5" + files, "--softcap expects a number >= 0, got \"-0.5\""},
      {"verify --alibi diagonal",
       "flashattn verify: --alibi expects one of none, heads, batch-heads, got \"diagonal\"\n"},
      {"bench --alibi 2", "--alibi expects one of none, heads, batch-heads, got \"2\""},
      {"verify --sinks=yes", "--sinks takes no value"},
      {"run --sinks" + files, "flashattn run: --sinks expects a value (FILE)\n"},
      {"run --alibi heads" + files, "unknown flag --alibi"},
      {"verify --varlen abc",
       "flashattn verify: --varlen expects random or lengths L1,L2,... (integers >= 0, one per "
       "sequence), got \"abc\"\n"},
      {"verify --varlen 17,-1", "--varlen expects random or lengths L1,L2,... (integers >= 0, one "
                                "per sequence), got \"17,-1\""},
      {"verify --varlen 17,,3", "got \"17,,3\""},
      {"verify --varlen-k 3,4", "flashattn verify: --varlen-k needs --varlen (variable-length "
                                "sequences)\n"},
      {"verify --seqused-k 3", "--seqused-k needs --varlen"},
      {"verify --varlen 3,4 --varlen-k 5",
       "flashattn verify: --varlen-k has 1 length, expected 2 (one per sequence of --varlen)\n"},
      {"verify --varlen 3,4 --varlen-k 5,x", "--varlen-k expects an integer, got \"x\""},
      {"verify --varlen 3,4 --varlen-k 5,-1", "--varlen-k expects an integer >= 0, got \"-1\""},
      {"verify --varlen 3,4 --batch 3", "--batch 3 disagrees with --varlen's 2 sequences"},
      {"verify --varlen 3,4 --seqlen-q 5",
       "--seqlen-q does not apply with --varlen LIST: the lengths are given"},
      {"verify --varlen 3,4 --seqlen-k 5", "--seqlen-k does not apply with --varlen LIST"},
      {"verify --varlen random --batch 0", "--varlen random needs --batch >= 1, got 0"},
      {"verify --varlen random --varlen-k 3,4 --seqlen-k 9",
       "--seqlen-k does not apply with --varlen-k"},
      {"verify --varlen 3,4 --seqused-k 3,5",
       "flashattn verify: --seqused-k[1] = 5, expected 0 to --varlen[1] = 4\n"},
      {"verify --varlen 3,4 --varlen-k 2,2 --seqused-k 3,1",
       "--seqused-k[0] = 3, expected 0 to --varlen-k[0] = 2"},
      {"verify --varlen 3,4 --seqused-k 1", "--seqused-k has 1 entries, expected 2"},
      {"verify --varlen 2000000000,2000000000",
       "the sum of --varlen exceeds 2147483647 (cu_seqlens_q is int32)"},
      {"bench --varlen random", "unknown flag --varlen"},
      {"run --cu-seqlens-q c.npy" + files,
       "flashattn run: --cu-seqlens-q needs --cu-seqlens-k: variable length takes the offsets of "
       "both\n"},
      {"run --cu-seqlens-k c.npy" + files, "--cu-seqlens-k needs --cu-seqlens-q"},
      {"run --max-seqlen-q 5" + files,
       "flashattn run: --max-seqlen-q applies only with --cu-seqlens-q and --cu-seqlens-k "
       "(variable length)\n"},
      {"run --max-seqlen-k -1" + files, "--max-seqlen-k expects an integer >= 0, got \"-1\""},
      {"run --cu-seqlens-q o.npy --cu-seqlens-k c.npy" + files,
       "--out o.npy names the same file as the input --cu-seqlens-q o.npy"},
  };
  for (const Case& c : cases) {
    const CliResult r = cli(c.args, kNoGpu);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << c.args << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    if (c.expected.back() == '\n') {
      EXPECT_EQ(r.err, c.expected) << c.args;
    } else {
      EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.args << "\nstderr: " << r.err;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// verify

TEST_F(CliVariantsTest, VerifyEveryVariantTogetherOnCpuFlash) {
  // The default CPU shape (b2 h8 d128 fp32, 512 per sequence on average): random lengths with an
  // empty sequence, a 64-key window keeping the reference affordable.
  const std::string args =
      "verify --device cpu --backend cpu-flash --window 64,0 --softcap 30 --alibi heads --sinks "
      "--varlen random";
  const CliResult r = cli(args);
  EXPECT_EQ(r.exit_code, 0) << args << "\nstdout:\n" << r.out << "stderr:\n" << r.err;
  EXPECT_EQ(r.out.rfind("PASS b=2 h=8/8 ", 0), 0u) << r.out;
  for (const char* text : {" window=64,0 softcap=30 alibi=heads sinks varlen q=", "cpu-flash",
                           "reference cpu-reference (float64)"}) {
    EXPECT_NE(r.out.find(text), std::string::npos) << text << "\n" << r.out;
  }
}

TEST_F(CliVariantsTest, VerifyEachVariantFlagOnCpu) {
  const std::string shape = "verify --device cpu --batch 2 --heads 4 --kv-heads 2 --head-dim 32 "
                            "--seed " + std::to_string(testing::base_seed());
  struct Case {
    std::string flags, shown;
  };
  const std::vector<Case> cases = {
      {"--window 16,4", " window=16,4"},
      {"--window -1,0", " window=-1,0"},
      {"--window 8,0 --causal --dtype bf16", " causal window=8,0"},
      {"--softcap 5", " softcap=5"},
      {"--softcap 0", ""},
      {"--alibi heads", " alibi=heads"},
      {"--alibi batch-heads --dtype fp16", " alibi=batch-heads"},
      {"--alibi none", ""},
      {"--sinks", " sinks"},
      {"--sinks --causal --seqlen-q 91 --seqlen-k 13", " causal sinks"},  // rows without keys
      {"--varlen random --causal", " causal varlen q="},
      {"--backend cpu-reference --window 3,3 --softcap 10 --alibi heads --sinks",
       " window=3,3 softcap=10 alibi=heads sinks"},
  };
  for (const Case& c : cases) {
    const bool own_lengths = c.flags.find("--seqlen-q") != std::string::npos;
    const std::string args =
        shape + (own_lengths ? " " : " --seqlen-q 57 --seqlen-k 91 ") + c.flags;
    const CliResult r = cli(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\nstdout:\n" << r.out << "stderr:\n" << r.err;
    EXPECT_NE(r.out.find("d=32 "), std::string::npos) << r.out;
    if (!c.shown.empty()) {
      EXPECT_NE(r.out.find(c.shown), std::string::npos) << c.shown << "\n" << r.out;
    }
  }
}

TEST_F(CliVariantsTest, VerifyVarlenListsOnCpu) {
  const std::string base = "verify --device cpu --heads 4 --kv-heads 2 --head-dim 64 ";
  struct Case {
    std::string flags, shown;
  };
  const std::vector<Case> cases = {
      // A zero-length sequence, the same lengths for q and k.
      {"--varlen 17,0,113", "b=3 h=4/2 sq=113 sk=113 d=64 fp32 varlen q=17,0,113 k=17,0,113"},
      // Keys of their own: sequence 2 has no keys (rows without keys), causal with lq > lk.
      {"--varlen 17,0,113 --varlen-k 33,5,0 --causal --dtype bf16",
       "sq=113 sk=33 d=64 bf16 causal varlen q=17,0,113 k=33,5,0"},
      {"--varlen 40,9 --varlen-k 50,9 --seqused-k 20,0 --sinks",
       "varlen q=40,9 k=50,9 seqused_k=20,0"},
      {"--varlen 64,64 --batch 2 --layout bhsd --window 8,8", "window=8,8 varlen q=64,64"},
      {"--varlen 31,0,90 --layout padded-heads --inputs very-negative", "varlen q=31,0,90"},
      {"--varlen random --batch 5 --seqlen-q 60 --seqlen-k 80 --alibi batch-heads",
       "b=5 h=4/2"},
      {"--varlen random --batch 4 --varlen-k 10,20,30,40", "k=10,20,30,40"},
  };
  for (const Case& c : cases) {
    const std::string args = base + c.flags;
    const CliResult r = cli(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\nstdout:\n" << r.out << "stderr:\n" << r.err;
    EXPECT_NE(r.out.find(c.shown), std::string::npos) << c.shown << "\n" << r.out;
  }
}

// With a window the CPU reference limit counts the pairs the mask keeps: seqlen 1e5 with a
// 64-key window verifies on the CPU (6.5e6 pairs), where the full product (1e10) is refused.
TEST_F(CliVariantsTest, VerifyReferenceLimitCountsWindowedPairs) {
  const std::string shape =
      "verify --device cpu --batch 1 --heads 1 --head-dim 8 --seqlen-q 30000 ";
  const CliResult full = cli(shape);
  EXPECT_EQ(full.exit_code, 1) << full.err;
  EXPECT_NE(full.err.find("batch * heads * seqlen_q * seqlen_k * head_dim = 1 * 1 * 30000 * "
                          "30000 * 8 = 7200000000 multiply-adds exceeds --cpu-reference-limit"),
            std::string::npos)
      << full.err;
  const CliResult refused = cli(shape + "--window 64,0 --cpu-reference-limit 1e6");
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_NE(refused.err.find("heads * head_dim * (query, key) pairs the mask keeps = 1 * 8 * "
                             "1947920 = 15583360 multiply-adds exceeds --cpu-reference-limit = "
                             "1e+06"),
            std::string::npos)
      << refused.err;
  const CliResult windowed = cli(shape + "--window 64,0");
  EXPECT_EQ(windowed.exit_code, 0) << windowed.out << windowed.err;
}

// A backend that does not implement a variant fails with the registry's message (exit 1, one
// line), not a crash or a report against a reference that ignored it. The CPU backends implement
// every variant since branch i9-cpu; before, this was the registry's refusal.
TEST_F(CliVariantsTest, VerifySoftcapOnCpuFlashIsTheRegistrysAnswer) {
  const CliResult r = cli("verify --device cpu --backend cpu-flash --softcap 30 --batch 1 "
                          "--heads 2 --seqlen-q 33 --head-dim 32");
  if ((find_backend("cpu-flash")->variants() & kVariantSoftcap) != 0) {
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("PASS b=1 h=2/2 sq=33 sk=33 d=32 fp32 softcap=30"), std::string::npos)
        << r.out;
    return;
  }
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "flashattn verify: could not verify b=1 h=2/2 sq=33 sk=33 d=32 fp32 softcap=30 on cpu "
            "(backend cpu-flash, seed 0): unsupported: backend \"cpu-flash\" does not implement "
            "softcap\n");
}

// The same on the GPU until the CUDA backends implement the variants.
TEST_F(CliVariantsTest, VerifyOnCudaWithAVariantTheBackendLacks) {
  FA_SKIP_WITHOUT_CUDA();
  if (!cuda_backends_usable()) GTEST_SKIP() << "skipped: GPU kernels not built";
  for (const char* backend : {"", " --backend flash", " --backend flash-sm80",
                                     " --backend naive"}) {
    const CliResult r = cli(std::string("verify --device cuda --softcap 30 --seqlen-q 64") + backend);
    if (r.exit_code == 0) continue;  // the backend implements softcap now (and passed)
    EXPECT_EQ(r.exit_code, 1) << backend << "\n" << r.out << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("does not implement softcap"), std::string::npos) << r.err;
  }
}

// ---------------------------------------------------------------------------------------------
// bench

TEST_F(CliVariantsTest, BenchAppliesTheVariantsToEveryCell) {
  const std::string csv = path("bench.csv");
  const CliResult r = cli(
      "bench --device cpu --batch 1 --heads 2 --head-dim 32 --seqlens 32,64 --iters 1 --warmup 0 "
      "--window 16,0 --softcap 30 --alibi heads --sinks --csv '" + csv + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("# flashattn bench --device cpu --batch 1 --heads 2 --kv-heads 2 "
                       "--head-dim 32 --dtype fp32 --window 16,0 --softcap 30 --alibi heads "
                       "--sinks --seed 0"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("# b=1 h=2/2 d=32 fp32 window=16,0 softcap=30 alibi=heads sinks,"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("pairs the window keeps"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("unsupported"), std::string::npos) << r.out;
  const std::string text = read_text(csv);
  EXPECT_NE(text.find(",causal,window_left,window_right,softcap,alibi,sinks,message\n"),
            std::string::npos)
      << text;
  // Each row: ..., causal 0, window 16,0, softcap 30, alibi heads, sinks 1, message.
  EXPECT_NE(text.find(",fp32,0,16,0,30,heads,1,\"\""), std::string::npos) << text;
  // FLOPs of the window: 4 * heads * head_dim * pairs, 32 rows seeing min(i, 16) + 1 keys each.
  std::int64_t pairs = 0;
  for (int i = 0; i < 32; ++i) pairs += std::min(i, 16) + 1;
  EXPECT_NE(text.find("," + std::to_string(4 * 2 * 32 * pairs) + ",1,2,2,32,fp32,"),
            std::string::npos)
      << text;
}

// ---------------------------------------------------------------------------------------------
// run: side-input files

npy::Array floats(std::vector<std::int64_t> shape, std::uint64_t salt) {
  npy::Array a;
  a.type = npy::ElemType::kFloat32;
  a.shape = std::move(shape);
  a.values.resize(static_cast<std::size_t>(a.numel()));
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    a.values[i] = 0.5f + 1.5f * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(salt));
  }
  return a;
}

npy::Array ints(std::vector<std::int64_t> values, npy::ElemType type = npy::ElemType::kInt64) {
  npy::Array a;
  a.type = type;
  a.shape = {static_cast<std::int64_t>(values.size())};
  a.ints = std::move(values);
  return a;
}

class CliRunVariantsTest : public CliVariantsTest {
 protected:
  void write(const std::string& name, const npy::Array& a) {
    std::string error;
    ASSERT_TRUE(npy::write(path(name), a, &error)) << error;
  }
  npy::Array read(const std::string& name) {
    npy::Array a;
    std::string error;
    EXPECT_TRUE(npy::read(path(name), &a, &error)) << error;
    return a;
  }
  std::string io() const {
    return " --q '" + path("q.npy") + "' --k '" + path("k.npy") + "' --v '" + path("v.npy") +
           "' --out '" + path("o.npy") + "' --lse '" + path("lse.npy") + "'";
  }
  std::string file(const std::string& flag, const std::string& name) const {
    return " " + flag + " '" + path(name) + "'";
  }
};

// Dense with every variant: run's O and LSE equal cpu-reference's through forward() bit for bit.
TEST_F(CliRunVariantsTest, DenseVariantsMatchForward) {
  const std::int64_t b = 2, sq = 37, sk = 53, h = 4, hk = 2, d = 32;
  const npy::Array q = floats({b, sq, h, d}, 1), k = floats({b, sk, hk, d}, 2),
                   v = floats({b, sk, hk, d}, 3);
  npy::Array slopes = floats({b, h}, 4);
  for (float& x : slopes.values) x = std::fabs(x) * 0.1f;
  const npy::Array sinks = floats({h}, 5);
  write("q.npy", q);
  write("k.npy", k);
  write("v.npy", v);
  write("slopes.npy", slopes);
  write("sinks.npy", sinks);
  const CliResult r = cli("run --device cpu --backend cpu-reference --dtype fp32 --window 20,3 "
                          "--softcap 4" + io() + file("--alibi-slopes", "slopes.npy") +
                          file("--sinks", "sinks.npy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");

  std::vector<float> qv = q.values, kv = k.values, vv = v.values, sl = slopes.values,
                     sn = sinks.values;
  std::vector<float> o(static_cast<std::size_t>(b * sq * h * d)), lse(static_cast<std::size_t>(b * h * sq));
  ForwardParams p;
  p.q = TensorView::contiguous(qv.data(), DType::kFP32, Device::cpu(), {b, sq, h, d});
  p.k = TensorView::contiguous(kv.data(), DType::kFP32, Device::cpu(), {b, sk, hk, d});
  p.v = TensorView::contiguous(vv.data(), DType::kFP32, Device::cpu(), {b, sk, hk, d});
  p.out = TensorView::contiguous(o.data(), DType::kFP32, Device::cpu(), {b, sq, h, d});
  p.lse = TensorView::contiguous(lse.data(), DType::kFP32, Device::cpu(), {b, h, sq});
  p.window_left = 20;
  p.window_right = 3;
  p.softcap = 4.0f;
  p.alibi_slopes = TensorView::contiguous(sl.data(), DType::kFP32, Device::cpu(), {b, h});
  p.sinks = TensorView::contiguous(sn.data(), DType::kFP32, Device::cpu(), {h});
  const Status st = forward(p, "cpu-reference");
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(read("o.npy").values, o);
  EXPECT_EQ(read("lse.npy").values, lse);
  EXPECT_EQ(read("lse.npy").shape, (std::vector<std::int64_t>{b, h, sq}));
}

// Packed sequences: rank-3 inputs, int64 and int32 offset files, LSE (heads, total_q), a
// zero-length sequence and one without keys.
TEST_F(CliRunVariantsTest, VarlenFilesMatchForward) {
  const std::vector<std::int64_t> cu_q = {0, 17, 17, 60}, cu_k = {0, 30, 41, 41};
  const std::int64_t total_q = 60, total_k = 41, h = 4, hk = 2, d = 16;
  const npy::Array q = floats({total_q, h, d}, 6), k = floats({total_k, hk, d}, 7),
                   v = floats({total_k, hk, d}, 8), sinks = floats({h}, 9);
  write("q.npy", q);
  write("k.npy", k);
  write("v.npy", v);
  write("sinks.npy", sinks);
  write("cu_q.npy", ints(cu_q));
  write("cu_k.npy", ints(cu_k, npy::ElemType::kInt32));
  const std::string varlen = file("--cu-seqlens-q", "cu_q.npy") + file("--cu-seqlens-k", "cu_k.npy");
  const CliResult r = cli("run --device cpu --backend cpu-reference --dtype fp32 --causal" + io() +
                          varlen + file("--sinks", "sinks.npy"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // LSE is the sink on rows without keys: finite, nothing to note

  std::vector<float> qv = q.values, kv = k.values, vv = v.values, sn = sinks.values;
  std::vector<std::int32_t> cq(cu_q.begin(), cu_q.end()), ck(cu_k.begin(), cu_k.end());
  std::vector<float> o(static_cast<std::size_t>(total_q * h * d)), lse(static_cast<std::size_t>(h * total_q));
  ForwardParams p;
  p.q = TensorView::contiguous(qv.data(), DType::kFP32, Device::cpu(), {total_q, h, d});
  p.k = TensorView::contiguous(kv.data(), DType::kFP32, Device::cpu(), {total_k, hk, d});
  p.v = TensorView::contiguous(vv.data(), DType::kFP32, Device::cpu(), {total_k, hk, d});
  p.out = TensorView::contiguous(o.data(), DType::kFP32, Device::cpu(), {total_q, h, d});
  p.lse = TensorView::contiguous(lse.data(), DType::kFP32, Device::cpu(), {h, total_q});
  p.causal = true;
  p.sinks = TensorView::contiguous(sn.data(), DType::kFP32, Device::cpu(), {h});
  p.cu_seqlens_q = TensorView::contiguous(cq.data(), DType::kInt32, Device::cpu(), {4});
  p.cu_seqlens_k = TensorView::contiguous(ck.data(), DType::kInt32, Device::cpu(), {4});
  p.max_seqlen_q = 43;
  p.max_seqlen_k = 30;
  const Status st = forward(p, "cpu-reference");
  ASSERT_TRUE(st.ok()) << st.to_string();
  const npy::Array out = read("o.npy"), lse_out = read("lse.npy");
  EXPECT_EQ(out.shape, (std::vector<std::int64_t>{total_q, h, d}));
  EXPECT_EQ(lse_out.shape, (std::vector<std::int64_t>{h, total_q}));
  EXPECT_EQ(out.values, o);
  EXPECT_EQ(lse_out.values, lse);
  // Sequence 2 (rows 17..59) has no keys: O = 0, LSE = the sink.
  EXPECT_EQ(out.values[static_cast<std::size_t>(20 * h * d)], 0.0f);
  EXPECT_EQ(lse_out.values[static_cast<std::size_t>(1 * total_q + 20)], sinks.values[1]);

  // Without sinks those rows' LSE is -inf, which is not counted as non-finite; explicit
  // max_seqlen (larger than needed) gives the same result.
  const CliResult plain = cli("run --device cpu --backend cpu-reference --dtype fp32 --causal "
                              "--max-seqlen-q 50 --max-seqlen-k 41" + io() + varlen);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.err, "");
  EXPECT_EQ(read("lse.npy").values[20], -std::numeric_limits<float>::infinity());
}

TEST_F(CliRunVariantsTest, BadSideFilesNameTheFileAndWriteNothing) {
  const std::int64_t h = 4, hk = 2, d = 16;
  const std::vector<std::int64_t> cu = {0, 10, 24};
  write("q.npy", floats({24, h, d}, 1));
  write("k.npy", floats({24, hk, d}, 2));
  write("v.npy", floats({24, hk, d}, 3));
  write("cu.npy", ints(cu));
  write("dense_q.npy", floats({1, 24, h, d}, 1));
  write("sinks3.npy", floats({3}, 4));
  write("slopes.npy", floats({h}, 4));
  write("cu_float.npy", floats({3}, 0));
  write("cu_big.npy", ints({0, 10, std::int64_t{1} << 33}));
  write("cu_start.npy", ints({3, 10, 24}));
  write("cu_past.npy", ints({0, 10, 25}));
  write("cu_2d.npy", [] {
    npy::Array a = ints({0, 10, 24, 24});
    a.shape = {2, 2};
    return a;
  }());
  const std::string cu_both = file("--cu-seqlens-q", "cu.npy") + file("--cu-seqlens-k", "cu.npy");
  struct Case {
    std::string flags, where, expected;
  };
  const std::vector<Case> cases = {
      {cu_both + file("--sinks", "sinks3.npy"), "--sinks " + path("sinks3.npy"),
       "sinks.shape[0] = 3, expected 4 (heads)"},
      {cu_both + file("--alibi-slopes", "cu.npy"), "--alibi-slopes " + path("cu.npy"),
       "unsupported dtype '<i8'"},
      {file("--cu-seqlens-q", "cu_float.npy") + file("--cu-seqlens-k", "cu.npy"),
       "--cu-seqlens-q " + path("cu_float.npy"),
       "unsupported dtype '<f4' (floating point; offsets are integers"},
      {file("--cu-seqlens-q", "cu_big.npy") + file("--cu-seqlens-k", "cu.npy"),
       "--cu-seqlens-q " + path("cu_big.npy"), "element 2 = 8589934592 does not fit int32"},
      {file("--cu-seqlens-q", "cu_start.npy") + file("--cu-seqlens-k", "cu.npy"),
       "--cu-seqlens-q " + path("cu_start.npy"), "cu_seqlens_q[0] = 3, expected 0"},
      {file("--cu-seqlens-q", "cu.npy") + file("--cu-seqlens-k", "cu_past.npy"),
       "--cu-seqlens-k " + path("cu_past.npy"), "cu_seqlens_k[2] = 25 is past k.shape[0]"},
      {file("--cu-seqlens-q", "cu_2d.npy") + file("--cu-seqlens-k", "cu.npy"),
       "--cu-seqlens-q " + path("cu_2d.npy"), "cu_seqlens_q.rank = 2"},
      {cu_both + " --max-seqlen-q 5", "--max-seqlen-q 5", "max_seqlen_q = 5"},
      {cu_both + " --q '" + path("dense_q.npy") + "'", "--q " + path("dense_q.npy"),
       "has rank 4, expected 3 (total_q, heads, head_dim)"},
      {file("--sinks", "sinks3.npy"), "", "has rank 3, expected 4"},  // rank-3 without offsets
  };
  for (const Case& c : cases) {
    std::string args = "run --device cpu" + c.flags;
    // --q given in the case replaces the default one.
    std::string io_flags = io();
    if (c.flags.find(" --q ") != std::string::npos) {
      io_flags.replace(io_flags.find(" --q '"), (" --q '" + path("q.npy") + "'").size(), "");
    }
    args += io_flags;
    const CliResult r = cli(args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    if (!c.where.empty()) {
      EXPECT_NE(r.err.find("flashattn run: " + c.where + ":"), std::string::npos)
          << "does not name " << c.where << ": " << r.err;
    }
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << args << "\n" << r.err;
    EXPECT_FALSE(exists("o.npy")) << args;
    EXPECT_FALSE(exists("lse.npy")) << args;
  }
}

// run with a paged KV cache and new tokens: O, LSE and the caches after the append equal
// cpu-reference's through forward() bit for bit.
TEST_F(CliRunVariantsTest, KvCacheFilesMatchForward) {
  const std::int64_t b = 2, sq = 3, h = 4, hk = 2, d = 16, page = 16, pages = 6, per_seq = 3;
  const npy::Array q = floats({b, sq, h, d}, 11), kn = floats({b, sq, hk, d}, 12),
                   vn = floats({b, sq, hk, d}, 13), kc = floats({pages, page, hk, d}, 14),
                   vc = floats({pages, page, hk, d}, 15);
  npy::Array table = ints({5, 0, 3, 1, 4, 2});
  table.shape = {b, per_seq};
  const std::vector<std::int64_t> lens = {20, 0};
  write("q.npy", q);
  write("kn.npy", kn);
  write("vn.npy", vn);
  write("kc.npy", kc);
  write("vc.npy", vc);
  write("table.npy", table);
  write("lens.npy", ints(lens, npy::ElemType::kInt32));
  const std::string cache = file("--k-cache", "kc.npy") + file("--v-cache", "vc.npy") +
                            file("--cache-seqlens", "lens.npy") + file("--block-table", "table.npy") +
                            file("--k-cache-out", "kc_out.npy") + file("--v-cache-out", "vc_out.npy");
  const CliResult r = cli("run --device cpu --backend cpu-reference --dtype fp32 --causal" +
                          file("--q", "q.npy") + file("--k", "kn.npy") + file("--v", "vn.npy") +
                          file("--out", "o.npy") + file("--lse", "lse.npy") + cache);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");

  std::vector<float> qv = q.values, knv = kn.values, vnv = vn.values, kcv = kc.values,
                     vcv = vc.values;
  std::vector<std::int32_t> tv(table.ints.begin(), table.ints.end()), lv(lens.begin(), lens.end());
  std::vector<float> o(static_cast<std::size_t>(b * sq * h * d)), lse(static_cast<std::size_t>(b * h * sq));
  ForwardParams p;
  p.q = TensorView::contiguous(qv.data(), DType::kFP32, Device::cpu(), {b, sq, h, d});
  p.k = TensorView::contiguous(knv.data(), DType::kFP32, Device::cpu(), {b, sq, hk, d});
  p.v = TensorView::contiguous(vnv.data(), DType::kFP32, Device::cpu(), {b, sq, hk, d});
  p.k_cache = TensorView::contiguous(kcv.data(), DType::kFP32, Device::cpu(), {pages, page, hk, d});
  p.v_cache = TensorView::contiguous(vcv.data(), DType::kFP32, Device::cpu(), {pages, page, hk, d});
  p.block_table = TensorView::contiguous(tv.data(), DType::kInt32, Device::cpu(), {b, per_seq});
  p.cache_seqlens = TensorView::contiguous(lv.data(), DType::kInt32, Device::cpu(), {b});
  p.out = TensorView::contiguous(o.data(), DType::kFP32, Device::cpu(), {b, sq, h, d});
  p.lse = TensorView::contiguous(lse.data(), DType::kFP32, Device::cpu(), {b, h, sq});
  p.causal = true;
  const Status st = forward(p, "cpu-reference");
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(read("o.npy").values, o);
  EXPECT_EQ(read("lse.npy").values, lse);
  EXPECT_EQ(read("kc_out.npy").values, kcv);  // the appended rows included
  EXPECT_EQ(read("vc_out.npy").values, vcv);
  EXPECT_EQ(read("kc_out.npy").shape, (std::vector<std::int64_t>{pages, page, hk, d}));
  EXPECT_NE(read("kc_out.npy").values, kc.values) << "the new tokens were not appended";
}

// KV-cache flags: a bad file names itself, a flag without --k-cache or a half pair is a usage
// error; nothing is written.
TEST_F(CliRunVariantsTest, BadKvCacheInputsWriteNothing) {
  const std::int64_t b = 2, h = 4, hk = 2, d = 16;
  write("q.npy", floats({b, 1, h, d}, 1));
  write("kc.npy", floats({b, 32, hk, d}, 2));
  write("vc.npy", floats({b, 32, hk, d}, 3));
  write("kn.npy", floats({b, 1, hk, d}, 4));
  write("lens.npy", ints({5, 40}));
  write("lens_ok.npy", ints({5, 7}));
  npy::Array table = ints({0, 9});
  table.shape = {b, 1};
  write("table.npy", table);
  const std::string io_cache = file("--q", "q.npy") + file("--out", "o.npy") +
                               file("--k-cache", "kc.npy") + file("--v-cache", "vc.npy");
  struct Case {
    std::string flags;
    int exit_code;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {io_cache + file("--cache-seqlens", "lens.npy"), 1,
       "--cache-seqlens " + path("lens.npy") + ": invalid_argument: cache_seqlens[1] + seqlen_new = 40"},
      {io_cache, 2, "--k-cache needs --cache-seqlens FILE"},
      {io_cache + file("--cache-seqlens", "lens_ok.npy") + file("--k", "kn.npy"), 2,
       "--k needs --v"},
      {file("--q", "q.npy") + file("--k", "kn.npy") + file("--v", "kn.npy") +
           file("--out", "o.npy") + file("--block-table", "table.npy"),
       2, "--block-table applies only with --k-cache"},
      {io_cache + file("--cache-seqlens", "lens_ok.npy") + " --num-splits -1", 2,
       "--num-splits expects an integer >= 0, got \"-1\""},
      {io_cache + file("--cache-seqlens", "lens_ok.npy") + " --num-splits 300", 1,
       "--num-splits 300: invalid_argument: num_splits = 300, expected 0 (chosen) to 256"},
  };
  for (const Case& c : cases) {
    const CliResult r = cli("run --device cpu --dtype fp32" + c.flags);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.flags << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << c.flags << "\n" << r.err;
    EXPECT_FALSE(exists("o.npy")) << c.flags;
  }
}

}  // namespace
}  // namespace flashattn
