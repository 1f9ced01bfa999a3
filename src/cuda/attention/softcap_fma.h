// Softcap's tanh with one MUFU op instead of two: the exponential stays on the MUFU unit (the
// caller's ex2), the reciprocal runs on the FMA pipe (cuda/primitives/rcp_fma.h). Plain
// arithmetic after the exponential (host and device), so tests/cuda/rcp_fma_test.cc checks it on
// the CPU against float64.
#pragma once

#include <cmath>

#include "common/host_device.h"
#include "cuda/primitives/rcp_fma.h"

namespace flashattn::cuda {

// cap tanh(x) from e = e^{-2|x|} (in [0, 1]) and s, any value with the sign of x:
// tanh|x| = 2 / (1 + e) - 1, with 1 + e in [1, 2] (no overflow for any x, e = 0 at |x| = inf),
// then the sign back. neg_two_cap = -2 cap (ScoreMod's constant). Absolute error a few float
// ulps of cap, as the MUFU form's (measured bound in the test).
FA_HOST_DEVICE float softcap_from_exp_fma(float e, float s, float neg_two_cap, float cap) {
  return copysignf(fmaf(-neg_two_cap, rcp_fma_1to2(e + 1.0f), -cap), s);
}

}  // namespace flashattn::cuda
