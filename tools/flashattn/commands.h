// The subcommands of the `flashattn` tool. Each takes the words after its name and returns the
// exit status; command-line mistakes throw UsageError and failures RunError (cli_args.h), which
// main() turns into one line on stderr and exit status 2 or 1.
#pragma once

#include <string>
#include <vector>

namespace flashattn::cli {

using Args = std::vector<std::string>;

int cmd_info(const Args& args);    // version, CUDA devices, backends
int cmd_verify(const Args& args);  // one shape through a backend, judged against the reference
int cmd_bench(const Args& args);   // the naive vs flash table over a sweep of sequence lengths
int cmd_run(const Args& args);     // attention on .npy files

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Args& args);
};

// The subcommands in the order --help lists them.
const std::vector<Command>& commands();

}  // namespace flashattn::cli
