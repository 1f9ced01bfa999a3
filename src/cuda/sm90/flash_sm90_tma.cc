// Host side of flash-sm90's TMA copies: q, k and v as TMA tensors (flash_sm90.h).
#include <algorithm>
#include <string>

#include "cuda/sm90/flash_sm90.h"

namespace flashattn::cuda {

Sm90Extents sm90_extents(const ForwardParams& p) {
  Sm90Extents e;
  if (p.varlen()) {
    e.q_rows = p.q.shape[0];  // packed (total_q, heads, d)
    e.k_rows = p.k.shape[0];
    e.batch = 1;
  } else {
    e.q_rows = p.q.shape[1];
    e.k_rows = p.k.shape[1];
    e.batch = p.q.shape[0];
  }
  return e;
}

Status sm90_tma_tensor(const std::int64_t (&stride)[3], std::int64_t rows, std::int64_t heads,
                       std::int64_t batch, std::int64_t head_dim, int box_rows, TmaTensor* t) {
  const std::int64_t dims[4] = {head_dim, rows, heads, batch};
  const std::int64_t strides[4] = {1, stride[1], stride[2], stride[0]};
  t->rank = 4;
  // Extent-1 dims take the smallest legal stride: 16 bytes (8 elements of 16 bits).
  constexpr std::int64_t kUnusedStride = 8;
  for (int i = 0; i < 4; ++i) {
    t->dims[i] = dims[i];
    t->strides[i] = strides[i];
    if (i > 0 && dims[i] == 1) t->strides[i] = kUnusedStride;
    if (i > 0 && dims[i] > 1 && strides[i] == 0) {
      return Status(StatusCode::kUnsupported,
                    "flash-sm90 loads through TMA, which cannot read a broadcast (stride 0) "
                    "dimension; got a zero stride along dim " + std::to_string(i));
    }
  }
  t->box[0] = 64;
  t->box[1] = box_rows;
  t->box[2] = 1;
  t->box[3] = 1;
  return Status::Ok();
}

Status sm90_tensor_map(CUtensorMap* map, const char* name, DType dtype, const void* data,
                       const std::int64_t (&stride)[3], std::int64_t rows, std::int64_t heads,
                       std::int64_t batch, std::int64_t head_dim, int box_rows) {
  TmaTensor t;
  Status st = sm90_tma_tensor(stride, rows, heads, batch, head_dim, box_rows, &t);
  if (st.ok()) st = make_tensor_map(map, dtype, data, t, TmaSwizzle::k128B);
  if (!st.ok()) {
    return Status(st.code(), std::string("flash-sm90: ") + name + "'s tensor map: " + st.message());
  }
  return Status::Ok();
}

Status sm90_check_tma(const KernelArgs& a, const Sm90Extents& e) {
  struct One {
    const char* name;
    const void* data;
    const std::int64_t (&stride)[3];
    std::int64_t rows, heads;
  };
  const One all[3] = {{"q", a.q, a.q_stride, e.q_rows, a.heads},
                      {"k", a.k, a.k_stride, e.k_rows, a.kv_heads},
                      {"v", a.v, a.v_stride, e.k_rows, a.kv_heads}};
  if (e.q_rows == 0 || e.batch == 0 || a.heads == 0) return Status::Ok();  // nothing runs
  for (const One& x : all) {
    if (x.rows == 0) continue;  // no keys: the launcher loads no K or V (flash_sm90_kernel.cuh)
    TmaTensor t;
    Status st = sm90_tma_tensor(x.stride, x.rows, x.heads, e.batch, a.head_dim, 64, &t);
    if (st.ok()) st = check_tma_tensor(a.dtype, x.data, t, TmaSwizzle::k128B);
    // TMA coordinates are int32: a row coordinate (plus a box) must not wrap.
    if (st.ok() && x.rows > (std::int64_t{1} << 31) - 512) {
      st = Status(StatusCode::kUnsupported, std::to_string(x.rows) + " rows exceed int32 coordinates");
    }
    if (!st.ok()) {
      return Status(StatusCode::kUnsupported,
                    std::string("flash-sm90: ") + x.name + " as a TMA tensor: " + st.message());
    }
  }
  return Status::Ok();
}

}  // namespace flashattn::cuda
