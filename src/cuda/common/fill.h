// Device-side tensor fills used by OwnedTensor: seeded normal values (bit-identical to the host
// generator), NaN poison, constants, dtype conversion. Launch on the default stream and
// synchronize; errors come back as Status.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashattn/forward.h"

namespace flashattn::cuda {

// Every logical element of `t` (row-major index i) = round(mean + std * normal_at(seed, stream, i)).
Status fill_normal(const TensorView& t, std::uint64_t seed, std::uint64_t stream, float mean,
                   float std);
// Every logical element of `t` = round(value).
Status fill_value(const TensorView& t, float value);
// dst (contiguous, any dtype) = src converted, elementwise over the logical index space.
Status convert(const TensorView& src, const TensorView& dst);
// Writes `bytes` of `value` at `ptr` (poison, guards, L2 flush).
Status memset_bytes(void* ptr, int value, std::size_t bytes);

}  // namespace flashattn::cuda
