// The backend registry and the public entry points that route through it.
#include <array>
#include <string>

#include "api/backend.h"
#include "api/workspace.h"
#include "cuda/common/runtime.h"

namespace flashattn {
namespace {

const std::array<const Backend*, 7>& registry() {
  static const std::array<const Backend*, 7> kBackends = {
      cpu_reference_backend(),   cpu_flash_backend(),       cuda_naive_backend(),
      cuda_flash_backend(),      cuda_flash_sm80_backend(), cuda_flash_sm90_backend(),
      cuda_flash_decode_backend()};
  return kBackends;
}

// "auto" takes the first usable backend that supports the params, in this order per device type.
// The Hopper kernel first (usable on compute capability 9.0 only); then the mma.sync kernel
// (Ampere, Ada, and Hopper problems flash-sm90 does not take); "flash" covers what neither does
// (fp32, other head dims, GPUs older than sm_80). On the CPU, cpu-flash takes everything; the
// float64 reference stays behind it for anything it would not. KV-cache calls go to flash-decode, the one GPU backend with a
// KV cache.
constexpr std::array<std::string_view, 4> kAutoCuda = {"flash-sm90", "flash-sm80", "flash",
                                                       "flash-decode"};
constexpr std::array<std::string_view, 2> kAutoCpu = {"cpu-flash", "cpu-reference"};

std::string known_names() {
  std::string s;
  for (const Backend* b : registry()) s += (s.empty() ? "" : ", ") + std::string(b->name());
  return s + ", auto";
}

Device default_device(const Backend& b) {
  return b.device_type() == DeviceType::kCUDA ? Device::cuda(0) : Device::cpu();
}

// No output element and no cache row to write: nothing to launch.
bool params_empty(const ForwardParams& p) {
  if (p.batch() > 0 && p.seqlen_new() > 0 && p.kv_heads() > 0) return false;  // appends
  return p.batch() == 0 || p.seqlen_q() == 0 || p.heads() == 0;
}

}  // namespace

unsigned variants_used(const ForwardParams& p) {
  unsigned used = 0;
  // Causal alone (window_right -1 or 0) is the base problem; a right edge without causal, or any
  // left edge, is a window.
  if (p.window_left != -1 || (p.window_right != -1 && !p.causal)) used |= kVariantWindow;
  if (p.softcap > 0.0f) used |= kVariantSoftcap;
  if (p.alibi_slopes.defined()) used |= kVariantAlibi;
  if (p.sinks.defined()) used |= kVariantSinks;
  if (p.varlen()) used |= kVariantVarlen;
  if (p.kv_cache()) used |= kVariantKvCache;
  if (p.paged_kv()) used |= kVariantPagedKv;
  return used;
}

Status check_supported(const Backend& b, const ForwardParams& p) {
  const unsigned missing = variants_used(p) & ~b.variants();
  if (missing != 0) {
    const char* what = (missing & kVariantWindow)    ? "a sliding window (window_left / window_right)"
                       : (missing & kVariantSoftcap) ? "softcap"
                       : (missing & kVariantAlibi)   ? "ALiBi slopes (alibi_slopes)"
                       : (missing & kVariantSinks)   ? "attention sinks (sinks)"
                       : (missing & kVariantVarlen)  ? "variable length (cu_seqlens_q / cu_seqlens_k)"
                       : (missing & kVariantKvCache) ? "a KV cache (k_cache / v_cache)"
                                                     : "a paged KV cache (block_table)";
    return Status(StatusCode::kUnsupported,
                  "backend \"" + std::string(b.name()) + "\" does not implement " + what);
  }
  return b.supports(p);
}

const Backend* find_backend(std::string_view name) {
  for (const Backend* b : registry()) {
    if (b->name() == name) return b;
  }
  return nullptr;
}

const Backend* const* all_backends(std::size_t* count) {
  *count = registry().size();
  return registry().data();
}

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> out;
  for (const Backend* b : registry()) {
    // On the CPU, or on the first CUDA device (forward() asks about the tensors' own device).
    Status st = b->usable(default_device(*b));
    out.push_back({std::string(b->name()), std::string(b->description()), b->device_type(),
                   st.ok(), st.message()});
  }
  return out;
}

Status resolve_backend(const ForwardParams& p, std::string_view requested, std::string* name) {
  if (requested != "auto") {
    const Backend* b = find_backend(requested);
    if (b == nullptr) {
      return Status(StatusCode::kUnknownBackend, "backend = \"" + std::string(requested) +
                                                     "\" is unknown; expected one of " +
                                                     known_names());
    }
    *name = std::string(requested);
    return Status::Ok();
  }
  const bool on_cuda = p.q.device.type == DeviceType::kCUDA;
  std::string reasons;
  auto try_list = [&](auto const& names) {
    for (std::string_view n : names) {
      const Backend* b = find_backend(n);
      Status st = b->usable(p.q.device);
      if (st.ok()) st = check_supported(*b, p);
      if (st.ok()) {
        *name = std::string(n);
        return true;
      }
      reasons += "; " + std::string(n) + ": " + st.message();
    }
    return false;
  };
  if (on_cuda ? try_list(kAutoCuda) : try_list(kAutoCpu)) return Status::Ok();
  return Status(StatusCode::kBackendUnavailable,
                std::string("backend = \"auto\" found no usable backend for ") +
                    (on_cuda ? "cuda" : "cpu") + " tensors" + reasons);
}

Status workspace_bytes(const ForwardParams& p, std::string_view backend, std::size_t* bytes) {
  std::string name;
  Status st = resolve_backend(p, backend, &name);
  if (!st.ok()) return st;
  *bytes = find_backend(name)->workspace_bytes(p);
  return Status::Ok();
}

Status forward(const ForwardParams& p, std::string_view backend, StreamHandle stream) {
  Status st = validate(p);
  if (!st.ok()) return st;
  std::string name;
  st = resolve_backend(p, backend, &name);
  if (!st.ok()) return st;
  const Backend* b = find_backend(name);
  if (b->device_type() != p.q.device.type) {
    return Status(StatusCode::kInvalidDevice,
                  "backend \"" + name + "\" runs on " +
                      (b->device_type() == DeviceType::kCUDA ? "cuda" : "cpu") +
                      " tensors but q.device = " +
                      (p.q.device.type == DeviceType::kCUDA ? "cuda" : "cpu"));
  }
  st = b->usable(p.q.device);
  if (!st.ok()) {
    return Status(StatusCode::kBackendUnavailable, "backend \"" + name + "\" is not usable on " +
                                                       device_name(p.q.device) + ": " +
                                                       st.message());
  }
  st = check_supported(*b, p);
  if (!st.ok()) return st;
  if (params_empty(p)) return Status::Ok();  // no output element exists: launch nothing
  // The caller's workspace, checked, or (none given) a temporary one: api/workspace.h.
  if (b->device_type() == DeviceType::kCUDA) {
    cuda::DeviceGuard guard(p.q.device.index);
    return run_with_workspace(*b, p, stream);
  }
  return run_with_workspace(*b, p, stream);
}

}  // namespace flashattn
