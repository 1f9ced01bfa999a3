// The naive attention algorithm on the host, and the cpu-reference backend built on it.
//
// For each (batch, head), each sequence (dense or packed, AttentionArgs::seq) and each query row:
// the keys the row sees (MaskRule::row_range), their scores s = transform_score(scale * q.k)
// (softcap, then ALiBi), softmax with the exact max, O = P V. With sinks, the head's sink logit
// joins the max and the denominator and adds no value:
//   LSE = log(sum_j exp(s_j) + exp(sink)),  O = sum_j exp(s_j - LSE) v_j.
// A row that sees no key gives O = 0 and LSE = -inf (LSE = sink with sinks). No tiling, no online
// rescaling: this is the definition the flash backends are checked against.
// naive_forward<double> is the float64 golden reference; naive_forward<float> is the verifier's
// float32 baseline (float arithmetic throughout, output rounded to the dtype).
#include "cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "api/backend.h"
#include "common/attention_args.h"
#include "common/dtype_convert.h"
#include "cpu/host_loop.h"
#include "cpu/kv_append.h"

namespace flashattn::cpu {
namespace {

// Element offset of (batch b, row, head h, d) through AttentionArgs' (batch, row, head) strides.
std::int64_t offset(const std::int64_t* stride, std::int64_t b, std::int64_t row, std::int64_t h,
                    std::int64_t d) {
  return b * stride[0] + row * stride[1] + h * stride[2] + d;
}

// Rows to compute, per (batch, head) item (b * heads + h): (row within the sequence, slot) pairs.
using RowPicks = std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>>;

// Computes every output row in Acc precision (only the rows of `picks` when given) and hands
// each to sink(batch, row, head, const Acc* o_row, Acc lse, slot), row being the row of q/out
// (the sequence's first row plus its index in the sequence) and slot the pick's slot (the index
// in the sequence without picks). A row's values do not depend on which other rows are
// computed. Fails only when the thread count is misconfigured (cpu/host_loop.h).
template <typename Acc, typename Sink>
Status naive_attention(const AttentionArgs& a, Sink sink, const RowPicks* picks = nullptr) {
  if (a.batch == 0 || a.heads == 0 || a.seqlen_q == 0) return Status::Ok();
  const std::int64_t heads = a.heads, head_dim = a.head_dim;
  const std::int64_t group = heads / a.kv_heads;  // query heads per kv head (GQA)
  const Acc scale = static_cast<Acc>(a.scale);
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();

  return parallel_for(a.batch * heads, [&] { return [&](std::int64_t item) {
    const std::int64_t b = item / heads, h = item % heads, kv_h = h / group;
    const SeqInfo seq = a.seq(b);
    if (seq.seqlen_q == 0) return;
    if (picks != nullptr && (*picks)[static_cast<std::size_t>(item)].empty()) return;
    const MaskRule rule = a.mask(seq);
    const float slope = a.alibi_slope(b, h);
    // The sink's logit, in the units of the transformed scores; -inf (no term) without sinks.
    const Acc sink_logit = a.sinks != nullptr ? static_cast<Acc>(a.sinks[h]) : neg_inf;
    // K and V of this (sequence, kv head), converted once: seqlen_k x head_dim each.
    const std::int64_t seqlen_k = seq.seqlen_k;
    std::vector<Acc> k_mat(static_cast<std::size_t>(seqlen_k * head_dim));
    std::vector<Acc> v_mat(k_mat.size());
    for (std::int64_t j = 0; j < seqlen_k; ++j) {
      const std::int64_t key = seq.k_row0 + j;
      for (std::int64_t d = 0; d < head_dim; ++d) {
        const std::int64_t at = j * head_dim + d;
        k_mat[at] = load_as_float(a.k, a.dtype, a.kv_offset(a.k_stride, b, key, kv_h) + d);
        v_mat[at] = load_as_float(a.v, a.dtype, a.kv_offset(a.v_stride, b, key, kv_h) + d);
      }
    }
    std::vector<Acc> q_row(static_cast<std::size_t>(head_dim));
    std::vector<Acc> s_row(static_cast<std::size_t>(seqlen_k));
    std::vector<Acc> o_row(static_cast<std::size_t>(head_dim));
    const std::int64_t count =
        picks != nullptr ? static_cast<std::int64_t>((*picks)[static_cast<std::size_t>(item)].size())
                         : seq.seqlen_q;
    for (std::int64_t n = 0; n < count; ++n) {
      const auto [i, slot] = picks != nullptr
                                 ? (*picks)[static_cast<std::size_t>(item)][static_cast<std::size_t>(n)]
                                 : std::pair<std::int64_t, std::int64_t>{n, n};
      const std::int64_t row = seq.q_row0 + i;
      std::fill(o_row.begin(), o_row.end(), Acc(0));
      const KeyRange keys = rule.row_range(i);
      if (keys.empty()) {
        // Only the sink, if any: its softmax weight is 1 and it adds no value.
        sink(b, row, h, o_row.data(), sink_logit, slot);
        continue;
      }
      for (std::int64_t d = 0; d < head_dim; ++d) {
        q_row[d] = load_as_float(a.q, a.dtype, offset(a.q_stride, b, row, h, d));
      }
      // S row (transformed) and its max, the sink included.
      Acc row_max = sink_logit;
      for (std::int64_t j = keys.begin; j < keys.end; ++j) {
        const Acc* k_row = &k_mat[j * head_dim];
        Acc dot = 0;
        for (std::int64_t d = 0; d < head_dim; ++d) dot += q_row[d] * k_row[d];
        s_row[j] = transform_score<Acc>(scale * dot, a.softcap, slope, i, j, rule.diag());
        row_max = std::max(row_max, s_row[j]);
      }
      // P = exp(S - max) in place, its sum (with the sink's term), then O = P V / sum.
      Acc row_sum = a.sinks != nullptr ? std::exp(sink_logit - row_max) : Acc(0);
      for (std::int64_t j = keys.begin; j < keys.end; ++j) {
        s_row[j] = std::exp(s_row[j] - row_max);
        row_sum += s_row[j];
      }
      for (std::int64_t j = keys.begin; j < keys.end; ++j) {
        const Acc pj = s_row[j];
        const Acc* v_row = &v_mat[j * head_dim];
        for (std::int64_t d = 0; d < head_dim; ++d) o_row[d] += pj * v_row[d];
      }
      for (std::int64_t d = 0; d < head_dim; ++d) o_row[d] /= row_sum;
      sink(b, row, h, o_row.data(), row_max + std::log(row_sum), slot);
    }
  }; });
}

Status require_host(const ForwardParams& p) {
  if (p.q.device.type != DeviceType::kCPU) {
    return Status(StatusCode::kInvalidDevice,
                  "the CPU naive attention needs host tensors, but q.device = cuda:" +
                      std::to_string(p.q.device.index));
  }
  return Status::Ok();
}

}  // namespace

template <typename Acc>
Status naive_forward(const ForwardParams& p) {
  Status st = require_host(p);
  if (!st.ok()) return st;
  const AttentionArgs a = make_attention_args(p);
  append_to_cache(p, a);
  return naive_attention<Acc>(a, [&](std::int64_t b, std::int64_t row, std::int64_t h,
                                     const Acc* o_row, Acc lse, std::int64_t /*slot*/) {
    for (std::int64_t d = 0; d < a.head_dim; ++d) {
      store_from_float(a.o, a.dtype, offset(a.o_stride, b, row, h, d),
                       static_cast<float>(o_row[d]));
    }
    if (a.lse != nullptr) {
      a.lse[b * a.lse_stride[0] + h * a.lse_stride[1] + row * a.lse_stride[2]] =
          static_cast<float>(lse);
    }
  });
}

template Status naive_forward<double>(const ForwardParams& params);
template Status naive_forward<float>(const ForwardParams& params);

Status reference_forward_f64(const ForwardParams& p, double* out, double* lse) {
  Status st = require_host(p);
  if (!st.ok()) return st;
  const AttentionArgs a = make_attention_args(p);
  // Row-major over out's and lse's own shapes: dense (batch, seqlen_q, heads, head_dim) and
  // (batch, heads, seqlen_q); packed (total_q, heads, head_dim) and (heads, total_q), one batch
  // entry of total_q rows.
  const bool varlen = a.varlen();
  const std::int64_t rows = varlen ? p.q.shape[0] : a.seqlen_q;
  const std::int64_t heads = a.heads, head_dim = a.head_dim;
  return naive_attention<double>(a, [&](std::int64_t b, std::int64_t row, std::int64_t h,
                                        const double* o_row, double row_lse,
                                        std::int64_t /*slot*/) {
    const std::int64_t bb = varlen ? 0 : b;
    if (out != nullptr) {
      double* dst = out + ((bb * rows + row) * heads + h) * head_dim;
      std::copy(o_row, o_row + head_dim, dst);
    }
    if (lse != nullptr) lse[(bb * heads + h) * rows + row] = row_lse;
  });
}

Status reference_rows_f64(const ForwardParams& p, const std::vector<RowId>& rows, double* out,
                          double* lse) {
  Status st = require_host(p);
  if (!st.ok()) return st;
  const AttentionArgs a = make_attention_args(p);
  RowPicks picks(static_cast<std::size_t>(a.batch * a.heads));
  for (std::size_t n = 0; n < rows.size(); ++n) {
    const RowId& r = rows[n];
    const bool in_range = r.batch >= 0 && r.batch < a.batch && r.head >= 0 &&
                          r.head < a.heads && r.row >= 0 && r.row < a.seq(r.batch).seqlen_q;
    if (!in_range) {
      return Status(StatusCode::kInvalidArgument,
                    "reference_rows_f64: row " + std::to_string(n) + " (b=" +
                        std::to_string(r.batch) + ", h=" + std::to_string(r.head) + ", s=" +
                        std::to_string(r.row) + ") is outside the problem");
    }
    picks[static_cast<std::size_t>(r.batch * a.heads + r.head)].emplace_back(
        r.row, static_cast<std::int64_t>(n));
  }
  const std::int64_t head_dim = a.head_dim;
  return naive_attention<double>(
      a,
      [&](std::int64_t, std::int64_t, std::int64_t, const double* o_row, double row_lse,
          std::int64_t slot) {
        if (out != nullptr) std::copy(o_row, o_row + head_dim, out + slot * head_dim);
        if (lse != nullptr) lse[slot] = row_lse;
      },
      &picks);
}

}  // namespace flashattn::cpu

namespace flashattn {
namespace {

class CpuReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu-reference"; }
  std::string_view description() const override {
    return "float64 naive reference (S materialized, softmax, PV)";
  }
  DeviceType device_type() const override { return DeviceType::kCPU; }
  Status usable(Device /*device*/) const override {
    std::int64_t threads = 0;
    return cpu::thread_count(&threads);
  }
  unsigned variants() const override { return kAllVariants | kVariantKvCache | kVariantPagedKv; }
  Status supports(const ForwardParams& /*params*/) const override { return Status::Ok(); }
  Status run(const ForwardParams& params, StreamHandle /*stream*/) const override {
    return cpu::naive_forward<double>(params);
  }
};

}  // namespace

const Backend* cpu_reference_backend() {
  static const CpuReferenceBackend backend;
  return &backend;
}

}  // namespace flashattn
