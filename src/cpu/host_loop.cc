#include "cpu/host_loop.h"

#include <charconv>
#include <cstdlib>
#include <string>

namespace flashattn::cpu {

Status thread_count(std::int64_t* threads) {
  const std::int64_t hardware =
      std::max<std::int64_t>(1, static_cast<std::int64_t>(std::thread::hardware_concurrency()));
  const char* env = std::getenv(kNumThreadsEnv);
  if (env == nullptr) {
    *threads = hardware;
    return Status::Ok();
  }
  const std::string text(env);
  std::int64_t value = 0;
  const char* last = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), last, value);
  if (text.empty() || ec != std::errc() || ptr != last || value < 1 || value > kMaxThreads) {
    return Status(StatusCode::kBackendUnavailable,
                  std::string(kNumThreadsEnv) + " = \"" + text + "\": expected an integer from 1 to " +
                      std::to_string(kMaxThreads) +
                      " (the CPU backends' thread count; unset, it is the " +
                      std::to_string(hardware) + " hardware threads)");
  }
  *threads = value;
  return Status::Ok();
}

}  // namespace flashattn::cpu
