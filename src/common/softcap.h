// Softcap's constants in the kernels' raw score units (s = q.k; cuda/attention/score_mod.cuh),
// computed once on the host into AttentionArgs, and its tanh on the FMA pipe: the fast path of
// the tiled GPU kernels (flash-sm80, flash-sm90: cuda/attention/fragment_ops.cuh
// score_mod_fragment), host and device, so tests/common/softcap_test.cc checks on the CPU the
// float32 steps the kernels take. As kernel parameters the constants are constant-bank operands
// of the FP32 ops, not registers: computed per block (as before), flash-sm90's variant kernel at
// d128 N176 spilled 40 bytes once the fast path's branch was in its loop.
//
// Why a polynomial. The exact form (score_mod.cuh) costs two MUFU ops per score (ex2, rcp) on
// top of the softmax's ex2: at 16 MUFU ops per clock per SM against ~8 scores per clock of
// tensor work at d128, three MUFU ops per score are ~1.5x the tensor time, and softcap measured
// 1.58x dense on flash-sm90. Here cap tanh(s / cap) = s P(s^2), P of degree 4 in s^2 (one FMUL
// for s^2, four FFMA, one FMUL by s), its coefficients folded with the cap: FP32 work only.
// Measured on the H200 (docs/performance.md, flash-sm90 softcap): d64 16k 222 -> 296 TFLOP/s,
// d128 417 -> 458, d256 598 -> 657; the degree-5 fit on |x| <= 1 (one FFMA more) reached 278,
// 424 and 614.
//
// Accuracy. P's coefficients are a minimax fit (tools/softcap/fit.py: Lawson's iteration on
// 20000 points) of tanh(x) / x on |x| <= 3/4 for the absolute error of x P(x^2) - tanh(x):
// 1.85e-7 in float64, 2.4e-7 to 2.7e-7 in the kernels' float32 steps (softcap_test.cc),
// against 2.5e-7 of the exact form's float32 steps. In logits that is softcap * 2.7e-7 (8e-6 at
// softcap 30): a relative error of 8e-6 in P, against P's rounding to 16 bits (2^-9 in bf16).
// Past |x| = 3/4 the polynomial leaves tanh, so a warp takes it only when every score of its
// tile has |s| <= poly_limit (3/4 of the cap: logits up to 22.5 at softcap 30, 37.5 at 50), and
// the exact form otherwise.
//
// Range. Folding divides the k-th coefficient by cap^{2k}: past cap ~3.3e4 the last one falls
// below float's normal range (or, for a tiny cap, past its top); poly_limit is then 0 and the
// kernels take the exact form everywhere. Real models sit far inside: softcap 30-50, scale 1/8
// to 1/16, cap 240-800.
#pragma once

#include <cmath>

#include "common/host_device.h"

namespace flashattn {

struct SoftcapConsts {
  static constexpr int kPolyTerms = 5;
  float cap = 0.0f;          // softcap / scale; 0: no softcap
  float neg_two_cap = 0.0f;  // -2 cap
  float tanh_in = 0.0f;      // 2 log2(e) / cap: ex2(s tanh_in) = e^{2 s / cap}
  float poly[kPolyTerms] = {};  // P(u) = sum poly[k] u^k, u = s^2
  float poly_limit = 0.0f;      // |s| up to which s P(s^2) holds; 0: never

  // cap tanh(s / cap) for |s| <= poly_limit.
  FA_HOST_DEVICE float apply_poly(float s) const {
    const float u = s * s;
    float p = poly[kPolyTerms - 1];
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int k = kPolyTerms - 2; k >= 0; --k) p = fmaf(p, u, poly[k]);
    return s * p;
  }
};

// Softcap `softcap` (scaled units; 0: off) at softmax scale `scale`. Host only.
SoftcapConsts make_softcap_consts(float softcap, float scale);

}  // namespace flashattn
