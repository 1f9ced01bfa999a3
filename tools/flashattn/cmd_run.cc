// flashattn run: attention on .npy files. Reads Q, K, V (float32 or float16, (batch, seqlen,
// heads, head_dim), C order), computes in --dtype on --device, writes O (float32, same shape as Q)
// and optionally LSE (float32, (batch, heads, seqlen_q)). The output paths are checked first
// (distinct from each other and from the inputs, writable), the input values next (each fits
// --dtype); outputs are written to temporary files and renamed into place only after the whole
// computation succeeded: on any error nothing is written.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include "cli_args.h"
#include "commands.h"
#include "common/dtype_convert.h"
#include "common/owned_tensor.h"
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

void load_input(Input* in, const char* layout) {
  std::string error;
  if (!npy::read(in->path, &in->array, &error)) throw RunError(in->flag + " " + error);
  if (in->array.shape.size() != 4) {
    throw RunError(in->flag + " " + in->path + ": shape " + npy::shape_string(in->array.shape) +
                   " has rank " + std::to_string(in->array.shape.size()) + ", expected 4 " +
                   layout);
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

void to_device(Input* in, DType dtype, Device device) {
  const std::vector<std::int64_t>& shape = in->array.shape;
  Status st = OwnedTensor::create(dtype, device, shape, &in->tensor);
  if (st.ok()) st = in->tensor.from_host_float(in->array.values);
  if (!st.ok()) throw RunError(in->flag + " " + in->path + ": " + st.to_string());
  in->array.values = {};  // the host copy is no longer needed
  in->array.values.shrink_to_fit();
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

std::int64_t count_nonfinite_lse(const std::vector<float>& lse, std::int64_t seqlen_q,
                                 std::int64_t seqlen_k, bool causal) {
  std::int64_t n = 0;
  for (std::size_t i = 0; i < lse.size(); ++i) {  // lse is empty when seqlen_q = 0
    const auto row = static_cast<std::int64_t>(i) % seqlen_q;
    const bool sees_keys = seqlen_k > 0 && (!causal || row + seqlen_k - seqlen_q >= 0);
    if (!std::isfinite(lse[i]) && (sees_keys || lse[i] != -std::numeric_limits<float>::infinity())) {
      ++n;
    }
  }
  return n;
}

}  // namespace

int cmd_run(const Args& args) {
  ArgParser parser(
      "flashattn run", "--q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy] [flags]",
      "Compute O = softmax(scale * Q K^T + mask) V on .npy files.\n"
      "Inputs: little-endian float32 ('<f4') or float16 ('<f2') arrays in C order, shaped\n"
      "q (batch, seqlen_q, heads, head_dim) and k, v (batch, seqlen_k, kv_heads, head_dim).\n"
      "They are rounded to --dtype and computed on --device; O is written as float32\n"
      "(batch, seqlen_q, heads, head_dim), LSE as float32 (batch, heads, seqlen_q); LSE is\n"
      "-inf (and O 0) on rows that see no key. On any error (malformed file, mismatched\n"
      "shapes, failed computation) nothing is written.\n"
      "Files: --out and --lse must not name the same file as each other or as an input\n"
      "(compared after resolving ., .. and links; exit status 2), and their directories\n"
      "must exist and be writable (checked before anything is read; exit status 1).\n"
      "Values: a finite input value that does not fit --dtype (it would round to infinity:\n"
      "|x| >= 65520 for fp16, about 3.4e38 for bf16) is an error naming the file, the\n"
      "element and the value (exit status 1). NaN and infinite inputs are allowed: attention\n"
      "over them is NaN or infinite, and run says on stderr how many output values are.");
  std::optional<std::string> q_path, k_path, v_path, out_path, lse_path;
  parser.section("Files");
  parser.add_string("--q", &q_path, "FILE", "queries (required)");
  parser.add_string("--k", &k_path, "FILE", "keys (required)");
  parser.add_string("--v", &v_path, "FILE", "values (required)");
  parser.add_string("--out", &out_path, "FILE", "output O (required)");
  parser.add_string("--lse", &lse_path, "FILE", "also write the log-sum-exp of each row");
  CommonFlags flags;
  add_common_flags(parser, &flags, kCudaDefaults, kCpuDefaults, /*with_sizes=*/false,
                   /*with_seqlens=*/false, /*with_backend=*/true);
  if (!parser.parse(args)) return kExitOk;

  for (const auto& [flag, value] : {std::pair{"--q", &q_path}, std::pair{"--k", &k_path},
                                    std::pair{"--v", &v_path}, std::pair{"--out", &out_path}}) {
    if (!value->has_value()) throw UsageError(std::string(flag) + " FILE is required");
  }
  std::vector<PathArg> outputs = {{"--out", *out_path}};
  if (lse_path.has_value()) outputs.push_back({"--lse", *lse_path});
  check_distinct_files(outputs, {{"--q", *q_path}, {"--k", *k_path}, {"--v", *v_path}});
  apply_threads(flags);
  const std::string backend = flags.backend.value_or("auto");
  check_backend_name("--backend", backend, /*allow_auto=*/true);
  const Device device = resolve_device("flashattn run", flags.device, {backend});
  const DType dtype = resolve_dtype(
      flags.dtype, device.type == DeviceType::kCUDA ? kCudaDefaults.dtype : kCpuDefaults.dtype);
  for (const PathArg& out : outputs) check_writable(out);

  Input q{"--q", *q_path, {}, {}}, k{"--k", *k_path, {}, {}}, v{"--v", *v_path, {}, {}};
  load_input(&q, "(batch, seqlen_q, heads, head_dim)");
  load_input(&k, "(batch, seqlen_k, kv_heads, head_dim)");
  load_input(&v, "(batch, seqlen_k, kv_heads, head_dim)");
  const std::vector<std::int64_t> o_shape = q.array.shape;
  const std::vector<std::int64_t> lse_shape = {o_shape[0], o_shape[2], o_shape[1]};
  std::int64_t nonfinite_inputs = 0;
  for (const Input* in : {&q, &k, &v}) nonfinite_inputs += check_values(*in, dtype);
  for (Input* in : {&q, &k, &v}) to_device(in, dtype, device);

  OwnedTensor out, lse;
  Status st = OwnedTensor::create(dtype, device, o_shape, &out);
  if (st.ok() && lse_path.has_value()) {
    st = OwnedTensor::create(DType::kFP32, device, lse_shape, &lse);
  }
  if (!st.ok()) throw RunError("allocating the outputs: " + st.to_string());

  ForwardParams params;
  params.q = q.tensor.view();
  params.k = k.tensor.view();
  params.v = v.tensor.view();
  params.out = out.view();
  if (lse_path.has_value()) params.lse = lse.view();
  params.causal = flags.causal;
  if (flags.scale.has_value()) params.softmax_scale = static_cast<float>(*flags.scale);

  // Shape mismatches are judged by the library; name the file its message is about.
  st = validate(params);
  if (!st.ok()) {
    const std::string& msg = st.message();
    std::string where = "inputs " + q.path + ", " + k.path + ", " + v.path;
    for (const Input* in : {&q, &k, &v}) {
      const std::string arg = in->flag.substr(2);  // "q"
      if (msg.compare(0, arg.size() + 1, arg + ".") == 0) where = in->flag + " " + in->path;
    }
    throw RunError(where + ": " + st.to_string());
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
      count_nonfinite_lse(lse_values, o_shape[1], k.array.shape[1], flags.causal);

  const std::string o_tmp = write_temp("--out", *out_path, o_shape, std::move(o_values));
  std::string lse_tmp;
  if (lse_path.has_value()) {
    try {
      lse_tmp = write_temp("--lse", *lse_path, lse_shape, std::move(lse_values));
    } catch (const RunError&) {
      std::remove(o_tmp.c_str());
      throw;
    }
  }
  if (std::rename(o_tmp.c_str(), out_path->c_str()) != 0) {
    std::remove(o_tmp.c_str());
    if (!lse_tmp.empty()) std::remove(lse_tmp.c_str());
    throw RunError("--out " + *out_path + ": cannot write (rename failed)");
  }
  if (!lse_tmp.empty() && std::rename(lse_tmp.c_str(), lse_path->c_str()) != 0) {
    std::remove(lse_tmp.c_str());
    throw RunError("--lse " + *lse_path + ": cannot write (rename failed); " + *out_path +
                   " was written");
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
