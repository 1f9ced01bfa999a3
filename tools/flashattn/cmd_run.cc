// flashattn run: attention on .npy files. Reads Q, K, V (float32 or float16, (batch, seqlen,
// heads, head_dim), C order), computes in --dtype on --device, writes O (float32, same shape as Q)
// and optionally LSE (float32, (batch, heads, seqlen_q)). Outputs are written to temporary files
// and renamed into place only after the whole computation succeeded: on any error nothing is
// written.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli_args.h"
#include "commands.h"
#include "common/owned_tensor.h"
#include "npy.h"

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
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::string error;
  if (!npy::write(tmp, a, &error)) {
    std::remove(tmp.c_str());
    throw RunError(flag + " " + error);
  }
  return tmp;
}

}  // namespace

int cmd_run(const Args& args) {
  ArgParser parser(
      "flashattn run", "--q Q.npy --k K.npy --v V.npy --out O.npy [--lse LSE.npy] [flags]",
      "Compute O = softmax(scale * Q K^T + mask) V on .npy files.\n"
      "Inputs: little-endian float32 ('<f4') or float16 ('<f2') arrays in C order, shaped\n"
      "q (batch, seqlen_q, heads, head_dim) and k, v (batch, seqlen_k, kv_heads, head_dim).\n"
      "They are rounded to --dtype and computed on --device; O is written as float32\n"
      "(batch, seqlen_q, heads, head_dim), LSE as float32 (batch, heads, seqlen_q). On any\n"
      "error (malformed file, mismatched shapes, failed computation) nothing is written.");
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
  if (lse_path.has_value() && *lse_path == *out_path) {
    throw UsageError("--lse and --out name the same file " + *out_path);
  }
  const std::string backend = flags.backend.value_or("auto");
  check_backend_name("--backend", backend, /*allow_auto=*/true);
  const Device device = resolve_device("flashattn run", flags.device, {backend});
  const DType dtype = resolve_dtype(
      flags.dtype, device.type == DeviceType::kCUDA ? kCudaDefaults.dtype : kCpuDefaults.dtype);

  Input q{"--q", *q_path, {}, {}}, k{"--k", *k_path, {}, {}}, v{"--v", *v_path, {}, {}};
  load_input(&q, "(batch, seqlen_q, heads, head_dim)");
  load_input(&k, "(batch, seqlen_k, kv_heads, head_dim)");
  load_input(&v, "(batch, seqlen_k, kv_heads, head_dim)");
  const std::vector<std::int64_t> o_shape = q.array.shape;
  const std::vector<std::int64_t> lse_shape = {o_shape[0], o_shape[2], o_shape[1]};
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
  return kExitOk;
}

}  // namespace flashattn::cli
