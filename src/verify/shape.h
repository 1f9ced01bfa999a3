// The problem shape of the verifier and the benchmark: sizes, the variants (window, softcap,
// ALiBi, sinks, varlen lengths), and what they imply: tensor bytes, multiply-adds, the (query,
// key) pairs the mask keeps. Every product is overflow-checked (common/checked_math.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "flashattn/status.h"
#include "flashattn/tensor.h"

namespace flashattn {

// The ALiBi slopes verify() generates (verifier::alibi_slopes in verify/inputs.h gives the values).
enum class AlibiMode {
  kNone,
  kHeads,       // float32 (heads): one slope per head
  kBatchHeads,  // float32 (batch, heads): the per-head slopes scaled differently per batch entry
};

struct ProblemShape {
  std::int64_t batch = 1, heads = 1, kv_heads = 1, seqlen_q = 1, seqlen_k = 1, head_dim = 64;
  DType dtype = DType::kBF16;
  bool causal = false;
  std::optional<float> scale;

  // The variants; flashattn/params.h gives their semantics.
  std::int64_t window_left = -1, window_right = -1;  // -1: unbounded on that side
  float softcap = 0.0f;                              // 0: off
  AlibiMode alibi = AlibiMode::kNone;
  bool sinks = false;  // one generated sink logit per head
  // Variable length when seqlens_q is non-empty: sequence b has seqlens_q[b] queries and
  // seqlens_k[b] keys, of which the first seqused_k[b] are used when seqused_k is non-empty.
  // batch is then seqlens_q.size() and seqlen_q / seqlen_k are max_seqlen_q / max_seqlen_k (at
  // least every length); set_varlen() keeps them so. (A varlen batch of 0 sequences cannot be
  // written: an empty seqlens_q means dense.)
  std::vector<std::int64_t> seqlens_q, seqlens_k, seqused_k;

  bool varlen() const { return !seqlens_q.empty(); }
  // Sets the lengths, batch = their count, seqlen_q / seqlen_k = the longest of each.
  void set_varlen(std::vector<std::int64_t> q, std::vector<std::int64_t> k,
                  std::vector<std::int64_t> used_k = {});
  // Sequence b's query count and key count (seqused_k applied); seqlen_q / seqlen_k when dense.
  std::int64_t seqlen_q_of(std::int64_t b) const;
  std::int64_t seqlen_k_of(std::int64_t b) const;
  // Rows of the packed q / k tensors (the sums of seqlens_q / seqlens_k); dense: batch * seqlen.
  std::int64_t total_q() const;
  std::int64_t total_k() const;
  // A window beyond causal's (as api/registry.cc counts the window variant): a left edge, or a
  // right edge without causal (causal is window_right = 0 already).
  bool has_window() const { return window_left != -1 || (window_right != -1 && !causal); }
  bool any_variant() const;
  // The variants in use as to_string() shows them: " window=64,0 softcap=30 alibi=heads sinks
  // varlen q=... k=..." ("" for none).
  std::string variants_string() const;
  // "b=2 h=8/2 sq=113 sk=203 d=64 bf16 causal", then each variant in use:
  // " window=64,0 softcap=30 alibi=heads sinks varlen q=17,0,113 k=17,0,113 seqused_k=..."
  std::string to_string() const;
};

// The name of an AlibiMode as the CLI spells it: "none", "heads", "batch-heads".
std::string_view alibi_mode_name(AlibiMode mode);

// How messages call the fields of a ProblemShape: the library's names by default; the CLI passes
// its flags ("--batch", ...), bench "--seqlens" for both sequence lengths.
struct ShapeFieldNames {
  std::string batch = "batch", heads = "heads", kv_heads = "kv_heads", seqlen_q = "seqlen_q",
              seqlen_k = "seqlen_k", head_dim = "head_dim";
  std::string seqlens_q = "seqlens_q", seqlens_k = "seqlens_k", seqused_k = "seqused_k";
};

// The sizes a shape implies, each an overflow-checked product (common/checked_math.h). With
// varlen, "batch * seqlen_q" below is total_q and "batch * seqlen_q * seqlen_k" the sum over
// sequences of seqlen_q(b) * seqlen_k(b).
struct ShapeSizes {
  std::int64_t q_bytes = 0;    // batch * seqlen_q * heads * head_dim * dtype size (q, and out)
  std::int64_t kv_bytes = 0;   // batch * seqlen_k * kv_heads * head_dim * dtype size (k, and v)
  std::int64_t lse_bytes = 0;  // batch * heads * seqlen_q * 4 (float32)
  std::int64_t io_bytes = 0;   // q, k, v, out and LSE together
  std::int64_t macs = 0;       // batch * heads * seqlen_q * seqlen_k * head_dim: the multiply-adds
                               // of S = Q K^T (and again of O = P V)
  // The (query, key) pairs the mask keeps (causal, window and per-sequence lengths applied),
  // summed over the batch, and heads * head_dim times that; both 0 when macs is 0.
  std::int64_t visible_pairs = 0;
  std::int64_t visible_macs = 0;
  // What cpu_reference_limit is compared with: macs for a dense shape without a window (the
  // documented rule, causal counted in full), visible_macs with a window or varlen, where the
  // full product says nothing about the work: a window of 64 keys at seqlen 1e5 keeps 0.07% of
  // the pairs, and a varlen batch has no single seqlen_q * seqlen_k.
  std::int64_t reference_macs = 0;
};

// Fills *sizes; kInvalidShape naming the fields (as `names` spells them), their values and the
// limit when a size does not fit int64 or a field is negative, or when the varlen lengths are
// inconsistent (counts differ from batch, a length above seqlen_q / seqlen_k, seqused_k beyond
// its sequence, a total past int32, the type of cu_seqlens).
Status shape_sizes(const ProblemShape& shape, ShapeSizes* sizes, const ShapeFieldNames& names = {});
// The varlen part of those checks alone (ok for a dense shape).
Status check_varlen_lengths(const ProblemShape& shape, const ShapeFieldNames& names = {});

}  // namespace flashattn
