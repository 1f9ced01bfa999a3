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

// Streams of the side inputs: the sink logits, and the random varlen lengths of q and k.
constexpr std::uint64_t kStreamSinks = 3, kStreamSeqlensQ = 4, kStreamSeqlensK = 5;
// Sink logits are N(kSinkMean, kSinkStd^2) (Irwin-Hall, so within kSinkMean +- 6 kSinkStd). With
// normal inputs the scaled scores of a row have mean about 0.25 sqrt(head_dim) and spread 1.2, so
// row maxima lie near 4 to 7 at head_dim 64 to 128: about a third of the (head, row) pairs have
// a sink above the row's max (it dominates the softmax), a quarter or more one 3 below it (its
// weight under 5% of the largest key's).
constexpr float kSinkMean = 4.0f, kSinkStd = 3.0f;

// Allocates a (batch, seqlen, heads, head_dim) tensor in `layout`; the view is always BSHD.
Status create_bshd(DType dtype, Device device, std::int64_t batch, std::int64_t seqlen,
                   std::int64_t heads, std::int64_t head_dim, InputLayout layout,
                   std::size_t guard_bytes, OwnedTensor* out);
// The packed varlen form: a (total, heads, head_dim) tensor in `layout` (kStridedBHSD: storage
// (heads, total, head_dim); kPaddedHeads: rows of (heads + kPadHeads) * head_dim).
Status create_packed(DType dtype, Device device, std::int64_t total, std::int64_t heads,
                     std::int64_t head_dim, InputLayout layout, std::size_t guard_bytes,
                     OwnedTensor* out);

// ALiBi slopes of `shape.alibi`, row-major: kHeads gives (heads) values slope_h =
// 2^(-8 (h + 1) / heads), the geometric sequence of Press et al. for a power-of-two head count;
// other head counts use the same formula (not BLOOM's interleaving of the two nearest powers of
// two: any positive slopes test the bias as well). kBatchHeads gives (batch, heads) values
// slope_h * (1 + b / batch), so every batch entry has its own slopes. Empty for kNone.
std::vector<float> alibi_slopes(const ProblemShape& shape);
// The sink logit of each head: kSinkMean + kSinkStd * normal_at(seed, kStreamSinks, h).
std::vector<float> sink_logits(std::uint64_t seed, std::int64_t heads);

// Random varlen lengths for `batch` sequences (batch >= 1), drawn from `seed`: the q lengths sum
// to batch * seqlen_q and the k lengths to batch * seqlen_k (exactly), each sequence's share
// proportional to 0.25 + u with u uniform in [0, 1), so lengths vary by up to 5x. With batch >= 2
// one sequence (chosen by the seed) is empty in q and k (zero-length); with batch >= 3 the next
// one has queries but no keys (rows without keys: O = 0, LSE = -inf, or the sink's logit).
struct VarlenLengths {
  std::vector<std::int64_t> q, k;
};
VarlenLengths random_varlen(std::uint64_t seed, std::int64_t batch, std::int64_t seqlen_q,
                            std::int64_t seqlen_k);

// q, k, v (dense (batch, seqlen, heads, head_dim) or packed (total, heads, head_dim)) and the side
// inputs the shape asks for, all on one device. Empty (undefined view) when not used.
struct Inputs {
  OwnedTensor q, k, v;
  OwnedTensor alibi_slopes;                       // float32 (heads) or (batch, heads)
  OwnedTensor sinks;                              // float32 (heads)
  OwnedTensor cu_seqlens_q, cu_seqlens_k;         // int32 (batch + 1)
  OwnedTensor seqused_k;                          // int32 (batch)
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
// With varlen, q, k and v are packed and the "query row" of kVeryNegative is the row within its
// sequence. The side inputs: alibi_slopes(shape), sink_logits(seed, heads), the int32 offsets of
// shape.seqlens_q / seqlens_k and seqused_k, on `device` like q.
Status make_inputs(const ProblemShape& shape, InputLayout layout, InputKind kind, Device device,
                   std::uint64_t seed, Inputs* out);

struct Outputs {
  OwnedTensor out;  // (batch, seqlen_q, heads, head_dim) in shape.dtype, in `layout`;
                    // varlen: (total_q, heads, head_dim)
  OwnedTensor lse;  // (batch, heads, seqlen_q) float32, contiguous; varlen: (heads, total_q);
                    // empty when !with_lse
};

// Output buffers with kOutputGuardBytes guards, poisoned with NaN.
Status make_outputs(const ProblemShape& shape, InputLayout layout, DType dtype, Device device,
                    bool with_lse, Outputs* out);

// The forward params over these tensors, variants included (lse left undefined when outputs.lse
// is empty; max_seqlen_q / max_seqlen_k = shape.seqlen_q / seqlen_k with varlen).
ForwardParams make_params(const ProblemShape& shape, const Inputs& inputs, Outputs& outputs);

std::string_view layout_name(InputLayout layout);  // "contiguous", "bhsd", "padded-heads"
std::string_view kind_name(InputKind kind);        // "normal", "large-scores", ...

// Every InputKind, in declaration order: the values 0, 1, ... up to the first one kind_name() does
// not know. So a kind added to the enum and to kind_name() reaches `flashattn verify --inputs`
// with no other edit (kind_name's switch must cover it: -Wall's -Wswitch says so).
std::vector<InputKind> all_input_kinds();

}  // namespace flashattn::verifier
