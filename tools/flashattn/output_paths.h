// The files the CLI writes (run's --out and --lse, bench's --csv): checked before anything is
// computed, written under a temporary name and renamed into place only when everything succeeded.
#pragma once

#include <string>
#include <vector>

namespace flashattn::cli {

// A file named on the command line: the flag and the path as the user typed it.
struct PathArg {
  std::string flag;  // "--out"
  std::string path;
};

// True when `a` and `b` name one file: for two existing paths, the same file (std::filesystem::
// equivalent, so symlinks and hard links count); otherwise the same absolute path once "." and
// "..", and symlinks in the part that exists, are resolved ("./o.npy" is "o.npy").
bool same_file(const std::string& a, const std::string& b);

// Throws UsageError when two `outputs`, or an output and one of `inputs`, name the same file:
//   "--lse ./o.npy and --out o.npy name the same file"
//   "--out q.npy names the same file as the input --q q.npy"
// Inputs may share a file (--k and --v both kv.npy reads it twice).
void check_distinct_files(const std::vector<PathArg>& outputs, const std::vector<PathArg>& inputs);

// Throws RunError unless `out.path` can be created or replaced: it is not a directory, and its
// directory exists and is writable. The message names the user's path:
//   "--out dir/o.npy: cannot open for writing: directory dir does not exist"
void check_writable(const PathArg& out);

// The temporary name `path` is written under before the rename: "o.npy.tmp.<pid>".
std::string temp_path(const std::string& path);

}  // namespace flashattn::cli
