// The naive attention algorithm on the host, and the cpu-reference backend built on it.
//
// For each (batch, head) and each query row: S = scale * q K^T over the visible keys (the whole
// row of scores materialized), softmax of the row with its exact max, O = P V. No tiling, no
// online rescaling: this is the definition the flash backends are checked against.
// naive_forward<double> is the float64 golden reference; naive_forward<float> is the verifier's
// float32 baseline (float arithmetic throughout, output rounded to the dtype).
#include "cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "api/backend.h"
#include "common/dtype_convert.h"
#include "cpu/host_loop.h"

namespace flashattn::cpu {
namespace {

// Number of keys query row `row` sees: all of them, or under the bottom-right causal mask the keys
// j <= row + (seqlen_k - seqlen_q), clamped to [0, seqlen_k].
std::int64_t visible_keys(const ForwardParams& p, std::int64_t row) {
  const std::int64_t seqlen_k = p.seqlen_k();
  if (!p.causal) return seqlen_k;
  const std::int64_t last = row + seqlen_k - p.seqlen_q();
  return std::clamp<std::int64_t>(last + 1, 0, seqlen_k);
}

// Computes every output row in Acc precision and hands each to
// sink(batch, row, head, const Acc* o_row, Acc lse). A row that sees no key gets O = 0 and
// LSE = -inf. Fails only when the thread count is misconfigured (cpu/host_loop.h).
template <typename Acc, typename Sink>
Status naive_attention(const ForwardParams& p, Sink sink) {
  const std::int64_t batch = p.batch(), heads = p.heads(), kv_heads = p.kv_heads();
  const std::int64_t seqlen_q = p.seqlen_q(), seqlen_k = p.seqlen_k(), head_dim = p.head_dim();
  if (batch == 0 || heads == 0 || seqlen_q == 0) return Status::Ok();
  const std::int64_t group = heads / kv_heads;  // query heads per kv head (GQA)
  const Acc scale = static_cast<Acc>(p.scale());
  const Acc neg_inf = -std::numeric_limits<Acc>::infinity();

  return parallel_for(batch * heads, [&] { return [&](std::int64_t item) {
    const std::int64_t b = item / heads, h = item % heads, kv_h = h / group;
    // K and V of this (batch, kv head), converted once: seqlen_k x head_dim each.
    std::vector<Acc> k_mat(static_cast<std::size_t>(seqlen_k * head_dim));
    std::vector<Acc> v_mat(k_mat.size());
    for (std::int64_t j = 0; j < seqlen_k; ++j) {
      for (std::int64_t d = 0; d < head_dim; ++d) {
        k_mat[j * head_dim + d] = load_as_float(p.k.data, p.k.dtype, offset4(p.k, b, j, kv_h, d));
        v_mat[j * head_dim + d] = load_as_float(p.v.data, p.v.dtype, offset4(p.v, b, j, kv_h, d));
      }
    }
    std::vector<Acc> q_row(static_cast<std::size_t>(head_dim));
    std::vector<Acc> s_row(static_cast<std::size_t>(seqlen_k));
    std::vector<Acc> o_row(static_cast<std::size_t>(head_dim));
    for (std::int64_t i = 0; i < seqlen_q; ++i) {
      std::fill(o_row.begin(), o_row.end(), Acc(0));
      const std::int64_t n_visible = visible_keys(p, i);
      if (n_visible == 0) {
        sink(b, i, h, o_row.data(), neg_inf);
        continue;
      }
      for (std::int64_t d = 0; d < head_dim; ++d) {
        q_row[d] = load_as_float(p.q.data, p.q.dtype, offset4(p.q, b, i, h, d));
      }
      // S row and its max.
      Acc row_max = neg_inf;
      for (std::int64_t j = 0; j < n_visible; ++j) {
        const Acc* k_row = &k_mat[j * head_dim];
        Acc dot = 0;
        for (std::int64_t d = 0; d < head_dim; ++d) dot += q_row[d] * k_row[d];
        s_row[j] = scale * dot;
        row_max = std::max(row_max, s_row[j]);
      }
      // P = exp(S - max) in place, its sum, then O = P V / sum.
      Acc row_sum = 0;
      for (std::int64_t j = 0; j < n_visible; ++j) {
        s_row[j] = std::exp(s_row[j] - row_max);
        row_sum += s_row[j];
      }
      for (std::int64_t j = 0; j < n_visible; ++j) {
        const Acc pj = s_row[j];
        const Acc* v_row = &v_mat[j * head_dim];
        for (std::int64_t d = 0; d < head_dim; ++d) o_row[d] += pj * v_row[d];
      }
      for (std::int64_t d = 0; d < head_dim; ++d) o_row[d] /= row_sum;
      sink(b, i, h, o_row.data(), row_max + std::log(row_sum));
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
  const std::int64_t head_dim = p.head_dim();
  return naive_attention<Acc>(p, [&](std::int64_t b, std::int64_t i, std::int64_t h,
                                     const Acc* o_row, Acc lse) {
    for (std::int64_t d = 0; d < head_dim; ++d) {
      store_from_float(p.out.data, p.out.dtype, offset4(p.out, b, i, h, d),
                       static_cast<float>(o_row[d]));
    }
    if (p.lse.defined()) {
      const std::int64_t at = b * p.lse.stride[0] + h * p.lse.stride[1] + i * p.lse.stride[2];
      static_cast<float*>(p.lse.data)[at] = static_cast<float>(lse);
    }
  });
}

template Status naive_forward<double>(const ForwardParams& params);
template Status naive_forward<float>(const ForwardParams& params);

Status reference_forward_f64(const ForwardParams& p, double* out, double* lse) {
  Status st = require_host(p);
  if (!st.ok()) return st;
  const std::int64_t seqlen_q = p.seqlen_q(), heads = p.heads(), head_dim = p.head_dim();
  return naive_attention<double>(p, [&](std::int64_t b, std::int64_t i, std::int64_t h,
                                        const double* o_row, double row_lse) {
    if (out != nullptr) {
      double* dst = out + ((b * seqlen_q + i) * heads + h) * head_dim;
      std::copy(o_row, o_row + head_dim, dst);
    }
    if (lse != nullptr) lse[(b * heads + h) * seqlen_q + i] = row_lse;
  });
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
  Status usable() const override {
    std::int64_t threads = 0;
    return cpu::thread_count(&threads);
  }
  unsigned variants() const override { return 0; }
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
