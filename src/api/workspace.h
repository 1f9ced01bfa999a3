// Backend workspaces (ForwardParams::workspace): the check a run() that needs one makes, and
// forward()'s path for a caller who gives none.
//
// With a workspace of at least workspace_bytes() the forward pass allocates nothing and never
// synchronizes: it can be captured in a CUDA graph and replayed. Without one (workspace == null)
// forward() allocates a temporary buffer, runs, synchronizes the stream and frees the buffer:
// the convenience path, which cannot be captured (it refuses a capturing stream rather than
// invalidate the capture with a cudaMalloc).
#pragma once

#include <cstddef>

#include "api/backend.h"
#include "cuda/common/runtime.h"

namespace flashattn {

// Ok when `backend` needs no workspace for `params` or params.workspace holds at least
// backend.workspace_bytes(params) bytes; else kInvalidArgument
// "workspace_size = X bytes, expected at least Y for backend NAME (what it holds)".
Status check_workspace(const Backend& backend, const ForwardParams& params);

// A workspace owned here: device memory of the current device for a CUDA backend, host memory
// (64-byte aligned) for a CPU one; freed by the destructor.
class OwnedWorkspace {
 public:
  OwnedWorkspace() = default;
  ~OwnedWorkspace();
  OwnedWorkspace(const OwnedWorkspace&) = delete;
  OwnedWorkspace& operator=(const OwnedWorkspace&) = delete;

  // backend.workspace_bytes(params) bytes (nothing when that is 0); kOutOfMemory naming the
  // bytes and the backend when they are not there.
  Status allocate(const Backend& backend, const ForwardParams& params);
  // `params` with this workspace in it.
  ForwardParams attach(const ForwardParams& params) const;
  void* data() const { return device_.data() != nullptr ? device_.data() : host_; }
  std::size_t bytes() const { return bytes_; }

 private:
  cuda::DeviceBuffer device_;
  void* host_ = nullptr;
  std::size_t bytes_ = 0;
};

// backend.run(params, stream) with a workspace: the caller's when params.workspace is set
// (checked first: too small is kInvalidArgument, nothing launched or written), else, when the
// backend needs one, a temporary OwnedWorkspace, the stream synchronized before it is freed
// (refused with kInvalidArgument while `stream` is capturing a CUDA graph).
Status run_with_workspace(const Backend& backend, const ForwardParams& params,
                          StreamHandle stream);

}  // namespace flashattn
