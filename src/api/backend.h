// The internal backend interface. Each backend registers itself in registry.cc; forward(), the
// verifier, the benchmark and the CLI all reach kernels through the registry only.
#pragma once

#include <cstddef>
#include <string_view>

#include "flashattn/forward.h"

namespace flashattn {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual std::string_view description() const = 0;
  virtual DeviceType device_type() const = 0;
  // Built in and runnable on this machine (device present, architecture new enough).
  virtual Status usable() const = 0;
  // Whether this backend covers these (already validated) params; the message says what not.
  virtual Status supports(const ForwardParams& params) const = 0;
  // Scratch bytes run() will allocate.
  virtual std::size_t workspace_bytes(const ForwardParams& /*params*/) const { return 0; }
  // Runs on validated, supported params. Writes nothing on error.
  virtual Status run(const ForwardParams& params, StreamHandle stream) const = 0;
};

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

}  // namespace flashattn
