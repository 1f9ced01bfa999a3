// Command-line parsing for the `flashattn` tool: a small declarative flag parser (typed flags,
// strict value parsing, generated --help) and the shape / device flags that verify, bench and run
// share.
//
// Errors are exceptions caught in main(): a UsageError (bad flag, missing or unparsable value) is
// printed as one line "flashattn <command>: <message>" with exit status 2; a RunError (the command
// line was fine but the command could not do its job) the same way with exit status 1.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "flashattn/flashattn.h"
#include "verify/verify.h"

namespace flashattn::cli {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;  // verification failed, could not run, I/O error, no device
constexpr int kExitUsage = 2;    // the command line is wrong

class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Strict value parsers: the whole text must be the value. They throw UsageError with messages like
//   --head-dim expects an integer, got "abc"
std::int64_t parse_int_value(const std::string& flag, const std::string& text,
                             std::int64_t min_value,
                             std::int64_t max_value = std::numeric_limits<std::int64_t>::max());
std::uint64_t parse_u64_value(const std::string& flag, const std::string& text);
// A finite number; > min_value when `exclusive`, else >= min_value.
double parse_number_value(const std::string& flag, const std::string& text, double min_value,
                          bool exclusive);
// A number as iostreams print it: "6e+08", "0.5", "2".
std::string format_number(double x);
// Comma-separated, no empty items.
std::vector<std::string> split_list(const std::string& flag, const std::string& text);

class ArgParser {
 public:
  // `command` as typed ("flashattn verify"), `synopsis` the usage line after it, `description` a
  // paragraph shown under the usage line.
  ArgParser(std::string command, std::string synopsis, std::string description);

  // Starts a titled group of flags in --help.
  void section(const std::string& title);
  void add_switch(const std::string& name, bool* out, const std::string& help);
  void add_int(const std::string& name, std::optional<std::int64_t>* out,
               const std::string& metavar, const std::string& help, std::int64_t min_value = 0,
               std::int64_t max_value = std::numeric_limits<std::int64_t>::max());
  void add_u64(const std::string& name, std::optional<std::uint64_t>* out,
               const std::string& metavar, const std::string& help);
  void add_number(const std::string& name, std::optional<double>* out, const std::string& metavar,
                  const std::string& help, double min_value, bool exclusive);
  void add_string(const std::string& name, std::optional<std::string>* out,
                  const std::string& metavar, const std::string& help);
  // A value from a fixed set; `help` is followed by the choices.
  void add_choice(const std::string& name, std::optional<std::string>* out,
                  const std::vector<std::string>& choices, const std::string& help);
  void add_int_list(const std::string& name, std::optional<std::vector<std::int64_t>>* out,
                    const std::string& metavar, const std::string& help,
                    std::int64_t min_value = 0);
  void add_string_list(const std::string& name, std::optional<std::vector<std::string>>* out,
                       const std::string& metavar, const std::string& help);
  // A flag with a value parsed by `apply`, which throws UsageError for a bad one.
  void add_value(const std::string& name, const std::string& metavar, const std::string& help,
                 std::function<void(const std::string&)> apply);
  // Whether `name` was given on the command line (after parse()).
  bool given(const std::string& name) const;
  // Parses the words after the subcommand: "--flag value" or "--flag=value"; each flag at most
  // once; no positional arguments. Returns false when -h/--help was given (the help was printed to
  // stdout; exit 0). Throws UsageError.
  bool parse(const std::vector<std::string>& args);
  std::string help() const;

 private:
  struct Flag {
    std::string name, metavar, help;
    std::function<void(const std::string&)> apply;  // the value, "" for switches
    bool seen = false;
  };
  struct HelpItem {
    std::string section;  // a section title, or empty for a flag
    std::size_t flag = 0;
  };
  void add(const std::string& name, const std::string& metavar, const std::string& help,
           std::function<void(const std::string&)> apply);
  Flag* find(const std::string& name);

  std::string command_, synopsis_, description_;
  std::vector<Flag> flags_;
  std::vector<HelpItem> items_;
};

// Shape defaults for one device type.
struct ShapeDefaults {
  std::int64_t batch = 2, heads = 8, seqlen = 512, head_dim = 128;
  DType dtype = DType::kBF16;
};

// The flags verify, bench and run share. Unset optionals take the defaults of the resolved device.
struct CommonFlags {
  std::optional<std::int64_t> batch, heads, kv_heads, seqlen_q, seqlen_k, head_dim;
  std::optional<std::string> dtype;
  bool causal = false;
  std::optional<double> scale;
  std::optional<std::uint64_t> seed;
  std::optional<std::string> backend;
  std::optional<std::string> device;
  std::optional<std::int64_t> threads;
};

// The variant flags (flashattn/params.h): --window and --softcap for verify, bench and run;
// --alibi and --sinks (generated side inputs, verify/inputs.h) for verify and bench; run reads
// those from files instead.
struct VariantFlags {
  std::optional<std::pair<std::int64_t, std::int64_t>> window;  // (left, right), each >= -1
  std::optional<double> softcap;
  std::optional<std::string> alibi;  // none | heads | batch-heads
  bool sinks = false;
};

// "--window expects L,R: two integers >= -1 (-1 is unbounded), got \"64\"" for anything else.
std::pair<std::int64_t, std::int64_t> parse_window(const std::string& flag,
                                                   const std::string& text);

// Registers the variant flags in a "Variants" section; `generated` adds --alibi and --sinks.
void add_variant_flags(ArgParser& parser, VariantFlags* flags, bool generated);
// Copies them into `shape` (window, softcap, alibi mode, sinks). Throws UsageError for a window
// whose R is not 0 (or -1) with --causal: causal fixes R = 0.
void apply_variant_flags(const VariantFlags& flags, ProblemShape* shape);
void check_window_with_causal(const VariantFlags& flags, bool causal);
// The flags that reproduce `shape`'s window, softcap, alibi and sinks (" --window 64,0 ...").
std::string variant_command_line(const ProblemShape& shape);

// Registers the shape flags; their help shows `cuda` and `cpu` defaults. `with_sizes` false leaves
// out batch/heads/kv-heads/head-dim/seed (run reads them from the files), `with_seqlens` false
// leaves out --seqlen-q/--seqlen-k (bench sweeps them), `with_backend` false leaves out --backend.
void add_common_flags(ArgParser& parser, CommonFlags* flags, const ShapeDefaults& cuda,
                      const ShapeDefaults& cpu, bool with_sizes, bool with_seqlens,
                      bool with_backend);

// Fills a ProblemShape from the flags and the defaults (kv_heads defaults to heads, seqlen_k to
// seqlen_q). Throws UsageError for a bad --dtype.
ProblemShape make_shape(const CommonFlags& flags, const ShapeDefaults& defaults);

// The shape's fields by their flags ("--batch", ...), the sequence lengths by the given ones
// ("--seqlen-q", "--seqlen-k"; bench: "--seqlens" for both).
ShapeFieldNames shape_flag_names(const std::string& seqlen_q_flag,
                                 const std::string& seqlen_k_flag);

// Throws UsageError naming the flags when a size of `shape` does not fit 64 bits (shape_sizes):
//   --batch * --seqlen-q * --heads * --head-dim * 4 bytes (q in fp32) = 9223372036854775807 * ...
// Returns the sizes otherwise.
ShapeSizes check_shape_sizes(const ProblemShape& shape, const ShapeFieldNames& flag_names);

// Sets FLASHATTN_NUM_THREADS from --threads for this process, then checks the variable: a set
// value the CPU backends would refuse is a RunError naming it, before anything runs.
void apply_threads(const CommonFlags& flags);
DType resolve_dtype(const std::optional<std::string>& dtype, DType fallback);

// The device a command runs on:
//   --device cpu | cuda | cuda:N when given (cuda checked against the devices present: RunError
//   "--device cuda: no CUDA device: ..." when there is none);
//   else the device the explicitly named backends run on;
//   else cuda when a CUDA device and a usable CUDA backend exist;
//   else cpu, with one note on stderr: "flashattn <cmd>: no CUDA device: using --device cpu".
// Throws UsageError for a malformed --device, an unknown backend name, or backends that do not
// run on the chosen device.
Device resolve_device(const std::string& command, const std::optional<std::string>& device_flag,
                      const std::vector<std::string>& named_backends);

// Throws UsageError unless `name` is a registered backend (or "auto" when allowed).
void check_backend_name(const std::string& flag, const std::string& name, bool allow_auto);


}  // namespace flashattn::cli
