// The score transforms of the GPU kernels (softcap, ALiBi) and the sink logit, as constants
// (softcap's from the host: AttentionArgs::softcap_consts; ALiBi's per block) and per-score
// functions, in the kernels' score unit: the raw score S = q.k, whose
// exponent multiplier is scale * log2(e) (online_softmax.cuh). Definitions (flashattn/params.h)
// are on the scaled score scale * S; dividing them by scale keeps the one multiplier, so the
// dense path, the running max, the LSE and the finalize stay as they are:
//   softcap:  scale S -> c tanh(scale S / c)        raw: S -> (c / scale) tanh(S * scale / c)
//   ALiBi:    scale S -> scale S - slope |i + diag - j|   raw: S -> S - (slope / scale) |...|
//   sink:     logit z joins the denominator          raw: z / scale
// The per-element reference is common/attention_args.h's transform_score (natural units).
//
// tanh(x) = 1 - 2 / (1 + e^{2x}): one ex2, one rcp and three FP32 ops, absolute error a few
// float32 ulps of 1 (e^{2x} overflows to inf for large x: rcp(inf) = 0, tanh = 1; underflows to 0
// for very negative x: tanh = -1). tanh.approx.f32 would be one MUFU op less, but its relative
// error of ~2^-11 becomes 0.015 in a logit capped at 30: a 1.5% error in P, 4x the bf16 rounding
// of P, where this form stays at the rounding floor. flash-sm80 and flash-sm90 take it only on
// tiles with a score past |s| = cap, and elsewhere the FMA-pipe polynomial of common/softcap.h
// (no MUFU op; fragment_ops.cuh score_mod_fragment).
#pragma once

#include <cstdint>

#include "common/alibi_tile.h"
#include "common/attention_args.h"
#include "cuda/common/exact_div.cuh"
#include "cuda/primitives/fast_math.cuh"

namespace flashattn::cuda {

// cap tanh(s / cap), s and cap raw (c.cap != 0), in the exact form.
__device__ __forceinline__ float softcap_exact(const SoftcapConsts& c, float s) {
  return fmaf(c.neg_two_cap, ptx::rcp(ptx::ex2(s * c.tanh_in) + 1.0f), c.cap);
}

// ALiBi's constant of one (batch, head).
struct ScoreMod {
  float neg_slope = 0.0f;  // -(ALiBi slope of this (batch, head)) / scale; 0: no ALiBi

  __device__ __forceinline__ static ScoreMod make(const AttentionArgs& a, std::int64_t b,
                                                  std::int64_t h) {
    ScoreMod m;
    m.neg_slope = div_zero_fast(-a.alibi_slope(b, h), a.scale);  // no ALiBi: 0, no division
    return m;
  }
  __device__ __forceinline__ bool alibi() const { return neg_slope != 0.0f; }

  // s - slope * |dist|, dist = i + diag - j as a float (common/alibi_tile.h).
  __device__ __forceinline__ float apply_alibi(float s, float dist) const {
    return alibi_abs_score(s, neg_slope, dist);
  }
};

// The sink logit of head h in raw units; -inf without sinks (it then adds nothing).
__device__ __forceinline__ float sink_raw(const AttentionArgs& a, std::int64_t h) {
  return a.sinks != nullptr ? div_zero_fast(a.sinks[h], a.scale) : -INFINITY;
}

}  // namespace flashattn::cuda
