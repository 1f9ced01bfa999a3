#include "cpu/kv_append.h"

#include <cstdint>

#include "common/dtype_convert.h"
#include "cpu/host_loop.h"

namespace flashattn::cpu {

void append_to_cache(const ForwardParams& p, const AttentionArgs& a) {
  if (a.cache_seqlens == nullptr || a.seqlen_new == 0) return;
  for (std::int64_t b = 0; b < a.batch; ++b) {
    for (std::int64_t t = 0; t < a.seqlen_new; ++t) {
      const std::int64_t key = a.cache_seqlens[b] + t;
      for (std::int64_t h = 0; h < a.kv_heads; ++h) {
        const std::int64_t dst_k = a.kv_offset(a.k_stride, b, key, h);
        const std::int64_t dst_v = a.kv_offset(a.v_stride, b, key, h);
        for (std::int64_t d = 0; d < a.head_dim; ++d) {
          store_from_float(p.k_cache.data, a.dtype, dst_k + d,
                           load_as_float(p.k.data, a.dtype, offset4(p.k, b, t, h, d)));
          store_from_float(p.v_cache.data, a.dtype, dst_v + d,
                           load_as_float(p.v.data, a.dtype, offset4(p.v, b, t, h, d)));
        }
      }
    }
  }
}

}  // namespace flashattn::cpu
