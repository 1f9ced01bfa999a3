// ProblemShape: sizes, varlen lengths and the pairs the mask keeps, in closed form.
#include "verify/shape.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "common/checked_math.h"
#include "common/mask_rule.h"

namespace flashattn {
namespace {

struct Factor {
  const std::string& name;
  std::int64_t value;
};

// *out = the product of the factors' values (times `elem_bytes` when > 0), or kInvalidShape
//   "batch * seqlen_q * heads * head_dim * 4 bytes (q in fp32) = 9223372036854775807 * 512 * 8 *
//   128 * 4 does not fit in 64 bits (at most 9223372036854775807)".
Status checked_size(const std::string& what, std::initializer_list<Factor> factors,
                    std::int64_t elem_bytes, std::int64_t* out) {
  std::vector<std::int64_t> values_of;
  if (elem_bytes > 0) values_of.push_back(elem_bytes);
  for (const Factor& f : factors) values_of.push_back(f.value);
  if (checked_product(values_of, out)) return Status::Ok();
  std::string names, values;
  for (const Factor& f : factors) {
    names += (names.empty() ? "" : " * ") + f.name;
    values += (values.empty() ? "" : " * ") + std::to_string(f.value);
  }
  if (elem_bytes > 0) {
    names += " * " + std::to_string(elem_bytes) + " bytes";
    values += " * " + std::to_string(elem_bytes);
  }
  return Status(StatusCode::kInvalidShape,
                names + " (" + what + ") = " + values + " does not fit in 64 bits (at most " +
                    std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
}

// 128-bit integers for the closed-form pair counts, whose intermediate terms (row index plus a
// window of up to 2^63 keys) leave int64.
__extension__ typedef __int128 Int128;

Int128 clamp128(Int128 x, Int128 lo, Int128 hi) { return x < lo ? lo : (x > hi ? hi : x); }

// sum over i in [0, n) of clamp(i + c, 0, sk), in closed form: 0 while i + c < 0, then i + c,
// then sk from i + c >= sk on.
Int128 clamped_sum(std::int64_t n, Int128 c, std::int64_t sk) {
  if (n <= 0) return 0;
  c = clamp128(c, -Int128{n}, sk);
  const Int128 lo = clamp128(-c, 0, n), hi = clamp128(Int128{sk} - c, 0, n);
  return (hi - lo) * c + (lo + hi - 1) * (hi - lo) / 2 + (Int128{n} - hi) * sk;
}

// The (query, key) pairs of one sequence the mask rule keeps: sum over rows of end - begin of
// MaskRule::row_range (common/mask_rule.h), which are clamp(i + diag - left, 0, sk) and
// clamp(i + diag + right + 1, 0, sk) or the unbounded ends 0 and sk.
Int128 visible_pairs(const MaskRule& rule) {
  const std::int64_t n = rule.seqlen_q, sk = rule.seqlen_k;
  if (n <= 0 || sk <= 0) return 0;
  const Int128 diag = rule.diag();
  const Int128 ends =
      rule.right >= 0 ? clamped_sum(n, diag + rule.right + 1, sk) : Int128{n} * sk;
  const Int128 begins = rule.left >= 0 ? clamped_sum(n, diag - rule.left, sk) : 0;
  return ends - begins;
}

std::string join_lengths(const std::vector<std::int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

Status shape_error(const std::string& message) {
  return Status(StatusCode::kInvalidShape, message);
}

}  // namespace

// The varlen lengths agree with each other and with batch, seqlen_q and seqlen_k; the totals fit
// the int32 offsets.
Status check_varlen_lengths(const ProblemShape& s, const ShapeFieldNames& n) {
  if (!s.varlen()) return Status::Ok();
  const std::size_t count = s.seqlens_q.size();
  if (s.seqlens_k.size() != count) {
    return shape_error(n.seqlens_k + " has " + std::to_string(s.seqlens_k.size()) +
                       " lengths, expected " + std::to_string(count) + " (one per sequence of " +
                       n.seqlens_q + ")");
  }
  if (!s.seqused_k.empty() && s.seqused_k.size() != count) {
    return shape_error(n.seqused_k + " has " + std::to_string(s.seqused_k.size()) +
                       " entries, expected " + std::to_string(count) + " (one per sequence of " +
                       n.seqlens_q + ")");
  }
  if (s.batch != static_cast<std::int64_t>(count)) {
    return shape_error(n.batch + " = " + std::to_string(s.batch) + " but " + n.seqlens_q +
                       " has " + std::to_string(count) + " sequences");
  }
  struct List {
    const std::vector<std::int64_t>* lengths;
    const std::string* name;
    std::int64_t max_len;
    const std::string* max_name;
    const char* max_what;
    const char* cu;
  };
  for (const List& l : {List{&s.seqlens_q, &n.seqlens_q, s.seqlen_q, &n.seqlen_q, "max_seqlen_q",
                             "cu_seqlens_q"},
                        List{&s.seqlens_k, &n.seqlens_k, s.seqlen_k, &n.seqlen_k, "max_seqlen_k",
                             "cu_seqlens_k"}}) {
    std::int64_t total = 0;
    for (std::size_t b = 0; b < count; ++b) {
      const std::int64_t len = (*l.lengths)[b];
      const std::string at = *l.name + "[" + std::to_string(b) + "] = " + std::to_string(len);
      if (len < 0) return shape_error(at + ", expected >= 0");
      if (len > l.max_len) {
        return shape_error(*l.max_name + " = " + std::to_string(l.max_len) + " (" + l.max_what +
                           ") is below " + at);
      }
      if (!checked_add(total, len, &total) || total > std::numeric_limits<std::int32_t>::max()) {
        return shape_error("the sum of " + *l.name + " exceeds " +
                           std::to_string(std::numeric_limits<std::int32_t>::max()) + " (" +
                           l.cu + " is int32)");
      }
    }
  }
  for (std::size_t b = 0; b < s.seqused_k.size(); ++b) {
    if (s.seqused_k[b] < 0 || s.seqused_k[b] > s.seqlens_k[b]) {
      return shape_error(n.seqused_k + "[" + std::to_string(b) + "] = " +
                         std::to_string(s.seqused_k[b]) + ", expected 0 to " + n.seqlens_k + "[" +
                         std::to_string(b) + "] = " + std::to_string(s.seqlens_k[b]));
    }
  }
  return Status::Ok();
}

std::string_view alibi_mode_name(AlibiMode mode) {
  switch (mode) {
    case AlibiMode::kNone: return "none";
    case AlibiMode::kHeads: return "heads";
    case AlibiMode::kBatchHeads: return "batch-heads";
  }
  return "?";
}

void ProblemShape::set_varlen(std::vector<std::int64_t> q, std::vector<std::int64_t> k,
                              std::vector<std::int64_t> used_k) {
  seqlens_q = std::move(q);
  seqlens_k = std::move(k);
  seqused_k = std::move(used_k);
  batch = static_cast<std::int64_t>(seqlens_q.size());
  seqlen_q = seqlens_q.empty() ? 0 : *std::max_element(seqlens_q.begin(), seqlens_q.end());
  seqlen_k = seqlens_k.empty() ? 0 : *std::max_element(seqlens_k.begin(), seqlens_k.end());
}

std::int64_t ProblemShape::seqlen_q_of(std::int64_t b) const {
  return varlen() ? seqlens_q[static_cast<std::size_t>(b)] : seqlen_q;
}

std::int64_t ProblemShape::seqlen_k_of(std::int64_t b) const {
  if (!varlen()) return seqlen_k;
  const auto i = static_cast<std::size_t>(b);
  return seqused_k.empty() ? seqlens_k[i] : seqused_k[i];
}

std::int64_t ProblemShape::total_q() const {
  if (!varlen()) return batch * seqlen_q;
  return std::accumulate(seqlens_q.begin(), seqlens_q.end(), std::int64_t{0});
}

std::int64_t ProblemShape::total_k() const {
  if (!varlen()) return batch * seqlen_k;
  return std::accumulate(seqlens_k.begin(), seqlens_k.end(), std::int64_t{0});
}

bool ProblemShape::any_variant() const {
  return has_window() || softcap != 0.0f ||
         alibi != AlibiMode::kNone || sinks || varlen();
}

Status shape_sizes(const ProblemShape& s, ShapeSizes* sizes, const ShapeFieldNames& n) {
  for (const Factor& f : {Factor{n.batch, s.batch}, Factor{n.heads, s.heads},
                          Factor{n.kv_heads, s.kv_heads}, Factor{n.seqlen_q, s.seqlen_q},
                          Factor{n.seqlen_k, s.seqlen_k}, Factor{n.head_dim, s.head_dim}}) {
    if (f.value < 0) {
      return Status(StatusCode::kInvalidShape,
                    f.name + " = " + std::to_string(f.value) + ", expected >= 0");
    }
  }
  const bool varlen = s.varlen();
  if (varlen) {
    Status st = check_varlen_lengths(s, n);
    if (!st.ok()) return st;
  }
  const auto elem = static_cast<std::int64_t>(dtype_size(s.dtype));
  const std::string dt(dtype_name(s.dtype));
  ShapeSizes z;
  Status st;
  if (!varlen) {
    st = checked_size("q in " + dt, {{n.batch, s.batch}, {n.seqlen_q, s.seqlen_q},
                                     {n.heads, s.heads}, {n.head_dim, s.head_dim}},
                      elem, &z.q_bytes);
    if (st.ok()) {
      st = checked_size("k in " + dt, {{n.batch, s.batch}, {n.seqlen_k, s.seqlen_k},
                                       {n.kv_heads, s.kv_heads}, {n.head_dim, s.head_dim}},
                        elem, &z.kv_bytes);
    }
    if (st.ok()) {
      st = checked_size("lse in float32",
                        {{n.batch, s.batch}, {n.heads, s.heads}, {n.seqlen_q, s.seqlen_q}},
                        static_cast<std::int64_t>(sizeof(float)), &z.lse_bytes);
    }
    if (st.ok()) {
      st = checked_size("multiply-adds",
                        {{n.batch, s.batch}, {n.heads, s.heads}, {n.seqlen_q, s.seqlen_q},
                         {n.seqlen_k, s.seqlen_k}, {n.head_dim, s.head_dim}},
                        0, &z.macs);
    }
  } else {
    // The totals fit int32 (check_varlen_lengths), so only the products can overflow.
    const std::string total_q = "sum of " + n.seqlens_q, total_k = "sum of " + n.seqlens_k;
    st = checked_size("q in " + dt, {{total_q, s.total_q()}, {n.heads, s.heads},
                                     {n.head_dim, s.head_dim}},
                      elem, &z.q_bytes);
    if (st.ok()) {
      st = checked_size("k in " + dt, {{total_k, s.total_k()}, {n.kv_heads, s.kv_heads},
                                       {n.head_dim, s.head_dim}},
                        elem, &z.kv_bytes);
    }
    if (st.ok()) {
      st = checked_size("lse in float32", {{n.heads, s.heads}, {total_q, s.total_q()}},
                        static_cast<std::int64_t>(sizeof(float)), &z.lse_bytes);
    }
    std::int64_t pairs = 0;  // sum over sequences of seqlen_q(b) * seqlen_k(b), < 2^62
    for (std::int64_t b = 0; st.ok() && b < s.batch; ++b) pairs += s.seqlen_q_of(b) * s.seqlen_k_of(b);
    if (st.ok()) {
      st = checked_size("multiply-adds",
                        {{n.heads, s.heads},
                         {"sum of " + n.seqlens_q + " * " + n.seqlens_k + " per sequence", pairs},
                         {n.head_dim, s.head_dim}},
                        0, &z.macs);
    }
  }
  if (!st.ok()) return st;

  // The pairs the mask keeps: at most the full products, whose multiply-adds fit int64 when there
  // are any (with heads or head_dim 0 the products are unchecked: nothing is counted).
  if (z.macs > 0) {
    Int128 visible = 0;
    for (std::int64_t b = 0; b < (varlen ? s.batch : 1); ++b) {
      visible += visible_pairs(MaskRule::make(s.seqlen_q_of(b), s.seqlen_k_of(b), s.window_left,
                                              s.window_right, s.causal));
    }
    if (!varlen) visible *= s.batch;
    z.visible_pairs = static_cast<std::int64_t>(visible);
    z.visible_macs = z.visible_pairs * s.heads * s.head_dim;
  }
  const bool full_rule = !varlen && !s.has_window();
  z.reference_macs = full_rule ? z.macs : z.visible_macs;
  // q + out + k + v + lse: each term fits, the sum may not.
  std::int64_t io = 0;
  bool fits = checked_mul(z.q_bytes, std::int64_t{2}, &io);
  std::int64_t kv2 = 0;
  fits = fits && checked_mul(z.kv_bytes, std::int64_t{2}, &kv2) && checked_add(io, kv2, &io) &&
         checked_add(io, z.lse_bytes, &io);
  if (!fits) {
    return Status(StatusCode::kInvalidShape,
                  "q, k, v, out and lse together (" + std::to_string(z.q_bytes) + " * 2 + " +
                      std::to_string(z.kv_bytes) + " * 2 + " + std::to_string(z.lse_bytes) +
                      " bytes) do not fit in 64 bits (at most " +
                      std::to_string(std::numeric_limits<std::int64_t>::max()) + ")");
  }
  z.io_bytes = io;
  *sizes = z;
  return Status::Ok();
}

std::string ProblemShape::to_string() const {
  std::ostringstream os;
  os << "b=" << batch << " h=" << heads << "/" << kv_heads << " sq=" << seqlen_q
     << " sk=" << seqlen_k << " d=" << head_dim << " " << dtype_name(dtype);
  if (causal) os << " causal";
  if (scale.has_value()) os << " scale=" << *scale;
  os << variants_string();
  return os.str();
}

std::string ProblemShape::variants_string() const {
  std::ostringstream os;
  if (window_left != -1 || window_right != -1) os << " window=" << window_left << "," << window_right;
  if (softcap != 0.0f) os << " softcap=" << softcap;
  if (alibi != AlibiMode::kNone) os << " alibi=" << alibi_mode_name(alibi);
  if (sinks) os << " sinks";
  if (varlen()) {
    os << " varlen q=" << join_lengths(seqlens_q) << " k=" << join_lengths(seqlens_k);
    if (!seqused_k.empty()) os << " seqused_k=" << join_lengths(seqused_k);
  }
  return os.str();
}

}  // namespace flashattn
