// The "flash-decode" backend: KV-cache calls (contiguous or paged, new tokens appended) on any
// GPU from sm_80 on, split-KV with the splits merged in a second kernel; the partial results live in the
// caller's workspace (workspace_bytes()), so run() neither allocates nor synchronizes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "api/backend.h"
#include "api/workspace.h"
#include "cuda/common/runtime.h"
#include "cuda/decode/decode.h"

namespace flashattn {
namespace {

// The device's SM count (cached per process: cuda::device_props), or 1 when it cannot be read
// (the launch then reports the device's problem).
int sm_count_of(Device device) {
  cuda::DeviceProps props;
  if (!cuda::device_props(device.index, &props).ok()) {
    cudaGetLastError();  // not sticky
    return 1;
  }
  return props.sm_count;
}

template <int kD>
Status dispatch_dtype(const cuda::KernelArgs& a, const cuda::DecodeNewTokens& nt,
                      const cuda::DecodeSplit& split, DType dtype, cudaStream_t stream) {
  switch (dtype) {
    case DType::kFP32: return cuda::launch_decode<float, kD>(a, nt, split, stream);
    case DType::kBF16: return cuda::launch_decode<__nv_bfloat16, kD>(a, nt, split, stream);
    case DType::kFP16: return cuda::launch_decode<__half, kD>(a, nt, split, stream);
    case DType::kInt32: break;  // not a value dtype: validate() refuses it
  }
  return Status(StatusCode::kInternal, "flash-decode: unknown dtype");
}

class DecodeBackend final : public Backend {
 public:
  std::string_view name() const override { return "flash-decode"; }
  std::string_view description() const override {
    return "GPU KV-cache kernel: tensor cores for bf16 / fp16, CUDA cores for float32 "
           "(contiguous or paged cache, split-KV, head dims up to 256)";
  }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  Status usable(Device device) const override {
    return cuda::backend_usable(device, &cuda::decode_kernels_available);
  }
  unsigned variants() const override {
    return kVariantWindow | kVariantSoftcap | kVariantAlibi | kVariantSinks | kVariantKvCache |
           kVariantPagedKv;
  }
  Status supports(const ForwardParams& p) const override {
    if (!p.kv_cache()) {
      return Status(StatusCode::kUnsupported,
                    "flash-decode runs KV-cache calls only (k_cache / v_cache given)");
    }
    constexpr std::int64_t kMaxGridY = 65535;
    if (p.batch() > kMaxGridY) {
      return Status(StatusCode::kUnsupported, "flash-decode: batch = " + std::to_string(p.batch()) +
                                                  " exceeds its grid limit 65535");
    }
    const std::int64_t rows = p.batch() * p.seqlen_q() * p.heads();  // the merge's grid
    if (rows > 0x7fffffff) {
      return Status(StatusCode::kUnsupported, "flash-decode: batch * seqlen_q * heads = " +
                                                  std::to_string(rows) +
                                                  " exceeds the merge's grid limit 2^31 - 1");
    }
    const std::int64_t blocks = cuda::decode_splits(p, sm_count_of(p.q.device)) * p.kv_heads() *
                                cuda::decode_shape(p).chunks;
    if (blocks > 0x7fffffff) {
      return Status(StatusCode::kUnsupported,
                    "flash-decode: splits * kv_heads * ceil(seqlen_q * heads / kv_heads / 16) = " +
                        std::to_string(blocks) + " blocks exceeds the grid limit 2^31 - 1");
    }
    return Status::Ok();
  }
  std::size_t workspace_bytes(const ForwardParams& p) const override {
    return cuda::decode_workspace_bytes(p, cuda::decode_splits(p, sm_count_of(p.q.device)));
  }
  std::string_view workspace_purpose() const override {
    return "the split-KV partial results (float32 O and LSE per split)";
  }
  Status run(const ForwardParams& p, StreamHandle stream) const override {
    const Status st = check_workspace(*this, p);
    if (!st.ok()) return st;
    const cuda::KernelArgs a = cuda::kernel_args_of(p);
    cuda::DecodeNewTokens nt;
    if (p.seqlen_new() > 0) {
      nt.k = p.k.data;
      nt.v = p.v.data;
      for (int i = 0; i < 3; ++i) {
        nt.k_stride[i] = p.k.stride[i];
        nt.v_stride[i] = p.v.stride[i];
      }
    }
    cuda::DecodeSplit split;
    split.splits = cuda::decode_splits(p, sm_count_of(p.q.device));
    split.bounds.capacity = p.seqlen_k();
    split.bounds.num_pages = p.paged_kv() ? p.k_cache.shape[0] : 0;
    cuda::decode_workspace_layout(p, p.workspace, &split);
    auto s = static_cast<cudaStream_t>(stream);
    if (p.head_dim() <= 64) return dispatch_dtype<64>(a, nt, split, p.q.dtype, s);
    if (p.head_dim() <= 128) return dispatch_dtype<128>(a, nt, split, p.q.dtype, s);
    return dispatch_dtype<256>(a, nt, split, p.q.dtype, s);
  }
};

}  // namespace

const Backend* cuda_flash_decode_backend() {
  static const DecodeBackend backend;
  return &backend;
}

}  // namespace flashattn
