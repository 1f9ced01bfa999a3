// Host-side helpers shared by the CPU backends: element offsets in strided views and a work-queue
// parallel loop whose thread count the environment sets.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <system_error>
#include <thread>
#include <vector>

#include "flashattn/status.h"
#include "flashattn/tensor.h"

namespace flashattn::cpu {

// Element offset of index (i0, i1, i2, i3) in a rank-4 view, 64-bit throughout.
inline std::int64_t offset4(const TensorView& t, std::int64_t i0, std::int64_t i1,
                            std::int64_t i2, std::int64_t i3) {
  return i0 * t.stride[0] + i1 * t.stride[1] + i2 * t.stride[2] + i3 * t.stride[3];
}

// The environment variable that sets the CPU backends' thread count (`flashattn --threads N`
// sets it for its own process).
constexpr const char* kNumThreadsEnv = "FLASHATTN_NUM_THREADS";
// The largest count it accepts: a guard against a typo starting 100000 threads, far above the 128
// cores of the largest host we run on.
constexpr std::int64_t kMaxThreads = 1024;

// The thread count of parallel_for: FLASHATTN_NUM_THREADS when set, else the hardware threads
// (std::thread::hardware_concurrency, at least 1). A set value that is not an integer from 1 to
// kMaxThreads is never ignored: kBackendUnavailable naming the variable, its value and the range.
Status thread_count(std::int64_t* threads);

// Runs items [0, count) on thread_count() threads (fewer when there are fewer items) that pull
// items from an atomic counter (work items differ in cost under a causal mask, so no static
// split). Each thread first calls make_body() once, so per-thread scratch lives in the returned
// callable, then calls body(item) for every item it takes. Returns thread_count()'s error, having
// run nothing.
template <typename MakeBody>
Status parallel_for(std::int64_t count, MakeBody make_body) {
  std::int64_t requested = 1;
  Status st = thread_count(&requested);
  if (!st.ok()) return st;
  const std::int64_t threads = std::min(requested, count);
  std::atomic<std::int64_t> next{0};
  auto worker = [&] {
    auto body = make_body();
    for (std::int64_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) body(i);
  };
  if (threads <= 1) {
    if (count > 0) worker();
    return Status::Ok();
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads - 1));
  try {
    for (std::int64_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  } catch (const std::system_error&) {
    // The system refused another thread: the ones started pull every remaining item, and each
    // item's result does not depend on which thread computes it.
  }
  worker();
  for (std::thread& t : pool) t.join();
  return Status::Ok();
}

}  // namespace flashattn::cpu
