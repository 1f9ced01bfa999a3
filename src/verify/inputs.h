// Verification inputs and outputs: seeded q, k, v in the requested layout and distortion, and
// NaN-poisoned outputs with guard margins.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "common/owned_tensor.h"
#include "verify/verify.h"

namespace flashattn::verifier {

// Bytes of kGuardByte after every output buffer.
constexpr std::size_t kOutputGuardBytes = 256;
// Streams of common/random.h per tensor: one seed draws q, k and v independently.
constexpr std::uint64_t kStreamQ = 0, kStreamK = 1, kStreamV = 2;
// Inputs are N(kInputMean, kInputStd^2): a zero-mean output would inflate relative errors.
constexpr float kInputMean = 0.5f, kInputStd = 1.0f;

// Extra heads of padding per row in InputLayout::kPaddedHeads (the row stride is
// (heads + kPadHeads) * head_dim, as when q is sliced out of a packed qkv tensor).
constexpr std::int64_t kPadHeads = 3;

// Allocates a (batch, seqlen, heads, head_dim) tensor in `layout`; the view is always BSHD.
Status create_bshd(DType dtype, Device device, std::int64_t batch, std::int64_t seqlen,
                   std::int64_t heads, std::int64_t head_dim, InputLayout layout,
                   std::size_t guard_bytes, OwnedTensor* out);

struct Inputs {
  OwnedTensor q, k, v;
};

// q, k, v drawn with fill_normal(seed, stream 0/1/2, 0.5, 1) in shape.dtype on `device`, then
// distorted by `kind`:
//   kLargeScores:    q and k scaled by one factor so that scale * q.k reaches ~1e4.
//   kVeryNegative:   head-dim column 0 carries a bias: k[..., 0] = 256 for every key, q[..., 0] = 0
//                    for ordinary rows, and for query rows s % 4 == 1 (s % 4 == 3) a negative value
//                    that shifts every score of the row to about -6e4 (-300). The other columns
//                    stay normal, so the softmax of such a row is an ordinary one shifted far down:
//                    a finite "-inf" sentinel (-5e4, -1e4 or -200) used as the running max breaks it.
//   kLargeMagnitude: v = M * clamp(0.5 + 0.5 * n, -1, 1) with M = 1.3e5 (bf16, fp32) or 6e4 (fp16).
//   kHugeScores:     q and k scaled by one factor so that scale * q.k reaches ~1e10 (fp16 inputs
//                    clamped to +-6e4, its range ending at 65504): still finite in float32, but
//                    one float32 step of the scaled running max is ~1e3, so an exponent argument
//                    rounded apart from the max it is measured against overflows or underflows.
Status make_inputs(const ProblemShape& shape, InputLayout layout, InputKind kind, Device device,
                   std::uint64_t seed, Inputs* out);

struct Outputs {
  OwnedTensor out;  // (batch, seqlen_q, heads, head_dim) in shape.dtype, in `layout`
  OwnedTensor lse;  // (batch, heads, seqlen_q) float32, contiguous; empty when !with_lse
};

// Output buffers with kOutputGuardBytes guards, poisoned with NaN.
Status make_outputs(const ProblemShape& shape, InputLayout layout, DType dtype, Device device,
                    bool with_lse, Outputs* out);

// The forward params over these tensors (lse left undefined when outputs.lse is empty).
ForwardParams make_params(const ProblemShape& shape, const Inputs& inputs, Outputs& outputs);

std::string_view layout_name(InputLayout layout);  // "contiguous", "bhsd", "padded-heads"
std::string_view kind_name(InputKind kind);        // "normal", "large-scores", ...

// Every InputKind, in declaration order: the values 0, 1, ... up to the first one kind_name() does
// not know. So a kind added to the enum and to kind_name() reaches `flashattn verify --inputs`
// with no other edit (kind_name's switch must cover it: -Wall's -Wswitch says so).
std::vector<InputKind> all_input_kinds();

}  // namespace flashattn::verifier
