// combine(): merges partial attention results computed over disjoint key sets of the same queries
// (split-KV decoding, cascade inference, context parallelism) into the result over their union.
//
// Layout: a list of N parts (N >= 0), each in forward()'s own output layout, so a forward() over
// a key subset writes a part directly:
//   outs[i] float32 (batch, seqlen_q, heads, head_dim)   part i's O (normalized over its keys)
//   lses[i] float32 (batch, heads, seqlen_q)              part i's LSE (natural log)
//   out     (batch, seqlen_q, heads, head_dim)            bf16, fp16 or fp32: the merged O
//   lse     float32 (batch, heads, seqlen_q), optional    the merged LSE
// (A list, not one (N, batch, ...) tensor: TensorView has at most 4 dims, and a list lets each
// part live where its producer wrote it, with its own strides.)
//
// Semantics, per (batch, head, row), computed in float64 with the max subtracted:
//   m = max_i lse_i;  LSE = m + log(sum_i exp(lse_i - m));  O = sum_i exp(lse_i - LSE) O_i.
// A part with lse_i = -inf (no key) has weight 0 and its O_i is not read (it may hold anything);
// when every part has -inf (or N = 0), O = 0 and LSE = -inf, never NaN. An lse_i of +inf or NaN
// is not a valid LSE and gives NaN. Each part's keys must be disjoint from the others' (the
// merge of overlapping sets counts the common keys twice).
//
// Rules (validate_combine()): as forward()'s for its outputs: head_dim one forward accepts, last
// dim contiguous, other strides multiples of 16 bytes (4 for the LSEs), 16-byte aligned pointers
// (4 for the LSEs), every tensor on out's device, outputs not overlapping any input or each other.
// Host tensors merge in float64; CUDA tensors in float32 on `stream`, at most 32 parts per call
// (more: kUnsupported; merge them in groups). On any error nothing is written.
#pragma once

#include <vector>

#include "flashattn/forward.h"
#include "flashattn/status.h"
#include "flashattn/tensor.h"

namespace flashattn {

struct CombineParams {
  std::vector<TensorView> outs;  // N float32 (batch, seqlen_q, heads, head_dim)
  std::vector<TensorView> lses;  // N float32 (batch, heads, seqlen_q), as many as outs
  TensorView out;                // bf16 / fp16 / fp32 (batch, seqlen_q, heads, head_dim)
  TensorView lse;                // optional float32 (batch, heads, seqlen_q)
};

// Checks every argument on the host; writes nothing.
Status validate_combine(const CombineParams& params);

// Validates, then merges on out's device (CUDA: on `stream`, neither allocating nor
// synchronizing). On any error nothing is written.
Status combine(const CombineParams& params, StreamHandle stream = nullptr);

}  // namespace flashattn
