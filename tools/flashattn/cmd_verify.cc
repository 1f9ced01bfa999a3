// flashattn verify: one shape through a backend on fresh seeded inputs, judged by the rule of
// docs/testing.md (flashattn::verify). Exit 0 on pass, 1 on failure or when it could not run.
#include <iostream>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "verify/inputs.h"

namespace flashattn::cli {
namespace {

// 512 x 512 keeps the float64 CPU reference affordable (2*8*512*512*128 = 5.4e8 multiply-adds,
// under kDefaultCpuReferenceLimit = 6e8) and still spans several tiles of every kernel.
constexpr ShapeDefaults kCudaDefaults = {2, 8, 512, 128, DType::kBF16};
constexpr ShapeDefaults kCpuDefaults = {2, 8, 512, 128, DType::kFP32};

InputLayout parse_layout(const std::string& s) {
  if (s == "bhsd") return InputLayout::kStridedBHSD;
  if (s == "padded-heads") return InputLayout::kPaddedHeads;
  return InputLayout::kContiguous;
}

// The --inputs choices: every kind the verifier knows, by its name (verify/inputs.h), so a new kind
// needs no edit here.
std::vector<std::string> input_kind_names() {
  std::vector<std::string> names;
  for (InputKind kind : verifier::all_input_kinds()) names.emplace_back(verifier::kind_name(kind));
  return names;
}

InputKind parse_inputs(const std::string& s) {
  for (InputKind kind : verifier::all_input_kinds()) {
    if (verifier::kind_name(kind) == s) return kind;
  }
  return InputKind::kNormal;  // unreachable: add_choice accepted only the names above
}

// --varlen: "random" or lengths.
struct VarlenFlag {
  bool random = false;
  std::vector<std::int64_t> lengths;
};

VarlenFlag parse_varlen(const std::string& text) {
  VarlenFlag v;
  if (text == "random") {
    v.random = true;
    return v;
  }
  const std::string expected =
      "--varlen expects random or lengths L1,L2,... (integers >= 0, one per sequence), got \"" +
      text + "\"";
  try {
    for (const std::string& item : split_list("--varlen", text)) {
      v.lengths.push_back(parse_int_value("--varlen", item, 0));
    }
  } catch (const UsageError&) {
    throw UsageError(expected);
  }
  return v;
}

// The varlen part of the shape from --varlen, --varlen-k and --seqused-k (dense when --varlen is
// absent). Throws UsageError for flags that do not go together.
void apply_varlen(const ArgParser& parser, const std::optional<VarlenFlag>& varlen,
                  const std::optional<std::vector<std::int64_t>>& varlen_k,
                  const std::optional<std::vector<std::int64_t>>& seqused_k, std::uint64_t seed,
                  ProblemShape* shape) {
  if (!varlen.has_value()) {
    for (const char* flag : {"--varlen-k", "--seqused-k"}) {
      if (parser.given(flag)) {
        throw UsageError(std::string(flag) + " needs --varlen (variable-length sequences)");
      }
    }
    return;
  }
  std::vector<std::int64_t> q, k;
  if (varlen->random) {
    if (shape->batch < 1) {
      throw UsageError("--varlen random needs --batch >= 1, got " + std::to_string(shape->batch));
    }
    const verifier::VarlenLengths drawn =
        verifier::random_varlen(seed, shape->batch, shape->seqlen_q, shape->seqlen_k);
    q = drawn.q;
    k = drawn.k;
  } else {
    for (const char* flag : {"--seqlen-q", "--seqlen-k"}) {
      if (parser.given(flag)) {
        throw UsageError(std::string(flag) +
                         " does not apply with --varlen LIST: the lengths are given (use "
                         "--varlen random for lengths around --seqlen-q / --seqlen-k)");
      }
    }
    q = k = varlen->lengths;
    const auto count = static_cast<std::int64_t>(q.size());
    if (parser.given("--batch") && shape->batch != count) {
      throw UsageError("--batch " + std::to_string(shape->batch) + " disagrees with --varlen's " +
                       std::to_string(count) + " sequence" + (count == 1 ? "" : "s"));
    }
  }
  if (varlen_k.has_value()) {
    if (varlen->random && parser.given("--seqlen-k")) {
      throw UsageError("--seqlen-k does not apply with --varlen-k: the key lengths are given");
    }
    k = *varlen_k;
    if (k.size() != q.size()) {
      throw UsageError("--varlen-k has " + std::to_string(k.size()) + " length" +
                       (k.size() == 1 ? "" : "s") + ", expected " + std::to_string(q.size()) +
                       " (one per sequence of --varlen)");
    }
  }
  shape->set_varlen(q, k, seqused_k.value_or(std::vector<std::int64_t>{}));
}

}  // namespace

int cmd_verify(const Args& args) {
  ArgParser parser(
      "flashattn verify", "[flags]",
      "Run one attention shape through a backend on fresh seeded inputs and compare it with a\n"
      "float64 CPU reference (or the GPU naive kernel in float32 for large shapes). It passes\n"
      "iff max|O - O_ref| <= 2 * max|O_baseline - O_ref| + atol, the mean error is within 1.5x\n"
      "the baseline's, LSE is within 1e-3, every output was written and nothing is non-finite;\n"
      "the baseline (the naive algorithm in the dtype) must itself be within a fixed bound of\n"
      "the reference (docs/testing.md).\n"
      "The float64 CPU reference takes shapes up to --cpu-reference-limit multiply-adds\n"
      "(batch*heads*seqlen_q*seqlen_k*head_dim, default " +
          format_number(kDefaultCpuReferenceLimit) +
          ": about 1 s on 2 cores); above it\n"
          "--device cpu refuses before allocating anything, and cuda verifies against the GPU\n"
          "naive kernel in float32, after holding that kernel and the baseline to the fixed\n"
          "bound against the float64 CPU reference on a sample of rows. The variants (--window, --softcap, --alibi, --sinks,\n"
          "--varlen) apply to the backend, the reference and the baseline alike; a backend that\n"
          "does not implement one fails with the library's message (exit status 1). With a\n"
          "window or --varlen the limit counts the (query, key) pairs the mask keeps.\n"
          "Prints the report; exit status 0 on pass, 1 on failure or when it could not run.");
  CommonFlags flags;
  add_common_flags(parser, &flags, kCudaDefaults, kCpuDefaults, /*with_sizes=*/true,
                   /*with_seqlens=*/true, /*with_backend=*/true);
  std::optional<std::string> layout, inputs;
  std::optional<double> cpu_reference_limit;
  bool no_lse = false;
  parser.section("Verification");
  parser.add_choice("--layout", &layout, {"contiguous", "bhsd", "padded-heads"},
                    "input memory layout: plain BSHD, BHSD storage seen through BSHD strides,\n"
                    "or heads sliced from a wider tensor (default contiguous)");
  parser.add_choice("--inputs", &inputs, input_kind_names(),
                    "input distribution (see src/verify/inputs.h): normal is N(0.5, 1);\n"
                    "large-scores puts scores near 1e4; very-negative makes rows whose scores\n"
                    "are all below -5e4; large-magnitude puts values near the dtype's range;\n"
                    "huge-scores puts scaled scores near 1e10 (default normal)");
  parser.add_switch("--no-lse", &no_lse, "do not request or check the LSE output");
  parser.add_number("--cpu-reference-limit", &cpu_reference_limit, "N",
                    "largest batch*heads*seqlen_q*seqlen_k*head_dim (multiply-adds) the\n"
                    "float64 CPU reference takes (default " + format_number(kDefaultCpuReferenceLimit) +
                        ", about 1 s on 2 cores);\n"
                        "with --window or --varlen, heads*head_dim*(query, key) pairs the mask\n"
                        "keeps; raise it to verify larger shapes on the CPU",
                    0.0, /*exclusive=*/true);
  VariantFlags variants;
  add_variant_flags(parser, &variants, /*generated=*/true);
  std::optional<VarlenFlag> varlen;
  std::optional<std::vector<std::int64_t>> varlen_k, seqused_k;
  parser.add_value("--varlen", "random|L1,L2,...",
                   "variable-length sequences, packed (total, heads, head_dim): random draws\n"
                   "--batch lengths from --seed summing to batch * --seqlen-q (and\n"
                   "batch * --seqlen-k for keys), one sequence empty and (batch >= 3) one with\n"
                   "queries but no keys; a list gives each sequence's length, for q and k",
                   [&varlen](const std::string& v) { varlen = parse_varlen(v); });
  parser.add_int_list("--varlen-k", &varlen_k, "L1,L2,...",
                      "the key lengths of the --varlen sequences, when they differ from q's", 0);
  parser.add_int_list("--seqused-k", &seqused_k, "N1,N2,...",
                      "with --varlen: sequence b uses only its first N_b keys (seqused_k)", 0);
  if (!parser.parse(args)) return kExitOk;

  ShapeFieldNames names = shape_flag_names("--seqlen-q", "--seqlen-k");
  names.seqlens_q = "--varlen";
  names.seqlens_k = varlen_k.has_value() ? "--varlen-k" : "--varlen";
  names.seqused_k = "--seqused-k";
  // The variant and varlen flags are judged before the device is (so a usage error is the one
  // line printed): the sizes they depend on default alike on both devices.
  static_assert(kCudaDefaults.batch == kCpuDefaults.batch &&
                kCudaDefaults.seqlen == kCpuDefaults.seqlen);
  auto shape_for = [&](const ShapeDefaults& defaults) {
    ProblemShape s = make_shape(flags, defaults);
    apply_variant_flags(variants, &s);
    apply_varlen(parser, varlen, varlen_k, seqused_k, flags.seed.value_or(0), &s);
    const Status st = check_varlen_lengths(s, names);
    if (!st.ok()) throw UsageError(st.message());
    return s;
  };
  shape_for(kCpuDefaults);

  apply_threads(flags);
  const std::string backend = flags.backend.value_or("auto");
  check_backend_name("--backend", backend, /*allow_auto=*/true);
  const Device device = resolve_device("flashattn verify", flags.device, {backend});
  const ProblemShape shape =
      shape_for(device.type == DeviceType::kCUDA ? kCudaDefaults : kCpuDefaults);
  const ShapeSizes sizes = check_shape_sizes(shape, names);
  const double limit = cpu_reference_limit.value_or(kDefaultCpuReferenceLimit);
  if (device.type == DeviceType::kCPU && static_cast<double>(sizes.reference_macs) > limit) {
    throw RunError("--device cpu: " +
                   cpu_reference_refusal(shape, sizes, limit, "--cpu-reference-limit") +
                   " (raise the limit to verify it anyway)");
  }

  VerifyOptions options;
  options.backend = backend;
  options.device = device;
  options.seed = flags.seed.value_or(0);
  options.layout = parse_layout(layout.value_or("contiguous"));
  options.kind = parse_inputs(inputs.value_or("normal"));
  options.check_lse = !no_lse;
  options.cpu_reference_limit = limit;

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
