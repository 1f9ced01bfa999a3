// Host attention helpers shared by the CPU backends and the verifier.
#pragma once

#include <cstdint>
#include <vector>

#include "flashattn/forward.h"

namespace flashattn::cpu {

// The naive algorithm on the host: for each (batch, head) and each query row, the scores of the
// keys the row sees (common/mask_rule.h) with softcap and ALiBi (transform_score), softmax with
// the exact max and the sink's logit, O = P V; every variant of params.h. `Acc` is the
// accumulation type: double for the golden reference (the cpu-reference backend), float for the
// verifier's CPU baseline (float32 arithmetic, output rounded to the dtype). Runs on the
// validated params' host views, multi-threaded over (batch, head).
template <typename Acc>
Status naive_forward(const ForwardParams& params);

// The same with double accumulation written into float64 host buffers, so the verifier keeps the
// reference unrounded. The buffers are row-major over the shapes of out and lse: dense
// (batch, seqlen_q, heads, head_dim) and (batch, heads, seqlen_q); varlen (total_q, heads,
// head_dim) and (heads, total_q), where rows past cu_seqlens_q[batch] are left as they are.
Status reference_forward_f64(const ForwardParams& params, double* out, double* lse);

// One output row: sequence (batch entry) `batch`, query head `head`, row `row` within the
// sequence (varlen: counted from the sequence's first row).
struct RowId {
  std::int64_t batch = 0, head = 0, row = 0;
};

// The float64 reference on the listed rows only: row n's O goes to out[n * head_dim, +head_dim)
// and its LSE to lse[n] (either may be null), bit-identical to what reference_forward_f64 gives
// those rows. Costs the listed rows' work (plus converting K and V once per listed (sequence,
// head)), so a few rows of a problem too large for the full reference are affordable. params'
// out and lse are neither read nor written. kInvalidArgument names a row outside the problem.
Status reference_rows_f64(const ForwardParams& params, const std::vector<RowId>& rows,
                          double* out, double* lse);

}  // namespace flashattn::cpu
