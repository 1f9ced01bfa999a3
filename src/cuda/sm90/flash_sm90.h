// The "flash-sm90" backend's launchers: the Hopper kernel (wgmma, TMA, mbarrier; sm_90a), bf16
// and fp16, for the head dims in kSm90HeadDims; and the description of q, k, v that its tensor
// maps are built from (host code, flash_sm90_tma.cc).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "cuda/common/kernel_args.h"
#include "cuda/common/tensor_map.h"
#include "flashattn/forward.h"

namespace flashattn::cuda {

constexpr std::array<int, 5> kSm90HeadDims = {64, 96, 128, 192, 256};

// The tensors' extents that KernelArgs does not carry: rows along the token axis (dense: the
// sequence length; packed varlen: the whole packed tensor, which TMA's bounds then are) and
// batch entries (packed: 1).
struct Sm90Extents {
  std::int64_t q_rows = 0, k_rows = 0;
  std::int64_t batch = 0;
};
Sm90Extents sm90_extents(const ForwardParams& p);

// q, k or v as a rank-4 TMA tensor {head_dim, rows, heads, batch}, boxes {64, box_rows, 1, 1}
// (128B swizzle). Dims of extent 1 get a harmless positive stride (the driver wants positive
// strides; the value is never used). kUnsupported when a stride the copies use is zero
// (broadcast tensors: TMA cannot express them).
Status sm90_tma_tensor(const std::int64_t (&stride)[3], std::int64_t rows, std::int64_t heads,
                       std::int64_t batch, std::int64_t head_dim, int box_rows, TmaTensor* t);

// Builds the tensor map of one of them (`name` for messages), boxes of {64, box_rows}.
Status sm90_tensor_map(CUtensorMap* map, const char* name, DType dtype, const void* data,
                       const std::int64_t (&stride)[3], std::int64_t rows, std::int64_t heads,
                       std::int64_t batch, std::int64_t head_dim, int box_rows);

// The three tensors' checks (what cuTensorMapEncodeTiled will require), for supports().
Status sm90_check_tma(const KernelArgs& a, const Sm90Extents& e);

// Whether the work tiles differ in cost (causal, a window, varlen): the persistent grid then
// hands them out from a counter (kSm90TileCounterBytes of the backend's workspace, zeroed by the
// launch on its stream) instead of dealing them out statically.
inline bool sm90_dynamic_tiles(const KernelArgs& a) {
  return a.varlen() || a.window_left >= 0 || a.window_right >= 0;
}
constexpr std::size_t kSm90TileCounterBytes = 16;

// T is __nv_bfloat16 or __half; kHeadDim one of kSm90HeadDims (its tile shape: Sm90ConfigFor in
// flash_sm90_config.h). Builds the tensor maps and launches. tile_counter: device memory of
// kSm90TileCounterBytes when sm90_dynamic_tiles(args), else unused (may be null).
template <typename T, int kHeadDim>
Status launch_flash_sm90(const KernelArgs& args, const Sm90Extents& ext, unsigned* tile_counter,
                         cudaStream_t stream);

// Ok when this GPU is compute capability 9.x and the kernels have an sm_90a image.
Status flash_sm90_kernels_available();

}  // namespace flashattn::cuda
