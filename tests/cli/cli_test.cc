// The `flashattn` command-line tool end to end: the built binary (FLASHATTN_CLI_PATH) is run with
// std::system, its stdout, stderr and exit status captured and checked.
// The tool's npy.cc (used here to write inputs and read outputs) is compiled into this test.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/dtype_convert.h"
#include "cuda/common/runtime.h"
#include "npy.h"
#include "flashattn/flashattn.h"
#include "test_util.h"

#ifndef FLASHATTN_CLI_PATH
#error "FLASHATTN_CLI_PATH must be defined by tests/CMakeLists.txt"
#endif

namespace flashattn {
namespace {

// Hides every GPU from the CUDA runtime: the no-GPU paths run the same on any machine.
constexpr const char* kNoGpu = "CUDA_VISIBLE_DEVICES=";

// Why the tool finds no GPU under kNoGpu: this machine's own reason (no driver, ...), or, where
// kNoGpu hides a GPU, the runtime's cudaErrorNoDevice.
std::string no_gpu_reason() {
  return testing::have_cuda() ? "no CUDA device found" : cuda::unavailable_reason();
}

// A GPU run through the tool needs a device and the GPU kernels: a
// -DFLASHATTN_BUILD_CUDA_KERNELS=OFF build on a GPU machine has a device but no CUDA backend.
bool cuda_backends_usable() {
  for (const BackendInfo& b : list_backends()) {
    if (b.device_type == DeviceType::kCUDA && b.usable) return true;
  }
  return false;
}

#define SKIP_WITHOUT_CUDA_BACKENDS()                                               \
  do {                                                                             \
    FA_SKIP_WITHOUT_CUDA();                                                        \
    if (!cuda_backends_usable()) GTEST_SKIP() << "skipped: GPU kernels not built"; \
  } while (0)

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

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

std::size_t count_lines(const std::string& text) {
  std::size_t n = 0;
  for (char c : text) n += c == '\n';
  if (!text.empty() && text.back() != '\n') ++n;
  return n;
}

std::size_t count_occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t pos = text.find(what); pos != std::string::npos;
       pos = text.find(what, pos + 1)) {
    ++n;
  }
  return n;
}

// A fresh directory per test for inputs, outputs and the captured streams.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "flashattn_cli_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl + "/";
  }
  void TearDown() override {
    if (!HasFailure() && std::system(("rm -rf '" + dir_ + "'").c_str()) != 0) ADD_FAILURE() << "cleanup";
  }

  std::string path(const std::string& name) const { return dir_ + name; }

  // Runs `flashattn <args>` with optional environment assignments in front.
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

  // The files in the test directory, sorted.
  std::vector<std::string> listing() {
    const std::string list = path("listing.txt");
    if (std::system(("ls -A '" + dir_ + "' | grep -v listing.txt > '" + list + "'").c_str()) != 0) {}
    std::vector<std::string> names;
    std::istringstream in(read_text(list));
    for (std::string line; std::getline(in, line);) names.push_back(line);
    std::remove(list.c_str());
    return names;
  }

  std::string dir_;
};

// ---------------------------------------------------------------------------------------------
// Help and usage errors

TEST_F(CliTest, TopLevelHelpListsEveryCommand) {
  for (const char* flag : {"--help", "-h", "help"}) {
    const CliResult r = cli(flag);
    EXPECT_EQ(r.exit_code, 0) << flag;
    EXPECT_EQ(r.err, "") << flag;
    EXPECT_NE(r.out.find("Usage: flashattn <command> [flags]"), std::string::npos) << r.out;
    for (const char* cmd : {"info", "verify", "bench", "run"}) {
      EXPECT_NE(r.out.find(std::string("\n  ") + cmd + " "), std::string::npos) << cmd;
    }
    EXPECT_NE(r.out.find("Exit status"), std::string::npos);
    EXPECT_NE(r.out.find("Environment: FLASHATTN_NUM_THREADS=N"), std::string::npos) << r.out;
  }
  const CliResult v = cli("--version");
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.out, std::string("flashattn ") + kVersion + "\n");
}

TEST_F(CliTest, EverySubcommandDocumentsItsFlags) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"info", {}},
      {"verify",
       {"--batch", "--heads", "--kv-heads", "--seqlen-q", "--seqlen-k", "--head-dim", "--dtype",
        "--causal", "--scale", "--seed", "--backend", "--device", "--threads", "--layout",
        "--inputs", "--no-lse", "--cpu-reference-limit", "--window", "--softcap", "--sinks",
        "--varlen-k"}},
      {"bench",
       {"--batch", "--heads", "--kv-heads", "--head-dim", "--dtype", "--causal", "--scale",
        "--seed", "--device", "--threads", "--seqlens", "--backends", "--warmup", "--iters",
        "--max-seconds", "--csv", "--window", "--softcap", "--sinks"}},
      {"run",
       {"--q", "--k", "--v", "--out", "--lse", "--dtype", "--causal", "--scale", "--backend",
        "--device", "--threads", "--window", "--softcap", "--alibi-slopes", "--sinks",
        "--cu-seqlens-q", "--cu-seqlens-k", "--max-seqlen-q", "--max-seqlen-k"}},
  };
  for (const auto& [cmd, flags] : expected) {
    for (const std::string& how : {cmd + " --help", "help " + cmd}) {
      const CliResult r = cli(how);
      EXPECT_EQ(r.exit_code, 0) << how;
      EXPECT_EQ(r.err, "") << how;
      EXPECT_EQ(r.out.rfind("Usage: flashattn " + cmd, 0), 0u) << how << ":\n" << r.out;
      EXPECT_NE(r.out.find("--help"), std::string::npos);
      for (const std::string& flag : flags) {
        EXPECT_NE(r.out.find("  " + flag + " "), std::string::npos)
            << how << " does not document " << flag << ":\n"
            << r.out;
      }
    }
  }
  // --help wins over anything else on the line.
  EXPECT_EQ(cli("verify --head-dim abc --help").exit_code, 0);
}

TEST_F(CliTest, UsageErrorsGiveOneLineAndExitTwo) {
  struct Case {
    std::string args, expected;
  };
  const std::vector<Case> cases = {
      {"verify --head-dim abc", "flashattn verify: --head-dim expects an integer, got \"abc\"\n"},
      {"verify --head-dim=12x", "flashattn verify: --head-dim expects an integer, got \"12x\"\n"},
      {"verify --batch -1", "flashattn verify: --batch expects an integer >= 0, got \"-1\"\n"},
      {"verify --seqlen-q 99999999999999999999", "--seqlen-q expects an integer"},
      {"verify --head-dim", "flashattn verify: --head-dim expects a value (N)\n"},
      {"verify --head-dim --causal", "--head-dim expects a value"},
      {"verify --bogus", "flashattn verify: unknown flag --bogus (see flashattn verify --help)\n"},
      {"verify extra", "unexpected argument \"extra\""},
      {"verify --causal=yes", "--causal takes no value"},
      {"verify --batch 1 --batch 2", "--batch given more than once"},
      {"verify --scale abc", "--scale expects a number, got \"abc\""},
      {"verify --scale 0", "--scale expects a number > 0, got \"0\""},
      {"verify --scale nan", "--scale expects a number, got \"nan\""},
      {"verify --seed -3", "--seed expects a non-negative integer"},
      {"verify --dtype fp64", "--dtype expects one of bf16, fp16, fp32, got \"fp64\""},
      {"verify --device tpu", "--device expects cpu, cuda or cuda:N, got \"tpu\""},
      {"verify --device cuda:x", "--device expects cpu, cuda or cuda:N, got \"cuda:x\""},
      {"verify --layout diagonal", "--layout expects one of contiguous, bhsd, padded-heads"},
      {"verify --inputs zeros", "--inputs expects one of normal, large-scores"},
      {"verify --backend nope", "--backend expects one of cpu-reference, cpu-flash"},
      {"verify --device cpu --backend flash", "backend flash runs on cuda but --device is cpu"},
      {"bench --seqlens 512,,1024", "--seqlens expects a comma-separated list without empty items"},
      {"bench --seqlens 512,abc", "--seqlens expects an integer, got \"abc\""},
      {"bench --seqlens 0", "--seqlens expects an integer >= 1"},
      {"bench --iters 0", "--iters expects an integer >= 1, got \"0\""},
      {"bench --max-seconds -1", "--max-seconds expects a number > 0"},
      {"bench --backends naive,cpu-flash", "run on different devices"},
      {"bench --backends cpu-flash --backend cpu-reference", "either --backend or --backends"},
      {"bench --backends nope", "--backends expects one of"},
      {"bench --seqlen-q 128", "unknown flag --seqlen-q"},
      {"run --q", "flashattn run: --q expects a value (FILE)\n"},
      {"run --k k.npy --v v.npy --out o.npy", "flashattn run: --q FILE is required\n"},
      {"run --q q.npy --k k.npy --v v.npy", "--out FILE is required"},
      {"run --q q.npy --k k.npy --v v.npy --out o.npy --lse o.npy", "name the same file"},
      // Products of sizes that overflow 64 bits, named by the flags that make them.
      {"verify --device cpu --batch 9223372036854775807",
       "flashattn verify: --batch * --seqlen-q * --heads * --head-dim * 4 bytes (q in fp32) = "
       "9223372036854775807 * 512 * 8 * 128 * 4 does not fit in 64 bits (at most "
       "9223372036854775807)\n"},
      {"verify --device cpu --batch 2 --seqlen-q 100000000",
       "--batch * --heads * --seqlen-q * --seqlen-k * --head-dim (multiply-adds) = 2 * 8 * "
       "100000000 * 100000000 * 128 does not fit in 64 bits"},
      {"bench --device cpu --batch 35184372088832 --seqlens 512",
       "flashattn bench: --batch * --seqlens * --heads * --head-dim * 4 bytes (q in fp32) = "
       "35184372088832 * 512 * 4 * 64 * 4 does not fit in 64 bits (at most "
       "9223372036854775807)\n"},
      {"verify --threads 0", "flashattn verify: --threads expects an integer from 1 to 1024, got \"0\"\n"},
      {"bench --threads 1025", "--threads expects an integer from 1 to 1024, got \"1025\""},
      {"run --threads x --q q.npy --k k.npy --v v.npy --out o.npy", "--threads expects an integer"},
      {"verify --cpu-reference-limit 0", "--cpu-reference-limit expects a number > 0, got \"0\""},
      {"run --q q.npy --k k.npy --v v.npy --out o.npy --batch 2", "unknown flag --batch"},
      {"info --verbose", "flashattn info: unknown flag --verbose"},
      {"frobnicate",
       "flashattn: unknown command \"frobnicate\" (expected one of info, verify, "
       "bench, run; see flashattn --help)\n"},
      {"--frobnicate", "flashattn: unknown flag --frobnicate"},
      {"", "flashattn: missing command"},
      {"help nope", "flashattn help: unknown command \"nope\""},
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
// info and the device default

TEST_F(CliTest, InfoShowsVersionDevicesAndBackends) {
  const CliResult r = cli("info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_NE(r.out.find(std::string("flashattn ") + kVersion), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Backends:"), std::string::npos) << r.out;
  for (const BackendInfo& b : list_backends()) {
    EXPECT_NE(r.out.find("  " + b.name + " "), std::string::npos) << b.name << "\n" << r.out;
    if (!b.usable) {
      EXPECT_NE(r.out.find("why not: " + b.why_not), std::string::npos) << r.out;
    }
  }
  if (testing::have_cuda()) {
    EXPECT_NE(r.out.find("cuda:0  "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("compute capability"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" SMs, "), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find("CUDA devices: none; " + cuda::unavailable_reason()), std::string::npos)
        << r.out;
  }
}

TEST_F(CliTest, InfoWithoutGpu) {
  const CliResult r = cli("info", kNoGpu);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("CUDA devices: none; " + no_gpu_reason()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu-reference"), std::string::npos) << r.out;
}

TEST_F(CliTest, InfoWithGpu) {
  FA_SKIP_WITHOUT_CUDA();
  const CliResult r = cli("info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("CUDA devices: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("CUDA devices: none"), std::string::npos) << r.out;
}

TEST_F(CliTest, WithoutGpuDeviceDefaultsToCpuWithOneNote) {
  const CliResult r = cli("verify --batch 1 --heads 2 --seqlen-q 17 --head-dim 32", kNoGpu);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count_occurrences(r.err, "no CUDA device: using --device cpu"), 1u) << r.err;
  // An explicit --device cpu needs no note.
  const CliResult quiet =
      cli("verify --device cpu --batch 1 --heads 2 --seqlen-q 17 --head-dim 32");
  EXPECT_EQ(quiet.exit_code, 0) << quiet.out << quiet.err;
  EXPECT_EQ(quiet.err.find("using --device cpu"), std::string::npos) << quiet.err;
}

TEST_F(CliTest, ExplicitCudaWithoutGpuFailsWithExitOne) {
  for (const std::string& args :
       {std::string("verify --device cuda --seqlen-q 16"), std::string("bench --device cuda:0"),
        std::string("verify --backend flash"),
        std::string("run --device cuda --q q.npy --k k.npy --v v.npy --out o.npy")}) {
    const CliResult r = cli(args, kNoGpu);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(no_gpu_reason()), std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.out, "");
  }
}

// ---------------------------------------------------------------------------------------------
// verify

TEST_F(CliTest, VerifyOnCpuPassesSmallShapes) {
  struct Case {
    const char* dtype;
    bool causal;
    int sq, sk;
  };
  const std::vector<Case> cases = {
      {"fp32", false, 113, 203}, {"fp32", true, 203, 113}, {"bf16", false, 203, 113},
      {"bf16", true, 113, 203},  {"fp16", true, 1, 17},    {"fp32", true, 64, 64},
  };
  for (const Case& c : cases) {
    const std::string args = std::string("verify --device cpu --batch 1 --heads 4 --kv-heads 2 ") +
                             "--head-dim 64 --dtype " + c.dtype + " --seqlen-q " +
                             std::to_string(c.sq) + " --seqlen-k " + std::to_string(c.sk) +
                             (c.causal ? " --causal" : "") + " --seed " +
                             std::to_string(testing::base_seed());
    const CliResult r = cli(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\nstdout:\n" << r.out << "stderr:\n" << r.err;
    EXPECT_FALSE(r.out.empty()) << args;
  }
}

TEST_F(CliTest, VerifyOnCpuLayoutsAndInputKinds) {
  for (const std::string& extra :
       {std::string("--layout bhsd"), std::string("--layout padded-heads"),
        std::string("--inputs large-scores"), std::string("--inputs very-negative --causal"),
        std::string("--no-lse"), std::string("--backend cpu-reference --scale 0.3")}) {
    const std::string args =
        "verify --device cpu --batch 2 --heads 2 --seqlen-q 39 --seqlen-k 71 --head-dim 32 " +
        extra;
    const CliResult r = cli(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\nstdout:\n" << r.out << "stderr:\n" << r.err;
  }
}

TEST_F(CliTest, VerifyThatCannotRunExitsOneWithOneLine) {
  // Head dim 12 is not supported: the library's message is passed through.
  const CliResult r = cli("verify --device cpu --batch 1 --heads 1 --seqlen-q 8 --head-dim 12");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("flashattn verify: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("head_dim"), std::string::npos) << r.err;
}

// The CPU reference's limit is checked before anything is allocated (seqlen_q 1e7 drew inputs for
// over a minute before a late refusal), says so by the flag's name, and the flag moves it:
// 1 * 2 * 17 * 17 * 32 = 18496 multiply-adds pass at a limit of 18496, not at 18495.
TEST_F(CliTest, VerifyCpuReferenceLimitIsEarlyAndAdjustable) {
  const CliResult big = cli("verify --device cpu --seqlen-q 10000000");
  EXPECT_EQ(big.exit_code, 1) << big.err;
  EXPECT_EQ(count_lines(big.err), 1u) << big.err;
  EXPECT_EQ(big.err.rfind("flashattn verify: --device cpu: batch * heads * seqlen_q * seqlen_k * "
                          "head_dim = 2 * 8 * 10000000 * 10000000 * 128 = 204800000000000000 "
                          "multiply-adds exceeds --cpu-reference-limit = 6e+08",
                          0),
            0u)
      << big.err;
  EXPECT_EQ(big.out, "");
  const std::string shape = "verify --device cpu --batch 1 --heads 2 --seqlen-q 17 --head-dim 32";
  const CliResult below = cli(shape + " --cpu-reference-limit 18495");
  EXPECT_EQ(below.exit_code, 1) << below.err;
  EXPECT_NE(below.err.find("= 18496 multiply-adds exceeds --cpu-reference-limit = 18495"),
            std::string::npos)
      << below.err;
  const CliResult at = cli(shape + " --cpu-reference-limit 18496");
  EXPECT_EQ(at.exit_code, 0) << at.out << at.err;
  EXPECT_NE(at.out.find("reference cpu-reference (float64)"), std::string::npos) << at.out;
  // --help says the limit exists and what it is.
  const CliResult help = cli("verify --help");
  EXPECT_NE(help.out.find("--cpu-reference-limit N"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("(default 6e+08, about 1 s on 2 cores)"), std::string::npos) << help.out;
}

// --threads sets the CPU backends' thread count for the process; FLASHATTN_NUM_THREADS with a bad
// value is an error naming it (exit 1, one line) before anything runs, in every subcommand.
TEST_F(CliTest, ThreadsFlagAndBadThreadsEnvironment) {
  const std::string shape = "--device cpu --batch 1 --heads 2 --seqlen-q 33 --head-dim 32";
  const CliResult one = cli("verify --threads 1 " + shape);
  EXPECT_EQ(one.exit_code, 0) << one.out << one.err;
  // The flag overrides a bad variable: it sets it.
  const CliResult over = cli("verify --threads 2 " + shape, "FLASHATTN_NUM_THREADS=lots");
  EXPECT_EQ(over.exit_code, 0) << over.out << over.err;
  for (const std::string& args :
       {"verify " + shape, std::string("bench --device cpu --seqlens 16 --iters 1 --warmup 0"),
        std::string("run --device cpu --q q.npy --k k.npy --v v.npy --out o.npy")}) {
    const CliResult r = cli(args, "FLASHATTN_NUM_THREADS=lots");
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(": FLASHATTN_NUM_THREADS = \"lots\": expected an integer from 1 to 1024"),
              std::string::npos)
        << args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << args;
  }
  // info lists the CPU backends as unusable, and why.
  const CliResult info = cli("info", "FLASHATTN_NUM_THREADS=0");
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("why not: FLASHATTN_NUM_THREADS = \"0\""), std::string::npos) << info.out;
}

TEST_F(CliTest, VerifyOnCudaPasses) {
  SKIP_WITHOUT_CUDA_BACKENDS();
  for (const std::string& extra : {std::string(""), std::string("--causal --dtype fp16")}) {
    const std::string args =
        "verify --device cuda --batch 1 --heads 4 --kv-heads 2 --seqlen-q 113 --seqlen-k 203 "
        "--head-dim 128 " +
        extra;
    const CliResult r = cli(args);
    EXPECT_EQ(r.exit_code, 0) << args << "\nstdout:\n" << r.out << "stderr:\n" << r.err;
  }
}

// ---------------------------------------------------------------------------------------------
// bench

TEST_F(CliTest, BenchOnCpuPrintsTableAndWritesCsv) {
  const std::string csv = path("bench.csv");
  const CliResult r =
      cli("bench --device cpu --batch 1 --heads 2 --head-dim 32 --seqlens 16,48 "
          "--warmup 1 --iters 2 --max-seconds 0.2 --csv '" +
          csv + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("# flashattn bench --device cpu --batch 1 --heads 2 --kv-heads 2 "
                       "--head-dim 32 --dtype fp32"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--seqlens 16,48 --backends cpu-reference,cpu-flash"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("cpu-flash"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("48"), std::string::npos) << r.out;
  EXPECT_FALSE(r.err.empty()) << "no progress lines on stderr";
  ASSERT_TRUE(file_exists(csv));
  const std::string text = read_text(csv);
  EXPECT_NE(text.find("cpu-reference"), std::string::npos) << text;
  EXPECT_NE(text.find("cpu-flash"), std::string::npos) << text;
  EXPECT_GE(count_lines(text), 5u) << "a header and 2 seqlens x 2 backends:\n" << text;
  // Only the CSV is left behind (no temporary file).
  EXPECT_EQ(listing(), std::vector<std::string>{"bench.csv"});
}

// A cell estimated above --max-seconds is skipped and the table says so: cpu-flash at 16384 with
// b1 h4 d64 on one thread is 2.75e11 FLOPs, tens of seconds at a few GFLOP/s on any machine
// (one thread, so a 16-core machine estimates it as slow as this one), estimated from a probe
// of 1e8 FLOPs.
TEST_F(CliTest, BenchSkipsCellsEstimatedOverMaxSeconds) {
  const CliResult r = cli(
      "bench --device cpu --backends cpu-flash --batch 1 --heads 4 --head-dim 64 --seqlens 16384 "
      "--warmup 0 --iters 1 --max-seconds 0.5 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("   16384 |            -         -"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" skipped"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# seqlen 16384 cpu-flash: est. "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" s per run > --max-seconds 0.5: 2.75e+11 FLOPs at "), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("probed at seqlen "), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("seqlen 16384: cpu-flash skipped (est. "), std::string::npos) << r.err;
}

// stderr: the command line once (not "flashattn bench: flashattn bench ..."), then a line as each
// cell starts and as it ends; the table says "median of 2 runs" when min and max agree.
TEST_F(CliTest, BenchProgressAndRunCounts) {
  const CliResult r = cli(
      "bench --device cpu --backends cpu-flash --batch 1 --heads 2 --head-dim 32 --seqlens 16,32 "
      "--warmup 1 --iters 2");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.err.find("flashattn bench: flashattn bench"), std::string::npos) << r.err;
  std::istringstream lines(r.err);
  std::vector<std::string> err;
  for (std::string line; std::getline(lines, line);) err.push_back(line);
  ASSERT_EQ(err.size(), 5u) << r.err;
  EXPECT_EQ(err[0].rfind("flashattn bench --device cpu --batch 1 --heads 2", 0), 0u) << err[0];
  EXPECT_EQ(err[1], "seqlen 16: cpu-flash: start");
  EXPECT_EQ(err[2].rfind("seqlen 16: cpu-flash ", 0), 0u) << err[2];
  EXPECT_EQ(err[3].rfind("seqlen 32: cpu-flash: start, est. ", 0), 0u) << err[3];
  EXPECT_EQ(err[4].rfind("seqlen 32: cpu-flash ", 0), 0u) << err[4];
  EXPECT_NE(r.out.find("median of 2 runs after 1 warm-up run;"), std::string::npos) << r.out;
}

TEST_F(CliTest, BenchOnCpuDefaultsWithoutGpu) {
  // The CPU defaults (cpu-reference,cpu-flash, fp32) kick in when there is no GPU; a tiny sweep.
  const CliResult r = cli("bench --seqlens 8 --iters 1 --warmup 0 --head-dim 16", kNoGpu);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(count_occurrences(r.err, "no CUDA device: using --device cpu"), 1u) << r.err;
  EXPECT_NE(r.out.find("--batch 1 --heads 4 --kv-heads 4 --head-dim 16 --dtype fp32"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--backends cpu-reference,cpu-flash"), std::string::npos) << r.out;
}

TEST_F(CliTest, BenchWithUnwritableCsvFailsBeforeRunning) {
  const CliResult r =
      cli("bench --device cpu --seqlens 8 --iters 1 --csv '" + path("missing_dir/out.csv") + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
  EXPECT_NE(r.err.find("cannot open for writing"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, BenchWithUnusableBackendFails) {
  for (const BackendInfo& b : list_backends()) {
    if (b.usable) continue;
    const CliResult r = cli("bench --seqlens 8 --iters 1 --backends " + b.name);
    EXPECT_EQ(r.exit_code, 1) << b.name << "\n" << r.out << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    // Without a GPU the device check speaks first ("needs a CUDA device"); with one, the backend
    // check ("is not usable here: not built").
    EXPECT_NE(r.err.find("flashattn bench: backend " + b.name + " "), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(CliTest, BenchOnCuda) {
  SKIP_WITHOUT_CUDA_BACKENDS();
  const std::string csv = path("bench.csv");
  const CliResult r =
      cli("bench --device cuda --batch 1 --heads 4 --seqlens 256,1024 "
          "--iters 3 --max-seconds 0.5 --csv '" +
          csv + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("--backends naive,flash,flash-sm80"), std::string::npos) << r.out;
  EXPECT_TRUE(file_exists(csv));
}

// ---------------------------------------------------------------------------------------------
// run

// Host tensors for a direct flashattn::forward computation (std::vector storage is 16-byte
// aligned, as validate() requires).
struct HostProblem {
  std::int64_t b, sq, sk, h, hk, d;
  npy::Array q, k, v;
};

float formula(std::int64_t i, int tensor) {
  return 0.5f + std::sin(0.013f * static_cast<float>(i) * static_cast<float>(tensor + 1) +
                         static_cast<float>(tensor)) *
                    1.5f;
}

HostProblem make_problem(std::int64_t b, std::int64_t sq, std::int64_t sk, std::int64_t h,
                         std::int64_t hk, std::int64_t d, npy::ElemType type) {
  HostProblem p{b, sq, sk, h, hk, d, {}, {}, {}};
  int t = 0;
  for (auto [array, shape] : {std::pair{&p.q, std::vector<std::int64_t>{b, sq, h, d}},
                              std::pair{&p.k, std::vector<std::int64_t>{b, sk, hk, d}},
                              std::pair{&p.v, std::vector<std::int64_t>{b, sk, hk, d}}}) {
    array->type = type;
    array->shape = shape;
    array->values.resize(static_cast<std::size_t>(array->numel()));
    for (std::size_t i = 0; i < array->values.size(); ++i) {
      float x = formula(static_cast<std::int64_t>(i), t);
      // What the file will hold.
      if (type == npy::ElemType::kFloat16) x = round_to_dtype(x, DType::kFP16);
      array->values[i] = x;
    }
    ++t;
  }
  return p;
}

// O and LSE from cpu-reference on the inputs rounded to `dtype` (O rounded to `dtype` too).
void reference(const HostProblem& p, DType dtype, bool causal, std::vector<float>* o,
               std::vector<float>* lse) {
  auto rounded = [dtype](const std::vector<float>& x) {
    std::vector<float> r(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) r[i] = round_to_dtype(x[i], dtype);
    return r;
  };
  std::vector<float> q = rounded(p.q.values), k = rounded(p.k.values), v = rounded(p.v.values);
  o->assign(static_cast<std::size_t>(p.b * p.sq * p.h * p.d), 0.0f);
  lse->assign(static_cast<std::size_t>(p.b * p.h * p.sq), 0.0f);
  ForwardParams params;
  params.q = TensorView::contiguous(q.data(), DType::kFP32, Device::cpu(), {p.b, p.sq, p.h, p.d});
  params.k = TensorView::contiguous(k.data(), DType::kFP32, Device::cpu(), {p.b, p.sk, p.hk, p.d});
  params.v = TensorView::contiguous(v.data(), DType::kFP32, Device::cpu(), {p.b, p.sk, p.hk, p.d});
  params.out =
      TensorView::contiguous(o->data(), DType::kFP32, Device::cpu(), {p.b, p.sq, p.h, p.d});
  params.lse = TensorView::contiguous(lse->data(), DType::kFP32, Device::cpu(), {p.b, p.h, p.sq});
  params.causal = causal;
  const Status st = forward(params, "cpu-reference");
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (float& x : *o) x = round_to_dtype(x, dtype);
}

// max |a - b|, with equal infinities counting as 0 and any NaN as infinity.
double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    if (a[i] == b[i]) continue;
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  }
  return m;
}

class CliRunTest : public CliTest {
 protected:
  void write_inputs(const HostProblem& p) {
    std::string error;
    ASSERT_TRUE(npy::write(path("q.npy"), p.q, &error)) << error;
    ASSERT_TRUE(npy::write(path("k.npy"), p.k, &error)) << error;
    ASSERT_TRUE(npy::write(path("v.npy"), p.v, &error)) << error;
  }
  std::string io_flags(bool with_lse = true) const {
    return " --q '" + path("q.npy") + "' --k '" + path("k.npy") + "' --v '" + path("v.npy") +
           "' --out '" + path("o.npy") + "'" + (with_lse ? " --lse '" + path("lse.npy") + "'" : "");
  }
  npy::Array read_output(const std::string& name) {
    npy::Array a;
    std::string error;
    EXPECT_TRUE(npy::read(path(name), &a, &error)) << error;
    EXPECT_EQ(a.type, npy::ElemType::kFloat32) << name;
    return a;
  }

  // Runs `flashattn run` and compares O and LSE with the reference.
  void round_trip(const HostProblem& p, const std::string& device, DType dtype, bool causal,
                  const std::string& backend, double o_tol, double lse_tol) {
    write_inputs(p);
    const std::string args = "run --device " + device + " --dtype " +
                             std::string(dtype_name(dtype)) + (causal ? " --causal" : "") +
                             (backend.empty() ? "" : " --backend " + backend) + io_flags();
    const CliResult r = cli(args);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.out << r.err;
    EXPECT_EQ(r.out, "");
    const npy::Array o = read_output("o.npy"), lse = read_output("lse.npy");
    EXPECT_EQ(o.shape, (std::vector<std::int64_t>{p.b, p.sq, p.h, p.d}));
    EXPECT_EQ(lse.shape, (std::vector<std::int64_t>{p.b, p.h, p.sq}));
    std::vector<float> o_ref, lse_ref;
    reference(p, dtype, causal, &o_ref, &lse_ref);
    EXPECT_LE(max_diff(o.values, o_ref), o_tol) << args;
    EXPECT_LE(max_diff(lse.values, lse_ref), lse_tol) << args;
    // Not a trivial output.
    double sum = 0;
    for (float x : o.values) sum += std::fabs(x);
    EXPECT_GT(sum, 0.0);
    // Nothing but the inputs and the outputs in the directory.
    EXPECT_EQ(listing(), (std::vector<std::string>{"k.npy", "lse.npy", "o.npy", "q.npy", "v.npy"}));
  }
};

TEST_F(CliRunTest, RoundTripFloat32MatchesForward) {
  // GQA (4 heads on 2), odd lengths, fp32 through the default CPU backend.
  const HostProblem p = make_problem(2, 37, 53, 4, 2, 32, npy::ElemType::kFloat32);
  round_trip(p, "cpu", DType::kFP32, /*causal=*/false, "", 2e-5, 2e-5);
}

TEST_F(CliRunTest, RoundTripCausalWithMaskedRows) {
  // seqlen_q > seqlen_k with causal: the first 16 rows see no key (O = 0, LSE = -inf).
  const HostProblem p = make_problem(1, 53, 37, 2, 2, 64, npy::ElemType::kFloat32);
  round_trip(p, "cpu", DType::kFP32, /*causal=*/true, "", 2e-5, 2e-5);
  const npy::Array lse = read_output("lse.npy");
  EXPECT_EQ(lse.values[0], -INFINITY);
  EXPECT_TRUE(std::isfinite(lse.values[16]));
}

TEST_F(CliRunTest, RoundTripWithTheReferenceBackendIsBitExact) {
  const HostProblem p = make_problem(1, 29, 29, 2, 1, 16, npy::ElemType::kFloat32);
  round_trip(p, "cpu", DType::kFP32, /*causal=*/true, "cpu-reference", 0.0, 0.0);
}

TEST_F(CliRunTest, RoundTripFloat16FilesInBf16) {
  const HostProblem p = make_problem(1, 31, 45, 2, 2, 32, npy::ElemType::kFloat16);
  round_trip(p, "cpu", DType::kBF16, /*causal=*/false, "", 2e-2, 1e-3);
}

TEST_F(CliRunTest, RoundTripOnCuda) {
  SKIP_WITHOUT_CUDA_BACKENDS();
  const HostProblem p = make_problem(2, 113, 203, 4, 2, 128, npy::ElemType::kFloat32);
  round_trip(p, "cuda", DType::kBF16, /*causal=*/true, "", 2e-2, 1e-3);
}

TEST_F(CliRunTest, MalformedInputsWriteNothing) {
  const HostProblem p = make_problem(1, 16, 24, 4, 2, 32, npy::ElemType::kFloat32);
  const std::string good_k = npy::encode(p.k);
  auto with_header = [](const std::string& dict, std::size_t data_bytes) {
    std::string header = dict;
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string bytes = "\x93NUMPY";
    bytes += '\x01';
    bytes += '\x00';
    bytes += static_cast<char>(header.size() & 0xff);
    bytes += static_cast<char>(header.size() >> 8);
    return bytes + header + std::string(data_bytes, '\x01');
  };
  npy::Array wrong_dim = p.k;
  wrong_dim.shape = {1, 24, 2, 16};
  wrong_dim.values.resize(24 * 2 * 16);
  npy::Array wrong_heads = p.k;
  wrong_heads.shape = {1, 24, 3, 32};
  wrong_heads.values.resize(24 * 3 * 32);
  npy::Array rank3 = p.k;
  rank3.shape = {24, 2, 32};

  struct Case {
    const char* what;
    std::string k_bytes;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"bad magic", "NUMPY" + good_k, "not a .npy file"},
      {"truncated", good_k.substr(0, good_k.size() - 10), "truncated .npy data"},
      {"bad header",
       with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 24, 2, 32) ", 0),
       "bad .npy header"},
      {"float64",
       with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 24, 2, 32), }",
                   24 * 2 * 32 * 8),
       "unsupported dtype '<f8'"},
      {"big-endian",
       with_header("{'descr': '>f4', 'fortran_order': False, 'shape': (1, 24, 2, 32), }",
                   24 * 2 * 32 * 4),
       "big-endian"},
      {"int32",
       with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (1, 24, 2, 32), }",
                   24 * 2 * 32 * 4),
       "unsupported dtype '<i4'"},
      {"fortran order",
       with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 24, 2, 32), }",
                   24 * 2 * 32 * 4),
       "Fortran-order"},
      {"rank 3", npy::encode(rank3), "has rank 3, expected 4"},
      {"head dim mismatch", npy::encode(wrong_dim),
       "k.shape[3] (head_dim) = 16 must equal q.shape[3] = 32"},
      {"kv heads do not divide heads", npy::encode(wrong_heads),
       "must divide q.shape[2] (heads) = 4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    write_inputs(p);
    // v gets the same bytes: k is read first, and validate() compares v with k before it checks
    // how k's kv heads relate to q's heads, so the k-specific checks are the ones that fail.
    for (const char* name : {"k.npy", "v.npy"}) {
      std::ofstream f(path(name), std::ios::binary | std::ios::trunc);
      f << c.k_bytes;
    }
    const CliResult r = cli("run --device cpu" + io_flags());
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(count_lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(path("k.npy")), std::string::npos) << "does not name the file: " << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
    EXPECT_FALSE(file_exists(path("o.npy")));
    EXPECT_FALSE(file_exists(path("lse.npy")));
    EXPECT_EQ(listing(), (std::vector<std::string>{"k.npy", "q.npy", "v.npy"}));
  }
}

TEST_F(CliRunTest, FailedRunLeavesExistingOutputsUntouched) {
  const HostProblem p = make_problem(1, 16, 16, 2, 2, 32, npy::ElemType::kFloat32);
  write_inputs(p);
  {
    std::ofstream(path("o.npy")) << "previous O";
    std::ofstream(path("lse.npy")) << "previous LSE";
  }
  // A missing input file.
  const CliResult r1 =
      cli("run --device cpu --q '" + path("nope.npy") + "' --k '" + path("k.npy") + "' --v '" +
          path("v.npy") + "' --out '" + path("o.npy") + "' --lse '" + path("lse.npy") + "'");
  EXPECT_EQ(r1.exit_code, 1);
  EXPECT_NE(r1.err.find(path("nope.npy") + ": cannot open"), std::string::npos) << r1.err;
  // Shapes the library refuses: 3 query heads on 2 kv heads.
  npy::Array bad_q = p.q;
  bad_q.shape = {1, 16, 3, 32};
  bad_q.values.resize(16 * 3 * 32);
  std::string error;
  ASSERT_TRUE(npy::write(path("q.npy"), bad_q, &error)) << error;
  const CliResult r2 = cli("run --device cpu" + io_flags());
  EXPECT_EQ(r2.exit_code, 1);
  EXPECT_EQ(count_lines(r2.err), 1u) << r2.err;
  EXPECT_EQ(read_text(path("o.npy")), "previous O");
  EXPECT_EQ(read_text(path("lse.npy")), "previous LSE");
}

// Two paths that name one file, however spelled or linked, are refused before anything runs:
// "--lse ./o.npy" wrote LSE over O and reported "o.npy was written"; "--out q.npy" replaced an
// input.
TEST_F(CliRunTest, OutputsThatNameTheSameFileAreUsageErrors) {
  const HostProblem p = make_problem(1, 16, 16, 2, 2, 32, npy::ElemType::kFloat32);
  write_inputs(p);
  const std::string q_bytes = read_text(path("q.npy")), k_bytes = read_text(path("k.npy"));
  ASSERT_EQ(::symlink(path("q.npy").c_str(), path("q_link.npy").c_str()), 0);
  ASSERT_EQ(::link(path("k.npy").c_str(), path("k_hard.npy").c_str()), 0);
  ASSERT_EQ(::mkdir(path("sub").c_str(), 0755), 0);
  const std::string inputs =
      " --q '" + path("q.npy") + "' --k '" + path("k.npy") + "' --v '" + path("v.npy") + "'";
  struct Case {
    std::string outputs, expected;
  };
  const std::vector<Case> cases = {
      {" --out '" + path("o.npy") + "' --lse '" + dir_ + "./o.npy'",
       "--lse " + dir_ + "./o.npy and --out " + path("o.npy") + " name the same file"},
      {" --out '" + dir_ + "sub/../o.npy' --lse '" + path("o.npy") + "'",
       "--lse " + path("o.npy") + " and --out " + dir_ + "sub/../o.npy name the same file"},
      {" --out '" + path("q.npy") + "'",
       "--out " + path("q.npy") + " names the same file as the input --q " + path("q.npy")},
      {" --out '" + path("o.npy") + "' --lse '" + path("q_link.npy") + "'",
       "--lse " + path("q_link.npy") + " names the same file as the input --q " + path("q.npy")},
      {" --out '" + path("k_hard.npy") + "'",
       "--out " + path("k_hard.npy") + " names the same file as the input --k " + path("k.npy")},
  };
  for (const Case& c : cases) {
    const CliResult r = cli("run --device cpu" + inputs + c.outputs);
    EXPECT_EQ(r.exit_code, 2) << c.outputs << "\n" << r.err;
    EXPECT_EQ(r.err, "flashattn run: " + c.expected + "\n") << c.outputs;
    EXPECT_FALSE(file_exists(path("o.npy"))) << c.outputs;
  }
  EXPECT_EQ(read_text(path("q.npy")), q_bytes);
  EXPECT_EQ(read_text(path("k.npy")), k_bytes);
  // Inputs may share a file.
  const CliResult shared = cli("run --device cpu --q '" + path("q.npy") + "' --k '" +
                               path("k.npy") + "' --v '" + path("k_hard.npy") + "' --out '" +
                               path("o.npy") + "'");
  EXPECT_EQ(shared.exit_code, 0) << shared.err;
}

// Every output's directory is checked before anything is read or computed, and the message names
// the user's path (it named the temporary file, after the whole computation).
TEST_F(CliRunTest, UnwritableOutputIsReportedBeforeComputing) {
  const HostProblem p = make_problem(1, 16, 16, 2, 2, 32, npy::ElemType::kFloat32);
  write_inputs(p);
  for (const auto& [flag, expected] :
       {std::pair{std::string("--out"), "--out " + path("missing/o.npy") +
                                            ": cannot open for writing: directory " +
                                            path("missing") + " does not exist"},
        std::pair{std::string("--lse"), "--lse " + path("missing/o.npy") +
                                            ": cannot open for writing: directory " +
                                            path("missing") + " does not exist"}}) {
    const std::string outputs = flag == "--out"
                                    ? " --out '" + path("missing/o.npy") + "'"
                                    : " --out '" + path("o.npy") + "' --lse '" +
                                          path("missing/o.npy") + "'";
    // An input that cannot be read proves nothing was read first.
    const CliResult r = cli("run --device cpu --q '" + path("nope.npy") + "' --k '" +
                            path("k.npy") + "' --v '" + path("v.npy") + "'" + outputs);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, "flashattn run: " + expected + "\n");
    EXPECT_EQ(listing(), (std::vector<std::string>{"k.npy", "q.npy", "v.npy"}));
  }
  ASSERT_EQ(::mkdir(path("o_dir").c_str(), 0755), 0);
  const CliResult dir = cli("run --device cpu" + io_flags(false).substr(0, io_flags(false).find(" --out")) +
                            " --out '" + path("o_dir") + "'");
  EXPECT_EQ(dir.exit_code, 1) << dir.err;
  EXPECT_NE(dir.err.find("--out " + path("o_dir") + ": cannot open for writing: it is a directory"),
            std::string::npos)
      << dir.err;
}

TEST_F(CliRunTest, DirectoryInputIsNamedAsOne) {
  const HostProblem p = make_problem(1, 16, 16, 2, 2, 32, npy::ElemType::kFloat32);
  write_inputs(p);
  const CliResult r = cli("run --device cpu --q '" + dir_ + "' --k '" + path("k.npy") + "' --v '" +
                          path("v.npy") + "' --out '" + path("o.npy") + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err, "flashattn run: --q " + dir_ + ": is a directory, expected a .npy file\n");
}

// A finite value that rounds to infinity in --dtype is an error naming the file, the element and
// the value; fp32 keeps it. (It turned into inf and a NaN output with exit status 0.)
TEST_F(CliRunTest, ValuesBeyondTheDtypeAreErrors) {
  HostProblem p = make_problem(1, 4, 4, 2, 2, 16, npy::ElemType::kFloat32);
  // q[0, 1, 1, 3]: flat index ((0 * 4 + 1) * 2 + 1) * 16 + 3 = 51.
  p.q.values[51] = 1e5f;
  // v[0, 2, 0, 5] = 3.4e38: beyond bf16's 3.3895e38 (and fp16's 65504).
  p.v.values[(2 * 2 + 0) * 16 + 5] = 3.4e38f;
  write_inputs(p);
  const CliResult fp16 = cli("run --device cpu --dtype fp16" + io_flags());
  EXPECT_EQ(fp16.exit_code, 1) << fp16.err;
  EXPECT_EQ(fp16.err, "flashattn run: --q " + path("q.npy") +
                          ": element (0, 1, 1, 3) = 100000 does not fit fp16 (max 65504)\n");
  const CliResult bf16 = cli("run --device cpu --dtype bf16" + io_flags());
  EXPECT_EQ(bf16.exit_code, 1) << bf16.err;
  EXPECT_EQ(bf16.err, "flashattn run: --v " + path("v.npy") +
                          ": element (0, 2, 0, 5) = 3.4e+38 does not fit bf16 (max 3.38953e+38)\n");
  EXPECT_EQ(listing(), (std::vector<std::string>{"k.npy", "q.npy", "v.npy"}));
  // 65519 rounds to 65504 in fp16: it fits.
  p.q.values[51] = 65519.0f;
  p.v.values[(2 * 2 + 0) * 16 + 5] = 1.0f;
  write_inputs(p);
  const CliResult fits = cli("run --device cpu --dtype fp16" + io_flags());
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
}

// NaN inputs are allowed; run says how many output values are non-finite. A NaN in q row
// (0, 2, head 1) makes that row's 16 O values and its LSE NaN. LSE -inf on rows that see no key
// (causal, seqlen_q > seqlen_k) is not counted.
TEST_F(CliRunTest, NonFiniteOutputsAreCountedOnStderr) {
  HostProblem p = make_problem(1, 4, 4, 2, 2, 16, npy::ElemType::kFloat32);
  p.q.values[(2 * 2 + 1) * 16 + 7] = NAN;
  write_inputs(p);
  const CliResult r = cli("run --device cpu" + io_flags());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "flashattn run: note: 16 of 128 values of --out " + path("o.npy") +
                       " and 1 of 8 of --lse " + path("lse.npy") +
                       " are NaN or infinite (the inputs hold 1 NaN or infinite value; attention "
                       "over them is non-finite)\n");
  const HostProblem masked = make_problem(1, 9, 4, 2, 2, 16, npy::ElemType::kFloat32);
  write_inputs(masked);
  const CliResult quiet = cli("run --device cpu --causal" + io_flags());
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(read_output("lse.npy").values[0], -INFINITY);
  const CliResult help = cli("run --help");
  EXPECT_NE(help.out.find("NaN and infinite inputs are allowed"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("does not fit --dtype"), std::string::npos) << help.out;
}

// --threads gives bit-identical outputs for any count.
TEST_F(CliRunTest, ThreadCountDoesNotChangeTheOutput) {
  const HostProblem p = make_problem(2, 130, 70, 4, 2, 32, npy::ElemType::kFloat32);
  write_inputs(p);
  std::string first_o, first_lse;
  for (const char* threads : {"1", "2", "5"}) {
    const CliResult r = cli(std::string("run --device cpu --causal --threads ") + threads + io_flags());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (first_o.empty()) {
      first_o = read_text(path("o.npy"));
      first_lse = read_text(path("lse.npy"));
    } else {
      EXPECT_EQ(read_text(path("o.npy")), first_o) << threads << " threads";
      EXPECT_EQ(read_text(path("lse.npy")), first_lse) << threads << " threads";
    }
  }
}

TEST_F(CliRunTest, EmptyBatchWritesEmptyOutputs) {
  const HostProblem p = make_problem(0, 8, 8, 2, 2, 32, npy::ElemType::kFloat32);
  write_inputs(p);
  const CliResult r = cli("run --device cpu" + io_flags());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_output("o.npy").shape, (std::vector<std::int64_t>{0, 8, 2, 32}));
  EXPECT_EQ(read_output("lse.npy").shape, (std::vector<std::int64_t>{0, 2, 8}));
}

}  // namespace
}  // namespace flashattn
