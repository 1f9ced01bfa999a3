// A reciprocal on the FMA pipe: no MUFU instruction, for kernels whose MUFU unit (16 ops per
// clock per SM against 128 FP32 ops) is the bottleneck. Plain arithmetic (host and device, any
// architecture), so tests/cuda/rcp_fma_test.cc checks it on the CPU against float64, bit for bit
// what the GPU computes (fmaf rounds once on both).
#pragma once

#include <cmath>

#include "common/host_device.h"

namespace flashattn::cuda {

// 1 / y for y in [1, 2] in six FMAs (any arch): a quadratic seed and two Newton steps.
// The seed p(y) = (210 - 144 y + 32 y^2) / 99 makes the residual 1 - y p(y) = -T3(2y - 3) / 99
// (T3 the Chebyshev polynomial: the cubic that is 1 at y = 0 and equioscillates on [1, 2]), so
// its relative error is at most 1/99. Each step r += r (1 - y r) squares the residual:
// 1.0e-4, then 1.04e-8, under float's rounding; the result is within 1 ulp of 1 / y (checked
// for every float in [1, 2] by the test). Outside [1, 2] the seed's error grows (|1 - y p(y)|
// = 1 at y = 0 and 3): the caller keeps y in range.
FA_HOST_DEVICE float rcp_fma_1to2(float y) {
  constexpr float kC0 = 210.0f / 99.0f, kC1 = -144.0f / 99.0f, kC2 = 32.0f / 99.0f;
  float r = fmaf(fmaf(kC2, y, kC1), y, kC0);
  r = fmaf(r, fmaf(-y, r, 1.0f), r);
  r = fmaf(r, fmaf(-y, r, 1.0f), r);
  return r;
}

}  // namespace flashattn::cuda
