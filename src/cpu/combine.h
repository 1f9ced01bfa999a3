// The host merge of partial attention results (flashattn/combine.h gives the semantics).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "flashattn/combine.h"

namespace flashattn::cpu {

// One (batch, head, row): n parts with LSEs lse(i) and O rows o(i, d); writes O through
// store(d, value) and returns the merged LSE. Float64, max-subtracted; a part with lse -inf is
// not read; all -inf (or n = 0) gives O = 0 and LSE = -inf. The one definition both the public
// combine() and combine_f64() run.
template <typename LseAt, typename OAt, typename Store>
double combine_row(std::int64_t n, std::int64_t head_dim, LseAt lse, OAt o, Store store) {
  const double neg_inf = -std::numeric_limits<double>::infinity();
  double m = neg_inf;
  for (std::int64_t i = 0; i < n; ++i) {
    const double l = lse(i);
    if (std::isnan(l)) {  // not an LSE: NaN out, never a silently dropped part
      const double nan = std::numeric_limits<double>::quiet_NaN();
      for (std::int64_t d = 0; d < head_dim; ++d) store(d, nan);
      return nan;
    }
    m = std::max(m, l);
  }
  if (m == neg_inf) {
    for (std::int64_t d = 0; d < head_dim; ++d) store(d, 0.0);
    return neg_inf;
  }
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double l = lse(i);
    if (l != neg_inf) sum += std::exp(l - m);
  }
  const double merged = m + std::log(sum);
  for (std::int64_t d = 0; d < head_dim; ++d) {
    double acc = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double l = lse(i);
      if (l != neg_inf) acc += std::exp(l - merged) * o(i, d);
    }
    store(d, acc);
  }
  return merged;
}

// combine() on validated host tensors, multi-threaded over (batch, head).
Status combine_host(const CombineParams& params);

// The same merge on float64 row-major buffers, as reference_forward_f64 writes them: outs[i]
// (batch, seqlen_q, heads, head_dim), lses[i] (batch, heads, seqlen_q), into out and lse (either
// may be null). For the tests: float64 partials merged without a float32 rounding.
void combine_f64(const std::vector<const double*>& outs, const std::vector<const double*>& lses,
                 std::int64_t batch, std::int64_t seqlen_q, std::int64_t heads,
                 std::int64_t head_dim, double* out, double* lse);

}  // namespace flashattn::cpu
