#include "common/attention_args.h"

#include "common/math_constants.h"
#include "flashattn/params.h"

namespace flashattn {

AttentionArgs make_attention_args(const ForwardParams& p) {
  AttentionArgs a{};
  a.q = p.q.data; a.k = p.k.data; a.v = p.v.data; a.o = p.out.data;
  a.lse = static_cast<float*>(p.lse.data);
  a.dtype = p.q.dtype;
  a.batch = p.batch(); a.heads = p.heads(); a.kv_heads = p.kv_heads();
  a.seqlen_q = p.seqlen_q(); a.seqlen_k = p.seqlen_k(); a.head_dim = p.head_dim();
  // (batch, row, head) strides: dense BSHD as given; packed varlen has no batch dim (the rows
  // of sequence b start at its offset instead).
  const bool varlen = p.varlen();
  for (int i = 0; i < 3; ++i) {
    const int src = varlen ? i - 1 : i;
    a.q_stride[i] = src < 0 ? 0 : p.q.stride[src];
    a.k_stride[i] = src < 0 ? 0 : p.k.stride[src];
    a.v_stride[i] = src < 0 ? 0 : p.v.stride[src];
    a.o_stride[i] = src < 0 ? 0 : p.out.stride[src];
  }
  if (p.lse.defined()) {
    // (batch, head, row): dense (batch, heads, seqlen_q); packed (heads, total_q).
    a.lse_stride[0] = varlen ? 0 : p.lse.stride[0];
    a.lse_stride[1] = varlen ? p.lse.stride[0] : p.lse.stride[1];
    a.lse_stride[2] = varlen ? p.lse.stride[1] : p.lse.stride[2];
  }
  a.scale = p.scale();
  a.scale_log2 = a.scale * kLog2e;
  a.causal = p.causal;
  a.window_left = p.window_left;
  a.window_right = p.causal ? 0 : p.window_right;
  a.softcap = p.softcap;
  a.softcap_consts = make_softcap_consts(p.softcap, a.scale);
  a.alibi_slopes = static_cast<const float*>(p.alibi_slopes.data);
  a.alibi_batch_stride = p.alibi_slopes.defined() && p.alibi_slopes.rank == 2 ? a.heads : 0;
  a.sinks = static_cast<const float*>(p.sinks.data);
  a.cu_seqlens_q = static_cast<const std::int32_t*>(p.cu_seqlens_q.data);
  a.cu_seqlens_k = static_cast<const std::int32_t*>(p.cu_seqlens_k.data);
  a.seqused_k = static_cast<const std::int32_t*>(p.seqused_k.data);
  if (p.kv_cache()) {
    a.k = p.k_cache.data;
    a.v = p.v_cache.data;
    for (int i = 0; i < 3; ++i) {
      a.k_stride[i] = p.k_cache.stride[i];
      a.v_stride[i] = p.v_cache.stride[i];
    }
    a.cache_seqlens = static_cast<const std::int32_t*>(p.cache_seqlens.data);
    a.seqlen_new = p.seqlen_new();
    if (p.paged_kv()) {
      a.block_table = static_cast<const std::int32_t*>(p.block_table.data);
      a.block_table_stride = p.block_table.shape[1];
      a.page_size = p.k_cache.shape[1];
    }
  }
  return a;
}

}  // namespace flashattn
