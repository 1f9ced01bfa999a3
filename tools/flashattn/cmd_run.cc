// flashattn run: attention on .npy files. Reads Q, K, V (float32 or float16, (batch, seqlen,
// heads, head_dim), C order; with --cu-seqlens-q/-k packed (total, heads, head_dim)) and the
// optional ALiBi slopes, sinks and offsets, computes in --dtype on --device, writes O (float32,
// same shape as Q) and optionally LSE (float32, (batch, heads, seqlen_q); varlen (heads,
// total_q)). The output paths are checked first (distinct from each other and from the inputs,
// writable), the input values next (each fits --dtype; offsets fit int32); the whole problem is
// validated on host copies (so offsets' values are checked for a CUDA run too) before anything is
// uploaded; outputs are written to temporary files and renamed into place only after the whole
// computation succeeded: on any error nothing is written.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include "cli_args.h"
#include "commands.h"
#include "common/dtype_convert.h"
#include "common/mask_rule.h"
#include "common/owned_tensor.h"
#include "verify/compare.h"
#include "npy.h"
#include "output_paths.h"

namespace flashattn::cli {
namespace {

constexpr ShapeDefaults kCudaDefaults = {0, 0, 0, 0, DType::kBF16};
constexpr ShapeDefaults kCpuDefaults = {0, 0, 0, 0, DType::kFP32};

struct Input {
  std::string flag;  // "--q"
  std::string path;
  npy::Array array;
  OwnedTensor tensor;
};

void load_input(Input* in, std::size_t rank, const std::string& layout) {
  std::string error;
  if (!npy::read(in->path, &in->array, &error)) throw RunError(in->flag + " " + error);
  if (in->array.shape.size() != rank) {
    throw RunError(in->flag + " " + in->path + ": shape " + npy::shape_string(in->array.shape) +
                   " has rank " + std::to_string(in->array.shape.size()) + ", expected " +
                   std::to_string(rank) + " " + layout);
  }
}

// A float32 side input (ALiBi slopes, sinks): any rank here, validate() judges the shape.
void load_side_input(Input* in) {
  std::string error;
  if (!npy::read(in->path, &in->array, &error)) throw RunError(in->flag + " " + error);
}

// An offsets file: integers that fit int32, uploaded as an int32 host tensor.
std::vector<std::int32_t> load_offsets(Input* in) {
  std::string error;
  if (!npy::read(in->path, &in->array, &error, npy::Content::kInteger)) {
    throw RunError(in->flag + " " + error);
  }
  std::vector<std::int32_t> values;
  values.reserve(in->array.ints.size());
  for (std::size_t i = 0; i < in->array.ints.size(); ++i) {
    const std::int64_t x = in->array.ints[i];
    if (x < std::numeric_limits<std::int32_t>::min() ||
        x > std::numeric_limits<std::int32_t>::max()) {
      throw RunError(in->flag + " " + in->path + ": element " + std::to_string(i) + " = " +
                     std::to_string(x) + " does not fit int32 (offsets are int32)");
    }
    values.push_back(static_cast<std::int32_t>(x));
  }
  return values;
}

// The integers of an offsets-like file (load_offsets) as an int32 host tensor of the file's shape;
// `what` says what the file should hold, for the message.
void to_int32_tensor(Input* in, const std::vector<std::int32_t>& values, const char* what) {
  const Status st = OwnedTensor::create(DType::kInt32, Device::cpu(), in->array.shape, &in->tensor);
  if (!st.ok() || in->tensor.from_host_int32(values).code() != StatusCode::kOk) {
    throw RunError(in->flag + " " + in->path + ": shape " + npy::shape_string(in->array.shape) +
                   " is not " + what + " (" + st.to_string() + ")");
  }
}

// "(0, 3, 1, 7)": the index of flat element `i` of an array of `shape` (C order).
std::string index_string(std::int64_t i, const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> index(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    index[d] = i % shape[d];
    i /= shape[d];
  }
  return npy::shape_string(index);
}

// Throws RunError at the first finite value that rounds to infinity in `dtype` (fp16 from 65520
// up, bf16 from about 3.4e38; fp32 holds every file value), e.g.
//   "--q q.npy: element (0, 3, 1, 7) = 100000 does not fit fp16 (max 65504)".
// Returns how many values are NaN or infinite: allowed, their attention is non-finite.
std::int64_t check_values(const Input& in, DType dtype) {
  std::int64_t nonfinite = 0;
  const std::vector<float>& values = in.array.values;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float x = values[i];
    if (!std::isfinite(x)) {
      ++nonfinite;
      continue;
    }
    if (std::isinf(round_to_dtype(x, dtype))) {
      const float max = dtype == DType::kFP16 ? fp16_bits_to_float(0x7bff)    // 65504
                                              : bf16_bits_to_float(0x7f7f);  // 3.39e38
      char text[160];
      std::snprintf(text, sizeof(text), " = %g does not fit %s (max %g)", static_cast<double>(x),
                    std::string(dtype_name(dtype)).c_str(), static_cast<double>(max));
      throw RunError(in.flag + " " + in.path + ": element " +
                     index_string(static_cast<std::int64_t>(i), in.array.shape) + text);
    }
  }
  return nonfinite;
}

// The file's values as a host tensor of `dtype` (the float array is freed).
void to_host_tensor(Input* in, DType dtype) {
  const std::vector<std::int64_t>& shape = in->array.shape;
  Status st = OwnedTensor::create(dtype, Device::cpu(), shape, &in->tensor);
  if (st.ok()) st = in->tensor.from_host_float(in->array.values);
  if (!st.ok()) throw RunError(in->flag + " " + in->path + ": " + st.to_string());
  in->array.values = {};  // the host copy is no longer needed
  in->array.values.shrink_to_fit();
}

// Moves a host tensor to `device` (nothing to do for the CPU).
void to_device(Input* in, Device device) {
  if (device.type == DeviceType::kCPU || !in->tensor.view().defined()) return;
  OwnedTensor on_device;
  const Status st = in->tensor.copy_to(device, &on_device);
  if (!st.ok()) throw RunError(in->flag + " " + in->path + ": " + st.to_string());
  in->tensor = std::move(on_device);
}

// Writes an array to `path` + a temporary suffix; returns the temporary name.
std::string write_temp(const std::string& flag, const std::string& path,
                       const std::vector<std::int64_t>& shape, std::vector<float> values) {
  npy::Array a;
  a.type = npy::ElemType::kFloat32;
  a.shape = shape;
  a.values = std::move(values);
  const std::string tmp = temp_path(path);
  std::string error;
  if (!npy::write(tmp, a, &error)) {
    std::remove(tmp.c_str());
    throw RunError(flag + " " + error);
  }
  return tmp;
}

// Values of an output that are NaN or infinite. LSE is -inf by definition on a row that sees no
// key (seqlen_k = 0, or causal with row i < seqlen_q - seqlen_k), so those rows are not counted.
std::int64_t count_nonfinite(const std::vector<float>& values) {
  std::int64_t n = 0;
  for (float x : values) n += std::isfinite(x) ? 0 : 1;
  return n;
}

// LSE values that are NaN or infinite, except -inf on the rows the mask leaves without keys
// (verifier::output_dims of the problem's shape) when there are no sinks: that is their value.
std::int64_t count_nonfinite_lse(const std::vector<float>& lse, const ProblemShape& shape) {
  const verifier::OutputDims dims = verifier::output_dims(shape);
  const std::int64_t rows = dims.rows(), per_batch = shape.heads * shape.seqlen_q;
  std::int64_t n = 0;
  for (std::size_t i = 0; i < lse.size(); ++i) {  // lse is empty when there are no rows
    const auto at = static_cast<std::int64_t>(i);
    // The output row of LSE element i: (heads, total_q) packed, (batch, heads, seqlen_q) dense.
    const std::int64_t t = dims.varlen() ? at % rows
                                         : at / per_batch * shape.seqlen_q + at % shape.seqlen_q;
    const bool keyless = dims.row_without_keys[static_cast<std::size_t>(t)] != 0;
    const bool expected_inf =
        keyless && !shape.sinks && lse[i] == -std::numeric_limits<float>::infinity();
    if (!std::isfinite(lse[i]) && !expected_inf) ++n;
  }
  return n;
}

// count_nonfinite_lse for a KV-cache call: sequence b has cache_seqlens[b] + seqlen_new keys,
// so which rows see none comes from the cache lengths, not from the shape alone.
std::int64_t count_nonfinite_lse_kv(const std::vector<float>& lse, const ProblemShape& shape,
                                    const std::vector<std::int32_t>& cache_seqlens,
                                    std::int64_t seqlen_new) {
  std::int64_t n = 0;
  const std::int64_t per_batch = shape.heads * shape.seqlen_q;
  for (std::size_t i = 0; i < lse.size(); ++i) {
    const auto at = static_cast<std::int64_t>(i);
    const std::int64_t b = at / per_batch, row = at % shape.seqlen_q;
    const MaskRule rule = MaskRule::make(shape.seqlen_q, cache_seqlens[static_cast<std::size_t>(b)] + seqlen_new,
                                         shape.window_left, shape.window_right, shape.causal);
    const bool expected_inf = rule.row_range(row).empty() && !shape.sinks &&
                              lse[i] == -std::numeric_limits<float>::infinity();
    if (!std::isfinite(lse[i]) && !expected_inf) ++n;
  }
  return n;
}

// The message of validate() names the argument first ("q.shape[2] ...", "cu_seqlens_q[1] = ...",
// "max_seqlen_k = ..."): the file or flag it came from, else every input.
std::string where_from(const std::string& msg, const std::vector<const Input*>& inputs,
                       const std::vector<std::pair<std::string, std::string>>& flags,
                       const std::string& fallback) {
  auto names = [&msg](const std::string& arg) {
    return msg.compare(0, arg.size(), arg) == 0 &&
           (msg.size() == arg.size() || msg[arg.size()] == '.' || msg[arg.size()] == '[' ||
            msg[arg.size()] == ' ');
  };
  for (const Input* in : inputs) {
    std::string arg = in->flag.substr(2);  // "q", "alibi-slopes", "cu-seqlens-q"
    for (char& c : arg) c = c == '-' ? '_' : c;
    if (names(arg)) return in->flag + " " + in->path;
  }
  for (const auto& [arg, flag] : flags) {
    if (names(arg)) return flag;
  }
  return fallback;
}

}  // namespace

int cmd_run(const Args& args) {
  ArgParser parser(
      "flashattn run", "--q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy] [flags]",
      "Compute O = softmax(scale * Q K^T + bias + mask) V on .npy files.\n"
      "Inputs: little-endian float32 ('<f4') or float16 ('<f2') arrays in C order, shaped\n"
      "q (batch, seqlen_q, heads, head_dim) and k, v (batch, seqlen_k, kv_heads, head_dim);\n"
      "with --cu-seqlens-q/-k the sequences are packed: q (total_q, heads, head_dim) and\n"
      "k, v (total_k, kv_heads, head_dim).\n"
      "They are rounded to --dtype and computed on --device; O is written as float32 in q's\n"
      "shape, LSE as float32 (batch, heads, seqlen_q), packed (heads, total_q); LSE is\n"
      "-inf (and O 0) on rows that see no key (with --sinks LSE is the head's sink logit).\n"
      "On any error (malformed file, mismatched shapes, failed computation) nothing is written.\n"
      "Files: --out and --lse must not name the same file as each other or as an input\n"
      "(compared after resolving ., .. and links; exit status 2), and their directories\n"
      "must exist and be writable (checked before anything is read; exit status 1).\n"
      "Values: a finite input value that does not fit --dtype (it would round to infinity:\n"
      "|x| >= 65520 for fp16, about 3.4e38 for bf16) is an error naming the file, the\n"
      "element and the value (exit status 1). NaN and infinite inputs are allowed: attention\n"
      "over them is NaN or infinite, and run says on stderr how many output values are.\n"
      "The whole problem, the offsets' values included, is checked on the host before it is\n"
      "computed; a mismatch between the files (or with --max-seqlen-q/-k) names the file or\n"
      "flag (exit status 1).\n"
      "KV cache (--k-cache, --v-cache, --cache-seqlens): the caches are (batch, cache_len,\n"
      "kv_heads, head_dim), or paged (num_pages, page_size, kv_heads, head_dim) with\n"
      "--block-table; --k and --v are then optional new tokens (batch, seqlen_new, kv_heads,\n"
      "head_dim), written into the caches at --cache-seqlens and attended; --k-cache-out and\n"
      "--v-cache-out write the caches after that append (float32, the caches' shapes).");
  std::optional<std::string> q_path, k_path, v_path, out_path, lse_path;
  parser.section("Files");
  parser.add_string("--q", &q_path, "FILE", "queries (required)");
  parser.add_string("--k", &k_path, "FILE", "keys (required; with --k-cache: new tokens, optional)");
  parser.add_string("--v", &v_path, "FILE", "values (required; with --k-cache: new tokens, optional)");
  parser.add_string("--out", &out_path, "FILE", "output O (required)");
  parser.add_string("--lse", &lse_path, "FILE", "also write the log-sum-exp of each row");
  CommonFlags flags;
  add_common_flags(parser, &flags, kCudaDefaults, kCpuDefaults, /*with_sizes=*/false,
                   /*with_seqlens=*/false, /*with_backend=*/true);
  VariantFlags variants;
  add_variant_flags(parser, &variants, /*generated=*/false);
  std::optional<std::string> alibi_path, sinks_path, cu_q_path, cu_k_path;
  std::optional<std::int64_t> max_seqlen_q, max_seqlen_k;
  parser.add_string("--alibi-slopes", &alibi_path, "FILE",
                    "ALiBi slopes, float32 (heads) or (batch, heads): the bias\n"
                    "-slope[b, h] * |i + seqlen_k - seqlen_q - j| is added to the scores");
  parser.add_string("--sinks", &sinks_path, "FILE",
                    "attention sinks, float32 (heads): a logit per head that joins every row's\n"
                    "softmax denominator and adds no value");
  parser.add_string("--cu-seqlens-q", &cu_q_path, "FILE",
                    "variable length: integer (batch + 1) offsets (int32 or int64 file, values\n"
                    "fitting int32), from 0, non-decreasing: sequence b is q's rows\n"
                    "[cu[b], cu[b + 1]); needs --cu-seqlens-k; q, k, v are then rank 3");
  parser.add_string("--cu-seqlens-k", &cu_k_path, "FILE",
                    "the same offsets into k's and v's rows (needs --cu-seqlens-q)");
  parser.add_int("--max-seqlen-q", &max_seqlen_q, "N",
                 "with --cu-seqlens-q: the longest query sequence, at least every length\n"
                 "(default: the longest in --cu-seqlens-q)");
  parser.add_int("--max-seqlen-k", &max_seqlen_k, "N",
                 "with --cu-seqlens-k: the longest key sequence (default: the longest in\n"
                 "--cu-seqlens-k)");
  std::optional<std::string> k_cache_path, v_cache_path, seqlens_path, table_path;
  std::optional<std::string> k_cache_out_path, v_cache_out_path;
  std::optional<std::int64_t> num_splits;
  parser.section("KV cache");
  parser.add_string("--k-cache", &k_cache_path, "FILE",
                    "key cache (batch, cache_len, kv_heads, head_dim), or paged (num_pages,\n"
                    "page_size, kv_heads, head_dim) with --block-table; needs --v-cache and\n"
                    "--cache-seqlens");
  parser.add_string("--v-cache", &v_cache_path, "FILE", "value cache, the key cache's shape");
  parser.add_string("--cache-seqlens", &seqlens_path, "FILE",
                    "integer (batch): the keys already in each sequence's cache");
  parser.add_string("--block-table", &table_path, "FILE",
                    "paged cache: integer (batch, max_pages_per_seq), the page of each block of\n"
                    "page_size keys");
  parser.add_int("--num-splits", &num_splits, "N",
                 "split-KV: blocks per (sequence, kv head) on the GPU (default 0: chosen);\n"
                 "the CPU backends compute unsplit");
  parser.add_string("--k-cache-out", &k_cache_out_path, "FILE",
                    "write the key cache after the append (float32)");
  parser.add_string("--v-cache-out", &v_cache_out_path, "FILE",
                    "write the value cache after the append (float32)");
  if (!parser.parse(args)) return kExitOk;

  const bool kv_cache = k_cache_path.has_value();
  for (const auto& [flag, value] : {std::pair{"--q", &q_path}, std::pair{"--out", &out_path}}) {
    if (!value->has_value()) throw UsageError(std::string(flag) + " FILE is required");
  }
  if (!kv_cache) {
    for (const auto& [flag, value] : {std::pair{"--k", &k_path}, std::pair{"--v", &v_path}}) {
      if (!value->has_value()) {
        throw UsageError(std::string(flag) + " FILE is required (or --k-cache for a KV cache)");
      }
    }
    for (const auto& [flag, given] :
         {std::pair{"--v-cache", v_cache_path.has_value()},
          std::pair{"--cache-seqlens", seqlens_path.has_value()},
          std::pair{"--block-table", table_path.has_value()},
          std::pair{"--num-splits", num_splits.has_value()},
          std::pair{"--k-cache-out", k_cache_out_path.has_value()},
          std::pair{"--v-cache-out", v_cache_out_path.has_value()}}) {
      if (given) throw UsageError(std::string(flag) + " applies only with --k-cache (a KV cache)");
    }
  } else {
    if (!v_cache_path.has_value()) throw UsageError("--k-cache needs --v-cache");
    if (!seqlens_path.has_value()) {
      throw UsageError("--k-cache needs --cache-seqlens FILE (the keys already in the cache)");
    }
    if (k_path.has_value() != v_path.has_value()) {
      throw UsageError(std::string(k_path.has_value() ? "--k" : "--v") + " needs " +
                       (k_path.has_value() ? "--v" : "--k") +
                       ": the new tokens of a KV cache come as both");
    }
    if (cu_q_path.has_value() || cu_k_path.has_value()) {
      throw UsageError("--k-cache does not combine with --cu-seqlens-q/-k (the KV cache takes "
                       "dense q)");
    }
  }
  if (cu_q_path.has_value() != cu_k_path.has_value()) {
    throw UsageError(std::string(cu_q_path.has_value() ? "--cu-seqlens-q" : "--cu-seqlens-k") +
                     " needs " + (cu_q_path.has_value() ? "--cu-seqlens-k" : "--cu-seqlens-q") +
                     ": variable length takes the offsets of both");
  }
  const bool varlen = cu_q_path.has_value();
  for (const auto& [flag, given] : {std::pair{"--max-seqlen-q", max_seqlen_q.has_value()},
                                    std::pair{"--max-seqlen-k", max_seqlen_k.has_value()}}) {
    if (given && !varlen) {
      throw UsageError(std::string(flag) +
                       " applies only with --cu-seqlens-q and --cu-seqlens-k (variable length)");
    }
  }
  check_window_with_causal(variants, flags.causal);
  std::vector<PathArg> outputs = {{"--out", *out_path}};
  if (lse_path.has_value()) outputs.push_back({"--lse", *lse_path});
  if (k_cache_out_path.has_value()) outputs.push_back({"--k-cache-out", *k_cache_out_path});
  if (v_cache_out_path.has_value()) outputs.push_back({"--v-cache-out", *v_cache_out_path});
  std::vector<PathArg> input_paths = {{"--q", *q_path}};
  for (const auto& [flag, path] :
       {std::pair{"--k", &k_path}, std::pair{"--v", &v_path},
        std::pair{"--alibi-slopes", &alibi_path}, std::pair{"--sinks", &sinks_path},
        std::pair{"--cu-seqlens-q", &cu_q_path}, std::pair{"--cu-seqlens-k", &cu_k_path},
        std::pair{"--k-cache", &k_cache_path}, std::pair{"--v-cache", &v_cache_path},
        std::pair{"--cache-seqlens", &seqlens_path}, std::pair{"--block-table", &table_path}}) {
    if (path->has_value()) input_paths.push_back({flag, **path});
  }
  check_distinct_files(outputs, input_paths);
  apply_threads(flags);
  const std::string backend = flags.backend.value_or("auto");
  check_backend_name("--backend", backend, /*allow_auto=*/true);
  const Device device = resolve_device("flashattn run", flags.device, {backend});
  const DType dtype = resolve_dtype(
      flags.dtype, device.type == DeviceType::kCUDA ? kCudaDefaults.dtype : kCpuDefaults.dtype);
  for (const PathArg& out : outputs) check_writable(out);

  Input q{"--q", *q_path, {}, {}}, k{"--k", k_path.value_or(""), {}, {}},
      v{"--v", v_path.value_or(""), {}, {}};
  const std::size_t rank = varlen ? 3 : 4;
  load_input(&q, rank, varlen ? "(total_q, heads, head_dim)" : "(batch, seqlen_q, heads, head_dim)");
  const std::string kv_layout =
      varlen     ? "(total_k, kv_heads, head_dim)"
      : kv_cache ? "(batch, seqlen_new, kv_heads, head_dim)"
                 : "(batch, seqlen_k, kv_heads, head_dim)";
  const bool new_tokens = k_path.has_value();
  if (new_tokens) {
    load_input(&k, rank, kv_layout);
    load_input(&v, rank, kv_layout);
  }
  Input k_cache{"--k-cache", k_cache_path.value_or(""), {}, {}};
  Input v_cache{"--v-cache", v_cache_path.value_or(""), {}, {}};
  Input seqlens{"--cache-seqlens", seqlens_path.value_or(""), {}, {}};
  Input table{"--block-table", table_path.value_or(""), {}, {}};
  std::vector<std::int32_t> seqlen_values, table_values;
  if (kv_cache) {
    const std::string cache_layout =
        table_path.has_value() ? "(num_pages, page_size, kv_heads, head_dim)"
                               : "(batch, cache_len, kv_heads, head_dim)";
    load_input(&k_cache, 4, cache_layout);
    load_input(&v_cache, 4, cache_layout);
    seqlen_values = load_offsets(&seqlens);
    if (table_path.has_value()) table_values = load_offsets(&table);
  }
  Input alibi{"--alibi-slopes", alibi_path.value_or(""), {}, {}};
  Input sinks{"--sinks", sinks_path.value_or(""), {}, {}};
  Input cu_q{"--cu-seqlens-q", cu_q_path.value_or(""), {}, {}};
  Input cu_k{"--cu-seqlens-k", cu_k_path.value_or(""), {}, {}};
  std::vector<Input*> side;  // the side inputs given
  if (alibi_path.has_value()) side.push_back(&alibi);
  if (sinks_path.has_value()) side.push_back(&sinks);
  for (Input* in : side) load_side_input(in);
  std::vector<std::int32_t> cu_q_values, cu_k_values;
  if (varlen) {
    cu_q_values = load_offsets(&cu_q);
    cu_k_values = load_offsets(&cu_k);
  }

  const std::vector<std::int64_t> o_shape = q.array.shape;
  const std::int64_t heads = o_shape[rank - 2];
  const std::vector<std::int64_t> lse_shape =
      varlen ? std::vector<std::int64_t>{heads, o_shape[0]}
             : std::vector<std::int64_t>{o_shape[0], o_shape[2], o_shape[1]};
  std::vector<Input*> values_in = {&q};
  if (new_tokens) values_in.insert(values_in.end(), {&k, &v});
  if (kv_cache) values_in.insert(values_in.end(), {&k_cache, &v_cache});
  std::int64_t nonfinite_inputs = 0;
  for (const Input* in : values_in) nonfinite_inputs += check_values(*in, dtype);
  for (Input* in : values_in) to_host_tensor(in, dtype);
  if (kv_cache) {
    to_int32_tensor(&seqlens, seqlen_values, "an integer array");
    if (table_path.has_value()) to_int32_tensor(&table, table_values, "an integer array");
  }
  for (Input* in : side) to_host_tensor(in, DType::kFP32);
  // Sequence lengths from the offsets (for the default max_seqlen and the LSE note): only where
  // the offsets are a list; validate() reports anything else.
  ProblemShape shape;  // the problem's rows and mask, for count_nonfinite_lse
  auto lengths = [](const std::vector<std::int32_t>& cu) {
    std::vector<std::int64_t> len;
    for (std::size_t b = 0; b + 1 < cu.size(); ++b) {
      len.push_back(std::max<std::int64_t>(0, static_cast<std::int64_t>(cu[b + 1]) - cu[b]));
    }
    return len;
  };
  if (varlen) {
    to_int32_tensor(&cu_q, cu_q_values, "a list of offsets");
    to_int32_tensor(&cu_k, cu_k_values, "a list of offsets");
    shape.set_varlen(lengths(cu_q_values), lengths(cu_k_values));
  }

  OwnedTensor out, lse;
  ForwardParams params;
  auto make_params = [&] {
    params = ForwardParams{};
    params.q = q.tensor.view();
    params.k = k.tensor.view();
    params.v = v.tensor.view();
    if (kv_cache) {
      params.k_cache = k_cache.tensor.view();
      params.v_cache = v_cache.tensor.view();
      params.cache_seqlens = seqlens.tensor.view();
      params.block_table = table.tensor.view();
      params.num_splits = static_cast<int>(std::clamp<std::int64_t>(
          num_splits.value_or(0), std::numeric_limits<int>::min(), std::numeric_limits<int>::max()));
    }
    params.out = out.view();
    if (lse_path.has_value()) params.lse = lse.view();
    params.causal = flags.causal;
    if (flags.scale.has_value()) params.softmax_scale = static_cast<float>(*flags.scale);
    if (variants.window.has_value()) {
      params.window_left = variants.window->first;
      params.window_right = variants.window->second;
    }
    if (variants.softcap.has_value()) params.softcap = static_cast<float>(*variants.softcap);
    params.alibi_slopes = alibi.tensor.view();
    params.sinks = sinks.tensor.view();
    params.cu_seqlens_q = cu_q.tensor.view();
    params.cu_seqlens_k = cu_k.tensor.view();
    if (varlen) {
      params.max_seqlen_q = max_seqlen_q.value_or(shape.seqlen_q);
      params.max_seqlen_k = max_seqlen_k.value_or(shape.seqlen_k);
    }
  };
  auto allocate_outputs = [&](Device where) {
    Status st = OwnedTensor::create(dtype, where, o_shape, &out);
    if (st.ok() && lse_path.has_value()) {
      st = OwnedTensor::create(DType::kFP32, where, lse_shape, &lse);
    }
    if (!st.ok()) throw RunError("allocating the outputs: " + st.to_string());
  };

  // The whole problem judged by the library on the host copies, offsets' values included (on a
  // CUDA device validate() cannot read them); name the file or flag its message is about.
  allocate_outputs(Device::cpu());
  make_params();
  Status st = validate(params);
  if (!st.ok()) {
    std::vector<const Input*> inputs = {&q, &k, &v};
    for (const Input* in : side) inputs.push_back(in);
    if (kv_cache) inputs.insert(inputs.end(), {&k_cache, &v_cache, &seqlens, &table});
    if (varlen) {
      inputs.push_back(&cu_q);
      inputs.push_back(&cu_k);
    }
    const std::string where = where_from(
        st.message(), inputs,
        {{"max_seqlen_q", "--max-seqlen-q " + std::to_string(params.max_seqlen_q)},
         {"max_seqlen_k", "--max-seqlen-k " + std::to_string(params.max_seqlen_k)},
         {"num_splits", "--num-splits " + std::to_string(params.num_splits)}},
        "inputs " + q.path + (new_tokens ? ", " + k.path + ", " + v.path : std::string()) +
            (kv_cache ? ", " + k_cache.path + ", " + v_cache.path : std::string()));
    throw RunError(where + ": " + st.to_string());
  }
  if (kv_cache) {
    shape.batch = o_shape[0];
    shape.seqlen_q = o_shape[1];
    shape.seqlen_k = params.seqlen_k();  // the capacity; the rows' own key counts: below
  } else if (!varlen) {
    shape.batch = o_shape[0];
    shape.seqlen_q = o_shape[1];
    shape.seqlen_k = k.array.shape[1];
  } else {
    shape.seqlen_q = params.max_seqlen_q;
    shape.seqlen_k = params.max_seqlen_k;
  }
  shape.heads = heads;
  shape.causal = flags.causal;
  shape.window_left = params.window_left;
  shape.window_right = params.window_right;
  shape.sinks = sinks_path.has_value();

  if (device.type != DeviceType::kCPU) {
    for (Input* in : {&q, &k, &v, &alibi, &sinks, &cu_q, &cu_k, &k_cache, &v_cache, &seqlens,
                      &table}) {
      to_device(in, device);
    }
    allocate_outputs(device);
    make_params();
  }
  st = forward(params, backend);
  if (!st.ok()) throw RunError("attention failed: " + st.to_string());

  std::vector<float> o_values, lse_values;
  st = out.to_host_float(&o_values);
  if (st.ok() && lse_path.has_value()) st = lse.to_host_float(&lse_values);
  if (!st.ok()) throw RunError("reading the outputs back: " + st.to_string());
  const std::int64_t o_values_count = static_cast<std::int64_t>(o_values.size());
  const std::int64_t lse_values_count = static_cast<std::int64_t>(lse_values.size());
  const std::int64_t nonfinite_o = count_nonfinite(o_values);
  const std::int64_t nonfinite_lse =
      kv_cache ? count_nonfinite_lse_kv(lse_values, shape, seqlen_values, params.seqlen_new())
               : count_nonfinite_lse(lse_values, shape);
  // The caches after the append, for --k-cache-out / --v-cache-out.
  std::vector<float> k_cache_values, v_cache_values;
  if (k_cache_out_path.has_value()) st = k_cache.tensor.to_host_float(&k_cache_values);
  if (st.ok() && v_cache_out_path.has_value()) st = v_cache.tensor.to_host_float(&v_cache_values);
  if (!st.ok()) throw RunError("reading the caches back: " + st.to_string());

  const std::string o_tmp = write_temp("--out", *out_path, o_shape, std::move(o_values));
  std::string lse_tmp;
  // Every output goes to a temporary first; a failure removes those already written.
  std::vector<std::pair<std::string, std::string>> extra;  // (temporary, final) cache outputs
  try {
    if (lse_path.has_value()) {
      lse_tmp = write_temp("--lse", *lse_path, lse_shape, std::move(lse_values));
    }
    if (k_cache_out_path.has_value()) {
      extra.emplace_back(write_temp("--k-cache-out", *k_cache_out_path, k_cache.array.shape,
                                    std::move(k_cache_values)),
                         *k_cache_out_path);
    }
    if (v_cache_out_path.has_value()) {
      extra.emplace_back(write_temp("--v-cache-out", *v_cache_out_path, v_cache.array.shape,
                                    std::move(v_cache_values)),
                         *v_cache_out_path);
    }
  } catch (const RunError&) {
    std::remove(o_tmp.c_str());
    if (!lse_tmp.empty()) std::remove(lse_tmp.c_str());
    for (const auto& [tmp, final_path] : extra) std::remove(tmp.c_str());
    throw;
  }
  if (std::rename(o_tmp.c_str(), out_path->c_str()) != 0) {
    std::remove(o_tmp.c_str());
    if (!lse_tmp.empty()) std::remove(lse_tmp.c_str());
    throw RunError("--out " + *out_path + ": cannot write (rename failed)");
  }
  if (!lse_tmp.empty() && std::rename(lse_tmp.c_str(), lse_path->c_str()) != 0) {
    std::remove(lse_tmp.c_str());
    for (const auto& [tmp, final_path] : extra) std::remove(tmp.c_str());
    throw RunError("--lse " + *lse_path + ": cannot write (rename failed); " + *out_path +
                   " was written");
  }
  for (const auto& [tmp, final_path] : extra) {
    if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
      std::remove(tmp.c_str());
      throw RunError(final_path + ": cannot write (rename failed); " + *out_path + " was written");
    }
  }
  if (nonfinite_o > 0 || nonfinite_lse > 0) {
    std::string note = "flashattn run: note: " + std::to_string(nonfinite_o) + " of " +
                       std::to_string(o_values_count) + " values of --out " + *out_path;
    if (lse_path.has_value()) {
      note += " and " + std::to_string(nonfinite_lse) + " of " + std::to_string(lse_values_count) +
              " of --lse " + *lse_path;
    }
    note += " are NaN or infinite";
    if (nonfinite_inputs > 0) {
      note += " (the inputs hold " + std::to_string(nonfinite_inputs) +
              " NaN or infinite value" + (nonfinite_inputs == 1 ? "" : "s") +
              "; attention over them is non-finite)";
    }
    std::cerr << note << "\n";
  }
  return kExitOk;
}

}  // namespace flashattn::cli
