// Host attention helpers shared by the CPU backends and the verifier.
#pragma once

#include "flashattn/forward.h"

namespace flashattn::cpu {

// The naive algorithm on the host: for each (batch, head) materialize S = scale * Q K^T with the
// mask, softmax each row, O = P V. `Acc` is the accumulation type: double for the golden
// reference (the cpu-reference backend), float for the verifier's CPU baseline (float32
// arithmetic, output rounded to the dtype). Runs on the validated params' host views,
// multi-threaded over (batch, head).
template <typename Acc>
Status naive_forward(const ForwardParams& params);

// The same with double accumulation written into float64 host buffers (row-major BSHD for O,
// (batch, heads, seqlen_q) for LSE), so the verifier keeps the reference unrounded.
Status reference_forward_f64(const ForwardParams& params, double* out, double* lse);

}  // namespace flashattn::cpu
