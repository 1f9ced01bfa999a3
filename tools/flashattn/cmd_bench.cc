// flashattn bench: the lesson's table. Times each backend at each sequence length (seqlen_q =
// seqlen_k), prints progress on stderr and the table on stdout, and optionally writes a CSV.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "bench/bench.h"
#include "cli_args.h"
#include "commands.h"
#include "cuda/common/runtime.h"
#include "output_paths.h"

namespace flashattn::cli {
namespace {

constexpr ShapeDefaults kCudaDefaults = {4, 16, 0, 128, DType::kBF16};
constexpr ShapeDefaults kCpuDefaults = {1, 4, 0, 64, DType::kFP32};
// Up to 32k so the naive backend's S matrix (4 * B * H * L^2 bytes: 275 GB at B=4, H=16, 32k)
// outgrows an H200's 141 GB and the table shows naive running out of memory.
const std::vector<std::int64_t> kCudaSeqlens = {512, 1024, 2048, 4096, 8192, 16384, 32768};
const std::vector<std::int64_t> kCpuSeqlens = {128, 256, 512, 1024};
const std::vector<std::string> kCudaBackends = {"naive", "flash", "flash-sm80"};
const std::vector<std::string> kCpuBackends = {"cpu-reference", "cpu-flash"};
constexpr int kDefaultWarmup = 2;
constexpr int kDefaultMaxIters = 20;
constexpr int kDefaultMinIters = 3;
constexpr double kDefaultMaxSeconds = 2.0;

template <typename T>
std::string join(const std::vector<T>& items) {
  std::ostringstream os;
  for (std::size_t i = 0; i < items.size(); ++i) os << (i ? "," : "") << items[i];
  return os.str();
}

std::string device_description(Device device) {
  if (device.type == DeviceType::kCPU) return "cpu";
  cuda::DeviceProps props;
  if (!cuda::device_props(device.index, &props).ok()) return device_name(device);
  return device_name(device) + " (" + props.name + ")";
}

// The command line that reproduces this run, every default spelled out.
std::string command_line(const BenchOptions& o) {
  const ProblemShape& s = o.shape;
  std::ostringstream os;
  os << "flashattn bench --device " << device_name(o.device) << " --batch " << s.batch
     << " --heads " << s.heads << " --kv-heads " << s.kv_heads << " --head-dim " << s.head_dim
     << " --dtype " << dtype_name(s.dtype) << (s.causal ? " --causal" : "");
  if (s.scale.has_value()) os << " --scale " << *s.scale;
  os << variant_command_line(s);
  os << " --seed " << o.seed << " --seqlens " << join(o.seqlens) << " --backends "
     << join(o.backends) << " --warmup " << o.warmup << " --iters " << o.max_iters
     << " --max-seconds " << o.max_seconds_per_cell;
  return os.str();
}

}  // namespace

int cmd_bench(const Args& args) {
  const std::string description =
      "Time backends over a sweep of sequence lengths (seqlen_q = seqlen_k = each) on fresh\n"
      "random inputs: median time, TFLOP/s, memory, and flash's speedup over naive. A backend\n"
      "that does not fit reports OOM (the naive S matrix needs 4*batch*heads*L^2 bytes).\n"
      "Each cell's time per run is estimated first: its FLOPs at the rate the backend reached\n"
      "on its previous cell, or on a probe of about " +
      format_number(kProbeFlopsCpu) + " FLOPs on cpu, " + format_number(kProbeFlopsCuda) +
      " on cuda\n"
      "(a first cell no larger than that runs without an estimate). A cell estimated above\n"
      "--max-seconds is skipped: the table says so with the estimate.\n"
      "Progress goes to stderr (a line as each cell starts and ends), the table to stdout.\n"
      "The variants (--window, --softcap, --alibi, --sinks) apply to every cell; a backend\n"
      "that does not implement one shows \"unsupported\" cells with the library's message.\n"
      "Exit status 1 if the benchmark could not run or a cell failed with an error (OOM,\n"
      "unsupported and skipped cells are results, not errors).";
  ArgParser parser("flashattn bench", "[flags]", description);
  CommonFlags flags;
  add_common_flags(parser, &flags, kCudaDefaults, kCpuDefaults, /*with_sizes=*/true,
                   /*with_seqlens=*/false, /*with_backend=*/false);
  std::optional<std::vector<std::int64_t>> seqlens;
  std::optional<std::vector<std::string>> backends;
  std::optional<std::string> single_backend, csv_path;
  std::optional<std::int64_t> warmup, iters;
  std::optional<double> max_seconds;
  parser.section("Sweep");
  parser.add_int_list("--seqlens", &seqlens, "L1,L2,...",
                      "sequence lengths (default " + join(kCudaSeqlens) + " on cuda,\n" +
                          join(kCpuSeqlens) + " on cpu)",
                      1);
  parser.add_string_list("--backends", &backends, "B1,B2,...",
                         "backends to time, one device type (default " + join(kCudaBackends) +
                             " on cuda,\n" + join(kCpuBackends) + " on cpu)");
  parser.add_string("--backend", &single_backend, "NAME", "same as --backends NAME");
  parser.add_int("--warmup", &warmup, "N",
                 "untimed runs per cell (default " + std::to_string(kDefaultWarmup) + ")", 0);
  parser.add_int("--iters", &iters, "N",
                 "most timed runs per cell (default " + std::to_string(kDefaultMaxIters) + ")", 1);
  parser.add_number("--max-seconds", &max_seconds, "S",
                    "time budget of a cell (default 2): a cell estimated above S per run is\n"
                    "skipped; one that runs repeats until S seconds are spent (after its\n"
                    "warm-up and at least min(3, --iters) timed runs)",
                    0.0, true);
  parser.section("Output");
  parser.add_string("--csv", &csv_path, "FILE", "also write the results as CSV to FILE");
  VariantFlags variants;
  add_variant_flags(parser, &variants, /*generated=*/true);
  if (!parser.parse(args)) return kExitOk;

  check_window_with_causal(variants, flags.causal);
  apply_threads(flags);
  if (single_backend.has_value()) {
    if (backends.has_value()) throw UsageError("give either --backend or --backends, not both");
    backends = std::vector<std::string>{*single_backend};
  }
  if (backends.has_value()) {
    for (const std::string& b : *backends) check_backend_name("--backends", b, false);
  }
  const Device device = resolve_device("flashattn bench", flags.device,
                                       backends.value_or(std::vector<std::string>{}));
  const bool on_cuda = device.type == DeviceType::kCUDA;

  // A backend that cannot run here at all (not built, no device) is an error, not a table of
  // "unsupported" cells.
  for (const BackendInfo& b : list_backends()) {
    for (const std::string& name : backends.value_or(on_cuda ? kCudaBackends : kCpuBackends)) {
      if (b.name == name && !b.usable) {
        throw RunError("backend " + name + " is not usable here: " + b.why_not);
      }
    }
  }

  BenchOptions options;
  options.shape = make_shape(flags, on_cuda ? kCudaDefaults : kCpuDefaults);
  apply_variant_flags(variants, &options.shape);
  options.seqlens = seqlens.value_or(on_cuda ? kCudaSeqlens : kCpuSeqlens);
  options.backends = backends.value_or(on_cuda ? kCudaBackends : kCpuBackends);
  options.device = device;
  options.warmup =
      static_cast<int>(std::min<std::int64_t>(warmup.value_or(kDefaultWarmup), 1 << 20));
  options.max_iters =
      static_cast<int>(std::min<std::int64_t>(iters.value_or(kDefaultMaxIters), 1 << 20));
  options.min_iters = std::min(kDefaultMinIters, options.max_iters);
  options.max_seconds_per_cell = max_seconds.value_or(kDefaultMaxSeconds);
  options.seed = flags.seed.value_or(0);
  // Sizes at the longest length, by the flags that set them (run_bench checks them too).
  ProblemShape longest = options.shape;
  longest.seqlen_q = longest.seqlen_k =
      *std::max_element(options.seqlens.begin(), options.seqlens.end());
  check_shape_sizes(longest, shape_flag_names("--seqlens", "--seqlens"));

  // Open the CSV before the (possibly long) run so a bad path fails at once; the file is written
  // under a temporary name and renamed into place only when everything succeeded.
  std::string csv_tmp;
  std::ofstream csv;
  if (csv_path.has_value()) {
    check_writable({"--csv", *csv_path});
    csv_tmp = temp_path(*csv_path);
    csv.open(csv_tmp, std::ios::trunc);
    if (!csv) throw RunError("--csv " + *csv_path + ": cannot open for writing");
  }
  auto drop_csv = [&] {
    if (!csv_tmp.empty()) {
      csv.close();
      std::remove(csv_tmp.c_str());
    }
  };

  std::cerr << command_line(options) << "\n";
  BenchResult result;
  const Status st = run_bench(options, &result, [](const std::string& line) {
    std::cerr << line << (line.empty() || line.back() != '\n' ? "\n" : "") << std::flush;
  });
  if (!st.ok()) {
    drop_csv();
    throw RunError("benchmark failed: " + st.to_string());
  }

  std::cout << "# " << command_line(options) << "\n";
  if (on_cuda) std::cout << "# device: " << device_description(device) << "\n";
  const std::string table = result.table();
  std::cout << table << (table.empty() || table.back() != '\n' ? "\n" : "") << std::flush;

  if (csv_path.has_value()) {
    csv << result.csv();
    csv.close();
    if (!csv || std::rename(csv_tmp.c_str(), csv_path->c_str()) != 0) {
      std::remove(csv_tmp.c_str());
      throw RunError("--csv " + *csv_path + ": write failed");
    }
    std::cerr << "flashattn bench: wrote " << *csv_path << "\n";
  }

  int errors = 0;
  for (const BenchCell& cell : result.cells) {
    if (cell.status == CellStatus::kError) {
      ++errors;
      std::cerr << "flashattn bench: error: " << cell.backend << " at seqlen " << cell.seqlen
                << ": " << cell.message << "\n";
    }
  }
  return errors == 0 ? kExitOk : kExitFailure;
}

}  // namespace flashattn::cli
