// cpu-flash: the GPU flash kernels' algorithm, step for step, on the host in float32.
//
// One work item is a block of kBlockM query rows of one (batch, head) of one sequence (dense or
// packed, AttentionArgs::seq). It keeps the attention state (row_max, row_sum, o_acc) and
// streams the K/V tiles of kBlockN keys that the block's rows can see (MaskRule::tile_range:
// tiles left of a window or right of the causal diagonal are never touched):
//   S = Q K^T (float32 accumulate);  [softcap, ALiBi: S = transform_score(scale * S)]
//   mask (only on tiles MaskRule::tile_needs_mask names: tails, window and diagonal edges) -> -inf
//   m_new = max(m, rowmax(S))
//   P = exp2((S - m_new) * c);  alpha = exp2((m - m_new) * c)
//   l = l * alpha + rowsum(P);  O = O * alpha + round_to_dtype(P) V
// and finalizes: sinks merged into (m, l) (below), O / l and LSE = (m * c + log2(l)) * ln(2).
// Subtracting before scaling keeps every exponent <= 0 and exactly 0 at the max
// (cuda/attention/online_softmax.cuh says why the fused fma form overflowed at scaled scores near
// 1e10). Because it is the same algorithm with the same rounding points, it catches the kernels'
// algorithm bugs (a broken -inf guard, a wrong tile bound, LSE in the wrong log base) on a
// machine without a GPU.
//
// Score units. Without softcap and ALiBi (dense, window, sinks, varlen) the scores stay raw,
// S = Q K^T, and c = scale * log2(e): the dense path as it always was, no per-score multiply.
// Softcap and ALiBi are defined on the scaled score (softcap * tanh(scale S / softcap), then
// minus slope * distance), so with either the tile is transformed into natural units,
// S = transform_score(scale * Q K^T), and c = log2(e); the running max is then in natural units
// too. (The GPU kernels instead divide the transforms by scale and stay in raw units with
// c = scale * log2(e): cuda/attention/score_mod.cuh. Both are the same function up to rounding.)
//
// Sinks, at finalize. The sink logit of head h is natural; in the score unit it is
// sink_u = sinks[h] / scale (raw) or sinks[h] (natural). It joins the softmax as one more score
// that adds no value:
//   m' = max(m, sink_u);  alpha = exp2((m - m') * c);  l' = l * alpha + exp2((sink_u - m') * c)
//   O = o_acc * alpha / l';  LSE = (m' * c + log2(l')) * ln(2)
// (both exponents <= 0, exactly 0 for the larger of the two). A row without keys (l = 0) gives
// O = 0 and LSE = sinks[h] exactly (-inf without sinks).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "api/backend.h"
#include "common/attention_args.h"
#include "common/dtype_convert.h"
#include "common/math_constants.h"
#include "common/tile_scheduler.h"
#include "cpu/host_loop.h"
#include "cpu/kv_append.h"

namespace flashattn {
namespace {

constexpr std::int64_t kBlockM = 64;  // query rows per work item (one GPU thread block)
constexpr std::int64_t kBlockN = 64;  // keys per K/V tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Per-thread scratch, reused across work items.
struct TileBuffers {
  explicit TileBuffers(std::int64_t head_dim)
      : q_tile(kBlockM * head_dim),
        k_tile_t(head_dim * kBlockN),
        v_tile(kBlockN * head_dim),
        s_tile(kBlockM * kBlockN),
        o_acc(kBlockM * head_dim),
        row_max(kBlockM),
        row_sum(kBlockM) {}
  std::vector<float> q_tile;    // kBlockM x head_dim
  std::vector<float> k_tile_t;  // head_dim x kBlockN (transposed so the S loop runs along keys)
  std::vector<float> v_tile;    // kBlockN x head_dim
  std::vector<float> s_tile;    // kBlockM x kBlockN: scores (raw or natural units), then P
  std::vector<float> o_acc;     // kBlockM x head_dim
  std::vector<float> row_max;   // running max of the scores, in their unit
  std::vector<float> row_sum;   // running softmax denominator
};

// Element offset of (batch b, row, head h, d) through AttentionArgs' (batch, row, head) strides.
std::int64_t offset(const std::int64_t* stride, std::int64_t b, std::int64_t row, std::int64_t h,
                    std::int64_t d) {
  return b * stride[0] + row * stride[1] + h * stride[2] + d;
}

class FlashWorker {
 public:
  FlashWorker(const AttentionArgs& a, TileBuffers& buf) : a_(a), buf_(buf) {
    head_dim_ = a.head_dim;
    group_ = a.heads / a.kv_heads;
    natural_ = a.softcap > 0.0f || a.alibi_slopes != nullptr;
    exp2_scale_ = natural_ ? kLog2e : a.scale_log2;
  }

  void run_block(std::int64_t b, std::int64_t h, std::int64_t m_block) {
    const SeqInfo seq = a_.seq(b);
    const std::int64_t row_begin = m_block * kBlockM;
    if (row_begin >= seq.seqlen_q) return;  // a block past this sequence's rows (varlen)
    const std::int64_t rows = std::min(kBlockM, seq.seqlen_q - row_begin);
    const std::int64_t kv_h = h / group_;
    const MaskRule rule = a_.mask(seq);
    load_q(b, h, seq.q_row0 + row_begin, rows);
    std::fill(buf_.o_acc.begin(), buf_.o_acc.end(), 0.0f);
    std::fill(buf_.row_max.begin(), buf_.row_max.end(), kNegInf);
    std::fill(buf_.row_sum.begin(), buf_.row_sum.end(), 0.0f);

    std::int64_t n_block_first = 0, n_block_end = 0;
    rule.tile_range(row_begin, rows, kBlockN, &n_block_first, &n_block_end);
    for (std::int64_t n_block = n_block_first; n_block < n_block_end; ++n_block) {
      const std::int64_t key_begin = n_block * kBlockN;
      const std::int64_t keys = std::min(kBlockN, seq.seqlen_k - key_begin);
      load_kv(b, kv_h, seq.k_row0 + key_begin, keys);
      compute_scores(rows);
      if (natural_) transform_scores(b, h, row_begin, rows, key_begin, rule.diag());
      // The mask after the transform: softcap would turn a masked -inf into -softcap.
      if (rule.tile_needs_mask(row_begin, rows, key_begin, kBlockN)) {
        apply_mask(rule, row_begin, rows, key_begin);
      }
      online_softmax_update(rows);
    }
    store_output(b, h, seq.q_row0 + row_begin, rows);
  }

 private:
  void load_q(std::int64_t b, std::int64_t h, std::int64_t q_row, std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t d = 0; d < head_dim_; ++d) {
        buf_.q_tile[r * head_dim_ + d] =
            load_as_float(a_.q, a_.dtype, offset(a_.q_stride, b, q_row + r, h, d));
      }
    }
  }

  // Loads `keys` rows of K (transposed) and V from row `k_row` on; the rest of the tile is zeroed
  // so the full-width loops below read defined values (those columns are masked to -inf, so P = 0
  // there).
  void load_kv(std::int64_t b, std::int64_t kv_h, std::int64_t k_row, std::int64_t keys) {
    for (std::int64_t c = 0; c < kBlockN; ++c) {
      for (std::int64_t d = 0; d < head_dim_; ++d) {
        float k_val = 0.0f, v_val = 0.0f;
        if (c < keys) {
          // kv_offset: the same as offset() for dense and packed K / V, through the block table
          // for a paged KV cache.
          k_val = load_as_float(a_.k, a_.dtype, a_.kv_offset(a_.k_stride, b, k_row + c, kv_h) + d);
          v_val = load_as_float(a_.v, a_.dtype, a_.kv_offset(a_.v_stride, b, k_row + c, kv_h) + d);
        }
        buf_.k_tile_t[d * kBlockN + c] = k_val;
        buf_.v_tile[c * head_dim_ + d] = v_val;
      }
    }
  }

  // S = Q K^T, unscaled. The products accumulate over d in order for each (r, c), so the result
  // does not depend on the thread count or on vectorization across c.
  void compute_scores(std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) {
      // A local accumulator row aliases no buffer, so the compiler can keep it in registers
      // across d (accumulating in s_tile: 2% more instructions, 4% slower at 512).
      float s_acc[kBlockN] = {};
      const float* q_row = &buf_.q_tile[r * head_dim_];
      for (std::int64_t d = 0; d < head_dim_; ++d) {
        const float q_val = q_row[d];
        const float* k_col = &buf_.k_tile_t[d * kBlockN];
        for (std::int64_t c = 0; c < kBlockN; ++c) s_acc[c] += q_val * k_col[c];
      }
      std::copy(s_acc, s_acc + kBlockN, &buf_.s_tile[r * kBlockN]);
    }
  }

  // Softcap and ALiBi: S = transform_score(scale * S), natural units (the file comment says why).
  // Row i and key j are the sequence's own indices, as in the definition.
  void transform_scores(std::int64_t b, std::int64_t h, std::int64_t row_begin, std::int64_t rows,
                        std::int64_t key_begin, std::int64_t diag) {
    const float slope = a_.alibi_slope(b, h);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* s_row = &buf_.s_tile[r * kBlockN];
      for (std::int64_t c = 0; c < kBlockN; ++c) {
        s_row[c] = transform_score<float>(a_.scale * s_row[c], a_.softcap, slope, row_begin + r,
                                          key_begin + c, diag);
      }
    }
  }

  // Every score the row does not see -> -inf: keys left of its range, right of it, past seqlen_k.
  void apply_mask(const MaskRule& rule, std::int64_t row_begin, std::int64_t rows,
                  std::int64_t key_begin) {
    for (std::int64_t r = 0; r < rows; ++r) {
      // Columns [lo, hi) of this tile stay visible for row r (row_range ends at seqlen_k).
      const KeyRange range = rule.row_range(row_begin + r);
      const std::int64_t lo = std::clamp<std::int64_t>(range.begin - key_begin, 0, kBlockN);
      const std::int64_t hi = std::clamp<std::int64_t>(range.end - key_begin, lo, kBlockN);
      float* s_row = &buf_.s_tile[r * kBlockN];
      std::fill(s_row, s_row + lo, kNegInf);
      std::fill(s_row + hi, s_row + kBlockN, kNegInf);
    }
  }

  void online_softmax_update(std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) {
      float* s_row = &buf_.s_tile[r * kBlockN];
      // Of the scores in their unit; for raw scores, scale > 0 keeps the argmax.
      float tile_max = kNegInf;
      for (std::int64_t c = 0; c < kBlockN; ++c) tile_max = std::max(tile_max, s_row[c]);
      const float m_old = buf_.row_max[r];
      const float m_new = std::max(m_old, tile_max);
      // -inf guard: a row with nothing visible yet keeps m = -inf; subtracting 0 instead makes
      // exp2(-inf - 0) = 0 rather than exp2(-inf + inf) = NaN.
      const float m_sub = m_new == kNegInf ? 0.0f : m_new;
      const float alpha = std::exp2(exp2_arg(m_old, m_sub));
      float tile_sum = 0.0f;
      for (std::int64_t c = 0; c < kBlockN; ++c) {
        const float p_val = std::exp2(exp2_arg(s_row[c], m_sub));
        tile_sum += p_val;  // the denominator uses P before rounding, as the GPU kernels do
        s_row[c] = round_to_dtype(p_val, a_.dtype);  // P enters the PV matmul in the input dtype
      }
      buf_.row_max[r] = m_new;
      buf_.row_sum[r] = buf_.row_sum[r] * alpha + tile_sum;

      float* o_row = &buf_.o_acc[r * head_dim_];
      for (std::int64_t d = 0; d < head_dim_; ++d) o_row[d] *= alpha;
      add_pv(s_row, o_row);
    }
  }

  // O += P V for one row: p_row (kBlockN, in the dtype), o_row (head_dim). Keys with P = 0
  // (masked or underflowed) are skipped: they add exactly 0. Four V rows per pass over O: every O
  // element still adds p_c v_c in key order (the same roundings as one key at a time), but is
  // loaded and stored once per four keys; 15% faster on the dense path at 512 and 1024 (b1 h4 d64
  // fp32, one thread, AMD EPYC), and no longer at the mercy of where the compiler aligns the loop
  // (a one-key loop measured 5-15% apart between builds that differed only in unrelated code).
  void add_pv(const float* p_row, float* o_row) const {
    std::int64_t keys_nz[kBlockN];
    std::int64_t n_nz = 0;
    for (std::int64_t c = 0; c < kBlockN; ++c) {
      if (p_row[c] != 0.0f) keys_nz[n_nz++] = c;
    }
    const float* v_tile = buf_.v_tile.data();
    std::int64_t t = 0;
    for (; t + 4 <= n_nz; t += 4) {
      const float p0 = p_row[keys_nz[t]], p1 = p_row[keys_nz[t + 1]];
      const float p2 = p_row[keys_nz[t + 2]], p3 = p_row[keys_nz[t + 3]];
      const float* v0 = &v_tile[keys_nz[t] * head_dim_];
      const float* v1 = &v_tile[keys_nz[t + 1] * head_dim_];
      const float* v2 = &v_tile[keys_nz[t + 2] * head_dim_];
      const float* v3 = &v_tile[keys_nz[t + 3] * head_dim_];
      for (std::int64_t d = 0; d < head_dim_; ++d) {
        o_row[d] = (((o_row[d] + p0 * v0[d]) + p1 * v1[d]) + p2 * v2[d]) + p3 * v3[d];
      }
    }
    for (; t < n_nz; ++t) {
      const float p_val = p_row[keys_nz[t]];
      const float* v_row = &v_tile[keys_nz[t] * head_dim_];
      for (std::int64_t d = 0; d < head_dim_; ++d) o_row[d] += p_val * v_row[d];
    }
  }

  void store_output(std::int64_t b, std::int64_t h, std::int64_t q_row, std::int64_t rows) {
    const bool has_sink = a_.sinks != nullptr;
    const float sink = has_sink ? a_.sinks[h] : kNegInf;
    // The sink in the scores' unit (file comment).
    const float sink_u = natural_ ? sink : sink / a_.scale;
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t row = q_row + r;
      float row_max = buf_.row_max[r], row_sum = buf_.row_sum[r];
      // l == 0 only when the row saw no key (any visible key contributes exp2(0) = 1 at the max):
      // O = 0 exactly and LSE = -inf, or the sink's logit (its softmax is the sink alone).
      const bool empty = row_sum == 0.0f;
      float inv_sum = empty ? 0.0f : 1.0f / row_sum;
      if (has_sink && !empty) {
        const float m_new = std::max(row_max, sink_u);
        const float alpha = std::exp2(exp2_arg(row_max, m_new));
        row_sum = row_sum * alpha + std::exp2(exp2_arg(sink_u, m_new));
        inv_sum = alpha / row_sum;
        row_max = m_new;
      }
      const float* o_row = &buf_.o_acc[r * head_dim_];
      for (std::int64_t d = 0; d < head_dim_; ++d) {
        store_from_float(a_.o, a_.dtype, offset(a_.o_stride, b, row, h, d),
                         empty ? 0.0f : o_row[d] * inv_sum);
      }
      if (a_.lse != nullptr) {
        // ln(sum exp(scale * S)) = (row_max * c + log2(row_sum)) * ln(2), the GPU kernels'
        // finalize_lse.
        const float lse = empty ? sink : (row_max * exp2_scale_ + std::log2(row_sum)) * kLn2;
        a_.lse[b * a_.lse_stride[0] + h * a_.lse_stride[1] + row * a_.lse_stride[2]] = lse;
      }
    }
  }

  // (s - m) * c in float32, the GPU kernels' exp2_arg: a float subtraction, then a float
  // multiply.
  float exp2_arg(float s, float m) const { return (s - m) * exp2_scale_; }

  const AttentionArgs& a_;
  TileBuffers& buf_;
  std::int64_t head_dim_ = 0, group_ = 1;
  bool natural_ = false;     // scores in natural units (softcap or ALiBi), else raw Q K^T
  float exp2_scale_ = 0.0f;  // c: log2(e) for natural scores, scale * log2(e) for raw ones
};

Status flash_forward(const ForwardParams& p) {
  const AttentionArgs a = make_attention_args(p);
  cpu::append_to_cache(p, a);  // a KV cache's new tokens, before anything reads the cache
  if (a.batch == 0 || a.heads == 0 || a.seqlen_q == 0) return Status::Ok();
  // Blocks of the longest sequence (max_seqlen_q with varlen); a shorter one's extra blocks
  // return at once.
  const TileScheduler tiles = TileScheduler::make(a.batch, a.heads, a.seqlen_q, kBlockM);

  // Threads pull tiles from an atomic counter in the scheduler's order (common/tile_scheduler.h:
  // the longest causal blocks first), because causal blocks near the bottom cost more than those
  // at the top.
  return cpu::parallel_for(tiles.tiles(), [&] {
    // Per-thread scratch, reused across the thread's work items.
    return [&a, tiles, buf = TileBuffers(a.head_dim)](std::int64_t t) mutable {
      FlashWorker flash(a, buf);
      const TileCoord c = tiles.tile(t);
      flash.run_block(c.batch, c.head, c.m_block);
    };
  });
}

class CpuFlashBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu-flash"; }
  std::string_view description() const override {
    return "tiled online-softmax flash algorithm on the CPU (float32, multi-threaded)";
  }
  DeviceType device_type() const override { return DeviceType::kCPU; }
  Status usable(Device /*device*/) const override {
    std::int64_t threads = 0;
    return cpu::thread_count(&threads);
  }
  // Every variant and the KV cache, contiguous or paged (appended first, kv_append.h; the
  // computation is unsplit whatever num_splits says).
  unsigned variants() const override { return kAllVariants | kVariantKvCache | kVariantPagedKv; }
  Status supports(const ForwardParams& /*params*/) const override { return Status::Ok(); }
  Status run(const ForwardParams& params, StreamHandle /*stream*/) const override {
    if (params.q.device.type != DeviceType::kCPU) {
      return Status(StatusCode::kInvalidDevice,
                    "backend \"cpu-flash\" needs host tensors, but q.device = cuda:" +
                        std::to_string(params.q.device.index));
    }
    return flash_forward(params);
  }
};

}  // namespace

const Backend* cpu_flash_backend() {
  static const CpuFlashBackend backend;
  return &backend;
}

}  // namespace flashattn
