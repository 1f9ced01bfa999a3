// launch_decode (decode.h): the append (a kernel of its own, or fused into the tensor-core
// attention: kFusedAppendMax), then the split-KV attention, whose last split blocks merge.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <type_traits>

#include "cuda/common/check.h"
#include "cuda/decode/decode.h"
#include "cuda/decode/decode_kernel.cuh"
#include "cuda/decode/decode_mma_kernel.cuh"

namespace flashattn::cuda {

// The attention kernel of (T, kD): tensor cores for 16-bit inputs, CUDA cores for float32.
template <typename T, int kD>
auto decode_kernel_of() {
  if constexpr (std::is_same_v<T, float>) return decode_attention_kernel<T, kD>;
  else return decode_mma_kernel<T, kD>;
}

// Once per device and kernel: the shared-memory opt-in (cudaFuncSetAttribute), which a launch
// otherwise repeats on the host every call (eager mode; a graph replay skips it anyway).
template <typename T, int kD, int kSmemBytes>
Status decode_prepare_kernel() {
  constexpr int kMaxDevices = 64;
  static std::atomic<bool> prepared[kMaxDevices];  // this instantiation's kernel, per device
  int device = 0;
  FA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device), "flash-decode: cudaGetDevice");
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable && prepared[device].load(std::memory_order_acquire)) return Status::Ok();
  FA_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(decode_kernel_of<T, kD>(),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               kSmemBytes),
                          "flash-decode: cudaFuncSetAttribute(max dynamic shared memory)");
  if (cacheable) prepared[device].store(true, std::memory_order_release);
  return Status::Ok();
}

template <typename T, int kD>
Status launch_decode(const KernelArgs& args, const DecodeNewTokens& new_tokens,
                     const DecodeSplit& split, cudaStream_t stream) {
  // 16-bit inputs run on tensor cores; float32 on CUDA cores.
  constexpr bool kMma = !std::is_same_v<T, float>;
  using Tr = std::conditional_t<kMma, DecodeMmaTraits<kD>, DecodeTraits<kD>>;
  const std::int64_t group = args.kv_heads > 0 ? args.heads / args.kv_heads : 0;
  const std::int64_t chunks = (args.seqlen_q * group + Tr::kRows - 1) / Tr::kRows;
  const bool any_block = args.batch > 0 && chunks > 0 && args.kv_heads > 0;
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
  const auto kernel = decode_kernel_of<T, kD>();
  const Status prepared = decode_prepare_kernel<T, kD, Tr::kSmemBytes>();
  if (!prepared.ok()) return prepared;
  // With more than one split, the last split block of each (sequence, kv head, row chunk)
  // merges the splits (decode_merge_splits): no second kernel.
  const dim3 grid(static_cast<unsigned>(split.splits * chunks * args.kv_heads),
                  static_cast<unsigned>(args.batch));
  if constexpr (kMma) {
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(
        args, split, fused ? new_tokens : DecodeNewTokens{});
  } else {
    kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(args, split);
  }
  return check_launch("decode_attention_kernel");
}

#define FLASHATTN_INSTANTIATE_DECODE(HDIM)                                                  \
  template Status launch_decode<float, HDIM>(const KernelArgs&, const DecodeNewTokens&,      \
                                             const DecodeSplit&, cudaStream_t);              \
  template Status launch_decode<__nv_bfloat16, HDIM>(const KernelArgs&, const DecodeNewTokens&, \
                                                     const DecodeSplit&, cudaStream_t);      \
  template Status launch_decode<__half, HDIM>(const KernelArgs&, const DecodeNewTokens&,     \
                                              const DecodeSplit&, cudaStream_t);

}  // namespace flashattn::cuda
