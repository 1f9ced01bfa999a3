// cpu-flash: the GPU flash kernels' algorithm, step for step, on the host in float32.
//
// One work item is a block of kBlockM query rows of one (batch, head). It keeps the attention
// state (row_max, row_sum, o_acc) and streams K/V tiles of kBlockN keys:
//   S = Q K^T (float32 accumulate);  mask (tail keys, causal bottom-right) -> -inf
//   m_new = max(m, rowmax(S))                          (m stays unscaled)
//   P = exp2((S - m_new) * scale * log2(e));  alpha = exp2((m - m_new) * scale * log2(e))
//   l = l * alpha + rowsum(P);  O = O * alpha + round_to_dtype(P) V
// and finalizes O / l and LSE = (m * scale * log2(e) + log2(l)) * ln(2). Subtracting before
// scaling keeps every exponent <= 0 and exactly 0 at the max (cuda/attention/online_softmax.cuh
// says why the fused fma form overflowed at scaled scores near 1e10). Because it is the same algorithm with the same
// rounding points, it catches the kernels' algorithm bugs (a broken -inf guard, a wrong causal
// tile bound, LSE in the wrong log base) on a machine without a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "api/backend.h"
#include "common/dtype_convert.h"
#include "common/math_constants.h"
#include "cpu/host_loop.h"

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
  std::vector<float> s_tile;    // kBlockM x kBlockN: raw scores Q K^T, then P
  std::vector<float> o_acc;     // kBlockM x head_dim
  std::vector<float> row_max;   // running max of the raw scores
  std::vector<float> row_sum;   // running softmax denominator
};

class FlashWorker {
 public:
  FlashWorker(const ForwardParams& p, TileBuffers& buf) : p_(p), buf_(buf) {
    head_dim_ = p.head_dim();
    seqlen_q_ = p.seqlen_q();
    seqlen_k_ = p.seqlen_k();
    group_ = p.heads() / p.kv_heads();
    scale_log2_ = p.scale() * kLog2e;
  }

  void run_block(std::int64_t b, std::int64_t h, std::int64_t m_block) {
    const std::int64_t row_begin = m_block * kBlockM;
    const std::int64_t rows = std::min(kBlockM, seqlen_q_ - row_begin);
    const std::int64_t kv_h = h / group_;
    load_q(b, h, row_begin, rows);
    std::fill(buf_.o_acc.begin(), buf_.o_acc.end(), 0.0f);
    std::fill(buf_.row_max.begin(), buf_.row_max.end(), kNegInf);
    std::fill(buf_.row_sum.begin(), buf_.row_sum.end(), 0.0f);

    // Bottom-right causal: row i sees keys j <= i + diag_offset.
    const std::int64_t diag_offset = seqlen_k_ - seqlen_q_;
    std::int64_t n_block_end = (seqlen_k_ + kBlockN - 1) / kBlockN;
    if (p_.causal) {
      // Tiles past the last key the block's last row sees are never touched.
      const std::int64_t keys_seen = std::max<std::int64_t>(
          0, std::min(seqlen_k_, row_begin + rows - 1 + diag_offset + 1));
      n_block_end = (keys_seen + kBlockN - 1) / kBlockN;
    }
    for (std::int64_t n_block = 0; n_block < n_block_end; ++n_block) {
      const std::int64_t key_begin = n_block * kBlockN;
      const std::int64_t keys = std::min(kBlockN, seqlen_k_ - key_begin);
      // The mask is needed only on the tail tile and on tiles that cross the diagonal (some key
      // lies beyond what the block's first row sees).
      const bool tail = keys < kBlockN;
      const bool crosses_diagonal = p_.causal && key_begin + kBlockN - 1 > row_begin + diag_offset;
      load_kv(b, kv_h, key_begin, keys);
      compute_scores(rows);
      if (tail || crosses_diagonal) apply_mask(row_begin, rows, key_begin, keys);
      online_softmax_update(rows);
    }
    store_output(b, h, row_begin, rows);
  }

 private:
  void load_q(std::int64_t b, std::int64_t h, std::int64_t row_begin, std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t d = 0; d < head_dim_; ++d) {
        buf_.q_tile[r * head_dim_ + d] =
            load_as_float(p_.q.data, p_.q.dtype, cpu::offset4(p_.q, b, row_begin + r, h, d));
      }
    }
  }

  // Loads `keys` rows of K (transposed) and V; the rest of the tile is zeroed so the full-width
  // loops below read defined values (those columns are masked to -inf, so P = 0 there).
  void load_kv(std::int64_t b, std::int64_t kv_h, std::int64_t key_begin, std::int64_t keys) {
    for (std::int64_t c = 0; c < kBlockN; ++c) {
      for (std::int64_t d = 0; d < head_dim_; ++d) {
        float k_val = 0.0f, v_val = 0.0f;
        if (c < keys) {
          k_val = load_as_float(p_.k.data, p_.k.dtype, cpu::offset4(p_.k, b, key_begin + c, kv_h, d));
          v_val = load_as_float(p_.v.data, p_.v.dtype, cpu::offset4(p_.v, b, key_begin + c, kv_h, d));
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
      float* s_row = &buf_.s_tile[r * kBlockN];
      std::fill(s_row, s_row + kBlockN, 0.0f);
      const float* q_row = &buf_.q_tile[r * head_dim_];
      for (std::int64_t d = 0; d < head_dim_; ++d) {
        const float q_val = q_row[d];
        const float* k_col = &buf_.k_tile_t[d * kBlockN];
        for (std::int64_t c = 0; c < kBlockN; ++c) s_row[c] += q_val * k_col[c];
      }
    }
  }

  void apply_mask(std::int64_t row_begin, std::int64_t rows, std::int64_t key_begin,
                  std::int64_t keys) {
    const std::int64_t diag_offset = seqlen_k_ - seqlen_q_;
    for (std::int64_t r = 0; r < rows; ++r) {
      // Columns [0, limit) of this tile stay visible for row r.
      std::int64_t limit = keys;
      if (p_.causal) {
        limit = std::min(limit, row_begin + r + diag_offset + 1 - key_begin);
        limit = std::max<std::int64_t>(limit, 0);
      }
      float* s_row = &buf_.s_tile[r * kBlockN];
      std::fill(s_row + limit, s_row + kBlockN, kNegInf);
    }
  }

  void online_softmax_update(std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) {
      float* s_row = &buf_.s_tile[r * kBlockN];
      float tile_max = kNegInf;  // of the raw scores; scale > 0 keeps the argmax
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
        s_row[c] = round_to_dtype(p_val, p_.q.dtype);  // P enters the PV matmul in the input dtype
      }
      buf_.row_max[r] = m_new;
      buf_.row_sum[r] = buf_.row_sum[r] * alpha + tile_sum;

      float* o_row = &buf_.o_acc[r * head_dim_];
      for (std::int64_t d = 0; d < head_dim_; ++d) o_row[d] *= alpha;
      for (std::int64_t c = 0; c < kBlockN; ++c) {
        const float p_val = s_row[c];
        if (p_val == 0.0f) continue;  // masked or underflowed: adds exactly 0
        const float* v_row = &buf_.v_tile[c * head_dim_];
        for (std::int64_t d = 0; d < head_dim_; ++d) o_row[d] += p_val * v_row[d];
      }
    }
  }

  void store_output(std::int64_t b, std::int64_t h, std::int64_t row_begin, std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t row = row_begin + r;
      const float row_sum = buf_.row_sum[r];
      // l == 0 only when the row saw no key (any visible key contributes exp2(0) = 1 at the max):
      // O = 0 exactly and LSE = -inf.
      const bool empty = row_sum == 0.0f;
      const float inv_sum = empty ? 0.0f : 1.0f / row_sum;
      const float* o_row = &buf_.o_acc[r * head_dim_];
      for (std::int64_t d = 0; d < head_dim_; ++d) {
        store_from_float(p_.out.data, p_.out.dtype, cpu::offset4(p_.out, b, row, h, d),
                         empty ? 0.0f : o_row[d] * inv_sum);
      }
      if (p_.lse.defined()) {
        // ln(sum exp(scale * S)) = (row_max * scale * log2(e) + log2(row_sum)) * ln(2), the GPU
        // kernels' finalize_lse.
        const float lse =
            empty ? kNegInf : (buf_.row_max[r] * scale_log2_ + std::log2(row_sum)) * kLn2;
        const std::int64_t at =
            b * p_.lse.stride[0] + h * p_.lse.stride[1] + row * p_.lse.stride[2];
        static_cast<float*>(p_.lse.data)[at] = lse;
      }
    }
  }

  // (s - m) * scale_log2 in float32, the GPU kernels' exp2_arg: a float subtraction, then a
  // float multiply.
  float exp2_arg(float s, float m) const { return (s - m) * scale_log2_; }

  const ForwardParams& p_;
  TileBuffers& buf_;
  std::int64_t head_dim_ = 0, seqlen_q_ = 0, seqlen_k_ = 0, group_ = 1;
  float scale_log2_ = 0.0f;
};

Status flash_forward(const ForwardParams& p) {
  const std::int64_t batch = p.batch(), heads = p.heads();
  if (batch == 0 || heads == 0 || p.seqlen_q() == 0) return Status::Ok();
  const std::int64_t m_blocks = (p.seqlen_q() + kBlockM - 1) / kBlockM;
  const std::int64_t items = batch * heads * m_blocks;

  // Work item -> (batch, head, m_block); threads pull items from an atomic counter because causal
  // blocks near the bottom cost more than those at the top.
  return cpu::parallel_for(items, [&] {
    // Per-thread scratch, reused across the thread's work items.
    return [&p, heads, m_blocks, buf = TileBuffers(p.head_dim())](std::int64_t item) mutable {
      FlashWorker flash(p, buf);
      const std::int64_t bh = item / m_blocks;
      flash.run_block(bh / heads, bh % heads, item % m_blocks);
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
  Status usable() const override {
    std::int64_t threads = 0;
    return cpu::thread_count(&threads);
  }
  unsigned variants() const override { return 0; }
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
