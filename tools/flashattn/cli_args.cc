#include "cli_args.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <thread>

#include "cpu/host_loop.h"
#include "cuda/common/runtime.h"

namespace flashattn::cli {
namespace {

// Help column where flag descriptions start.
constexpr std::size_t kHelpColumn = 24;

// The user's text in double quotes, control characters escaped so a message stays one line.
std::string quote(const std::string& text) {
  std::string s = "\"";
  for (char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
      s += buf;
    } else {
      s += c;
    }
  }
  return s + "\"";
}

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : sep) + item;
  return s;
}

std::string default_text(std::int64_t cuda_value, std::int64_t cpu_value) {
  if (cuda_value == cpu_value) return "default " + std::to_string(cuda_value);
  return "default " + std::to_string(cuda_value) + " on cuda, " + std::to_string(cpu_value) +
         " on cpu";
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendInfo& b : list_backends()) names.push_back(b.name);
  return names;
}

}  // namespace

std::int64_t parse_int_value(const std::string& flag, const std::string& text,
                             std::int64_t min_value, std::int64_t max_value) {
  std::int64_t v = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(first, last, v);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != last) {
    throw UsageError(flag + " expects an integer, got " + quote(text));
  }
  if (ec == std::errc::result_out_of_range) {
    throw UsageError(flag + " expects an integer, got " + quote(text) + " (out of range)");
  }
  if (max_value < std::numeric_limits<std::int64_t>::max() && (v < min_value || v > max_value)) {
    throw UsageError(flag + " expects an integer from " + std::to_string(min_value) + " to " +
                     std::to_string(max_value) + ", got " + quote(text));
  }
  if (v < min_value) {
    throw UsageError(flag + " expects an integer >= " + std::to_string(min_value) + ", got " +
                     quote(text));
  }
  return v;
}

std::uint64_t parse_u64_value(const std::string& flag, const std::string& text) {
  std::uint64_t v = 0;
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), last, v);
  if (text.empty() || ec != std::errc() || ptr != last) {
    throw UsageError(flag + " expects a non-negative integer, got " + quote(text));
  }
  return v;
}

double parse_number_value(const std::string& flag, const std::string& text, double min_value,
                          bool exclusive) {
  const bool bad_start =
      text.empty() || std::isspace(static_cast<unsigned char>(text.front())) != 0;
  char* end = nullptr;
  errno = 0;
  const double v = bad_start ? 0.0 : std::strtod(text.c_str(), &end);
  if (bad_start || end != text.c_str() + text.size() || !std::isfinite(v) || errno == ERANGE) {
    throw UsageError(flag + " expects a number, got " + quote(text));
  }
  if (exclusive ? !(v > min_value) : !(v >= min_value)) {
    std::ostringstream os;
    os << flag << " expects a number " << (exclusive ? "> " : ">= ") << min_value << ", got "
       << quote(text);
    throw UsageError(os.str());
  }
  return v;
}

std::string format_number(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

std::vector<std::string> split_list(const std::string& flag, const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) {
      throw UsageError(flag + " expects a comma-separated list without empty items, got " +
                       quote(text));
    }
    items.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

// ---------------------------------------------------------------------------------------------
// ArgParser

ArgParser::ArgParser(std::string command, std::string synopsis, std::string description)
    : command_(std::move(command)),
      synopsis_(std::move(synopsis)),
      description_(std::move(description)) {}

void ArgParser::section(const std::string& title) { items_.push_back({title, 0}); }

void ArgParser::add(const std::string& name, const std::string& metavar, const std::string& help,
                    std::function<void(const std::string&)> apply) {
  flags_.push_back({name, metavar, help, std::move(apply), false});
  items_.push_back({"", flags_.size() - 1});
}

ArgParser::Flag* ArgParser::find(const std::string& name) {
  for (Flag& f : flags_) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

void ArgParser::add_switch(const std::string& name, bool* out, const std::string& help) {
  add(name, "", help, [out](const std::string&) { *out = true; });
}

void ArgParser::add_int(const std::string& name, std::optional<std::int64_t>* out,
                        const std::string& metavar, const std::string& help,
                        std::int64_t min_value, std::int64_t max_value) {
  add(name, metavar, help, [name, out, min_value, max_value](const std::string& v) {
    *out = parse_int_value(name, v, min_value, max_value);
  });
}

void ArgParser::add_u64(const std::string& name, std::optional<std::uint64_t>* out,
                        const std::string& metavar, const std::string& help) {
  add(name, metavar, help, [name, out](const std::string& v) { *out = parse_u64_value(name, v); });
}

void ArgParser::add_number(const std::string& name, std::optional<double>* out,
                           const std::string& metavar, const std::string& help, double min_value,
                           bool exclusive) {
  add(name, metavar, help, [name, out, min_value, exclusive](const std::string& v) {
    *out = parse_number_value(name, v, min_value, exclusive);
  });
}

void ArgParser::add_string(const std::string& name, std::optional<std::string>* out,
                           const std::string& metavar, const std::string& help) {
  add(name, metavar, help, [name, out](const std::string& v) {
    if (v.empty()) throw UsageError(name + " expects a non-empty value");
    *out = v;
  });
}

void ArgParser::add_choice(const std::string& name, std::optional<std::string>* out,
                           const std::vector<std::string>& choices, const std::string& help) {
  add(name, join(choices, "|"), help, [name, out, choices](const std::string& v) {
    for (const std::string& c : choices) {
      if (c == v) {
        *out = v;
        return;
      }
    }
    throw UsageError(name + " expects one of " + join(choices, ", ") + ", got " + quote(v));
  });
}

void ArgParser::add_int_list(const std::string& name, std::optional<std::vector<std::int64_t>>* out,
                             const std::string& metavar, const std::string& help,
                             std::int64_t min_value) {
  add(name, metavar, help, [name, out, min_value](const std::string& v) {
    std::vector<std::int64_t> values;
    for (const std::string& item : split_list(name, v)) {
      values.push_back(parse_int_value(name, item, min_value));
    }
    *out = values;
  });
}

void ArgParser::add_string_list(const std::string& name,
                                std::optional<std::vector<std::string>>* out,
                                const std::string& metavar, const std::string& help) {
  add(name, metavar, help, [name, out](const std::string& v) { *out = split_list(name, v); });
}

void ArgParser::add_value(const std::string& name, const std::string& metavar,
                          const std::string& help, std::function<void(const std::string&)> apply) {
  add(name, metavar, help, std::move(apply));
}

bool ArgParser::given(const std::string& name) const {
  for (const Flag& f : flags_) {
    if (f.name == name) return f.seen;
  }
  return false;
}

bool ArgParser::parse(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "-h" || arg == "--help") {
      std::cout << help();
      return false;
    }
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      throw UsageError("unexpected argument " + quote(arg) + " (flags start with --; see " +
                       command_ + " --help)");
    }
    const std::size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    Flag* flag = find(name);
    if (flag == nullptr) {
      throw UsageError("unknown flag " + name + " (see " + command_ + " --help)");
    }
    if (flag->seen) throw UsageError(name + " given more than once");
    flag->seen = true;
    if (flag->metavar.empty()) {
      if (eq != std::string::npos) throw UsageError(name + " takes no value, got " + quote(arg));
      flag->apply("");
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      // A following "--word" is the next flag, not a value; negative numbers have a single '-'.
      if (i + 1 >= args.size() || args[i + 1].compare(0, 2, "--") == 0) {
        throw UsageError(name + " expects a value (" + flag->metavar + ")");
      }
      value = args[++i];
    }
    flag->apply(value);
  }
  return true;
}

std::string ArgParser::help() const {
  std::ostringstream os;
  os << "Usage: " << command_ << (synopsis_.empty() ? "" : " " + synopsis_) << "\n\n"
     << description_ << "\n";
  for (const HelpItem& item : items_) {
    if (!item.section.empty()) {
      os << "\n" << item.section << ":\n";
      continue;
    }
    const Flag& f = flags_[item.flag];
    std::string left = "  " + f.name + (f.metavar.empty() ? "" : " " + f.metavar);
    if (left.size() + 2 > kHelpColumn) {
      os << left << "\n" << std::string(kHelpColumn, ' ');
    } else {
      os << left << std::string(kHelpColumn - left.size(), ' ');
    }
    // Continuation lines of a multi-line help text are indented to the column.
    std::string text = f.help;
    for (std::size_t pos = text.find('\n'); pos != std::string::npos;
         pos = text.find('\n', pos + 1 + kHelpColumn)) {
      text.insert(pos + 1, std::string(kHelpColumn, ' '));
    }
    os << text << "\n";
  }
  os << "  -h, --help" << std::string(kHelpColumn - 12, ' ') << "show this help\n";
  return os.str();
}

// ---------------------------------------------------------------------------------------------
// Shared flags

void add_common_flags(ArgParser& parser, CommonFlags* flags, const ShapeDefaults& cuda,
                      const ShapeDefaults& cpu, bool with_sizes, bool with_seqlens,
                      bool with_backend) {
  if (with_sizes || with_seqlens) parser.section("Shape");
  if (with_sizes) {
    parser.add_int("--batch", &flags->batch, "N",
                   "batch size (" + default_text(cuda.batch, cpu.batch) + ")");
    parser.add_int("--heads", &flags->heads, "N",
                   "query heads (" + default_text(cuda.heads, cpu.heads) + ")");
    parser.add_int("--kv-heads", &flags->kv_heads, "N",
                   "key/value heads, dividing --heads (GQA/MQA; default --heads)");
  }
  if (with_seqlens) {
    parser.add_int("--seqlen-q", &flags->seqlen_q, "N",
                   "query sequence length (" + default_text(cuda.seqlen, cpu.seqlen) + ")");
    parser.add_int("--seqlen-k", &flags->seqlen_k, "N",
                   "key/value sequence length (default --seqlen-q)");
  }
  if (with_sizes) {
    parser.add_int("--head-dim", &flags->head_dim, "N",
                   "head dimension, a multiple of 8 up to 256 (" +
                       default_text(cuda.head_dim, cpu.head_dim) + ")");
  }
  parser.section("Computation");
  parser.add_choice("--dtype", &flags->dtype, {"bf16", "fp16", "fp32"},
                    "data type of Q, K, V and O (default " + std::string(dtype_name(cuda.dtype)) +
                        " on cuda, " + std::string(dtype_name(cpu.dtype)) + " on cpu)");
  parser.add_switch("--causal", &flags->causal,
                    "causal mask, aligned bottom-right:\n"
                    "query row i sees keys j <= i + seqlen_k - seqlen_q");
  parser.add_number("--scale", &flags->scale, "X", "softmax scale, > 0 (default 1/sqrt(head_dim))",
                    0.0, true);
  if (with_sizes) {
    parser.add_u64("--seed", &flags->seed, "N", "seed of the random inputs (default 0)");
  }
  if (with_backend) {
    parser.add_string("--backend", &flags->backend, "NAME",
                      join(backend_names(), ", ") + " or auto\n" +
                          "(default auto: the best usable one for the device)");
  }
  parser.add_string("--device", &flags->device, "cpu|cuda[:N]",
                    "where to run (default cuda when a CUDA device and a CUDA backend are\n"
                    "usable, else cpu, with a note on stderr; --device cuda without a CUDA\n"
                    "device fails with exit status 1)");
  parser.add_int("--threads", &flags->threads, "N",
                 "threads of the CPU backends and the CPU reference, 1 to " +
                     std::to_string(cpu::kMaxThreads) + "; sets\n" + cpu::kNumThreadsEnv +
                     " for this run (default: that variable, else all\n" +
                     std::to_string(std::max(1u, std::thread::hardware_concurrency())) +
                     " hardware threads; an invalid value of it fails with exit status 1)",
                 1, cpu::kMaxThreads);
}

std::pair<std::int64_t, std::int64_t> parse_window(const std::string& flag,
                                                   const std::string& text) {
  const std::string expected =
      flag + " expects L,R: two integers >= -1 (keys left and right of the diagonal; -1 is "
             "unbounded), got " + quote(text);
  const std::size_t comma = text.find(',');
  if (comma == std::string::npos || text.find(',', comma + 1) != std::string::npos) {
    throw UsageError(expected);
  }
  std::int64_t sides[2] = {0, 0};
  const std::string parts[2] = {text.substr(0, comma), text.substr(comma + 1)};
  for (int i = 0; i < 2; ++i) {
    try {
      sides[i] = parse_int_value(flag, parts[i], -1);
    } catch (const UsageError&) {
      throw UsageError(expected);
    }
  }
  return {sides[0], sides[1]};
}

void add_variant_flags(ArgParser& parser, VariantFlags* flags, bool generated) {
  parser.section("Variants");
  parser.add_value("--window", "L,R",
                   "sliding window: query row i sees keys j with i + d - L <= j <= i + d + R,\n"
                   "d = seqlen_k - seqlen_q (bottom-right aligned); -1 leaves a side unbounded;\n"
                   "--causal is R = 0, so with it R must be 0 or -1 (default -1,-1: no window)",
                   [flags](const std::string& v) { flags->window = parse_window("--window", v); });
  parser.add_number("--softcap", &flags->softcap, "X",
                    "score soft-capping, >= 0: scores become X * tanh(scores / X) before the\n"
                    "softmax (Gemma 2, Grok; default 0: off)",
                    0.0, /*exclusive=*/false);
  if (!generated) return;
  parser.add_choice("--alibi", &flags->alibi, {"none", "heads", "batch-heads"},
                    "ALiBi bias -slope * |i + d - j| with generated slopes: heads gives\n"
                    "slope_h = 2^(-8 (h + 1) / heads) (the same formula for any head count),\n"
                    "batch-heads (batch, heads) slopes slope_h * (1 + b / batch) (default none)");
  parser.add_switch("--sinks", &flags->sinks,
                    "attention sinks: one generated logit per head (drawn from --seed, about\n"
                    "N(4, 9)) joins every row's softmax denominator and adds no value; a row\n"
                    "without keys then has LSE = the sink, O = 0");
}

void check_window_with_causal(const VariantFlags& flags, bool causal) {
  if (causal && flags.window.has_value() && flags.window->second != 0 &&
      flags.window->second != -1) {
    throw UsageError("--window " + std::to_string(flags.window->first) + "," +
                     std::to_string(flags.window->second) +
                     " with --causal: causal fixes R = 0 (give --window " +
                     std::to_string(flags.window->first) + ",0, or drop --causal)");
  }
}

void apply_variant_flags(const VariantFlags& flags, ProblemShape* shape) {
  check_window_with_causal(flags, shape->causal);
  if (flags.window.has_value()) {
    shape->window_left = flags.window->first;
    shape->window_right = flags.window->second;
  }
  if (flags.softcap.has_value()) shape->softcap = static_cast<float>(*flags.softcap);
  if (flags.alibi == std::optional<std::string>("heads")) shape->alibi = AlibiMode::kHeads;
  if (flags.alibi == std::optional<std::string>("batch-heads")) {
    shape->alibi = AlibiMode::kBatchHeads;
  }
  shape->sinks = flags.sinks;
}

std::string variant_command_line(const ProblemShape& s) {
  std::ostringstream os;
  if (s.window_left != -1 || s.window_right != -1) {
    os << " --window " << s.window_left << "," << s.window_right;
  }
  if (s.softcap != 0.0f) os << " --softcap " << s.softcap;
  if (s.alibi != AlibiMode::kNone) os << " --alibi " << alibi_mode_name(s.alibi);
  if (s.sinks) os << " --sinks";
  return os.str();
}

void apply_threads(const CommonFlags& flags) {
  if (flags.threads.has_value()) {
    ::setenv(cpu::kNumThreadsEnv, std::to_string(*flags.threads).c_str(), 1);
  }
  std::int64_t threads = 0;
  const Status st = cpu::thread_count(&threads);
  if (!st.ok()) throw RunError(st.message());
}

ShapeFieldNames shape_flag_names(const std::string& seqlen_q_flag,
                                 const std::string& seqlen_k_flag) {
  ShapeFieldNames n;
  n.batch = "--batch";
  n.heads = "--heads";
  n.kv_heads = "--kv-heads";
  n.seqlen_q = seqlen_q_flag;
  n.seqlen_k = seqlen_k_flag;
  n.head_dim = "--head-dim";
  return n;
}

ShapeSizes check_shape_sizes(const ProblemShape& shape, const ShapeFieldNames& flag_names) {
  ShapeSizes sizes;
  const Status st = shape_sizes(shape, &sizes, flag_names);
  if (!st.ok()) throw UsageError(st.message());
  return sizes;
}

DType resolve_dtype(const std::optional<std::string>& dtype, DType fallback) {
  if (!dtype.has_value()) return fallback;
  DType d = fallback;
  if (!parse_dtype(*dtype, &d)) {
    throw UsageError("--dtype expects one of bf16, fp16, fp32, got " + quote(*dtype));
  }
  return d;
}

ProblemShape make_shape(const CommonFlags& flags, const ShapeDefaults& defaults) {
  ProblemShape s;
  s.batch = flags.batch.value_or(defaults.batch);
  s.heads = flags.heads.value_or(defaults.heads);
  s.kv_heads = flags.kv_heads.value_or(s.heads);
  s.seqlen_q = flags.seqlen_q.value_or(defaults.seqlen);
  s.seqlen_k = flags.seqlen_k.value_or(s.seqlen_q);
  s.head_dim = flags.head_dim.value_or(defaults.head_dim);
  s.dtype = resolve_dtype(flags.dtype, defaults.dtype);
  s.causal = flags.causal;
  if (flags.scale.has_value()) s.scale = static_cast<float>(*flags.scale);
  return s;
}

void check_backend_name(const std::string& flag, const std::string& name, bool allow_auto) {
  if (allow_auto && name == "auto") return;
  const std::vector<std::string> names = backend_names();
  for (const std::string& n : names) {
    if (n == name) return;
  }
  throw UsageError(flag + " expects one of " + join(names, ", ") + (allow_auto ? ", auto" : "") +
                   ", got " + quote(name));
}

Device resolve_device(const std::string& command, const std::optional<std::string>& device_flag,
                      const std::vector<std::string>& named_backends) {
  const std::vector<BackendInfo> backends = list_backends();
  auto backend_device = [&](const std::string& name) {
    for (const BackendInfo& b : backends) {
      if (b.name == name) return b.device_type;
    }
    return DeviceType::kCPU;  // unreachable: names were checked by check_backend_name
  };

  std::optional<Device> device;
  if (device_flag.has_value()) {
    const std::string& text = *device_flag;
    if (text == "cpu") {
      device = Device::cpu();
    } else if (text == "cuda" || text.compare(0, 5, "cuda:") == 0) {
      std::int64_t index = 0;
      if (text != "cuda") {
        try {
          index = parse_int_value("--device", text.substr(5), 0);
        } catch (const UsageError&) {
          throw UsageError("--device expects cpu, cuda or cuda:N, got " + quote(text));
        }
      }
      const int count = cuda::device_count();
      if (count == 0) {
        std::string reason = cuda::unavailable_reason();
        if (reason.empty()) reason = "no CUDA device";
        throw RunError("--device " + text + ": " + reason);
      }
      if (index >= count) {
        throw RunError("--device " + text + ": there " + (count == 1 ? "is " : "are ") +
                       std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") +
                       " (cuda:0" + (count > 1 ? "..cuda:" + std::to_string(count - 1) : "") + ")");
      }
      device = Device::cuda(static_cast<int>(index));
    } else {
      throw UsageError("--device expects cpu, cuda or cuda:N, got " + quote(text));
    }
  }

  // Backends named explicitly decide the device when --device is absent, and must agree with it.
  std::optional<DeviceType> named_type;
  std::string first_named;
  for (const std::string& name : named_backends) {
    if (name == "auto") continue;
    const DeviceType t = backend_device(name);
    if (named_type.has_value() && *named_type != t) {
      throw UsageError("backends " + first_named + " and " + name +
                       " run on different devices (cpu and cuda); bench one device at a time");
    }
    if (!named_type.has_value()) first_named = name;
    named_type = t;
  }
  if (device.has_value()) {
    if (named_type.has_value() && *named_type != device->type) {
      throw UsageError("backend " + first_named + " runs on " +
                       (*named_type == DeviceType::kCUDA ? "cuda" : "cpu") + " but --device is " +
                       *device_flag);
    }
    return *device;
  }
  if (named_type.has_value()) {
    if (*named_type == DeviceType::kCPU) return Device::cpu();
    if (cuda::device_count() == 0) {
      std::string reason = cuda::unavailable_reason();
      if (reason.empty()) reason = "no CUDA device";
      throw RunError("backend " + first_named + " needs a CUDA device: " + reason);
    }
    return Device::cuda(0);
  }

  // The default: cuda when it can run something, else cpu with one note.
  if (cuda::device_count() > 0) {
    for (const BackendInfo& b : backends) {
      if (b.device_type == DeviceType::kCUDA && b.usable) return Device::cuda(0);
    }
    std::cerr << command
              << ": no usable CUDA backend (GPU kernels not built): using --device cpu\n";
    return Device::cpu();
  }
  std::cerr << command << ": no CUDA device: using --device cpu\n";
  return Device::cpu();
}

}  // namespace flashattn::cli
