// launch_decode (decode.h): the append (a kernel of its own, or fused into the tensor-core
// attention: kFusedAppendMax), the split-KV attention and the merge, in stream order.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/check.h"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_kernel.cuh"
#include "cuda/decode/decode_merge_kernel.cuh"
#include "cuda/decode/decode_mma_kernel.cuh"

namespace flashattn::cuda {

template <typename T, int kD>
Status launch_decode(const KernelArgs& args, const DecodeNewTokens& new_tokens,
                     const DecodeSplit& split_in, cudaStream_t stream) {
  // 16-bit inputs run on tensor cores; float32 on CUDA cores.
  constexpr bool kMma = !std::is_same_v<T, float>;
  using Tr = std::conditional_t<kMma, DecodeMmaTraits<kD>, DecodeTraits<kD>>;
  const std::int64_t group = args.kv_heads > 0 ? args.heads / args.kv_heads : 0;
  const std::int64_t chunks = (args.seqlen_q * group + Tr::kRows - 1) / Tr::kRows;
  const bool any_block = args.batch > 0 && chunks > 0 && args.kv_heads > 0;
  DecodeSplit split = split_in;
  split.by_splits = FastDivmod::make(split.splits);
  split.by_chunks = FastDivmod::make(chunks);
  split.by_group = FastDivmod::make(group);
  // The tensor-core kernel appends short runs of new tokens itself (kFusedAppendMax).
  const bool fused = kMma && any_block && args.seqlen_new > 0 &&
                     args.seqlen_new <= kFusedAppendMax;
  if (args.seqlen_new > 0 && args.kv_heads > 0 && args.batch > 0 && !fused) {
    const dim3 grid(static_cast<unsigned>(args.seqlen_new * args.kv_heads),
                    static_cast<unsigned>(args.batch));
    decode_append_kernel<T><<<grid, 64, 0, stream>>>(args, new_tokens, split.bounds);
    const Status st = check_launch("decode_append_kernel");
    if (!st.ok()) return st;
  }
  if (!any_block) return Status::Ok();  // no row
  auto kernel = [] {
    if constexpr (kMma) return decode_mma_kernel<T, kD>;
    else return decode_attention_kernel<T, kD>;
  }();
  FA_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tr::kSmemBytes),
      "flash-decode: cudaFuncSetAttribute(max dynamic shared memory)");
  const dim3 grid(static_cast<unsigned>(split.splits * chunks * args.kv_heads),
                  static_cast<unsigned>(args.batch));
  if constexpr (kMma) {
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(
        args, split, fused ? new_tokens : DecodeNewTokens{});
  } else {
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(args, split);
  }
  const Status st = check_launch("decode_attention_kernel");
  if (!st.ok() || split.splits == 1) return st;  // one split wrote out / lse itself
  const std::int64_t rows = args.batch * args.seqlen_q * args.heads;  // < 2^31: supports()
  decode_merge_kernel<T><<<static_cast<unsigned>(rows), kMergeThreads, 0, stream>>>(args, split);
  return check_launch("decode_merge_kernel");
}

#define FLASHATTN_INSTANTIATE_DECODE(HDIM)                                                  \
  template Status launch_decode<float, HDIM>(const KernelArgs&, const DecodeNewTokens&,      \
                                             const DecodeSplit&, cudaStream_t);              \
  template Status launch_decode<__nv_bfloat16, HDIM>(const KernelArgs&, const DecodeNewTokens&, \
                                                     const DecodeSplit&, cudaStream_t);      \
  template Status launch_decode<__half, HDIM>(const KernelArgs&, const DecodeNewTokens&,     \
                                              const DecodeSplit&, cudaStream_t);

}  // namespace flashattn::cuda
