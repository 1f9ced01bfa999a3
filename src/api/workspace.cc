#include "api/workspace.h"

#include <limits>
#include <new>
#include <string>

namespace flashattn {
namespace {

constexpr std::size_t kHostAlignment = 64;  // a cache line; the kernels need 16 (validate())

std::string for_backend(const Backend& b) {
  return "for backend " + std::string(b.name()) + " (" + std::string(b.workspace_purpose()) + ")";
}

}  // namespace

Status check_workspace(const Backend& b, const ForwardParams& p) {
  const std::size_t need = b.workspace_bytes(p);
  if (need == 0) return Status::Ok();
  if (p.workspace == nullptr) {
    return Status(StatusCode::kInvalidArgument,
                  "workspace is null, expected " + std::to_string(need) + " bytes " +
                      for_backend(b) + "; forward() allocates one when given none");
  }
  if (p.workspace_size < need) {
    return Status(StatusCode::kInvalidArgument,
                  "workspace_size = " + std::to_string(p.workspace_size) +
                      " bytes, expected at least " + std::to_string(need) + " " + for_backend(b) +
                      "; workspace_bytes() gives the size");
  }
  return Status::Ok();
}

OwnedWorkspace::~OwnedWorkspace() {
  if (host_ != nullptr) ::operator delete(host_, std::align_val_t{kHostAlignment});
}

Status OwnedWorkspace::allocate(const Backend& b, const ForwardParams& p) {
  const std::size_t need = b.workspace_bytes(p);
  if (need == 0) return Status::Ok();
  const std::string what = "backend " + std::string(b.name()) + ": its workspace (" +
                           std::string(b.workspace_purpose()) + ")";
  if (b.device_type() == DeviceType::kCUDA) {
    Status st = device_.allocate(need, what.c_str());
    if (!st.ok()) return st;
  } else {
    host_ = ::operator new(need, std::align_val_t{kHostAlignment}, std::nothrow);
    if (host_ == nullptr) {
      return Status(StatusCode::kOutOfMemory,
                    what + " needs " + cuda::format_bytes(need) + ": host allocation failed");
    }
  }
  bytes_ = need;
  return Status::Ok();
}

ForwardParams OwnedWorkspace::attach(const ForwardParams& p) const {
  ForwardParams with = p;
  with.workspace = data();
  with.workspace_size = bytes_;
  return with;
}

Status run_with_workspace(const Backend& b, const ForwardParams& p, StreamHandle stream) {
  const std::size_t need = b.workspace_bytes(p);
  if (need == 0) return b.run(p, stream);
  // Too many bytes to count: run() refuses them, naming the factors (Backend::workspace_bytes).
  if (need == std::numeric_limits<std::size_t>::max()) return b.run(p, stream);
  if (p.workspace != nullptr) {
    const Status st = check_workspace(b, p);
    return st.ok() ? b.run(p, stream) : st;
  }
  // The convenience path: allocate, run, wait, free.
  const bool on_cuda = b.device_type() == DeviceType::kCUDA;
  if (on_cuda) {
    bool capturing = false;
    Status st = cuda::stream_is_capturing(stream, &capturing);
    if (!st.ok()) return st;
    if (capturing) {
      return Status(StatusCode::kInvalidArgument,
                    "workspace is null while the stream is capturing a CUDA graph: backend " +
                        std::string(b.name()) + " needs " + std::to_string(need) + " bytes (" +
                        std::string(b.workspace_purpose()) +
                        "), which forward() would allocate and free around a synchronization; "
                        "pass params.workspace (workspace_bytes() gives the size)");
    }
  }
  OwnedWorkspace ws;
  Status st = ws.allocate(b, p);
  if (!st.ok()) return st;
  st = b.run(ws.attach(p), stream);
  if (!on_cuda) return st;
  // The workspace is freed when this returns: wait for the kernels that use it, also when run()
  // failed after queuing some of them.
  const Status sync = cuda::stream_synchronize(stream, "forward: stream synchronize");
  return st.ok() ? sync : st;
}

}  // namespace flashattn
