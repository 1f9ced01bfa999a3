// The KV cache's append on host tensors (ForwardParams::k / v into k_cache / v_cache), shared by
// the CPU backends.
#pragma once

#include "common/attention_args.h"
#include "flashattn/params.h"

namespace flashattn::cpu {

// Writes the new tokens k, v (batch, seqlen_new, kv_heads, head_dim) into the cache at rows
// cache_seqlens[b] .. + seqlen_new of sequence b (same dtype: an exact copy), contiguous or
// through the block table (AttentionArgs::kv_offset). Nothing to do without new tokens.
void append_to_cache(const ForwardParams& p, const AttentionArgs& a);

}  // namespace flashattn::cpu
