// verify(): inputs -> backend under test -> reference -> baseline -> judge (verify/compare.h).
#include "verify/verify.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "api/backend.h"
#include "common/checked_math.h"
#include "common/mask_rule.h"
#include "common/owned_tensor.h"
#include "cpu/reference.h"
#include "verify/compare.h"
#include "verify/inputs.h"

namespace flashattn {
namespace {

using verifier::HostOutputs;
using verifier::Inputs;
using verifier::Outputs;
using verifier::ReferenceOutputs;

Status with_context(const Status& st, const std::string& context) {
  if (st.ok()) return st;
  return Status(st.code(), context + ": " + st.message());
}

Status read_back(const Outputs& outputs, HostOutputs* host) {
  Status st = outputs.out.to_host_float(&host->out);
  if (st.ok() && outputs.lse.view().defined()) st = outputs.lse.to_host_float(&host->lse);
  return st;
}

// q, k, v on the host (the tensors themselves when they already are).
Status host_inputs(const Inputs& in, Inputs* host) {
  if (in.q.device().type == DeviceType::kCPU) {
    *host = in;
    return Status::Ok();
  }
  Status st = Status::Ok();
  const std::pair<const OwnedTensor*, OwnedTensor*> tensors[] = {
      {&in.q, &host->q},
      {&in.k, &host->k},
      {&in.v, &host->v},
      {&in.alibi_slopes, &host->alibi_slopes},
      {&in.sinks, &host->sinks},
      {&in.cu_seqlens_q, &host->cu_seqlens_q},
      {&in.cu_seqlens_k, &host->cu_seqlens_k},
      {&in.seqused_k, &host->seqused_k}};
  for (auto [from, to] : tensors) {
    if (st.ok() && from->view().defined()) st = from->copy_to(Device::cpu(), to);
  }
  return st;
}

// float64 on the CPU, from the inputs as stored (already rounded to the dtype).
Status cpu_reference(const ProblemShape& shape, const Inputs& host_in, ReferenceOutputs* ref) {
  Outputs scratch;  // the views reference_forward_f64 validates; it writes the float64 buffers
  Status st = verifier::make_outputs(shape, InputLayout::kContiguous, shape.dtype, Device::cpu(),
                                   /*with_lse=*/true, &scratch);
  if (!st.ok()) return st;
  const ForwardParams p = verifier::make_params(shape, host_in, scratch);
  ref->out.assign(static_cast<std::size_t>(p.out.numel()), 0.0);
  ref->lse.assign(static_cast<std::size_t>(p.lse.numel()), 0.0);
  ref->is_fp32 = false;
  return cpu::reference_forward_f64(p, ref->out.data(), ref->lse.data());
}

// The GPU naive kernel in float32 on float32 copies of the inputs.
Status gpu_reference(const ProblemShape& shape, const Inputs& in, ReferenceOutputs* ref) {
  Inputs in32 = in;  // the side inputs are float32 / int32 already: shared
  Status st = in.q.convert_to(DType::kFP32, &in32.q);
  if (st.ok()) st = in.k.convert_to(DType::kFP32, &in32.k);
  if (st.ok()) st = in.v.convert_to(DType::kFP32, &in32.v);
  Outputs out32;
  if (st.ok()) {
    st = verifier::make_outputs(shape, InputLayout::kContiguous, DType::kFP32, in.q.device(),
                              /*with_lse=*/true, &out32);
  }
  if (st.ok()) st = forward(verifier::make_params(shape, in32, out32), "naive");
  HostOutputs host;
  if (st.ok()) st = read_back(out32, &host);
  if (!st.ok()) return st;
  ref->out.assign(host.out.begin(), host.out.end());
  ref->lse.assign(host.lse.begin(), host.lse.end());
  ref->is_fp32 = true;
  return Status::Ok();
}

struct Factor {
  const std::string& name;
  std::int64_t value;
};

// *out = the product of the factors' values (times `elem_bytes` when > 0), or kInvalidShape
//   "batch * seqlen_q * heads * head_dim * 4 bytes (q in fp32) = 9223372036854775807 * 512 * 8 *
//   128 * 4 does not fit in 64 bits (at most 9223372036854775807)".
Status checked_size(const std::string& what, std::initializer_list<Factor> factors,
                    std::int64_t elem_bytes, std::int64_t* out) {
  std::vector<std::int64_t> values_of;
  if (elem_bytes > 0) values_of.push_back(elem_bytes);
  for (const Factor& f : factors) values_of.push_back(f.value);
  if (checked_product(values_of, out)) return Status::Ok();
  std::string names, values;
  for (const Factor& f : factors) {
    names += (names.empty() ? "" : " * ") + f.name;
    values += (values.empty() ? "" : " * ") + std::to_string(f.value);
  }
  if (elem_bytes > 0) {
    names += " * " + std::to_string(elem_bytes) + " bytes";
    values += " * " + std::to_string(elem_bytes);
  }
  return Status(StatusCode::kInvalidShape,
                names + " (" + what + ") = " + values + " does not fit in 64 bits (at most " +
                    std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
}

// 128-bit integers for the closed-form pair counts, whose intermediate terms (row index plus a
// window of up to 2^63 keys) leave int64.
__extension__ typedef __int128 Int128;

Int128 clamp128(Int128 x, Int128 lo, Int128 hi) { return x < lo ? lo : (x > hi ? hi : x); }

// sum over i in [0, n) of clamp(i + c, 0, sk), in closed form: 0 while i + c < 0, then i + c,
// then sk from i + c >= sk on.
Int128 clamped_sum(std::int64_t n, Int128 c, std::int64_t sk) {
  if (n <= 0) return 0;
  c = clamp128(c, -Int128{n}, sk);
  const Int128 lo = clamp128(-c, 0, n), hi = clamp128(Int128{sk} - c, 0, n);
  return (hi - lo) * c + (lo + hi - 1) * (hi - lo) / 2 + (Int128{n} - hi) * sk;
}

// The (query, key) pairs of one sequence the mask rule keeps: sum over rows of end - begin of
// MaskRule::row_range (common/mask_rule.h), which are clamp(i + diag - left, 0, sk) and
// clamp(i + diag + right + 1, 0, sk) or the unbounded ends 0 and sk.
Int128 visible_pairs(const MaskRule& rule) {
  const std::int64_t n = rule.seqlen_q, sk = rule.seqlen_k;
  if (n <= 0 || sk <= 0) return 0;
  const Int128 diag = rule.diag();
  const Int128 ends =
      rule.right >= 0 ? clamped_sum(n, diag + rule.right + 1, sk) : Int128{n} * sk;
  const Int128 begins = rule.left >= 0 ? clamped_sum(n, diag - rule.left, sk) : 0;
  return ends - begins;
}

std::string join_lengths(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

Status shape_error(const std::string& message) {
  return Status(StatusCode::kInvalidShape, message);
}

}  // namespace

// The varlen lengths agree with each other and with batch, seqlen_q and seqlen_k; the totals fit
// the int32 offsets.
Status check_varlen_lengths(const ProblemShape& s, const ShapeFieldNames& n) {
  if (!s.varlen()) return Status::Ok();
  const std::size_t count = s.seqlens_q.size();
  if (s.seqlens_k.size() != count) {
    return shape_error(n.seqlens_k + " has " + std::to_string(s.seqlens_k.size()) +
                       " lengths, expected " + std::to_string(count) + " (one per sequence of " +
                       n.seqlens_q + ")");
  }
  if (!s.seqused_k.empty() && s.seqused_k.size() != count) {
    return shape_error(n.seqused_k + " has " + std::to_string(s.seqused_k.size()) +
                       " entries, expected " + std::to_string(count) + " (one per sequence of " +
                       n.seqlens_q + ")");
  }
  if (s.batch != static_cast<std::int64_t>(count)) {
    return shape_error(n.batch + " = " + std::to_string(s.batch) + " but " + n.seqlens_q +
                       " has " + std::to_string(count) + " sequences");
  }
  struct List {
    const std::vector<std::int64_t>* lengths;
    const std::string* name;
    std::int64_t max_len;
    const std::string* max_name;
    const char* max_what;
    const char* cu;
  };
  for (const List& l : {List{&s.seqlens_q, &n.seqlens_q, s.seqlen_q, &n.seqlen_q, "max_seqlen_q",
                             "cu_seqlens_q"},
                        List{&s.seqlens_k, &n.seqlens_k, s.seqlen_k, &n.seqlen_k, "max_seqlen_k",
                             "cu_seqlens_k"}}) {
    std::int64_t total = 0;
    for (std::size_t b = 0; b < count; ++b) {
      const std::int64_t len = (*l.lengths)[b];
      const std::string at = *l.name + "[" + std::to_string(b) + "] = " + std::to_string(len);
      if (len < 0) return shape_error(at + ", expected >= 0");
      if (len > l.max_len) {
        return shape_error(*l.max_name + " = " + std::to_string(l.max_len) + " (" + l.max_what +
                           ") is below " + at);
      }
      if (!checked_add(total, len, &total) || total > std::numeric_limits<std::int32_t>::max()) {
        return shape_error("the sum of " + *l.name + " exceeds " +
                           std::to_string(std::numeric_limits<std::int32_t>::max()) + " (" +
                           l.cu + " is int32)");
      }
    }
  }
  for (std::size_t b = 0; b < s.seqused_k.size(); ++b) {
    if (s.seqused_k[b] < 0 || s.seqused_k[b] > s.seqlens_k[b]) {
      return shape_error(n.seqused_k + "[" + std::to_string(b) + "] = " +
                         std::to_string(s.seqused_k[b]) + ", expected 0 to " + n.seqlens_k + "[" +
                         std::to_string(b) + "] = " + std::to_string(s.seqlens_k[b]));
    }
  }
  return Status::Ok();
}

std::string_view alibi_mode_name(AlibiMode mode) {
  switch (mode) {
    case AlibiMode::kNone: return "none";
    case AlibiMode::kHeads: return "heads";
    case AlibiMode::kBatchHeads: return "batch-heads";
  }
  return "?";
}

void ProblemShape::set_varlen(std::vector<std::int64_t> q, std::vector<std::int64_t> k,
                              std::vector<std::int64_t> used_k) {
  seqlens_q = std::move(q);
  seqlens_k = std::move(k);
  seqused_k = std::move(used_k);
  batch = static_cast<std::int64_t>(seqlens_q.size());
  seqlen_q = seqlens_q.empty() ? 0 : *std::max_element(seqlens_q.begin(), seqlens_q.end());
  seqlen_k = seqlens_k.empty() ? 0 : *std::max_element(seqlens_k.begin(), seqlens_k.end());
}

std::int64_t ProblemShape::seqlen_q_of(std::int64_t b) const {
  return varlen() ? seqlens_q[static_cast<std::size_t>(b)] : seqlen_q;
}

std::int64_t ProblemShape::seqlen_k_of(std::int64_t b) const {
  if (!varlen()) return seqlen_k;
  const auto i = static_cast<std::size_t>(b);
  return seqused_k.empty() ? seqlens_k[i] : seqused_k[i];
}

std::int64_t ProblemShape::total_q() const {
  if (!varlen()) return batch * seqlen_q;
  return std::accumulate(seqlens_q.begin(), seqlens_q.end(), std::int64_t{0});
}

std::int64_t ProblemShape::total_k() const {
  if (!varlen()) return batch * seqlen_k;
  return std::accumulate(seqlens_k.begin(), seqlens_k.end(), std::int64_t{0});
}

bool ProblemShape::any_variant() const {
  return has_window() || softcap != 0.0f ||
         alibi != AlibiMode::kNone || sinks || varlen();
}

std::string cpu_reference_refusal(const ProblemShape& s, const ShapeSizes& sizes, double limit,
                                  const std::string& limit_name) {
  std::ostringstream os;
  if (!s.varlen() && !s.has_window()) {
    os << "batch * heads * seqlen_q * seqlen_k * head_dim = " << s.batch << " * " << s.heads
       << " * " << s.seqlen_q << " * " << s.seqlen_k << " * " << s.head_dim << " = "
       << sizes.macs;
  } else {
    os << "heads * head_dim * (query, key) pairs the mask keeps = " << s.heads << " * "
       << s.head_dim << " * " << sizes.visible_pairs << " = " << sizes.reference_macs;
  }
  os << " multiply-adds exceeds " << limit_name << " = " << limit
     << " of the float64 CPU reference (about 1 s per 6e8 on 2 cores), and the float32 GPU "
        "naive reference needs a CUDA device";
  return os.str();
}

Status shape_sizes(const ProblemShape& s, ShapeSizes* sizes, const ShapeFieldNames& n) {
  for (const Factor& f : {Factor{n.batch, s.batch}, Factor{n.heads, s.heads},
                          Factor{n.kv_heads, s.kv_heads}, Factor{n.seqlen_q, s.seqlen_q},
                          Factor{n.seqlen_k, s.seqlen_k}, Factor{n.head_dim, s.head_dim}}) {
    if (f.value < 0) {
      return Status(StatusCode::kInvalidShape,
                    f.name + " = " + std::to_string(f.value) + ", expected >= 0");
    }
  }
  const bool varlen = s.varlen();
  if (varlen) {
    Status st = check_varlen_lengths(s, n);
    if (!st.ok()) return st;
  }
  const auto elem = static_cast<std::int64_t>(dtype_size(s.dtype));
  const std::string dt(dtype_name(s.dtype));
  ShapeSizes z;
  Status st;
  if (!varlen) {
    st = checked_size("q in " + dt, {{n.batch, s.batch}, {n.seqlen_q, s.seqlen_q},
                                     {n.heads, s.heads}, {n.head_dim, s.head_dim}},
                      elem, &z.q_bytes);
    if (st.ok()) {
      st = checked_size("k in " + dt, {{n.batch, s.batch}, {n.seqlen_k, s.seqlen_k},
                                       {n.kv_heads, s.kv_heads}, {n.head_dim, s.head_dim}},
                        elem, &z.kv_bytes);
    }
    if (st.ok()) {
      st = checked_size("lse in float32",
                        {{n.batch, s.batch}, {n.heads, s.heads}, {n.seqlen_q, s.seqlen_q}},
                        static_cast<std::int64_t>(sizeof(float)), &z.lse_bytes);
    }
    if (st.ok()) {
      st = checked_size("multiply-adds",
                        {{n.batch, s.batch}, {n.heads, s.heads}, {n.seqlen_q, s.seqlen_q},
                         {n.seqlen_k, s.seqlen_k}, {n.head_dim, s.head_dim}},
                        0, &z.macs);
    }
  } else {
    // The totals fit int32 (check_varlen_lengths), so only the products can overflow.
    const std::string total_q = "sum of " + n.seqlens_q, total_k = "sum of " + n.seqlens_k;
    st = checked_size("q in " + dt, {{total_q, s.total_q()}, {n.heads, s.heads},
                                     {n.head_dim, s.head_dim}},
                      elem, &z.q_bytes);
    if (st.ok()) {
      st = checked_size("k in " + dt, {{total_k, s.total_k()}, {n.kv_heads, s.kv_heads},
                                       {n.head_dim, s.head_dim}},
                        elem, &z.kv_bytes);
    }
    if (st.ok()) {
      st = checked_size("lse in float32", {{n.heads, s.heads}, {total_q, s.total_q()}},
                        static_cast<std::int64_t>(sizeof(float)), &z.lse_bytes);
    }
    std::int64_t pairs = 0;  // sum over sequences of seqlen_q(b) * seqlen_k(b), < 2^62
    for (std::int64_t b = 0; st.ok() && b < s.batch; ++b) pairs += s.seqlen_q_of(b) * s.seqlen_k_of(b);
    if (st.ok()) {
      st = checked_size("multiply-adds",
                        {{n.heads, s.heads},
                         {"sum of " + n.seqlens_q + " * " + n.seqlens_k + " per sequence", pairs},
                         {n.head_dim, s.head_dim}},
                        0, &z.macs);
    }
  }
  if (!st.ok()) return st;

  // The pairs the mask keeps: at most the full products, whose multiply-adds fit int64 when there
  // are any (with heads or head_dim 0 the products are unchecked: nothing is counted).
  if (z.macs > 0) {
    Int128 visible = 0;
    for (std::int64_t b = 0; b < (varlen ? s.batch : 1); ++b) {
      visible += visible_pairs(MaskRule::make(s.seqlen_q_of(b), s.seqlen_k_of(b), s.window_left,
                                              s.window_right, s.causal));
    }
    if (!varlen) visible *= s.batch;
    z.visible_pairs = static_cast<std::int64_t>(visible);
    z.visible_macs = z.visible_pairs * s.heads * s.head_dim;
  }
  const bool full_rule = !varlen && !s.has_window();
  z.reference_macs = full_rule ? z.macs : z.visible_macs;
  // q + out + k + v + lse: each term fits, the sum may not.
  std::int64_t io = 0;
  bool fits = checked_mul(z.q_bytes, std::int64_t{2}, &io);
  std::int64_t kv2 = 0;
  fits = fits && checked_mul(z.kv_bytes, std::int64_t{2}, &kv2) && checked_add(io, kv2, &io) &&
         checked_add(io, z.lse_bytes, &io);
  if (!fits) {
    return Status(StatusCode::kInvalidShape,
                  "q, k, v, out and lse together (" + std::to_string(z.q_bytes) + " * 2 + " +
                      std::to_string(z.kv_bytes) + " * 2 + " + std::to_string(z.lse_bytes) +
                      " bytes) do not fit in 64 bits (at most " +
                      std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
  }
  z.io_bytes = io;
  *sizes = z;
  return Status::Ok();
}

std::string ProblemShape::to_string() const {
  std::ostringstream os;
  os << "b=" << batch << " h=" << heads << "/" << kv_heads << " sq=" << seqlen_q
     << " sk=" << seqlen_k << " d=" << head_dim << " " << dtype_name(dtype);
  if (causal) os << " causal";
  if (scale.has_value()) os << " scale=" << *scale;
  os << variants_string();
  return os.str();
}

std::string ProblemShape::variants_string() const {
  std::ostringstream os;
  if (window_left != -1 || window_right != -1) os << " window=" << window_left << "," << window_right;
  if (softcap != 0.0f) os << " softcap=" << softcap;
  if (alibi != AlibiMode::kNone) os << " alibi=" << alibi_mode_name(alibi);
  if (sinks) os << " sinks";
  if (varlen()) {
    os << " varlen q=" << join_lengths(seqlens_q) << " k=" << join_lengths(seqlens_k);
    if (!seqused_k.empty()) os << " seqused_k=" << join_lengths(seqused_k);
  }
  return os.str();
}

Status verify(const ProblemShape& shape, const VerifyOptions& options, VerifyReport* report) {
  VerifyReport r;
  r.shape = shape;
  r.seed = options.seed;
  r.layout = options.layout;
  r.kind = options.kind;
  const Device device = options.device;

  // 1. Which reference, decided from the shape alone before anything is allocated (inputs of
  //    seqlen_q = 1e8 took 75 s to draw before a late check refused them).
  ShapeSizes sizes;
  Status st = shape_sizes(shape, &sizes);
  if (!st.ok()) return with_context(st, "verify");
  const bool cpu_ref = static_cast<double>(sizes.reference_macs) <= options.cpu_reference_limit;
  if (!cpu_ref && device.type != DeviceType::kCUDA) {
    return Status(StatusCode::kUnsupported,
                  "verify: " + cpu_reference_refusal(shape, sizes, options.cpu_reference_limit));
  }

  // 2. Inputs and poisoned, guarded outputs on the test device.
  Inputs in;
  st = verifier::make_inputs(shape, options.layout, options.kind, device, options.seed, &in);
  if (!st.ok()) return with_context(st, "verify: inputs");
  Outputs outs;
  st = verifier::make_outputs(shape, options.layout, shape.dtype, device, options.check_lse, &outs);
  if (!st.ok()) return with_context(st, "verify: outputs");
  const ForwardParams params = verifier::make_params(shape, in, outs);
  st = validate(params);
  if (!st.ok()) return st;
  bool on_cuda = device.type == DeviceType::kCUDA;
  if (options.run_backend) {
    r.backend = options.backend;
  } else {
    st = resolve_backend(params, options.backend, &r.backend);
    if (!st.ok()) return st;
    const Backend* backend = find_backend(r.backend);
    on_cuda = backend->device_type() == DeviceType::kCUDA;
    // The backend's own refusal first ("backend "flash" does not implement softcap"), before the
    // reference's below.
    if (backend->device_type() == device.type && backend->usable().ok()) {
      st = check_supported(*backend, params);
      if (!st.ok()) return st;
    }
  }
  // The CPU naive algorithm (the float64 reference and the CPU baseline) is cpu-reference's:
  // cpu::naive_forward reads only the fields it implements, so params using a variant that
  // cpu-reference does not declare would be judged against a reference that ignored it.
  if (cpu_ref || !on_cuda) {
    st = check_supported(*find_backend("cpu-reference"), params);
    if (!st.ok()) {
      return Status(st.code(), "verify: the float64 reference and the CPU baseline (the "
                               "cpu-reference algorithm) cannot check these params: " +
                                   st.message());
    }
  }

  r.reference = cpu_ref ? "cpu-reference (float64)" : "naive (float32)";
  const std::string dt(dtype_name(shape.dtype));
  r.baseline = on_cuda ? "naive (" + dt + ")" : "cpu naive (float32 accumulate, " + dt + " out)";

  // 3. The backend under test.
  st = options.run_backend ? options.run_backend(params) : forward(params, r.backend);
  if (!st.ok()) return st;
  bool out_guard = true, lse_guard = true;
  st = outs.out.guard_intact(&out_guard);
  if (st.ok()) st = outs.lse.guard_intact(&lse_guard);
  if (!st.ok()) return with_context(st, "verify: guard read-back");
  r.guards_intact = out_guard && lse_guard;
  HostOutputs result;
  st = read_back(outs, &result);
  if (!st.ok()) return with_context(st, "verify: output read-back");

  // 4. Reference.
  ReferenceOutputs ref;
  Inputs host_in;
  if (cpu_ref || !on_cuda) {
    st = host_inputs(in, &host_in);
    if (!st.ok()) return with_context(st, "verify: inputs to host");
  }
  st = cpu_ref ? cpu_reference(shape, host_in, &ref) : gpu_reference(shape, in, &ref);
  if (!st.ok()) return with_context(st, "verify: reference " + r.reference);

  // 5. Baseline: the naive algorithm in the test dtype.
  Outputs base_outs;
  st = verifier::make_outputs(shape, InputLayout::kContiguous, shape.dtype,
                            on_cuda ? device : Device::cpu(), /*with_lse=*/true, &base_outs);
  if (st.ok()) {
    if (on_cuda) {
      st = forward(verifier::make_params(shape, in, base_outs), "naive");
    } else {
      st = cpu::naive_forward<float>(verifier::make_params(shape, host_in, base_outs));
    }
  }
  HostOutputs baseline;
  if (st.ok()) st = read_back(base_outs, &baseline);
  if (!st.ok()) return with_context(st, "verify: baseline " + r.baseline);

  // 6. Judge.
  const verifier::OutputDims dims = verifier::output_dims(shape);
  verifier::judge(dims, shape.dtype, result, baseline, ref, options.check_lse, &r);
  *report = std::move(r);
  return Status::Ok();
}

std::string VerifyReport::to_string() const {
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%-12.4g", x);
    return std::string(buf);
  };
  auto index = [](const std::vector<std::int64_t>& idx, const char* names) {
    std::string s;
    for (std::size_t i = 0; i < idx.size(); ++i) {
      s += (i ? " " : "") + std::string(1, names[i]) + "=" + std::to_string(idx[i]);
    }
    return s;
  };
  std::ostringstream os;
  os << (passed ? "PASS " : "FAIL ") << shape.to_string() << "\n";
  os << "  backend " << backend << " | reference " << reference << " | baseline " << baseline
     << "\n";
  os << "  inputs " << verifier::layout_name(layout) << ", " << verifier::kind_name(kind)
     << " | seed " << seed << "\n";
  os << "              max_abs     mean_abs    rel_l2      lse_max_abs\n";
  os << "  backend     " << num(error.max_abs) << num(error.mean_abs) << num(error.rel_l2)
     << num(error.lse_max_abs) << "\n";
  os << "  baseline    " << num(baseline_error.max_abs) << num(baseline_error.mean_abs)
     << num(baseline_error.rel_l2) << num(baseline_error.lse_max_abs) << "\n";
  os << "  bound       " << num(max_abs_bound) << num(mean_abs_bound) << "-           "
     << num(lse_bound) << "\n";
  os << "  atol " << atol << " | non-finite " << error.nonfinite << " | unwritten " << unwritten
     << " | masked rows != 0: " << error.masked_nonzero << " | LSE -inf mismatches "
     << error.lse_mismatch_inf << " | guards " << (guards_intact ? "intact" : "OVERWRITTEN")
     << "\n";
  if (!error.first_bad.empty()) os << "  first bad output at " << index(error.first_bad, "bshd") << "\n";
  if (!error.first_bad_lse.empty()) {
    os << "  first bad LSE at " << index(error.first_bad_lse, "bhs") << "\n";
  }
  for (const std::string& f : failures) os << "  failed: " << f << "\n";
  return os.str();
}

}  // namespace flashattn
