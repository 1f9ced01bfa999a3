// Host launcher of the exp2_fma test kernel (exp2_fma_kernels.cu), for exp2_fma_test.cc.
#pragma once

#include <vector>

#include "flashattn/status.h"

namespace flashattn::testing {

// y[i] = cuda::ptx::exp2_fma<degree>(x[i]) computed on the current device (degree 3 or 4).
Status run_exp2_fma(int degree, const std::vector<float>& x, std::vector<float>* y);

}  // namespace flashattn::testing
