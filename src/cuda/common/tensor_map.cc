#include "cuda/common/tensor_map.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/runtime.h"

namespace flashattn::cuda {
namespace {

constexpr std::int64_t kMaxDim = std::int64_t{1} << 32;
constexpr std::int64_t kMaxStrideBytes = std::int64_t{1} << 40;
constexpr int kMaxBox = 256;

std::string field(const char* name, int i) {
  return std::string(name) + "[" + std::to_string(i) + "]";
}

int swizzle_span_bytes(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::kNone: return 0;
    case TmaSwizzle::k32B: return 32;
    case TmaSwizzle::k64B: return 64;
    case TmaSwizzle::k128B: return 128;
  }
  return 0;
}

CUtensorMapSwizzle driver_swizzle(TmaSwizzle s) {
  switch (s) {
    case TmaSwizzle::kNone: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case TmaSwizzle::k32B: return CU_TENSOR_MAP_SWIZZLE_32B;
    case TmaSwizzle::k64B: return CU_TENSOR_MAP_SWIZZLE_64B;
    case TmaSwizzle::k128B: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

// The driver functions, looked up once. The versioned lookup asks for the ABI of CUDA 12.0, the
// one PFN_cuTensorMapEncodeTiled_v12000 describes (CUDA 13 deprecates the unversioned lookup).
// A lookup can return cudaSuccess with no function: the query result says why.
struct DriverFunctions {
  PFN_cuTensorMapEncodeTiled_v12000 encode_tiled = nullptr;
  PFN_cuGetErrorName_v6000 error_name = nullptr;
  Status status;
};

template <class Fn>
Status lookup(const char* symbol, unsigned int version, Fn* fn) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult query = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(symbol, &ptr, version, cudaEnableDefault, &query);
#else
  (void)version;
  const cudaError_t err = cudaGetDriverEntryPoint(symbol, &ptr, cudaEnableDefault, &query);
#endif
  if (err != cudaSuccess) {
    cudaGetLastError();
    return Status(StatusCode::kBackendUnavailable,
                  std::string("looking up the driver's ") + symbol + ": " +
                      status_from_cuda(err, "cudaGetDriverEntryPoint").message());
  }
  if (query != cudaDriverEntryPointSuccess || ptr == nullptr) {
    return Status(StatusCode::kBackendUnavailable,
                  std::string("the NVIDIA driver has no ") + symbol +
                      (query == cudaDriverEntryPointVersionNotSufficent
                           ? " of CUDA " + std::to_string(version / 1000) + "." +
                                 std::to_string(version % 1000 / 10) + " or later"
                           : std::string()) +
                      " (TMA needs a CUDA 12 driver)");
  }
  *fn = reinterpret_cast<Fn>(ptr);
  return Status::Ok();
}

const DriverFunctions& driver_functions() {
  static const DriverFunctions fns = [] {
    DriverFunctions f;
    f.status = lookup("cuTensorMapEncodeTiled", 12000, &f.encode_tiled);
    if (!lookup("cuGetErrorName", 6000, &f.error_name).ok()) f.error_name = nullptr;  // names only
    return f;
  }();
  return fns;
}

}  // namespace

Status check_tma_tensor(DType dtype, const void* gmem, const TmaTensor& t, TmaSwizzle swizzle) {
  if (dtype != DType::kBF16 && dtype != DType::kFP16) {
    return Status(
        StatusCode::kInvalidDtype,
        "TMA tensor dtype = " + std::string(dtype_name(dtype)) + ", expected bf16 or fp16");
  }
  const std::int64_t esize = 2;
  if (gmem == nullptr) return Status(StatusCode::kNullPointer, "TMA tensor address is null");
  if (reinterpret_cast<std::uintptr_t>(gmem) % 16 != 0) {
    return Status(StatusCode::kMisaligned, "TMA tensor address must be 16-byte aligned");
  }
  if (t.rank < 1 || t.rank > 5) {
    return Status(StatusCode::kInvalidRank,
                  "TMA tensor rank = " + std::to_string(t.rank) + ", expected 1..5");
  }
  for (int i = 0; i < t.rank; ++i) {
    if (t.dims[i] < 1 || t.dims[i] > kMaxDim) {
      return Status(
          StatusCode::kInvalidShape,
          "TMA " + field("dims", i) + " = " + std::to_string(t.dims[i]) + ", expected 1..2^32");
    }
    if (t.box[i] < 1 || t.box[i] > kMaxBox) {
      return Status(StatusCode::kInvalidShape, "TMA " + field("box", i) + " = " +
                                                   std::to_string(t.box[i]) + ", expected 1..256");
    }
  }
  if (t.strides[0] != 1) {
    return Status(StatusCode::kInvalidStride, "TMA strides[0] = " + std::to_string(t.strides[0]) +
                                                  ", expected 1 (dims[0] must be contiguous)");
  }
  for (int i = 1; i < t.rank; ++i) {
    const std::int64_t bytes = t.strides[i] * esize;
    if (t.strides[i] < 1 || bytes % 16 != 0 || bytes >= kMaxStrideBytes) {
      return Status(StatusCode::kInvalidStride,
                    "TMA " + field("strides", i) + " = " + std::to_string(t.strides[i]) +
                        " elements (" + std::to_string(bytes) +
                        " bytes), expected a positive multiple of 16 bytes below 2^40");
    }
  }
  const int inner_bytes = t.box[0] * static_cast<int>(esize);
  if (inner_bytes % 16 != 0) {
    return Status(StatusCode::kInvalidShape, "TMA box[0] = " + std::to_string(t.box[0]) + " (" +
                                                 std::to_string(inner_bytes) +
                                                 " bytes), expected a multiple of 16 bytes");
  }
  const int span = swizzle_span_bytes(swizzle);
  if (span > 0 && inner_bytes > span) {
    return Status(StatusCode::kInvalidShape,
                  "TMA box[0] = " + std::to_string(t.box[0]) + " (" + std::to_string(inner_bytes) +
                      " bytes) exceeds the " + std::to_string(span) + "-byte swizzle span");
  }
  return Status::Ok();
}

Status make_tensor_map(CUtensorMap* map, DType dtype, const void* gmem, const TmaTensor& t,
                       TmaSwizzle swizzle) {
  if (map == nullptr) return Status(StatusCode::kNullPointer, "TMA: the CUtensorMap is null");
  if (reinterpret_cast<std::uintptr_t>(map) % 64 != 0) {
    return Status(StatusCode::kMisaligned, "TMA: the CUtensorMap must be 64-byte aligned");
  }
  Status st = check_tma_tensor(dtype, gmem, t, swizzle);
  if (!st.ok()) return st;
  const DriverFunctions& fns = driver_functions();
  if (!fns.status.ok()) return fns.status;

  cuuint64_t dims[5] = {}, strides_bytes[4] = {};
  cuuint32_t box[5] = {}, element_strides[5] = {};
  for (int i = 0; i < t.rank; ++i) {
    dims[i] = static_cast<cuuint64_t>(t.dims[i]);
    box[i] = static_cast<cuuint32_t>(t.box[i]);
    element_strides[i] = 1;
    if (i > 0) strides_bytes[i - 1] = static_cast<cuuint64_t>(t.strides[i] * 2);
  }
  const CUresult res = fns.encode_tiled(
      map,
      dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
      static_cast<cuuint32_t>(t.rank), const_cast<void*>(gmem), dims, strides_bytes, box,
      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, driver_swizzle(swizzle),
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (res != CUDA_SUCCESS) {
    const char* name = nullptr;
    if (fns.error_name == nullptr || fns.error_name(res, &name) != CUDA_SUCCESS) name = nullptr;
    return Status(StatusCode::kCudaError, "cuTensorMapEncodeTiled failed: " +
                                              (name != nullptr ? std::string(name) : "CUresult") +
                                              " (" + std::to_string(static_cast<int>(res)) + ")");
  }
  return Status::Ok();
}

}  // namespace flashattn::cuda
