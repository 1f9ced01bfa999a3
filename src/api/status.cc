#include "flashattn/status.h"

namespace flashattn {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kNullPointer: return "null_pointer";
    case StatusCode::kInvalidRank: return "invalid_rank";
    case StatusCode::kInvalidShape: return "invalid_shape";
    case StatusCode::kInvalidDtype: return "invalid_dtype";
    case StatusCode::kInvalidStride: return "invalid_stride";
    case StatusCode::kMisaligned: return "misaligned";
    case StatusCode::kUnsupportedHeadDim: return "unsupported_head_dim";
    case StatusCode::kInvalidScale: return "invalid_scale";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kInvalidDevice: return "invalid_device";
    case StatusCode::kAliasing: return "aliasing";
    case StatusCode::kUnknownBackend: return "unknown_backend";
    case StatusCode::kBackendUnavailable: return "backend_unavailable";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kOutOfMemory: return "out_of_memory";
    case StatusCode::kCudaError: return "cuda_error";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace flashattn
