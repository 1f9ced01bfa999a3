// The internal backend interface. Each backend registers itself in registry.cc; forward(), the
// verifier, the benchmark and the CLI all reach kernels through the registry only.
#pragma once

#include <cstddef>
#include <string_view>

#include "flashattn/forward.h"

namespace flashattn {

// The problem variants: ForwardParams fields beyond the dense (causal) problem. A backend declares
// the ones it implements (Backend::variants()); the registry refuses params that use another one
// before supports() is asked, so no backend ever ignores an option.
enum Variant : unsigned {
  kVariantWindow = 1u << 0,   // window_left / window_right other than -1
  kVariantSoftcap = 1u << 1,  // softcap > 0
  kVariantAlibi = 1u << 2,    // alibi_slopes
  kVariantSinks = 1u << 3,    // sinks
  kVariantVarlen = 1u << 4,   // cu_seqlens_q / cu_seqlens_k (and seqused_k)
  kVariantKvCache = 1u << 5,  // k_cache / v_cache / cache_seqlens (new k / v appended)
  kVariantPagedKv = 1u << 6,  // block_table (a paged KV cache)
};
// kAllVariants is the set every backend implements; the KV cache bits are not in it: the CPU
// backends and flash-decode declare them, and every other backend refuses a KV cache by name.
constexpr unsigned kAllVariants =
    kVariantWindow | kVariantSoftcap | kVariantAlibi | kVariantSinks | kVariantVarlen;

// The variants `params` uses.
unsigned variants_used(const ForwardParams& params);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  virtual DeviceType device_type() const = 0;
  // Built in and runnable on `device` (present, architecture new enough, a kernel image for it);
  // for a CPU backend the device is Device::cpu().
  virtual Status usable(Device device) const = 0;
  // The variants it implements (a mask of Variant).
  virtual unsigned variants() const = 0;
  // Whether this backend covers these (already validated) params, their variants aside; the
  // message says what not.
  virtual Status supports(const ForwardParams& params) const = 0;
  // Scratch bytes run() needs in params.workspace (device memory for a CUDA backend); 0: none.
  // Saturates at SIZE_MAX when the count does not fit 64 bits; run() then refuses the params
  // with kOutOfMemory naming the factors.
  virtual std::size_t workspace_bytes(const ForwardParams& /*params*/) const { return 0; }
  // What the workspace holds, for messages ("the float32 S matrix, ...").
  virtual std::string_view workspace_purpose() const { return "scratch memory"; }
  // Runs on validated, supported params whose workspace holds workspace_bytes() (a run() that
  // needs one checks it: check_workspace() in api/workspace.h); never allocates device memory nor
  // synchronizes, so a CUDA backend's run() can be captured in a CUDA graph. Writes nothing on
  // error. forward() reaches it through run_with_workspace(), which supplies a workspace when the
  // caller gave none.
  virtual Status run(const ForwardParams& params, StreamHandle stream) const = 0;
};

// Ok when `backend` implements every variant `params` uses and supports() accepts them; else
// kUnsupported naming the first variant or supports()'s reason.
Status check_supported(const Backend& backend, const ForwardParams& params);

// Registry order is the order list_backends() reports and "auto" prefers within a device type.
const Backend* find_backend(std::string_view name);
// Every registered backend.
const Backend* const* all_backends(std::size_t* count);

// Factories, defined by each backend's own file.
const Backend* cpu_reference_backend();
const Backend* cpu_flash_backend();
const Backend* cuda_naive_backend();
const Backend* cuda_flash_backend();
const Backend* cuda_flash_sm80_backend();
const Backend* cuda_flash_sm90_backend();
const Backend* cuda_flash_decode_backend();

}  // namespace flashattn
