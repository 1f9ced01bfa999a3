// The entry points: validate, forward, backend discovery.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "flashattn/params.h"
#include "flashattn/status.h"

struct CUstream_st;

namespace flashattn {

using StreamHandle = CUstream_st*;  // a cudaStream_t; nullptr is the default stream

// Checks every argument on the host: shapes, dtypes, strides, alignment, devices, head dim, scale,
// aliasing. Launches nothing and writes nothing. forward() calls it first.
Status validate(const ForwardParams& params);

// Runs attention with the named backend ("auto" picks the best usable one for the params' device).
// On any error, nothing is written to the outputs.
//
// Workspace (ForwardParams::workspace). A backend that needs scratch memory (workspace_bytes() > 0:
// the naive backend's S matrix, flash-decode's split-KV partials, flash-sm90's tile counter for
// causal, windowed or varlen problems) uses the caller's workspace when one is given; one smaller
// than workspace_bytes() is refused (kInvalidArgument, nothing written). Given one, or needing
// none, forward() only queues kernels on `stream`: no allocation, no synchronization, so it can be
// captured in a CUDA graph and replayed. Given none while the backend needs one, forward()
// allocates a temporary buffer, runs, synchronizes `stream` and frees the buffer: convenient, but
// not capturable (refused with kInvalidArgument on a capturing stream), and out of memory is
// kOutOfMemory naming the bytes.
Status forward(const ForwardParams& params, std::string_view backend = "auto",
               StreamHandle stream = nullptr);

// Bytes of workspace the backend needs for these params (the naive backend's S matrix,
// batch * heads * seqlen_q * seqlen_k * 4 with the max lengths for varlen; flash-decode's
// split-KV partials; flash-sm90's tile counter, 16 bytes, for causal, windowed or varlen
// problems; 0 for the others);
// the inputs and outputs are not counted. SIZE_MAX when the count does not fit 64 bits.
Status workspace_bytes(const ForwardParams& params, std::string_view backend, std::size_t* bytes);

struct BackendInfo {
  std::string name;
  std::string description;
  DeviceType device_type;
  bool usable;             // built in and runnable on this machine now
  std::string why_not;     // when !usable: "no CUDA device", "not built", ...
};

// Every backend built into the library, in registry order.
std::vector<BackendInfo> list_backends();

// The backend "auto" resolves to for these params (they must be valid).
Status resolve_backend(const ForwardParams& params, std::string_view requested, std::string* name);

}  // namespace flashattn
