// Host side of TMA (cuda/primitives/tma.cuh): builds the CUtensorMap that describes a global
// tensor and the box one copy moves. The encoder, cuTensorMapEncodeTiled, is a driver function;
// it is fetched through the runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda.
// Plain C++ (no kernels), compiled with the host compiler.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only)

#include <cstdint>

#include "flashattn/status.h"
#include "flashattn/tensor.h"

namespace flashattn::cuda {

// How TMA lays a box out in shared memory: the 16-byte chunks of each box row are XOR-permuted
// within 32, 64 or 128 bytes (cuda/primitives/wgmma_layout.h: the 128B case that wgmma reads).
enum class TmaSwizzle { kNone, k32B, k64B, k128B };

// A tensor as TMA sees it, dimensions innermost first: dims[0] is the contiguous one.
// A BSHD tensor [batch][seqlen][heads][head_dim] with element strides s[0..3] is
//   rank 4, dims {head_dim, seqlen, heads, batch}, strides {1, s[1], s[2], s[0]},
// and a query tile of kBlockM rows of one head, 64 columns at a time with 128B swizzle, is the
// box {64, kBlockM, 1, 1} at coordinates {d0, row0, head, batch}.
struct TmaTensor {
  int rank = 0;                  // 1..5
  std::int64_t dims[5] = {};     // elements, each 1..2^32
  std::int64_t strides[5] = {};  // elements between neighbours along each dim; strides[0] = 1
  int box[5] = {};               // elements per copy along each dim, each 1..256
};

// What cuTensorMapEncodeTiled requires, checked on the host with messages that name the field:
// dtype bf16 or fp16, gmem non-null and 16-byte aligned, rank 1..5, dims in 1..2^32, strides[0]
// = 1 and the other strides' bytes multiples of 16 below 2^40, boxes in 1..256 with box[0] a
// multiple of 16 bytes and, with a swizzle, at most its span (128B swizzle: 64 elements).
Status check_tma_tensor(DType dtype, const void* gmem, const TmaTensor& t, TmaSwizzle swizzle);

// Builds `map` (64-byte aligned; CUtensorMap is declared alignas(128)) for boxes of `t` at
// `gmem` (device memory): no interleave, element strides 1, L2 promotion 128 B, out-of-bounds
// box elements read as zeros. Errors: check_tma_tensor's, kBackendUnavailable when the driver
// has no cuTensorMapEncodeTiled, kCudaError when encoding fails (the driver's error name).
Status make_tensor_map(CUtensorMap* map, DType dtype, const void* gmem, const TmaTensor& t,
                       TmaSwizzle swizzle);

}  // namespace flashattn::cuda
