#include "output_paths.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "cli_args.h"

namespace flashattn::cli {
namespace {

namespace fs = std::filesystem;

// Where `path` points once resolved as far as it exists; the lexical absolute form if even that
// fails (a permission error on a parent).
fs::path resolved(const std::string& path) {
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  if (ec) return fs::path(path).lexically_normal();
  const fs::path canonical = fs::weakly_canonical(absolute, ec);
  return ec ? absolute.lexically_normal() : canonical;
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec_a, ec_b, ec;
  if (fs::exists(a, ec_a) && fs::exists(b, ec_b)) {
    const bool same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  return resolved(a) == resolved(b);
}

void check_distinct_files(const std::vector<PathArg>& outputs, const std::vector<PathArg>& inputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (same_file(outputs[i].path, outputs[j].path)) {
        throw UsageError(outputs[i].flag + " " + outputs[i].path + " and " + outputs[j].flag + " " +
                         outputs[j].path + " name the same file");
      }
    }
    for (const PathArg& in : inputs) {
      if (same_file(outputs[i].path, in.path)) {
        throw UsageError(outputs[i].flag + " " + outputs[i].path +
                         " names the same file as the input " + in.flag + " " + in.path);
      }
    }
  }
}

void check_writable(const PathArg& out) {
  const std::string what = out.flag + " " + out.path + ": cannot open for writing: ";
  std::error_code ec;
  if (fs::is_directory(out.path, ec)) throw RunError(what + "it is a directory");
  fs::path dir = fs::path(out.path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::exists(dir, ec)) throw RunError(what + "directory " + dir.string() + " does not exist");
  if (!fs::is_directory(dir, ec)) throw RunError(what + dir.string() + " is not a directory");
  // The temporary file is created in `dir` and renamed over the path: both need write and search
  // permission on the directory, not on an existing file at the path.
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw RunError(what + "directory " + dir.string() + ": " + std::strerror(errno));
  }
}

std::string temp_path(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

}  // namespace flashattn::cli
