#include "verify/compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

#include "common/dtype_convert.h"
#include "common/mask_rule.h"

namespace flashattn::verifier {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Float bits of one poison element (0xFF bytes) read back through load_as_float.
std::uint32_t poison_bits(DType dtype) {
  const std::uint16_t h = 0xFFFF;
  switch (dtype) {
    case DType::kBF16: return float_bits(bf16_bits_to_float(h));
    case DType::kFP16: return float_bits(fp16_bits_to_float(h));
    case DType::kFP32:
    case DType::kInt32: return 0xFFFFFFFFu;
  }
  return 0xFFFFFFFFu;
}

std::string fmt(double x) {
  std::ostringstream os;
  os.precision(4);
  os << x;
  return os.str();
}

std::string index_string(const std::vector<std::int64_t>& idx, const char* names) {
  // names: one letter per index, e.g. "bshd".
  std::string s = "(";
  for (std::size_t i = 0; i < idx.size(); ++i) {
    s += (i ? ", " : "") + std::string(1, names[i]) + "=" + std::to_string(idx[i]);
  }
  return s + ")";
}

}  // namespace

double dtype_spacing(double x, DType dtype) {
  // Explicit mantissa bits and the smallest spacing (subnormals) of each dtype.
  int mantissa_bits = 23, min_exponent = -149;
  if (dtype == DType::kBF16) mantissa_bits = 7, min_exponent = -133;
  if (dtype == DType::kFP16) mantissa_bits = 10, min_exponent = -24;
  if (x == 0.0 || !std::isfinite(x)) return std::ldexp(1.0, min_exponent);
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  return std::ldexp(1.0, std::max(e - 1 - mantissa_bits, min_exponent));
}

double max_abs_finite(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) {
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  }
  return m;
}

double rounding_atol(const ReferenceOutputs& ref, DType dtype) {
  double max_spacing = 0.0;
  for (double r : ref.out) {
    if (std::isfinite(r)) max_spacing = std::max(max_spacing, dtype_spacing(r, dtype));
  }
  const double max_ref = max_abs_finite(ref.out);
  if (max_ref == 0.0) return 0.0;
  const double floor = (ref.is_fp32 ? kAtolFloorFp32Ref : kAtolFloor) * max_ref;
  return std::max(max_spacing, floor) + score_noise_atol(ref);
}

double score_noise_atol(const ReferenceOutputs& ref) {
  return kScoreUlps * kFloat32Epsilon * max_abs_finite(ref.lse) * max_abs_finite(ref.out);
}

double lse_bound(const ReferenceOutputs& ref, double baseline_lse_error) {
  const double baseline = std::isfinite(baseline_lse_error) ? 2.0 * baseline_lse_error : 0.0;
  return VerifyReport::kLseTolerance + baseline +
         kLseUlps * kFloat32Epsilon * max_abs_finite(ref.lse);
}

double baseline_bound(const ReferenceOutputs& ref, DType dtype) {
  double max_spacing = 0.0;
  for (double r : ref.out) {
    if (std::isfinite(r)) max_spacing = std::max(max_spacing, dtype_spacing(r, dtype));
  }
  const double max_ref = max_abs_finite(ref.out);
  if (max_ref == 0.0) return 0.0;
  const double float32_sides = ref.is_fp32 ? 2.0 : 1.0;
  const double float32_noise =
      kFloat32Epsilon * max_ref * (kBaselineSumUlps + kBaselineScoreUlps * max_abs_finite(ref.lse));
  return kBaselineRoundingUlps * max_spacing + float32_sides * float32_noise;
}

double baseline_lse_bound(const ReferenceOutputs& ref) {
  const double float32_sides = ref.is_fp32 ? 2.0 : 1.0;
  return VerifyReport::kLseTolerance +
         float32_sides * kBaselineLseUlps * kFloat32Epsilon * max_abs_finite(ref.lse);
}

OutputDims output_dims(const ProblemShape& shape) {
  OutputDims dims{shape.batch, shape.seqlen_q, shape.heads, shape.head_dim};
  if (shape.varlen()) {
    dims.cu_seqlens_q.push_back(0);
    for (std::int64_t len : shape.seqlens_q) dims.cu_seqlens_q.push_back(dims.cu_seqlens_q.back() + len);
  }
  dims.row_without_keys.reserve(static_cast<std::size_t>(std::max<std::int64_t>(dims.rows(), 0)));
  for (std::int64_t b = 0; b < shape.batch; ++b) {
    const MaskRule rule = MaskRule::make(shape.seqlen_q_of(b), shape.seqlen_k_of(b),
                                         shape.window_left, shape.window_right, shape.causal);
    for (std::int64_t s = 0; s < rule.seqlen_q; ++s) {
      dims.row_without_keys.push_back(rule.row_range(s).empty() ? 1 : 0);
    }
  }
  return dims;
}

namespace {

// Where output row t (O's row order) lives: its sequence b, its row s within it, and the index of
// its LSE for head h.
struct RowIndex {
  const OutputDims& dims;
  std::vector<std::int64_t> seq_of_row;  // varlen only

  explicit RowIndex(const OutputDims& d) : dims(d) {
    if (!d.varlen()) return;
    seq_of_row.resize(static_cast<std::size_t>(d.rows()));
    for (std::size_t b = 0; b + 1 < d.cu_seqlens_q.size(); ++b) {
      for (std::int64_t t = d.cu_seqlens_q[b]; t < d.cu_seqlens_q[b + 1]; ++t) {
        seq_of_row[static_cast<std::size_t>(t)] = static_cast<std::int64_t>(b);
      }
    }
  }
  std::int64_t batch(std::int64_t t) const {
    return dims.varlen() ? seq_of_row[static_cast<std::size_t>(t)] : t / dims.seqlen_q;
  }
  std::int64_t row(std::int64_t t) const {
    return dims.varlen() ? t - dims.cu_seqlens_q[static_cast<std::size_t>(batch(t))]
                         : t % dims.seqlen_q;
  }
  std::int64_t lse_index(std::int64_t t, std::int64_t h) const {
    return dims.varlen() ? h * dims.rows() + t
                         : (batch(t) * dims.heads + h) * dims.seqlen_q + row(t);
  }
  // The output row of LSE element i.
  std::int64_t row_of_lse(std::int64_t i) const {
    if (dims.varlen()) return i % dims.rows();
    const std::int64_t b = i / (dims.heads * dims.seqlen_q);
    return b * dims.seqlen_q + i % dims.seqlen_q;
  }
  std::int64_t head_of_lse(std::int64_t i) const {
    return dims.varlen() ? i / dims.rows() : (i / dims.seqlen_q) % dims.heads;
  }
};

}  // namespace

ErrorStats error_stats(const OutputDims& dims, const HostOutputs& result,
                       const ReferenceOutputs& ref, double elem_bound, double lse_bound) {
  ErrorStats e;
  const std::int64_t H = dims.heads, D = dims.head_dim;
  const RowIndex rows(dims);
  const bool have_ref_lse = static_cast<std::int64_t>(ref.lse.size()) == dims.lse_numel();
  const bool explicit_rows =
      static_cast<std::int64_t>(dims.row_without_keys.size()) == dims.rows();
  double sum = 0.0, sum_sq = 0.0, ref_sq = 0.0;
  std::int64_t count = 0;
  const std::int64_t n = std::min<std::int64_t>(dims.out_numel(),
                                                static_cast<std::int64_t>(result.out.size()));
  for (std::int64_t i = 0; i < n; ++i) {
    const double r = ref.out[static_cast<std::size_t>(i)];
    if (!std::isfinite(r)) continue;
    const std::int64_t d = i % D, h = (i / D) % H, t = i / (D * H);
    const std::int64_t b = rows.batch(t), s = rows.row(t);
    const double o = result.out[static_cast<std::size_t>(i)];
    bool bad = false;
    const bool masked_row =
        explicit_rows ? dims.row_without_keys[static_cast<std::size_t>(t)] != 0
                      : have_ref_lse &&
                            ref.lse[static_cast<std::size_t>(rows.lse_index(t, h))] == -kInf;
    if (masked_row && o != 0.0) {  // NaN compares unequal too
      ++e.masked_nonzero;
      bad = true;
    }
    if (!std::isfinite(o)) {
      ++e.nonfinite;
      bad = true;
    } else {
      const double err = std::fabs(o - r);
      e.max_abs = std::max(e.max_abs, err);
      sum += err;
      sum_sq += err * err;
      ref_sq += r * r;
      ++count;
      if (err > elem_bound) bad = true;
    }
    if (bad && e.first_bad.empty()) e.first_bad = {b, s, h, d};
  }
  e.mean_abs = count > 0 ? sum / static_cast<double>(count) : 0.0;
  e.rel_l2 = ref_sq > 0.0 ? std::sqrt(sum_sq / ref_sq) : (sum_sq > 0.0 ? kInf : 0.0);

  if (have_ref_lse && static_cast<std::int64_t>(result.lse.size()) == dims.lse_numel()) {
    for (std::int64_t i = 0; i < dims.lse_numel(); ++i) {
      const double r = ref.lse[static_cast<std::size_t>(i)];
      const double l = result.lse[static_cast<std::size_t>(i)];
      bool bad = false;
      if (r == -kInf) {
        if (l != -kInf) {
          ++e.lse_mismatch_inf;
          bad = true;
        }
      } else if (std::isfinite(r)) {
        if (l == -kInf) {
          ++e.lse_mismatch_inf;
          bad = true;
        } else if (!std::isfinite(l)) {
          ++e.nonfinite;
          e.lse_max_abs = kInf;
          bad = true;
        } else {
          const double err = std::fabs(l - r);
          e.lse_max_abs = std::max(e.lse_max_abs, err);
          bad = err > lse_bound;
        }
      }
      if (bad && e.first_bad_lse.empty()) {
        const std::int64_t t = rows.row_of_lse(i);
        e.first_bad_lse = {rows.batch(t), rows.head_of_lse(i), rows.row(t)};
      }
    }
  }
  return e;
}

std::int64_t count_unwritten(const HostOutputs& result, DType out_dtype) {
  auto count = [](const std::vector<float>& v, std::uint32_t poison) {
    return static_cast<std::int64_t>(std::count_if(
        v.begin(), v.end(), [poison](float x) { return float_bits(x) == poison; }));
  };
  return count(result.out, poison_bits(out_dtype)) + count(result.lse, poison_bits(DType::kFP32));
}

void judge(const OutputDims& dims, DType dtype, const HostOutputs& result,
           const HostOutputs& baseline, const ReferenceOutputs& ref, bool check_lse,
           VerifyReport* report) {
  VerifyReport& r = *report;
  HostOutputs result_checked = result;
  HostOutputs baseline_checked = baseline;
  if (!check_lse) {
    result_checked.lse.clear();
    baseline_checked.lse.clear();
  }
  r.atol = rounding_atol(ref, dtype);
  r.score_noise = score_noise_atol(ref);
  r.baseline_bound = baseline_bound(ref, dtype);
  r.baseline_lse_bound = baseline_lse_bound(ref);
  r.baseline_error =
      error_stats(dims, baseline_checked, ref, r.baseline_bound, r.baseline_lse_bound);
  r.max_abs_bound = 2.0 * r.baseline_error.max_abs + r.atol;
  r.mean_abs_bound = 1.5 * r.baseline_error.mean_abs + r.atol / 4.0;
  r.lse_bound = lse_bound(ref, r.baseline_error.lse_max_abs);
  r.error = error_stats(dims, result_checked, ref, r.max_abs_bound, r.lse_bound);
  r.unwritten = count_unwritten(result_checked, dtype);

  r.failures.clear();
  // The baseline first: a backend is never passed against a baseline that is itself off.
  const ErrorStats& b = r.baseline_error;
  const std::string base_name = "baseline " + (r.baseline.empty() ? "" : r.baseline + " ");
  const std::string base_at =
      b.first_bad.empty() ? "" : " first at " + index_string(b.first_bad, "bshd");
  const std::string base_lse_at =
      b.first_bad_lse.empty() ? "" : " first at " + index_string(b.first_bad_lse, "bhs");
  const std::string fixed = ref.is_fp32 ? " (fixed, against a float32 reference)" : " (fixed)";
  const std::size_t before_baseline = r.failures.size();
  if (b.max_abs > r.baseline_bound) {
    r.failures.push_back(base_name + "is itself off: max|O_base - O_ref| = " + fmt(b.max_abs) +
                         " > bound " + fmt(r.baseline_bound) + fixed + base_at);
  }
  if (b.nonfinite > 0) {
    r.failures.push_back(base_name + "is itself off: " + std::to_string(b.nonfinite) +
                         " non-finite outputs where the reference is finite" + base_at);
  }
  if (b.masked_nonzero > 0) {
    r.failures.push_back(base_name + "is itself off: " + std::to_string(b.masked_nonzero) +
                         " outputs != 0 on rows without keys" + base_at);
  }
  if (check_lse && b.lse_max_abs > r.baseline_lse_bound) {
    r.failures.push_back(base_name + "is itself off: max|LSE_base - LSE_ref| = " +
                         fmt(b.lse_max_abs) + " > bound " + fmt(r.baseline_lse_bound) + fixed +
                         base_lse_at);
  }
  if (check_lse && b.lse_mismatch_inf > 0) {
    r.failures.push_back(base_name + "is itself off: " + std::to_string(b.lse_mismatch_inf) +
                         " LSE rows where exactly one of LSE_base, LSE_ref is -inf" + base_lse_at);
  }
  r.baseline_passed = r.failures.size() == before_baseline;

  const ErrorStats& e = r.error;
  const std::string at = e.first_bad.empty() ? "" : " first at " + index_string(e.first_bad, "bshd");
  if (e.max_abs > r.max_abs_bound) {
    r.failures.push_back("max|O - O_ref| = " + fmt(e.max_abs) + " > bound " +
                         fmt(r.max_abs_bound) + " (2 * baseline " +
                         fmt(r.baseline_error.max_abs) + " + atol " + fmt(r.atol) + ")" + at);
  }
  if (e.mean_abs > r.mean_abs_bound) {
    r.failures.push_back("mean|O - O_ref| = " + fmt(e.mean_abs) + " > bound " +
                         fmt(r.mean_abs_bound) + " (1.5 * baseline " +
                         fmt(r.baseline_error.mean_abs) + " + atol/4 " + fmt(r.atol / 4.0) + ")");
  }
  if (e.nonfinite > 0) {
    r.failures.push_back(std::to_string(e.nonfinite) +
                         " non-finite outputs where the reference is finite" + at);
  }
  if (e.masked_nonzero > 0) {
    r.failures.push_back(std::to_string(e.masked_nonzero) +
                         " outputs != 0 on rows without keys (expected O = 0 exactly)" + at);
  }
  if (check_lse) {
    const std::string lse_at =
        e.first_bad_lse.empty() ? "" : " first at " + index_string(e.first_bad_lse, "bhs");
    if (e.lse_max_abs > r.lse_bound) {
      r.failures.push_back("max|LSE - LSE_ref| = " + fmt(e.lse_max_abs) + " > bound " +
                           fmt(r.lse_bound) + lse_at);
    }
    if (e.lse_mismatch_inf > 0) {
      r.failures.push_back(std::to_string(e.lse_mismatch_inf) +
                           " LSE rows where exactly one of LSE, LSE_ref is -inf" + lse_at);
    }
  }
  if (r.unwritten > 0) {
    r.failures.push_back(std::to_string(r.unwritten) +
                         " output elements never written (still NaN poison)");
  }
  if (!r.guards_intact) {
    r.failures.push_back("guard bytes after an output buffer were overwritten");
  }
  r.passed = r.failures.empty();
}

}  // namespace flashattn::verifier
