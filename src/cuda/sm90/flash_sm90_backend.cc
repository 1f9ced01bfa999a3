// The "flash-sm90" backend: the Hopper kernel (wgmma, TMA, mbarrier; flash_sm90_kernel.cuh) for
// bf16/fp16 and the head dims in kSm90HeadDims, on GPUs of compute capability 9.0 with an sm_90a
// image. Other params are reported as unsupported, so "auto" moves on to "flash-sm80".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "api/backend.h"
#include "api/workspace.h"
#include "cuda/common/runtime.h"
#include "cuda/sm90/flash_sm90.h"

namespace flashattn {
namespace {

template <typename T>
Status dispatch_head_dim(const cuda::KernelArgs& a, const cuda::Sm90Extents& e,
                         unsigned* tile_counter, cudaStream_t stream) {
  switch (a.head_dim) {
    case 64: return cuda::launch_flash_sm90<T, 64>(a, e, tile_counter, stream);
    case 96: return cuda::launch_flash_sm90<T, 96>(a, e, tile_counter, stream);
    case 128: return cuda::launch_flash_sm90<T, 128>(a, e, tile_counter, stream);
    case 192: return cuda::launch_flash_sm90<T, 192>(a, e, tile_counter, stream);
    case 256: return cuda::launch_flash_sm90<T, 256>(a, e, tile_counter, stream);
    default: break;
  }
  return Status(StatusCode::kInternal, "flash-sm90: head dim not dispatched");
}

std::string head_dim_list() {
  std::string s;
  for (int d : cuda::kSm90HeadDims) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return s;
}

class FlashSm90Backend final : public Backend {
 public:
  std::string_view name() const override { return "flash-sm90"; }
  std::string_view description() const override {
    return "GPU Hopper kernel (wgmma + TMA, sm_90a), bf16/fp16, head dims 64/96/128/192/256";
  }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  Status usable(Device device) const override {
    Status st = cuda::backend_usable(device, &cuda::flash_sm90_kernels_available, /*min_major=*/9);
    if (!st.ok()) return st;
    cuda::DeviceProps props;
    st = cuda::device_props(device.index, &props);
    if (!st.ok()) return st;
    if (props.major != 9 || props.minor != 0) {
      return Status(StatusCode::kBackendUnavailable,
                    "needs compute capability 9.0 (sm_90a code runs only there); " + props.name +
                        " is " + std::to_string(props.major) + "." + std::to_string(props.minor));
    }
    return Status::Ok();
  }
  unsigned variants() const override { return kAllVariants; }
  Status supports(const ForwardParams& p) const override {
    if (p.q.dtype == DType::kFP32) {
      return Status(StatusCode::kUnsupported,
                    "flash-sm90 takes dtype bf16 or fp16; got q.dtype = fp32");
    }
    bool known = false;
    for (int d : cuda::kSm90HeadDims) known = known || p.head_dim() == d;
    if (!known) {
      return Status(StatusCode::kUnsupported, "flash-sm90 takes head_dim in {" + head_dim_list() +
                                                  "}; got q.shape[3] = " +
                                                  std::to_string(p.head_dim()));
    }
    // What the tensor maps need (strides and addresses: validate() already asks 16 bytes).
    return cuda::sm90_check_tma(cuda::kernel_args_of(p), cuda::sm90_extents(p));
  }
  // Causal, windowed and varlen problems: the persistent grid's tile counter.
  std::size_t workspace_bytes(const ForwardParams& p) const override {
    return cuda::sm90_dynamic_tiles(cuda::kernel_args_of(p)) ? cuda::kSm90TileCounterBytes : 0;
  }
  std::string_view workspace_purpose() const override {
    return "the persistent grid's tile counter, for causal, windowed or varlen problems";
  }
  Status run(const ForwardParams& p, StreamHandle stream) const override {
    const Status st = check_workspace(*this, p);
    if (!st.ok()) return st;
    const cuda::KernelArgs a = cuda::kernel_args_of(p);
    const cuda::Sm90Extents e = cuda::sm90_extents(p);
    auto* counter = static_cast<unsigned*>(p.workspace);
    if (p.q.dtype == DType::kBF16) return dispatch_head_dim<__nv_bfloat16>(a, e, counter, stream);
    return dispatch_head_dim<__half>(a, e, counter, stream);
  }
};

}  // namespace

const Backend* cuda_flash_sm90_backend() {
  static const FlashSm90Backend backend;
  return &backend;
}

}  // namespace flashattn
