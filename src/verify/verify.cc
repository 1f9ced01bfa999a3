// verify(): inputs -> backend under test -> reference -> baseline -> judge (verify/compare.h).
#include "verify/verify.h"

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "api/backend.h"
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

}  // namespace

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
    if (backend->device_type() == device.type && backend->usable(device).ok()) {
      st = check_supported(*backend, params);
      if (!st.ok()) return st;
    }
  }
  // The baseline: the naive algorithm in the test dtype. CUDA backends get the GPU naive kernel,
  // except the GPU naive backend itself: against its own output it would be allowed twice its
  // own error, whatever that error is (a 3% scale error passed), so it gets the float32 CPU naive
  // on host copies, as the CPU backends do. That costs about 1 s per 6e8 multiply-adds on 2 cores
  // (the largest GPU grid shape, 4097 x 4097 at d256, b1 h2, is 8.6e9).
  // cpu-reference keeps the float32 CPU naive: a different computation from its own (float64,
  // rounded on store), bounded by the baseline's fixed bound like any other. What verify() cannot
  // check for cpu-reference is its algorithm, which the float64 reference shares (its error here
  // is the output rounding alone); tests/cpu checks that against a brute force of params.h.
  const bool cpu_baseline = !on_cuda || r.backend == "naive";
  // The CPU naive algorithm (the float64 reference and the CPU baseline) is cpu-reference's:
  // cpu::naive_forward reads only the fields it implements, so params using a variant that
  // cpu-reference does not declare would be judged against a reference that ignored it.
  const bool sample_check = !cpu_ref || options.sample_check_always;
  if (cpu_ref || cpu_baseline || sample_check) {
    st = check_supported(*find_backend("cpu-reference"), params);
    if (!st.ok()) {
      return Status(st.code(), "verify: the float64 reference and the CPU baseline (the "
                               "cpu-reference algorithm) cannot check these params: " +
                                   st.message());
    }
  }

  r.reference = cpu_ref ? "cpu-reference (float64)" : "naive (float32)";
  const std::string dt(dtype_name(shape.dtype));
  r.baseline =
      cpu_baseline ? "cpu naive (float32 accumulate, " + dt + " out)" : "naive (" + dt + ")";
  if (options.run_baseline) r.baseline += " (replaced by a test hook)";

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

  // 4. Reference. Host copies of the inputs for the CPU reference, the CPU baseline and the
  //    sampled check (for a large shape that is q, k and v once more in the dtype, less than
  //    the float64 reference read back beside them).
  ReferenceOutputs ref;
  Inputs host_in;
  if (cpu_ref || cpu_baseline || sample_check) {
    st = host_inputs(in, &host_in);
    if (!st.ok()) return with_context(st, "verify: inputs to host");
  }
  st = cpu_ref ? cpu_reference(shape, host_in, &ref) : gpu_reference(shape, in, &ref);
  if (!st.ok()) return with_context(st, "verify: reference " + r.reference);

  // 5. Baseline: the naive algorithm in the test dtype (see cpu_baseline above).
  //    Against the float32 GPU reference, the GPU naive baseline is the reference's own kernel
  //    and differs from it only by the output rounding: judge()'s fixed bound then checks that
  //    rounding, not the kernel; the sampled check (step 7) checks the kernel. The CPU baseline
  //    is an independent float32 implementation: there judge() checks the GPU naive reference
  //    as well.
  Outputs base_outs;
  st = verifier::make_outputs(shape, InputLayout::kContiguous, shape.dtype,
                              cpu_baseline ? Device::cpu() : device, /*with_lse=*/true,
                              &base_outs);
  if (st.ok()) {
    const ForwardParams base_params =
        verifier::make_params(shape, cpu_baseline ? host_in : in, base_outs);
    if (options.run_baseline) {
      st = options.run_baseline(base_params);
    } else if (cpu_baseline) {
      st = cpu::naive_forward<float>(base_params);
    } else {
      st = forward(base_params, "naive");
    }
  }
  HostOutputs baseline;
  if (st.ok()) st = read_back(base_outs, &baseline);
  if (!st.ok()) return with_context(st, "verify: baseline " + r.baseline);

  // 6. Judge.
  const verifier::OutputDims dims = verifier::output_dims(shape);
  verifier::judge(dims, shape.dtype, result, baseline, ref, options.check_lse, &r);

  // 7. The sampled check: with the float32 GPU reference the baseline was only compared with
  //    that reference, the GPU naive kernel itself; both now meet the float64 CPU reference on a
  //    sample of rows (verifier::sample_rows says which), from the same host inputs, by the
  //    fixed bound. About options.sample_limit multiply-adds: 0.2 s on 2 cores by default.
  if (sample_check) {
    const std::vector<cpu::RowId> sample = verifier::sample_rows(shape, options.sample_limit);
    ReferenceOutputs sample_ref;
    sample_ref.out.assign(sample.size() * static_cast<std::size_t>(shape.head_dim), 0.0);
    sample_ref.lse.assign(sample.size(), 0.0);
    st = cpu::reference_rows_f64(verifier::make_params(shape, host_in, base_outs), sample,
                                 sample_ref.out.data(), sample_ref.lse.data());
    if (!st.ok()) return with_context(st, "verify: sampled float64 reference");
    verifier::judge_sample(dims, shape.dtype, sample, sample_ref, baseline,
                           ref.is_fp32 ? &ref : nullptr, options.check_lse, &r);
  }
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
  os << "  base bound  " << num(baseline_bound) << "-           -           "
     << num(baseline_lse_bound) << "(fixed: the baseline against the reference, "
     << (baseline_passed ? "ok" : "FAILED") << ")\n";
  if (sample_rows > 0) {
    os << "  sampled     " << num(baseline_sample_error.max_abs) << "-           -           "
       << num(baseline_sample_error.lse_max_abs) << "(the baseline against float64 on "
       << sample_rows << " rows: bound " << sample_bound << ", LSE " << sample_lse_bound << ", "
       << (sample_baseline_passed ? "ok" : "FAILED") << ")\n";
    if (reference_sampled) {
      os << "  sampled ref " << num(reference_sample_error.max_abs) << "-           -           "
         << num(reference_sample_error.lse_max_abs) << "(the reference against float64 there: bound "
         << sample_reference_bound << ", LSE " << sample_lse_bound << ", "
         << (sample_reference_passed ? "ok" : "FAILED") << ")\n";
    }
  }
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
