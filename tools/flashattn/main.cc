// flashattn: the command-line tool. Dispatches to a subcommand and maps its errors to one line on
// stderr and an exit status (0 ok, 1 failure, 2 command-line error).
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "cli_args.h"
#include "commands.h"
#include "cpu/host_loop.h"

namespace flashattn::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"info", "show the version, the CUDA devices and the backends built in", cmd_info},
      {"verify", "run one shape through a backend and check it against the reference", cmd_verify},
      {"bench", "time backends over a sweep of sequence lengths (naive vs flash)", cmd_bench},
      {"run", "compute attention on .npy files (Q, K, V in; O and LSE out)", cmd_run},
  };
  return kCommands;
}

namespace {

std::string top_level_help() {
  std::string s = std::string("flashattn ") + kVersion +
                  ": FlashAttention forward pass in CUDA C++, with CPU references\n"
                  "\n"
                  "Usage: flashattn <command> [flags]\n"
                  "       flashattn <command> --help\n"
                  "\n"
                  "Commands:\n";
  for (const Command& c : commands()) {
    s += "  " + std::string(c.name) + std::string(8 - std::string(c.name).size(), ' ') + c.summary +
         "\n";
  }
  s += "\n"
       "Flags:\n"
       "  -h, --help  show this help\n"
       "  --version   print the version\n"
       "\n"
       "Without a CUDA device, --device defaults to cpu (one note on stderr says so) and an\n"
       "explicit --device cuda fails with exit status 1.\n"
       "Exit status: 0 success; 1 failure (verification failed, could not run, bad input file,\n"
       "no device); 2 command-line error (unknown command or flag, missing or unparsable value).\n"
       "Environment: " + std::string(cpu::kNumThreadsEnv) +
       "=N sets the CPU backends' thread count (1 to " + std::to_string(cpu::kMaxThreads) +
       ";\n--threads N sets it for one command); an invalid value fails with exit status 1.\n";
  return s;
}

std::string command_names() {
  std::string s;
  for (const Command& c : commands()) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

// Runs one subcommand, turning its exceptions into one line on stderr and an exit status.
int dispatch(const Command& command, const Args& args) {
  const std::string prefix = std::string("flashattn ") + command.name + ": ";
  try {
    return command.run(args);
  } catch (const UsageError& e) {
    std::cerr << prefix << e.what() << "\n";
    return kExitUsage;
  } catch (const RunError& e) {
    std::cerr << prefix << e.what() << "\n";
    return kExitFailure;
  } catch (const std::bad_alloc&) {
    std::cerr << prefix << "out of host memory\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << prefix << "internal error: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace
}  // namespace flashattn::cli

int main(int argc, char** argv) {
  using namespace flashattn::cli;
  const Args args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << "flashattn: missing command (expected one of " << command_names()
              << "; see flashattn --help)\n";
    return kExitUsage;
  }
  const std::string& first = args[0];
  if (first == "-h" || first == "--help" || first == "help") {
    if (first == "help" && args.size() > 1) {
      for (const Command& c : commands()) {
        if (args[1] == c.name) return dispatch(c, {"--help"});
      }
      std::cerr << "flashattn help: unknown command \"" << args[1] << "\" (expected one of "
                << command_names() << ")\n";
      return kExitUsage;
    }
    std::cout << top_level_help();
    return kExitOk;
  }
  if (first == "--version") {
    std::cout << "flashattn " << flashattn::kVersion << "\n";
    return kExitOk;
  }
  for (const Command& c : commands()) {
    if (first == c.name) return dispatch(c, Args(args.begin() + 1, args.end()));
  }
  if (first.compare(0, 1, "-") == 0) {
    std::cerr << "flashattn: unknown flag " << first
              << " (flags follow a command; see flashattn --help)\n";
  } else {
    std::cerr << "flashattn: unknown command \"" << first << "\" (expected one of "
              << command_names() << "; see flashattn --help)\n";
  }
  return kExitUsage;
}
