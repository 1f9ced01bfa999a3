#include "verify/inputs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/dtype_convert.h"
#include "common/random.h"

namespace flashattn::verifier {
namespace {

// kLargeScores: the typical score scale * q.k of N(0.5, 1) vectors is about 0.25 * d * scale
// (mean) with a spread of sqrt(1.5 d) * scale; scaling q and k by f multiplies it by f^2. This
// target for f^2 * scale * 0.5 * d puts the bulk of the scores near 5e3 and the row maxima past 1e4.
constexpr double kLargeScoreTarget = 1e4;
// kHugeScores: the same construction aimed at 1e10; fp16 inputs are clamped to +-kFp16Clamp.
constexpr double kHugeScoreTarget = 1e10;
constexpr float kFp16Clamp = 6e4f;
// kVeryNegative: the bias column of k, and the score shifts of the two kinds of biased rows.
constexpr float kBiasKey = 256.0f;  // exact in every dtype
constexpr double kVeryNegativeShift = 6e4;   // below the -5e4 sentinel some kernels use
constexpr double kNegativeShift = 300.0;     // below the -200 sentinel
// kLargeMagnitude: largest |v|; fp16 stops at 65504.
constexpr float kLargeMagnitudeBF16 = 1.3e5f;
constexpr float kLargeMagnitudeFP16 = 6e4f;

std::vector<float> draw(std::uint64_t seed, std::uint64_t stream, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    v[i] = kInputMean + kInputStd * normal_at(seed, stream, i);
  }
  return v;
}

}  // namespace

std::string_view layout_name(InputLayout layout) {
  switch (layout) {
    case InputLayout::kContiguous: return "contiguous";
    case InputLayout::kStridedBHSD: return "bhsd";
    case InputLayout::kPaddedHeads: return "padded-heads";
  }
  return "?";
}

std::string_view kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::kNormal: return "normal";
    case InputKind::kLargeScores: return "large-scores";
    case InputKind::kVeryNegative: return "very-negative";
    case InputKind::kLargeMagnitude: return "large-magnitude";
    case InputKind::kHugeScores: return "huge-scores";
  }
  return "?";
}

std::vector<InputKind> all_input_kinds() {
  std::vector<InputKind> kinds;
  for (int i = 0;; ++i) {
    const auto kind = static_cast<InputKind>(i);
    if (kind_name(kind) == "?") return kinds;
    kinds.push_back(kind);
  }
}

Status create_bshd(DType dtype, Device device, std::int64_t batch, std::int64_t seqlen,
                   std::int64_t heads, std::int64_t head_dim, InputLayout layout,
                   std::size_t guard_bytes, OwnedTensor* out) {
  const std::vector<std::int64_t> shape = {batch, seqlen, heads, head_dim};
  std::vector<std::int64_t> strides;
  switch (layout) {
    case InputLayout::kContiguous:
      break;
    case InputLayout::kStridedBHSD:  // storage (b, h, s, d)
      strides = {heads * seqlen * head_dim, head_dim, seqlen * head_dim, 1};
      break;
    case InputLayout::kPaddedHeads: {  // storage (b, s, heads + kPadHeads, d), first heads used
      const std::int64_t row = (heads + kPadHeads) * head_dim;
      strides = {seqlen * row, row, head_dim, 1};
      break;
    }
  }
  return OwnedTensor::create(dtype, device, shape, out, strides, guard_bytes);
}

Status create_packed(DType dtype, Device device, std::int64_t total, std::int64_t heads,
                     std::int64_t head_dim, InputLayout layout, std::size_t guard_bytes,
                     OwnedTensor* out) {
  const std::vector<std::int64_t> shape = {total, heads, head_dim};
  std::vector<std::int64_t> strides;
  switch (layout) {
    case InputLayout::kContiguous:
      break;
    case InputLayout::kStridedBHSD:  // storage (h, t, d)
      strides = {head_dim, total * head_dim, 1};
      break;
    case InputLayout::kPaddedHeads:  // storage (t, heads + kPadHeads, d), first heads used
      strides = {(heads + kPadHeads) * head_dim, head_dim, 1};
      break;
  }
  return OwnedTensor::create(dtype, device, shape, out, strides, guard_bytes);
}

std::vector<float> alibi_slopes(const ProblemShape& shape) {
  std::vector<float> slopes;
  if (shape.alibi == AlibiMode::kNone) return slopes;
  const auto heads = static_cast<double>(shape.heads);
  const std::int64_t batches = shape.alibi == AlibiMode::kBatchHeads ? shape.batch : 1;
  for (std::int64_t b = 0; b < batches; ++b) {
    const double batch_factor =
        1.0 + static_cast<double>(b) / static_cast<double>(std::max<std::int64_t>(shape.batch, 1));
    for (std::int64_t h = 0; h < shape.heads; ++h) {
      const double slope = std::exp2(-8.0 * static_cast<double>(h + 1) / heads);
      slopes.push_back(static_cast<float>(slope * batch_factor));
    }
  }
  return slopes;
}

std::vector<float> sink_logits(std::uint64_t seed, std::int64_t heads) {
  std::vector<float> sinks(static_cast<std::size_t>(std::max<std::int64_t>(heads, 0)));
  for (std::size_t h = 0; h < sinks.size(); ++h) {
    sinks[h] = kSinkMean + kSinkStd * normal_at(seed, kStreamSinks, h);
  }
  return sinks;
}

namespace {

// Uniform in [0, 1) for (seed, stream, index), from 53 bits of splitmix64.
double uniform_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  const std::uint64_t key = splitmix64(seed ^ splitmix64(stream + 0x632be59bd9b4e019ull));
  return static_cast<double>(splitmix64(key ^ index) >> 11) * 0x1.0p-53;
}

// `total` split over the sequences in proportion to `weights` (floors, then the remainder one
// by one to the sequences with weight, in order): the parts sum to `total` exactly.
std::vector<std::int64_t> split_total(std::int64_t total, const std::vector<double>& weights) {
  double sum = 0.0;
  for (double w : weights) sum += w;
  std::vector<std::int64_t> parts(weights.size(), 0);
  if (sum <= 0.0 || total <= 0) return parts;
  std::int64_t used = 0;
  for (std::size_t b = 0; b < weights.size(); ++b) {
    parts[b] = static_cast<std::int64_t>(std::floor(static_cast<double>(total) * weights[b] / sum));
    used += parts[b];
  }
  for (std::size_t b = 0; used < total; b = (b + 1) % weights.size()) {
    if (weights[b] > 0.0) {
      ++parts[b];
      ++used;
    }
  }
  return parts;
}

}  // namespace

VarlenLengths random_varlen(std::uint64_t seed, std::int64_t batch, std::int64_t seqlen_q,
                            std::int64_t seqlen_k) {
  VarlenLengths out;
  if (batch <= 0) return out;
  const auto n = static_cast<std::size_t>(batch);
  const std::size_t empty = static_cast<std::size_t>(
      splitmix64(seed ^ 0x5eed5eed5eedull) % static_cast<std::uint64_t>(batch));
  std::vector<double> wq(n), wk(n);
  for (std::size_t b = 0; b < n; ++b) {
    wq[b] = 0.25 + uniform_at(seed, kStreamSeqlensQ, b);
    wk[b] = 0.25 + uniform_at(seed, kStreamSeqlensK, b);
  }
  if (n >= 2) wq[empty] = wk[empty] = 0.0;  // a zero-length sequence
  if (n >= 3) wk[(empty + 1) % n] = 0.0;    // queries without keys
  out.q = split_total(batch * seqlen_q, wq);
  out.k = split_total(batch * seqlen_k, wk);
  return out;
}

Status make_inputs(const ProblemShape& shape, InputLayout layout, InputKind kind, Device device,
                   std::uint64_t seed, Inputs* out) {
  Inputs in;
  const bool varlen = shape.varlen();
  Status st;
  if (varlen) {
    st = create_packed(shape.dtype, device, shape.total_q(), shape.heads, shape.head_dim, layout,
                       0, &in.q);
    if (st.ok()) {
      st = create_packed(shape.dtype, device, shape.total_k(), shape.kv_heads, shape.head_dim,
                         layout, 0, &in.k);
    }
    if (st.ok()) {
      st = create_packed(shape.dtype, device, shape.total_k(), shape.kv_heads, shape.head_dim,
                         layout, 0, &in.v);
    }
  } else {
    st = create_bshd(shape.dtype, device, shape.batch, shape.seqlen_q, shape.heads,
                     shape.head_dim, layout, 0, &in.q);
    if (st.ok()) {
      st = create_bshd(shape.dtype, device, shape.batch, shape.seqlen_k, shape.kv_heads,
                       shape.head_dim, layout, 0, &in.k);
    }
    if (st.ok()) {
      st = create_bshd(shape.dtype, device, shape.batch, shape.seqlen_k, shape.kv_heads,
                       shape.head_dim, layout, 0, &in.v);
    }
  }
  if (!st.ok()) return st;

  // The side inputs.
  if (shape.alibi != AlibiMode::kNone) {
    std::vector<std::int64_t> dims = {shape.heads};
    if (shape.alibi == AlibiMode::kBatchHeads) dims = {shape.batch, shape.heads};
    st = OwnedTensor::create(DType::kFP32, device, dims, &in.alibi_slopes);
    if (st.ok()) st = in.alibi_slopes.from_host_float(alibi_slopes(shape));
  }
  if (st.ok() && shape.sinks) {
    st = OwnedTensor::create(DType::kFP32, device, {shape.heads}, &in.sinks);
    if (st.ok()) st = in.sinks.from_host_float(sink_logits(seed, shape.heads));
  }
  if (st.ok() && varlen) {
    // Offsets: shape_sizes() checked that the totals fit int32.
    auto offsets = [](const std::vector<std::int64_t>& lengths) {
      std::vector<std::int32_t> cu(lengths.size() + 1, 0);
      for (std::size_t b = 0; b < lengths.size(); ++b) {
        cu[b + 1] = cu[b] + static_cast<std::int32_t>(lengths[b]);
      }
      return cu;
    };
    const std::vector<std::int32_t> cu_q = offsets(shape.seqlens_q), cu_k = offsets(shape.seqlens_k);
    st = OwnedTensor::create(DType::kInt32, device, {shape.batch + 1}, &in.cu_seqlens_q);
    if (st.ok()) st = in.cu_seqlens_q.from_host_int32(cu_q);
    if (st.ok()) st = OwnedTensor::create(DType::kInt32, device, {shape.batch + 1}, &in.cu_seqlens_k);
    if (st.ok()) st = in.cu_seqlens_k.from_host_int32(cu_k);
    if (st.ok() && !shape.seqused_k.empty()) {
      st = OwnedTensor::create(DType::kInt32, device, {shape.batch}, &in.seqused_k);
      if (st.ok()) {
        st = in.seqused_k.from_host_int32(
            std::vector<std::int32_t>(shape.seqused_k.begin(), shape.seqused_k.end()));
      }
    }
  }
  if (!st.ok()) return st;

  if (kind == InputKind::kNormal) {
    for (auto [t, stream] : {std::pair{&in.q, kStreamQ}, std::pair{&in.k, kStreamK},
                             std::pair{&in.v, kStreamV}}) {
      st = t->fill_normal(seed, stream, kInputMean, kInputStd);
      if (!st.ok()) return st;
    }
    *out = std::move(in);
    return Status::Ok();
  }

  // Distortions: the same draws as fill_normal, changed on the host, uploaded once.
  std::vector<float> q = draw(seed, kStreamQ, in.q.numel());
  std::vector<float> k = draw(seed, kStreamK, in.k.numel());
  std::vector<float> v = draw(seed, kStreamV, in.v.numel());
  const std::int64_t d = shape.head_dim;
  const double scale = shape.scale.has_value() ? static_cast<double>(*shape.scale)
                                               : 1.0 / std::sqrt(static_cast<double>(d));
  switch (kind) {
    case InputKind::kNormal:
      break;
    case InputKind::kLargeScores:
    case InputKind::kHugeScores: {
      const double target = kind == InputKind::kHugeScores ? kHugeScoreTarget : kLargeScoreTarget;
      const float f =
          static_cast<float>(std::sqrt(target / (scale * 0.5 * static_cast<double>(d))));
      const float limit = shape.dtype == DType::kFP16 ? kFp16Clamp
                                                      : std::numeric_limits<float>::max();
      for (float& x : q) x = std::clamp(x * f, -limit, limit);
      for (float& x : k) x = std::clamp(x * f, -limit, limit);
      break;
    }
    case InputKind::kVeryNegative: {
      for (std::size_t i = 0; i < k.size(); i += static_cast<std::size_t>(d)) k[i] = kBiasKey;
      // q is (b, sq, h, d) row-major: element index i / (h * d) % sq is the query row. Packed
      // (total_q, h, d): token t / ... is row t - cu_seqlens_q[b] of its sequence b.
      std::vector<std::int64_t> position;  // varlen: each token's row within its sequence
      for (std::int64_t b = 0; varlen && b < shape.batch; ++b) {
        for (std::int64_t i = 0; i < shape.seqlens_q[static_cast<std::size_t>(b)]; ++i) {
          position.push_back(i);
        }
      }
      const std::int64_t rows = static_cast<std::int64_t>(q.size()) / d;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t token = r / shape.heads;
        const std::int64_t s =
            varlen ? position[static_cast<std::size_t>(token)] : token % shape.seqlen_q;
        double shift = 0.0;
        if (s % 4 == 1) shift = kVeryNegativeShift;
        if (s % 4 == 3) shift = kNegativeShift;
        q[static_cast<std::size_t>(r * d)] =
            static_cast<float>(-shift / (scale * static_cast<double>(kBiasKey)));
      }
      break;
    }
    case InputKind::kLargeMagnitude: {
      const float m = shape.dtype == DType::kFP16 ? kLargeMagnitudeFP16 : kLargeMagnitudeBF16;
      for (std::size_t i = 0; i < v.size(); ++i) {
        const float n = normal_at(seed, kStreamV, i);
        v[i] = m * std::clamp(0.5f + 0.5f * n, -1.0f, 1.0f);
      }
      break;
    }
  }
  st = in.q.from_host_float(q);
  if (st.ok()) st = in.k.from_host_float(k);
  if (st.ok()) st = in.v.from_host_float(v);
  if (!st.ok()) return st;
  *out = std::move(in);
  return Status::Ok();
}

Status make_outputs(const ProblemShape& shape, InputLayout layout, DType dtype, Device device,
                    bool with_lse, Outputs* out) {
  Outputs o;
  const bool varlen = shape.varlen();
  Status st = varlen ? create_packed(dtype, device, shape.total_q(), shape.heads, shape.head_dim,
                                     layout, kOutputGuardBytes, &o.out)
                     : create_bshd(dtype, device, shape.batch, shape.seqlen_q, shape.heads,
                                   shape.head_dim, layout, kOutputGuardBytes, &o.out);
  if (st.ok()) st = o.out.fill_nan();
  if (st.ok() && with_lse) {
    const std::vector<std::int64_t> dims =
        varlen ? std::vector<std::int64_t>{shape.heads, shape.total_q()}
               : std::vector<std::int64_t>{shape.batch, shape.heads, shape.seqlen_q};
    st = OwnedTensor::create(DType::kFP32, device, dims, &o.lse, {}, kOutputGuardBytes);
    if (st.ok()) st = o.lse.fill_nan();
  }
  if (!st.ok()) return st;
  *out = std::move(o);
  return Status::Ok();
}

ForwardParams make_params(const ProblemShape& shape, const Inputs& inputs, Outputs& outputs) {
  ForwardParams p;
  p.q = inputs.q.view();
  p.k = inputs.k.view();
  p.v = inputs.v.view();
  p.out = outputs.out.view();
  if (outputs.lse.view().defined()) p.lse = outputs.lse.view();
  p.softmax_scale = shape.scale;
  p.causal = shape.causal;
  p.window_left = shape.window_left;
  p.window_right = shape.window_right;
  p.softcap = shape.softcap;
  p.alibi_slopes = inputs.alibi_slopes.view();
  p.sinks = inputs.sinks.view();
  p.cu_seqlens_q = inputs.cu_seqlens_q.view();
  p.cu_seqlens_k = inputs.cu_seqlens_k.view();
  p.seqused_k = inputs.seqused_k.view();
  if (shape.varlen()) {
    p.max_seqlen_q = shape.seqlen_q;
    p.max_seqlen_k = shape.seqlen_k;
  }
  return p;
}

}  // namespace flashattn::verifier
