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

// The failure lines of a computation that is itself off against its reference (the baseline, or
// the float32 GPU reference against float64 on the sample): "<who> is itself off<where>: ...".
struct OffNames {
  std::string who;    // "baseline naive (bf16) ", "reference naive (float32) "
  std::string where;  // "" or " (float64 on 12 sampled rows)"
  std::string o, o_ref, lse, lse_ref;  // "O_base", "O_ref", "LSE_base", "LSE_ref"
  std::string fixed;  // " (fixed)", " (fixed, against a float32 reference)"
};

void off_lines(const OffNames& n, const ErrorStats& e, double bound, double lse_bound,
               bool check_lse, const std::string& o_at, const std::string& lse_at,
               std::vector<std::string>* lines) {
  const std::string off = n.who + "is itself off" + n.where + ": ";
  if (e.max_abs > bound) {
    lines->push_back(off + "max|" + n.o + " - " + n.o_ref + "| = " + fmt(e.max_abs) +
                     " > bound " + fmt(bound) + n.fixed + o_at);
  }
  if (e.nonfinite > 0) {
    lines->push_back(off + std::to_string(e.nonfinite) +
                     " non-finite outputs where the reference is finite" + o_at);
  }
  if (e.masked_nonzero > 0) {
    lines->push_back(off + std::to_string(e.masked_nonzero) + " outputs != 0 on rows without keys" +
                     o_at);
  }
  if (check_lse && e.lse_max_abs > lse_bound) {
    lines->push_back(off + "max|" + n.lse + " - " + n.lse_ref + "| = " + fmt(e.lse_max_abs) +
                     " > bound " + fmt(lse_bound) + n.fixed + lse_at);
  }
  if (check_lse && e.lse_mismatch_inf > 0) {
    lines->push_back(off + std::to_string(e.lse_mismatch_inf) + " LSE rows where exactly one of " +
                     n.lse + ", " + n.lse_ref + " is -inf" + lse_at);
  }
}

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
  const std::string base_at =
      b.first_bad.empty() ? "" : " first at " + index_string(b.first_bad, "bshd");
  const std::string base_lse_at =
      b.first_bad_lse.empty() ? "" : " first at " + index_string(b.first_bad_lse, "bhs");
  const OffNames names{"baseline " + (r.baseline.empty() ? "" : r.baseline + " "),
                       "",
                       "O_base",
                       "O_ref",
                       "LSE_base",
                       "LSE_ref",
                       ref.is_fp32 ? " (fixed, against a float32 reference)" : " (fixed)"};
  const std::size_t before_baseline = r.failures.size();
  off_lines(names, b, r.baseline_bound, r.baseline_lse_bound, check_lse, base_at, base_lse_at,
            &r.failures);
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

std::vector<cpu::RowId> sample_rows(const ProblemShape& shape, double macs_budget) {
  std::vector<cpu::RowId> rows;
  const std::int64_t items = shape.batch * shape.heads;
  if (items <= 0 || shape.head_dim <= 0) return rows;
  const std::int64_t slices = std::min<std::int64_t>(items, kSampleSlices);
  const double per_slice = std::max(macs_budget, 0.0) / static_cast<double>(slices);
  for (std::int64_t k = 0; k < slices; ++k) {
    // Spread over the (batch, head) items, the first and the last included.
    const std::int64_t item = slices == 1 ? 0 : k * (items - 1) / (slices - 1);
    const std::int64_t b = item / shape.heads, h = item % shape.heads;
    const std::int64_t sq = shape.seqlen_q_of(b);
    if (sq <= 0) continue;
    // A row costs at most seqlen_k * head_dim multiply-adds (QK^T; PV again).
    const double per_row =
        static_cast<double>(std::max<std::int64_t>(shape.seqlen_k_of(b), 1)) *
        static_cast<double>(shape.head_dim);
    const double fit = std::floor(per_slice / per_row);
    const std::int64_t want =
        std::clamp<std::int64_t>(fit >= static_cast<double>(sq) ? sq : static_cast<std::int64_t>(fit),
                                 std::min<std::int64_t>(kSampleMinRows, sq), sq);
    // Evenly spaced rows, the first and the last included (strictly increasing: want <= sq).
    for (std::int64_t j = 0; j < want; ++j) {
      const std::int64_t s = want == 1 ? 0 : j * (sq - 1) / (want - 1);
      rows.push_back({b, h, s});
    }
  }
  return rows;
}

namespace {

// Where sampled row `r` lives in the full outputs: its O row index t (O's row order) and its LSE
// element.
struct SampledAt {
  std::int64_t t = 0, lse = 0;
};

SampledAt sampled_at(const OutputDims& dims, const cpu::RowId& r) {
  SampledAt at;
  if (dims.varlen()) {
    at.t = dims.cu_seqlens_q[static_cast<std::size_t>(r.batch)] + r.row;
    at.lse = r.head * dims.rows() + at.t;
  } else {
    at.t = r.batch * dims.seqlen_q + r.row;
    at.lse = (r.batch * dims.heads + r.head) * dims.seqlen_q + r.row;
  }
  return at;
}

// The sampled rows of full outputs (O row-major as OutputDims says, LSE likewise), as compact
// (rows, head_dim) and (rows) vectors.
template <typename T>
void pick(const OutputDims& dims, const std::vector<cpu::RowId>& sample, const std::vector<T>& out,
          const std::vector<T>& lse, std::vector<T>* out_rows, std::vector<T>* lse_rows) {
  const std::int64_t D = dims.head_dim;
  out_rows->clear();
  lse_rows->clear();
  for (const cpu::RowId& r : sample) {
    const SampledAt at = sampled_at(dims, r);
    const auto o0 = static_cast<std::size_t>((at.t * dims.heads + r.head) * D);
    out_rows->insert(out_rows->end(), out.begin() + static_cast<std::ptrdiff_t>(o0),
                     out.begin() + static_cast<std::ptrdiff_t>(o0 + static_cast<std::size_t>(D)));
    if (!lse.empty()) lse_rows->push_back(lse[static_cast<std::size_t>(at.lse)]);
  }
}

// first_bad / first_bad_lse of compact sample stats, mapped back to the full problem's indices.
void unmap_first_bad(const std::vector<cpu::RowId>& sample, ErrorStats* e) {
  if (!e->first_bad.empty()) {
    const cpu::RowId& r = sample[static_cast<std::size_t>(e->first_bad[1])];
    e->first_bad = {r.batch, r.row, r.head, e->first_bad[3]};
  }
  if (!e->first_bad_lse.empty()) {
    const cpu::RowId& r = sample[static_cast<std::size_t>(e->first_bad_lse[2])];
    e->first_bad_lse = {r.batch, r.head, r.row};
  }
}

}  // namespace

void judge_sample(const OutputDims& dims, DType dtype, const std::vector<cpu::RowId>& sample,
                  const ReferenceOutputs& sample_ref, const HostOutputs& baseline,
                  const ReferenceOutputs* fp32_ref, bool check_lse, VerifyReport* report) {
  VerifyReport& r = *report;
  const auto n = static_cast<std::int64_t>(sample.size());
  r.sample_rows = n;
  // The sample as a problem of its own: one batch entry of n rows, one head.
  OutputDims compact{1, n, 1, dims.head_dim, {}, {}};
  if (static_cast<std::int64_t>(dims.row_without_keys.size()) == dims.rows()) {
    for (const cpu::RowId& row : sample) {
      compact.row_without_keys.push_back(
          dims.row_without_keys[static_cast<std::size_t>(sampled_at(dims, row).t)]);
    }
  }
  ReferenceOutputs f64 = sample_ref;
  f64.is_fp32 = false;
  if (!check_lse) f64.lse.clear();
  r.sample_bound = baseline_bound(f64, dtype);
  r.sample_reference_bound = baseline_bound(f64, DType::kFP32);
  r.sample_lse_bound = baseline_lse_bound(f64);

  const std::string where = " (float64 on " + std::to_string(n) + " sampled rows)";
  std::vector<std::string> lines;
  auto check = [&](const std::vector<float>& out, const std::vector<float>& lse, double bound,
                   const OffNames& names, ErrorStats* stats) {
    HostOutputs rows;
    pick(dims, sample, out, check_lse ? lse : std::vector<float>{}, &rows.out, &rows.lse);
    *stats = error_stats(compact, rows, f64, bound, r.sample_lse_bound);
    unmap_first_bad(sample, stats);
    const std::size_t before = lines.size();
    off_lines(names, *stats, bound, r.sample_lse_bound, check_lse,
              stats->first_bad.empty() ? "" : " first at " + index_string(stats->first_bad, "bshd"),
              stats->first_bad_lse.empty() ? ""
                                           : " first at " + index_string(stats->first_bad_lse, "bhs"),
              &lines);
    return lines.size() == before;
  };
  const bool baseline_ok =
      check(baseline.out, baseline.lse, r.sample_bound,
            {"baseline " + (r.baseline.empty() ? "" : r.baseline + " "), where, "O_base", "O_f64",
             "LSE_base", "LSE_f64", " (fixed)"},
            &r.baseline_sample_error);
  r.sample_baseline_passed = baseline_ok;
  r.sample_reference_passed = true;
  r.reference_sampled = fp32_ref != nullptr;
  if (fp32_ref != nullptr) {
    const std::vector<float> out(fp32_ref->out.begin(), fp32_ref->out.end());
    const std::vector<float> lse(fp32_ref->lse.begin(), fp32_ref->lse.end());
    r.sample_reference_passed =
        check(out, lse, r.sample_reference_bound,
              {"reference " + (r.reference.empty() ? "" : r.reference + " "), where, "O_ref",
               "O_f64", "LSE_ref", "LSE_f64", " (fixed, as a float32 baseline)"},
              &r.reference_sample_error);
  }
  r.failures.insert(r.failures.begin(), lines.begin(), lines.end());
  r.passed = r.failures.empty();
}

}  // namespace flashattn::verifier
