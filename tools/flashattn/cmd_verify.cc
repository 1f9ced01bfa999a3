// flashattn verify: one shape through a backend on fresh seeded inputs, judged by the rule of
// docs/testing.md (flashattn::verify). Exit 0 on pass, 1 on failure or when it could not run.
#include <iostream>

#include "cli_args.h"
#include "commands.h"

namespace flashattn::cli {
namespace {

// 512 x 512 keeps the float64 CPU reference affordable (2*8*512*512*128 = 5.4e8 < 6e8 MACs) and
// still spans several tiles of every kernel.
constexpr ShapeDefaults kCudaDefaults = {2, 8, 512, 128, DType::kBF16};
constexpr ShapeDefaults kCpuDefaults = {2, 8, 512, 128, DType::kFP32};

InputLayout parse_layout(const std::string& s) {
  if (s == "bhsd") return InputLayout::kStridedBHSD;
  if (s == "padded-heads") return InputLayout::kPaddedHeads;
  return InputLayout::kContiguous;
}

InputKind parse_inputs(const std::string& s) {
  if (s == "large-scores") return InputKind::kLargeScores;
  if (s == "very-negative") return InputKind::kVeryNegative;
  if (s == "large-magnitude") return InputKind::kLargeMagnitude;
  if (s == "huge-scores") return InputKind::kHugeScores;
  return InputKind::kNormal;
}

}  // namespace

int cmd_verify(const Args& args) {
  ArgParser parser(
      "flashattn verify", "[flags]",
      "Run one attention shape through a backend on fresh seeded inputs and compare it with a\n"
      "float64 CPU reference (or the GPU naive kernel in float32 for large shapes). It passes\n"
      "iff max|O - O_ref| <= 2 * max|O_baseline - O_ref| + atol, the mean error is within 1.5x\n"
      "the baseline's, LSE is within 1e-3, every output was written and nothing is non-finite.\n"
      "Prints the report; exit status 0 on pass, 1 on failure or when it could not run.");
  CommonFlags flags;
  add_common_flags(parser, &flags, kCudaDefaults, kCpuDefaults, /*with_sizes=*/true,
                   /*with_seqlens=*/true, /*with_backend=*/true);
  std::optional<std::string> layout, inputs;
  bool no_lse = false;
  parser.section("Verification");
  parser.add_choice("--layout", &layout, {"contiguous", "bhsd", "padded-heads"},
                    "input memory layout: plain BSHD, BHSD storage seen through BSHD strides,\n"
                    "or heads sliced from a wider tensor (default contiguous)");
  parser.add_choice("--inputs", &inputs,
                    {"normal", "large-scores", "very-negative", "large-magnitude", "huge-scores"},
                    "input distribution: N(0.5, 1); scores near 1e4; rows whose scores are all\n"
                    "below -5e4; values near the dtype's range; scores near 1e10 (default normal)");
  parser.add_switch("--no-lse", &no_lse, "do not request or check the LSE output");
  if (!parser.parse(args)) return kExitOk;

  const std::string backend = flags.backend.value_or("auto");
  check_backend_name("--backend", backend, /*allow_auto=*/true);
  const Device device = resolve_device("flashattn verify", flags.device, {backend});
  const ProblemShape shape =
      make_shape(flags, device.type == DeviceType::kCUDA ? kCudaDefaults : kCpuDefaults);

  VerifyOptions options;
  options.backend = backend;
  options.device = device;
  options.seed = flags.seed.value_or(0);
  options.layout = parse_layout(layout.value_or("contiguous"));
  options.kind = parse_inputs(inputs.value_or("normal"));
  options.check_lse = !no_lse;

  VerifyReport report;
  const Status st = verify(shape, options, &report);
  if (!st.ok()) {
    throw RunError("could not verify " + shape.to_string() + " on " + device_name(device) +
                   " (backend " + backend + ", seed " + std::to_string(options.seed) +
                   "): " + st.to_string());
  }
  const std::string text = report.to_string();
  std::cout << text;
  if (!text.empty() && text.back() != '\n') std::cout << "\n";
  std::cout.flush();
  if (!report.passed) {
    std::cerr << "flashattn verify: FAILED: " << shape.to_string() << " backend " << report.backend
              << " seed " << report.seed << " (" << report.failures.size() << " failed check"
              << (report.failures.size() == 1 ? "" : "s") << ")\n";
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace flashattn::cli
