// Status: the one error type of the public API. Every failure carries a code and a message that
// names the argument and says expected vs actual, e.g.
//   "k.shape[2] (kv heads) = 3 must divide q.shape[2] (heads) = 8".
#pragma once

#include <string>
#include <string_view>

namespace flashattn {

enum class StatusCode {
  kOk = 0,
  kNullPointer,          // a required data pointer is null
  kInvalidRank,          // a tensor view has the wrong number of dimensions
  kInvalidShape,         // sizes disagree between tensors, or are negative
  kInvalidDtype,         // unsupported dtype, or q/k/v/out dtypes differ, or LSE not float32
  kInvalidStride,        // last dim not contiguous, negative or misaligned strides
  kMisaligned,           // base pointer not 16-byte aligned
  kUnsupportedHeadDim,   // head_dim outside the supported set (the message lists it)
  kInvalidScale,         // softmax scale non-finite or <= 0
  kInvalidArgument,      // an option out of range: window, softcap, max_seqlen, cu_seqlens values,
                         // workspace
  kInvalidDevice,        // tensors on different devices, host pointer for a CUDA tensor, ...
  kAliasing,             // an output overlaps an input
  kUnknownBackend,       // no backend of that name
  kBackendUnavailable,   // backend not built, no CUDA device, or architecture too old
  kUnsupported,          // the backend does not cover these params (it says which)
  kOutOfMemory,          // allocation would not fit (the message gives the bytes)
  kCudaError,            // a CUDA runtime call failed (the message quotes it)
  kInternal,
};

// Short stable name of a code ("invalid_shape"), for logs and the Python exception mapping.
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid_shape: k.shape[3] (head_dim) = 64 must equal q.shape[3] = 128"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace flashattn
