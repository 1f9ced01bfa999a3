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
Status forward(const ForwardParams& params, std::string_view backend = "auto",
               StreamHandle stream = nullptr);

// Bytes of scratch memory the backend allocates for these params (the naive backend's S matrix);
// the inputs and outputs are not counted.
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
