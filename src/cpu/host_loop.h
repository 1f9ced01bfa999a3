// Host-side helpers shared by the CPU backends: element offsets in strided views and a work-queue
// parallel loop.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "flashattn/tensor.h"

namespace flashattn::cpu {

// Element offset of index (i0, i1, i2, i3) in a rank-4 view, 64-bit throughout.
inline std::int64_t offset4(const TensorView& t, std::int64_t i0, std::int64_t i1,
                            std::int64_t i2, std::int64_t i3) {
  return i0 * t.stride[0] + i1 * t.stride[1] + i2 * t.stride[2] + i3 * t.stride[3];
}

// Runs items [0, count) on up to hardware_concurrency threads that pull items from an atomic
// counter (work items differ in cost under a causal mask, so no static split). Each thread first
// calls make_body() once, so per-thread scratch lives in the returned callable, then calls
// body(item) for every item it takes.
template <typename MakeBody>
void parallel_for(std::int64_t count, MakeBody make_body) {
  const std::int64_t hw = std::max<std::int64_t>(1, std::thread::hardware_concurrency());
  const std::int64_t threads = std::min(hw, count);
  std::atomic<std::int64_t> next{0};
  auto worker = [&] {
    auto body = make_body();
    for (std::int64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) body(i);
  };
  if (threads <= 1) {
    if (count > 0) worker();
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  for (std::int64_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

}  // namespace flashattn::cpu
