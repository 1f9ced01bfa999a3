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

Status make_inputs(const ProblemShape& shape, InputLayout layout, InputKind kind, Device device,
                   std::uint64_t seed, Inputs* out) {
  Inputs in;
  Status st = create_bshd(shape.dtype, device, shape.batch, shape.seqlen_q, shape.heads,
                          shape.head_dim, layout, 0, &in.q);
  if (st.ok()) {
    st = create_bshd(shape.dtype, device, shape.batch, shape.seqlen_k, shape.kv_heads,
                     shape.head_dim, layout, 0, &in.k);
  }
  if (st.ok()) {
    st = create_bshd(shape.dtype, device, shape.batch, shape.seqlen_k, shape.kv_heads,
                     shape.head_dim, layout, 0, &in.v);
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
      // q is (b, sq, h, d) row-major: element index i / (h * d) % sq is the query row.
      const std::int64_t rows = static_cast<std::int64_t>(q.size()) / d;
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t s = (r / shape.heads) % shape.seqlen_q;
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
  Status st = create_bshd(dtype, device, shape.batch, shape.seqlen_q, shape.heads, shape.head_dim,
                          layout, kOutputGuardBytes, &o.out);
  if (st.ok()) st = o.out.fill_nan();
  if (st.ok() && with_lse) {
    st = OwnedTensor::create(DType::kFP32, device, {shape.batch, shape.heads, shape.seqlen_q},
                             &o.lse, {}, kOutputGuardBytes);
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
  return p;
}

}  // namespace flashattn::verifier
